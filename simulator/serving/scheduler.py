"""Serving-mode DES: requests arrive, queue, prefill in chunks and decode in a changing batch.

Actors (SimPy processes):
- `request_source`: Poisson or trace arrivals put requests in the waiting queue and wake the
  engine when it idles; closed-loop arrivals are made at each finish instead (a client sends its
  next request when its last one finished, bench_serving --max-concurrency).
- `engine_loop`: one engine step after another, as SGLang and vLLM schedule them:
  1. admit waiting requests (FCFS) while fewer than `max_running_requests` are admitted and the
     KV cache holds the request's prompt (and recomputed output) besides what is cached. An engine
     that schedules a step ahead (vLLM's async scheduling, SGLang's overlap scheduler:
     `serving_engine.overlapped` of kind vllm or sglang) planned this step when the step before
     began: it admits only requests that had arrived by then (one that arrives while a step runs
     joins the step after next), unless nothing is in flight (an idle engine sees every request);
  2. make room for the decode batch's KV growth (num_draft_tokens per request with speculation,
     else 1): while it would not fit, preempt the most recently admitted request (vLLM's
     recompute preemption: its KV is freed, it returns to the front of the queue and is
     prefilled again over its prompt and the tokens it had generated; its streamed tokens stand);
  3. prefill chunks: up to `chunked_prefill_tokens` prompt tokens of admitted requests, FCFS (left
     unset where the engine profile measured the prefill: the engine's `max_num_batched_tokens`), less
     the decode batch's own tokens where an engine kind shares the step between them (vLLM schedules
     its running requests first: num_draft_tokens each with speculation, 1 without; the live loop's
     chunk is its own),
     limited by the free KV; a request whose prompt completes emits its first token at the step's end;
  4. one decode step over the requests that are decoding: a speculative cycle (spec policy at
     this batch size: `spec_off_above_batch`, `num_steps_by_batch`) or a plain decode step, priced
     at the batch's mean context, or at `decode_context_len` (a static attention window)
     (simulator.serving.costs); each request's accept_length is drawn
     from its own acceptance rate (rates drawn per request, simulator.acceptance), or one for the
     whole batch (`draw: per_batch_step`, SGLang's forced acceptance), and truncated at its output
     length.
  The step lasts the decode step plus the prefill chunk; an idle engine waits for an arrival. An
  engine that does not mix (`serving_engine.mixed_chunk` false: SGLang's default) runs a step of
  prefill alone whenever a chunk is scheduled, and the decode batch waits for it.
Left out: draft prefill (but an engine profile's prefill fit holds it), prefix caching, per-request contexts
inside one step (the batch mean stands for them).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import simpy

from simulator.acceptance import AcceptanceModel, build_acceptance
from simulator.config import Scenario
from simulator.engines.profile import chunk_token_pairs, prefill_chunk_tokens
from simulator.inputs import UserInputError
from simulator.serving.costs import StepCosts
from simulator.serving.workload import LengthSampler, read_trace
from simulator.units import US_PER_S
from simulator.workload_config import PositionalAcceptance, SpecConfig, policy_spec


@dataclass(frozen=True)
class ServingRecords:
    """Facts of one serving run: per request (n) and per engine step (k); times in us."""

    arrival_us: np.ndarray  # shape: (n,)
    admit_us: np.ndarray  # shape: (n,), first admission; nan if never admitted
    first_token_us: np.ndarray  # shape: (n,), nan if none
    finish_us: np.ndarray  # shape: (n,), nan if unfinished
    input_tokens: np.ndarray  # shape: (n,)
    output_tokens: np.ndarray  # shape: (n,)
    num_preemptions: np.ndarray  # shape: (n,)
    itl_request_idx: np.ndarray  # shape: (m,), request of each inter-token gap
    itl_us: np.ndarray  # shape: (m,), gap between two emissions of a request (after its first token)
    step_start_us: np.ndarray  # shape: (k,)
    step_end_us: np.ndarray  # shape: (k,)
    step_batch_size: np.ndarray  # shape: (k,), decode requests in the step
    step_num_steps: np.ndarray  # shape: (k,), draft steps of the cycle; 0 = no speculation
    step_prefill_tokens: np.ndarray  # shape: (k,)
    step_accepted: np.ndarray  # shape: (k,), sum of raw accept lengths over the batch
    speculative: bool  # the run may speculate (False: the no-speculation baseline)


class _Requests:
    """Per-request columns, grown by doubling."""

    FIELDS = {"arrival": float, "admit": float, "first": float, "finish": float, "last_emit": float,
              "rate": float, "input": np.int64, "output": np.int64, "generated": np.int64, "cached": np.int64,
              "prefill_target": np.int64, "alloc": np.int64, "preempted": np.int64}

    def __init__(self, capacity: int):
        self.n = 0
        self.cols = {k: np.full(capacity, np.nan) if t is float else np.zeros(capacity, dtype=t)
                     for k, t in self.FIELDS.items()}

    def add(self, arrival_us: float, input_tokens: int, output_tokens: int, rate: float) -> int:
        if self.n == len(self.cols["arrival"]):
            for k, v in self.cols.items():
                grown = np.full(2 * len(v), np.nan) if v.dtype == float else np.zeros(2 * len(v), dtype=v.dtype)
                grown[:len(v)] = v
                self.cols[k] = grown
        i = self.n
        c = self.cols
        c["arrival"][i], c["input"][i], c["output"][i], c["rate"][i] = arrival_us, input_tokens, output_tokens, rate
        c["prefill_target"][i] = input_tokens
        self.n += 1
        return i

    def __getattr__(self, name):
        return self.__dict__["cols"][name]


class ServingRun:
    """One serving-mode simulation of a scenario (its `serving:` section).

    Args:
        scenario: a Scenario with `serving` set. costs: its StepCosts.
        speculative: False runs the no-speculation baseline on the same workload streams.
        rngs: (arrivals, lengths, acceptance) generators (`serving_rngs`).
        request_rates: the i.i.d. acceptance rate of each request in the order they are sent (a replay
            of what a measured run's requests realized: simulator.evidence.validate_serving), in place
            of the acceptance model's; the last one stands for any request past the list.
    """

    def __init__(self, scenario: Scenario, costs: StepCosts, speculative: bool,
                 rngs: tuple[np.random.Generator, ...], request_rates: np.ndarray | None = None):
        if scenario.serving is None:
            raise ValueError("scenario has no serving section")
        self.sc, self.cfg, self.costs, self.speculative = scenario, scenario.serving, costs, speculative
        self.rng_arrivals, self.rng_lengths, self.rng_accept = rngs
        self.request_rates = None if request_rates is None else np.asarray(request_rates, dtype=float)
        if self.request_rates is not None and (not len(self.request_rates) or not np.all(
                (self.request_rates >= 0.0) & (self.request_rates <= 1.0))):
            raise ValueError("request_rates: one acceptance rate in [0, 1] a request")
        self.env = simpy.Environment()
        self.acceptance = build_acceptance(scenario.acceptance, scenario.spec)
        self._acc_models: dict[tuple, AcceptanceModel] = {}
        cfg = self.cfg
        self.limit = cfg.request_limit
        self.until_us = cfg.duration_s * US_PER_S if cfg.duration_s is not None else float("inf")
        self.trace = read_trace(cfg.arrivals.path, self.limit) \
            if cfg.arrivals.kind == "trace" and cfg.arrivals.path is not None else None
        self.input_len = LengthSampler(cfg.input_len) if self.trace is None else None
        self.output_len = LengthSampler(cfg.output_len) if self.trace is None else None
        # the engine's own chunk where its profile measured the prefill and the scenario leaves the chunk unset
        self.chunk_tokens = prefill_chunk_tokens(cfg, costs.engine_prefill(speculative))
        capacity = self.limit or 1024
        self.req = _Requests(min(max(capacity, 16), 1_000_000))
        self.waiting: deque[int] = deque()
        self.prefilling: list[int] = []
        self.decoding = np.zeros(0, dtype=np.int64)
        self.admit_order: list[int] = []  # admitted requests, oldest first (preemption takes the last)
        self.kv_used = 0
        self.num_sent = 0
        self.sending_done = False
        self.wake: simpy.Event | None = None
        self.prev_max_accept = 1
        self._itl_idx: list[np.ndarray] = []
        self._itl: list[np.ndarray] = []
        self._steps: list[tuple] = []

    # ---- arrivals -------------------------------------------------------------------------------
    def _new_request(self, arrival_us: float, input_tokens: int, output_tokens: int) -> None:
        kv = self.cfg.kv_cache_tokens
        if kv is not None and input_tokens + output_tokens > kv:
            raise UserInputError(f"serving: a request of {input_tokens} prompt + {output_tokens} output tokens "
                                 f"needs more KV cache than kv_cache_tokens={kv} holds")
        if self.request_rates is not None:
            rates = self.request_rates[min(self.num_sent, len(self.request_rates) - 1):][:1]
        else:
            rates = self.acceptance.draw_request_rates(self.rng_accept, 1)
        i = self.req.add(arrival_us, input_tokens, output_tokens, np.nan if rates is None else float(rates[0]))
        self.waiting.append(i)
        self.num_sent += 1
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()

    def _lengths(self) -> tuple[int, int]:
        return (int(self.input_len.sample(self.rng_lengths, 1)[0]), int(self.output_len.sample(self.rng_lengths, 1)[0]))

    def _more_to_send(self, now_us: float) -> bool:
        return (self.limit is None or self.num_sent < self.limit) and now_us < self.until_us

    def request_source(self):
        """Poisson or trace arrivals (closed loop: `_closed_loop_next` at each finish)."""
        env, arr = self.env, self.cfg.arrivals
        if arr.kind == "closed_loop":
            for _ in range(arr.concurrency):
                if self._more_to_send(env.now):
                    self._new_request(env.now, *self._lengths())
        elif arr.kind == "closed_batch":  # every request at once (the batch is num_requests)
            while self._more_to_send(env.now):
                self._new_request(env.now, *self._lengths())
        elif arr.kind == "poisson":
            mean_gap_us = US_PER_S / arr.rate_per_s
            while True:
                gap = float(self.rng_arrivals.exponential(mean_gap_us))
                if not self._more_to_send(env.now + gap):
                    break
                yield env.timeout(gap)
                self._new_request(env.now, *self._lengths())
        else:  # a trace: a file's rows, or arrivals listed inline whose lengths are drawn
            t = self.trace
            rows = zip(t.arrival_s, t.input_tokens, t.output_tokens) if t is not None else \
                ((a, None, None) for a in sorted(arr.arrival_s)[:self.limit])
            for a_s, n_in, n_out in rows:
                a_us = float(a_s) * US_PER_S
                if a_us >= self.until_us:
                    break
                if a_us > env.now:
                    yield env.timeout(a_us - env.now)
                self._new_request(env.now, *(self._lengths() if n_in is None else (int(n_in), int(n_out))))
        if arr.kind != "closed_loop":
            self.sending_done = True
            if self.wake is not None and not self.wake.triggered:
                self.wake.succeed()

    def _closed_loop_next(self) -> None:
        if self.cfg.arrivals.kind == "closed_loop":
            if self._more_to_send(self.env.now):
                self._new_request(self.env.now, *self._lengths())
            else:
                self.sending_done = True

    # ---- the policy ---------------------------------------------------------------------------
    def step_spec(self, batch_size: int) -> SpecConfig | None:
        """Speculation settings at this decode batch size; None = plain decode."""
        if not self.speculative or (entry := self.cfg.policy_at(batch_size)) is False:
            return None
        return self.sc.spec if entry is None else policy_spec(self.sc.spec, entry)

    def _acceptance_for(self, spec: SpecConfig) -> AcceptanceModel:
        key = (spec.num_steps, spec.topk, spec.num_draft_tokens)
        model = self._acc_models.get(key)
        if model is None:
            acc = self.sc.acceptance
            if isinstance(acc, PositionalAcceptance):
                acc = acc.model_copy(update={"acceptance_rates": acc.acceptance_rates[:spec.num_steps]})
            model = self._acc_models[key] = build_acceptance(acc, spec)
        return model

    # ---- scheduling ---------------------------------------------------------------------------
    def _admit(self, cutoff_us: float = float("inf")) -> None:
        r, kv = self.req, self.cfg.kv_cache_tokens
        while self.waiting and len(self.admit_order) < self.cfg.max_running_requests:
            i = self.waiting[0]
            if r.arrival[i] > cutoff_us:
                break
            if kv is not None and self.kv_used + int(r.prefill_target[i]) > kv:
                break
            self.waiting.popleft()
            r.alloc[i] = r.prefill_target[i]  # the prompt's KV is reserved at admission
            self.kv_used += int(r.alloc[i])
            if np.isnan(r.admit[i]):
                r.admit[i] = self.env.now
            self.admit_order.append(i)
            self.prefilling.append(i)

    def _preempt_last(self) -> None:
        """vLLM recompute preemption of the most recently admitted request."""
        r = self.req
        i = self.admit_order.pop()
        self.kv_used -= int(r.alloc[i])
        r.cached[i] = r.alloc[i] = 0
        r.prefill_target[i] = r.input[i] + r.generated[i]
        r.preempted[i] += 1
        if i in self.prefilling:
            self.prefilling.remove(i)
        else:
            self.decoding = self.decoding[self.decoding != i]
        self.waiting.appendleft(i)

    def _make_room(self, growth_per_request: int) -> None:
        kv = self.cfg.kv_cache_tokens
        if kv is None:
            return
        r = self.req
        while len(self.decoding):
            ids = self.decoding
            growth = int(np.minimum(growth_per_request, r.output[ids] - r.generated[ids]).sum())
            if self.kv_used + growth <= kv:
                break
            self._preempt_last()

    def _prefill_chunks(self, decode_tokens: int = 0) -> tuple[list[tuple[int, int]], int, float, float]:
        """[(request, tokens)] of this step's prefill, total tokens, token-weighted mean context, and
        the causal attention's token pairs (simulator.engines.profile.chunk_token_pairs). The step's
        token budget is the chunk less `decode_tokens`, what the decode batch places in the same step
        (vLLM schedules its running requests first, each 1 + its draft tokens, then fills the rest)."""
        r = self.req
        budget = self.chunk_tokens - decode_tokens
        chunks, total, ctx, pairs = [], 0, 0.0, 0.0
        for i in self.prefilling:
            if budget <= 0:
                break
            n = int(min(budget, r.prefill_target[i] - r.cached[i]))
            if n <= 0:
                continue
            chunks.append((i, n))
            ctx += n * float(r.cached[i])
            pairs += chunk_token_pairs(n, float(r.cached[i]))
            total += n
            budget -= n
        return chunks, total, (ctx / total if total else 0.0), pairs

    # ---- the engine -----------------------------------------------------------------------------
    def engine_loop(self):
        """One engine step after another (see the module docstring); returns when all is done."""
        env, r = self.env, self.req
        idle = True  # the engine starts idle
        lag = self.sc.serving_engine.kind in ("vllm", "sglang") and self.sc.serving_engine.overlapped
        cutoff = 0.0  # a step ahead: the requests the scheduler saw when the step before began
        while True:
            self._admit(cutoff if (lag and not idle) else float("inf"))
            if not self.prefilling and not len(self.decoding):
                self._admit()  # nothing in flight: the scheduler sees every waiting request
            if not self.prefilling and not len(self.decoding):
                if self.sending_done and not self.waiting:
                    return
                self.wake = env.event()
                yield self.wake
                self.wake = None
                idle = True
                continue
            b = len(self.decoding)
            spec = self.step_spec(b) if b else None
            self._make_room(spec.num_draft_tokens if spec is not None else 1)
            b = len(self.decoding)
            spec = self.step_spec(b) if b else None
            mixed = self.sc.serving_engine.mixed_chunk
            budgeted = mixed and self.sc.serving_engine.kind != "live_loop"  # the live loop's chunk is its own
            decode_tokens = b * (spec.num_draft_tokens if spec is not None else 1) if budgeted else 0
            chunks, num_prefill, prefill_ctx, prefill_pairs = self._prefill_chunks(decode_tokens)
            if chunks and b and not mixed:
                b, spec = 0, None  # a prefill batch runs alone: the decode batch waits (SGLang's default)
            for i, n in chunks:
                r.cached[i] += n  # its KV was reserved at admission
            start = env.now
            cutoff = start
            if b:
                ctx = (float(self.cfg.decode_context_len) if self.cfg.decode_context_len is not None
                       else float(r.cached[self.decoding].mean()))
                extend = min(self.prev_max_accept, spec.num_steps + 1) if spec is not None else 1
                dur = self.costs.decode_step_us(b, spec, ctx, extend)
            else:
                dur = self.costs.prefill_only_overhead_us(self.speculative)
            step_tokens = num_prefill + b * (spec.num_draft_tokens if spec is not None else 1)
            one = b and num_prefill and self.sc.serving_engine.mixed_forward == "one"  # one forward for both
            dur += self.costs.prefill_us(num_prefill, prefill_ctx, prefill_pairs, self.speculative, step_tokens,
                                         dur if b else 0.0, self.costs.decode_forward_us(b, spec, ctx) if one else 0.0)
            if idle:
                dur += self.costs.from_idle_us(self.speculative)
                idle = False
            yield env.timeout(dur)
            accepted = self._decode_commit(spec) if b else 0
            self._prefill_commit(chunks)
            self._steps.append((start, env.now, b, spec.num_steps if spec is not None else 0, num_prefill, accepted))

    def _decode_commit(self, spec: SpecConfig | None) -> int:
        """Commit one decode step's tokens; finished requests leave. Returns the raw accepted sum."""
        r, now, ids = self.req, self.env.now, self.decoding
        b = len(ids)
        if spec is None:
            acc = np.ones(b, dtype=np.int64)
            self.prev_max_accept = 1
        else:
            model = self._acceptance_for(spec)
            rates = r.rate[ids] if (model.beta_ab is not None or self.request_rates is not None) else None
            if model.batch_wide and rates is None:  # one accept length for the whole batch (SGLang's forced one)
                acc = np.repeat(model.sample(self.rng_accept, 1), b)
            else:
                acc = model.sample(self.rng_accept, b, rates)
            self.prev_max_accept = int(acc.max())
        committed = np.minimum(acc, r.output[ids] - r.generated[ids])
        r.generated[ids] += committed
        r.cached[ids] += committed
        r.alloc[ids] += committed
        self.kv_used += int(committed.sum())
        self._itl_idx.append(ids)
        self._itl.append(now - r.last_emit[ids])
        r.last_emit[ids] = now
        done = r.generated[ids] >= r.output[ids]
        if done.any():
            for i in ids[done].tolist():
                self._finish(i)
            self.decoding = ids[~done]
        return int(acc.sum())

    def _prefill_commit(self, chunks: list[tuple[int, int]]) -> None:
        r, now = self.req, self.env.now
        joined = []
        for i, _ in chunks:
            if r.cached[i] < r.prefill_target[i]:
                continue
            self.prefilling.remove(i)
            if r.generated[i] == 0:  # the prefill samples the first token (a recompute emits nothing)
                r.generated[i] = 1
                r.cached[i] += 1
                r.alloc[i] += 1
                self.kv_used += 1
                r.first[i] = now
                r.last_emit[i] = now
            if r.generated[i] >= r.output[i]:
                self._finish(i)
            else:
                joined.append(i)
        if joined:
            self.decoding = np.concatenate([self.decoding, np.asarray(joined, dtype=np.int64)])

    def _finish(self, i: int) -> None:
        r = self.req
        r.finish[i] = self.env.now
        self.kv_used -= int(r.alloc[i])
        r.cached[i] = r.alloc[i] = 0
        self.admit_order.remove(i)
        self._closed_loop_next()

    def run(self) -> ServingRecords:
        """Simulate until every sent request has finished."""
        self.env.process(self.request_source())
        self.env.run(until=self.env.process(self.engine_loop()))
        r, n = self.req, self.req.n
        steps = np.asarray(self._steps, dtype=float).reshape(-1, 6)
        return ServingRecords(
            arrival_us=r.arrival[:n].copy(), admit_us=r.admit[:n].copy(), first_token_us=r.first[:n].copy(),
            finish_us=r.finish[:n].copy(), input_tokens=r.input[:n].copy(), output_tokens=r.output[:n].copy(),
            num_preemptions=r.preempted[:n].copy(),
            itl_request_idx=np.concatenate(self._itl_idx) if self._itl_idx else np.zeros(0, dtype=np.int64),
            itl_us=np.concatenate(self._itl) if self._itl else np.zeros(0),
            step_start_us=steps[:, 0], step_end_us=steps[:, 1], step_batch_size=steps[:, 2].astype(np.int64),
            step_num_steps=steps[:, 3].astype(np.int64), step_prefill_tokens=steps[:, 4].astype(np.int64),
            step_accepted=steps[:, 5].astype(np.int64), speculative=self.speculative)


def serving_rngs(seed: int, draw: int = 0) -> tuple[np.random.Generator, np.random.Generator, np.random.Generator]:
    """(arrivals, lengths, acceptance) generators, spawned after the steady run's three streams
    (simulator.simulate.rng_streams), so serving and steady runs of one seed draw apart; draw > 0: the
    streams of the seed's further independent draw (a closed batch's averaged draws, `serving.draws`)."""
    ss = np.random.SeedSequence(seed if draw == 0 else [seed, draw]).spawn(6)[3:]
    return tuple(np.random.default_rng(s) for s in ss)
