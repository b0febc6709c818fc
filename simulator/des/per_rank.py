"""The kernel-granularity GPU side in closed form: ranks meet only at collectives.

One cycle's kernels, issued by the host at I_i (cycle issue start + cumulative host_us), run on
each GPU stream in issue order: kernel i starts once issued and the stream is free, so
t <- max(t, I_i) + d_i. Over a run of kernels between two collectives, with C the stream's
cumulative GPU time (C_prev_i before kernel i), this recurrence has the closed form

    t_end = C_end + max(t_start - C_prev_first, max_i (I_i - C_prev_i))

(the rule of `Forward.span_us`), computed for every stream and every run in a few numpy calls.
A collective or transfer (a barrier over its member streams) starts at the last member's
arrival max_r max(t_r, I_barrier) and ends its latency later on every member. When every
barrier spans every stream (a TP group without a dedicated draft GPU), the barrier times obey the
scalar max-plus recurrence T' = max(T + A_g, B_g) + latency_g, solved with a cumulative max; else
barriers are taken one by one over the member streams.

Jitter: each compute kernel on each stream is multiplied by a lognormal with mean 1 and the
scenario's cv (sigma^2 = log(1 + cv^2), mu = -sigma^2 / 2), as the SimPy kernel path draws it;
here a whole cycle's draws come from one numpy call, so a seed gives other draws than the SimPy
path: the two agree in distribution, and draw for draw only without jitter.
Busy time per bucket follows `DesRun._cycle_busy`: stream 0 (a collective counts from that
stream's arrival to its end, a transfer to the dedicated draft GPU its latency alone), plus the
dedicated draft GPU's compute.

Spans (`RankPlan.run_spans`, for traces): with each member's barrier wait folded into the barrier
kernel's duration (d_i = barrier end - the stream's arrival), every stream obeys the one recurrence
t_i = max(t_{i-1}, I_i) + d_i over the whole cycle, so each kernel's end is
C_i + max(t0, cummax_{j<=i}(I_j - C_prev_j)), one cumulative max per stream; the span a stream
shows for a kernel is what the SimPy streams record (a barrier from the stream's arrival to its
end; a transfer to or from the dedicated draft GPU its latency alone).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simulator.costs.forward import Forward


class RankPlan:
    """One cycle's kernels laid out for every GPU stream: what a cycle's simulation reuses.

    Args:
        forwards: the cycle's forwards in issue order.
        gpus: the GPU number of each stream (ranks in order, then a dedicated draft GPU), or
            None for a single stream that runs every kernel (the TP group as one actor).
        draft_gpu: the dedicated draft GPU's number, or None.
    """

    def __init__(self, forwards: Sequence[Forward], gpus: Sequence[int] | None, draft_gpu: int | None):
        kernels = [k for f in forwards for k in f.kernels]
        n = len(kernels)
        num_streams = 1 if gpus is None else len(gpus)
        member = np.ones((num_streams, n), dtype=bool)
        if gpus is not None:
            for i, k in enumerate(kernels):
                member[:, i] = [g in k.gpus for g in gpus]
        members = member.sum(axis=0)
        barrier = np.array([k.barrier and m > 1 for k, m in zip(kernels, members)], dtype=bool)
        self.num_streams, self.num_kernels = num_streams, n
        self.host_us = np.array([k.host_us for k in kernels], dtype=float)
        self.host_total_us = float(self.host_us.sum())
        gpu_us = np.array([k.gpu_us for k in kernels], dtype=float)
        runs = member & ~barrier  # kernels a stream runs alone
        self.d_us = np.where(runs, gpu_us, 0.0)  # shape: (num_streams, num_kernels)
        compute = np.array([k.category == "compute" for k in kernels], dtype=bool)
        self.jitter_mask = runs & compute
        self.num_jittered = int(self.jitter_mask.sum())
        self.runs = runs
        self.member = member  # shape: (num_streams, num_kernels): the stream runs (or joins) the kernel
        self.labels = [(k.name, f"{k.phase}_{k.category}") for k in kernels]  # (name, bucket) of each kernel
        self.barrier_idx = np.flatnonzero(barrier)
        self.barrier_latency_us = gpu_us[self.barrier_idx]
        self.barrier_member = member[:, self.barrier_idx].T  # shape: (num_barriers, num_streams)
        self.full_sync = bool(self.barrier_member.all())
        # runs of kernels: run g ends at barrier g (its d is 0); a last run after the last barrier
        self.run_starts = np.concatenate([[0], self.barrier_idx + 1]).astype(np.intp)
        self.run_ends = np.concatenate([self.barrier_idx, [n - 1]]).astype(np.intp)
        if n == 0 or self.run_starts[-1] >= n:  # nothing after the last barrier
            self.run_starts, self.run_ends = self.run_starts[:-1], self.run_ends[:-1]
        self.has_tail = len(self.run_starts) > len(self.barrier_idx)
        self._init_buckets(kernels, member, gpus, draft_gpu)

    def _init_buckets(self, kernels, member, gpus, draft_gpu):
        keys: list[str] = []
        idx = np.empty(len(kernels), dtype=np.intp)
        for i, k in enumerate(kernels):
            key = f"{k.phase}_{k.category}"
            if key not in keys:
                keys.append(key)
            idx[i] = keys.index(key)
        on0 = member[0]
        self.keys = keys
        self.key_idx = idx
        self.keys0 = [key for j, key in enumerate(keys) if (on0 & (idx == j)).any()]
        self.draft_row = gpus.index(draft_gpu) if gpus is not None and draft_gpu is not None else None
        self.barrier_key = idx[self.barrier_idx]
        self.barrier_on0 = self.barrier_member[:, 0] if len(self.barrier_idx) else np.zeros(0, bool)
        # a transfer to or from the dedicated draft GPU counts its latency alone (DesRun.stream_loop)
        self.barrier_fixed = (self.barrier_member[:, self.draft_row] if self.draft_row is not None
                              else np.zeros(len(self.barrier_idx), bool))
        if self.draft_row is not None:
            rows = member[self.draft_row] & np.array([k.category == "compute" for k in kernels])
            self.keys_draft = [key for j, key in enumerate(keys) if (rows & (idx == j)).any()]
        else:
            self.keys_draft = []

    def run(self, t0_us: float, rng: np.random.Generator | None, sigma: float) -> tuple[float, dict[str, float]]:
        """Simulate the cycle's kernels issued from t0_us onto idle streams.

        Args:
            t0_us: when the host issues the first kernel (streams idle by then).
            rng: jitter generator (used only when sigma > 0). sigma: lognormal sigma of the jitter.

        Returns:
            (time the last stream finishes in us, GPU busy us by bucket as `DesRun._cycle_busy`).
        """
        t_end, busy, _ = self._run(t0_us, rng, sigma, spans=False)
        return t_end, busy

    def run_spans(self, t0_us: float, rng: np.random.Generator | None, sigma: float,
                  ) -> tuple[float, dict[str, float], np.ndarray, np.ndarray]:
        """`run`, plus each kernel's span on each stream (the same draws: a traced cycle
        times out as an untraced one).

        Returns:
            (t_end_us, busy, start_us, dur_us): start_us and dur_us of shape (num_streams,
            num_kernels), meaningful where `self.member` is True.
        """
        t_end, busy, (start, dur) = self._run(t0_us, rng, sigma, spans=True)
        return t_end, busy, start, dur

    def _run(self, t0_us, rng, sigma, spans: bool):
        issue = np.cumsum(np.concatenate(([t0_us], self.host_us)))[1:]  # I_i, summed as the host does
        d = self.d_us
        if sigma > 0 and self.num_jittered:
            d = d.copy()
            d[self.jitter_mask] *= rng.lognormal(-0.5 * sigma * sigma, sigma, self.num_jittered)
        c = np.cumsum(d, axis=1)
        c_prev = c - d
        x = np.where(self.runs, issue - c_prev, -np.inf)
        if len(self.run_starts):
            mx = np.maximum.reduceat(x, self.run_starts, axis=1)
            c_end = c[:, self.run_ends]
            span = c_end - c_prev[:, self.run_starts]  # (num_streams, num_runs) GPU time of each run
            reach = c_end + mx  # latest issue-bound finish of each run, -inf for an empty one
        else:
            span = reach = np.zeros((self.num_streams, 0))
        t = np.full(self.num_streams, t0_us)
        if self.full_sync:
            t, arrive, done = self._full_sync(t0_us, issue, span, reach, spans)
        else:
            t, arrive, done = self._barriers(t, issue, span, reach, spans)
        arrive0 = arrive[0] if spans else arrive
        busy = np.bincount(self.key_idx, weights=d[0], minlength=len(self.keys))
        if len(self.barrier_idx):
            bar_us = np.where(self.barrier_fixed, self.barrier_latency_us, done - arrive0)
            busy += np.bincount(self.barrier_key, weights=np.where(self.barrier_on0, bar_us, 0.0),
                                minlength=len(self.keys))
        out = {key: float(busy[self.keys.index(key)]) for key in self.keys0}
        if self.draft_row is not None:
            draft = np.bincount(self.key_idx, weights=d[self.draft_row], minlength=len(self.keys))
            for key in self.keys_draft:
                out[key] = out.get(key, 0.0) + float(draft[self.keys.index(key)])
        return float(t.max()), out, (self._spans(t0_us, issue, d, arrive, done) if spans else None)

    def _spans(self, t0_us, issue, d, arrive, done):
        """(start_us, dur_us), each (num_streams, num_kernels): kernel ends from one cumulative max per
        stream, with each member's barrier wait folded into the barrier's duration."""
        bars = self.barrier_idx
        d = d.copy()
        if len(bars):
            wait = np.where(self.barrier_member.T, done[None, :] - arrive, 0.0)  # (num_streams, num_barriers)
            d[:, bars] = wait
        c = np.cumsum(d, axis=1)
        x = np.where(self.member, issue - (c - d), -np.inf)
        end = c + np.maximum(t0_us, np.maximum.accumulate(x, axis=1))
        start, dur = end - d, d
        if len(bars) and self.barrier_fixed.any():  # a transfer to/from the dedicated draft GPU: its latency
            cols = bars[self.barrier_fixed]
            lat = self.barrier_latency_us[self.barrier_fixed]
            start[:, cols] = end[:, cols] - lat
            dur[:, cols] = lat
        return start, dur

    def _full_sync(self, t0_us, issue, span, reach, all_streams: bool = False):
        """Every barrier spans every stream: T' = max(T + A_g, B_g) + latency_g in closed form.
        Returns (t, arrivals, done): arrivals at each barrier of stream 0, shape (num_barriers,),
        or with `all_streams` of every stream, shape (num_streams, num_barriers)."""
        nb = len(self.barrier_idx)
        t = np.full(self.num_streams, t0_us)
        if nb == 0:
            none = np.zeros((self.num_streams, 0)) if all_streams else np.zeros(0)
            return np.maximum(t + span[:, 0], reach[:, 0]) if self.has_tail else t, none, np.zeros(0)
        i_bar = issue[self.barrier_idx]
        a = span[:, :nb].max(axis=0) + self.barrier_latency_us
        b = np.maximum(reach[:, :nb].max(axis=0), i_bar) + self.barrier_latency_us
        p = np.concatenate(([0.0], np.cumsum(a)))  # P_g = sum of a before barrier g
        done = p[1:] + np.maximum(t0_us, np.maximum.accumulate(b - p[1:]))  # T after each barrier
        before = np.concatenate(([t0_us], done[:-1]))  # T at the start of each run
        rows = slice(None) if all_streams else 0
        arrive = np.maximum(np.maximum(before + span[rows, :nb], reach[rows, :nb]), i_bar)
        t = np.full(self.num_streams, done[-1])
        if self.has_tail:
            t = np.maximum(t + span[:, -1], reach[:, -1])
        return t, arrive, done

    def _barriers(self, t, issue, span, reach, all_streams: bool = False):
        """Barriers over subsets of the streams, one at a time (returns as `_full_sync`; a
        stream's arrival at a barrier it is no member of is 0)."""
        nb = len(self.barrier_idx)
        arrive, done = np.zeros((self.num_streams, nb) if all_streams else nb), np.zeros(nb)
        span_l, reach_l = span.T.tolist(), reach.T.tolist()
        i_bar = issue[self.barrier_idx].tolist()
        lat = self.barrier_latency_us.tolist()
        members = [np.flatnonzero(m).tolist() for m in self.barrier_member]
        t = t.tolist()
        for g in range(nb):
            t = [max(a + s, r) for a, s, r in zip(t, span_l[g], reach_l[g])]
            arr = {r: max(t[r], i_bar[g]) for r in members[g]}
            end = max(arr.values()) + lat[g]
            if all_streams:
                for r, a in arr.items():
                    arrive[r, g] = a
            else:
                arrive[g] = arr.get(0, 0.0)
            done[g] = end
            for r in members[g]:
                t[r] = end
        if self.has_tail:
            t = [max(a + s, r) for a, s, r in zip(t, span_l[-1], reach_l[-1])]
        return np.array(t), arrive, done
