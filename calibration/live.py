"""Live speculative decoding on a GPU: real target and draft forwards, a seeded acceptance oracle.

One cycle, for a batch of b requests (chain drafting, topk = 1, s = num_steps):
  draft_extend  draft forward over the previous cycle's accepted tokens with the target's hidden
                states, padded to max(accept_length) tokens per request (the first cycle: 1);
  draft         s draft forwards over b tokens, step d feeding the draft's own hidden state;
  verify        one target forward over b x (s + 1) tokens: the last verified token + s drafts;
  accept        `ops_torch.accept` on the GPU;
  sync          the device->host copy of its result (`.tolist()`) and the host's wake-up;
  host          bookkeeping: positions advance by accept_length; one host->device copy of the
                next cycle's positions (`meta`). host = cycle time - the five phases above.
The baseline is one target decode forward over b tokens + argmax ("decode"), then its sync.
Sync modes (`_Loop.sync_mode`): "blocking" (default) lets `.tolist()` block in the CUDA driver;
"spin" first polls a CUDA event from Python until the GPU is done, so the host thread never
sleeps in the driver (what a latency-critical serving loop may do).

Acceptance comes from an oracle (`simulator.acceptance.build_acceptance`), since random weights
agree with nothing: the GPU's accept result is synchronised and range-checked, the oracle's
accept lengths decide how many tokens are kept. The oracle draws from the simulator's
acceptance stream (`SeedSequence(seed).spawn(3)[0]`, as `simulator.simulate.rng_streams`):
per-request rates first, then one (batch_size,) draw per cycle. Same distribution as the
simulator's; not the same sequence (the DES draws homogeneous requests in blocks).

KV positions: each request's position stays in a band just below `context_len` (every forward
attends the fixed window context_len + num_new); a request that leaves the band moves back
`span` slots (a finished request replaced by one with the same context). Rollback: positions
advance by accept_length only; rejected slots are overwritten next cycle.

CUDA graphs (serving_engine.cuda_graph): one graph per draft_extend length 1..s+1, per draft step
(step d reads step d-1's graph outputs, so no copies), verify, accept, and baseline decode.
Glue kernels outside the simulator's op list: besides `models.GLUE_OPS`, the verify input
`cat`, a copy of the target tokens, two gathers in the draft_extend (bonus token, hidden row),
for batch > 1 two copies of the extend inputs, and one copy per baseline decode step.
"""

from __future__ import annotations

import datetime
import shlex
import statistics
import sys
import time

import numpy as np
import torch

from calibration.build_profile import collect_hardware_info, git_commit
from calibration.models import DraftModel, TargetModel
from simulator.config import Scenario
from simulator.profile import HardwareInfo
from simulator.live_records import LiveRun
from simulator.units import US_PER_MS, US_PER_S

WRAP_SPAN_TOKENS = 256  # slots a request moves back when it leaves its position band
GRAPH_WARMUP_CALLS = 2  # eager calls on a side stream before each capture (torch docs)
TARGET_WEIGHT_SEED, DRAFT_WEIGHT_SEED = 0, 1  # weights do not depend on the scenario's seed


def acceptance_rng(seed: int) -> np.random.Generator:
    """The acceptance stream of `simulator.simulate.rng_streams` (first of three spawned)."""
    return np.random.default_rng(np.random.SeedSequence(seed).spawn(3)[0])


def oracle_accept_lengths(scenario: Scenario, num_cycles: int) -> np.ndarray:
    """(num_cycles, batch_size) int accept lengths in 1..num_steps+1, drawn as the simulator does."""
    from simulator.acceptance import build_acceptance
    model = build_acceptance(scenario.acceptance, scenario.spec)
    rng, b = acceptance_rng(scenario.seed), scenario.workload.batch_size
    rates = model.draw_request_rates(rng, b)
    return np.stack([model.sample(rng, b, rates) for _ in range(num_cycles)]).astype(np.int64)


class _Clock:
    """Timestamps on the GPU stream (CUDA events) or the host (perf_counter); us between them.

    CUDA events come from a pool reused after each `reset()` (no allocation while timing).
    """

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self._events: list = []
        self._next = 0

    def reset(self) -> None:
        self._next = 0

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        if self._next == len(self._events):
            self._events.append(torch.cuda.Event(enable_timing=True))
        ev = self._events[self._next]
        self._next += 1
        ev.record()
        return ev

    def us(self, a, b) -> float:
        return a.elapsed_time(b) * US_PER_MS if self.cuda else (b - a) * US_PER_S

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def _capture(fn, *args):
    """Warm `fn` up on a side stream, capture it as a CUDA graph, replay once (valid outputs)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP_CALLS):
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*args)
    graph.replay()
    return graph, out


class _Loop:
    """Shared state of a speculative or baseline loop: positions band and the meta buffer.

    `kv_lens` (host, (batch_size,) int64) is each request's next KV slot: the slot of its last
    verified (not yet cached) token. `meta` holds the next cycle's positions as named int64
    segments of one GPU buffer, refreshed by one host->device copy per cycle (`_upload`).
    """

    def __init__(self, target: TargetModel, batch_size: int, context_len: int, num_steps: int):
        s, c = num_steps, context_len
        if c < 2 * (s + 1):
            raise ValueError(f"context_len={c} must be >= 2 * (num_steps + 1) = {2 * (s + 1)}")
        self.b, self.s, self.c, self.dev = batch_size, s, c, target.device
        self.hi = c - max(s - 1, 0)  # highest start position: draft step s-1 writes hi + s - 1 <= c
        self.span = min(WRAP_SPAN_TOKENS, self.hi)
        self.kv_lens = np.full(batch_size, self.hi - self.span, dtype=np.int64)
        self.graph = False
        self.sync_mode = "blocking"
        self._done = torch.cuda.Event() if target.device.type == "cuda" else None

    def wait_gpu(self) -> None:
        """In sync_mode "spin" on CUDA, poll an event recorded now until the GPU reaches it."""
        if self.sync_mode == "spin" and self._done is not None:
            self._done.record()
            while not self._done.query():
                pass

    def _segments(self, sizes: dict[str, int]) -> None:
        total = sum(sizes.values())
        self.meta = torch.zeros(total, dtype=torch.int64, device=self.dev)
        self.meta_cpu = torch.zeros(total, dtype=torch.int64, pin_memory=self.dev.type == "cuda")
        self.seg, off = {}, 0
        for name, n in sizes.items():
            self.seg[name] = (off, off + n)
            off += n

    def row(self, name: str) -> torch.Tensor:
        lo, hi = self.seg[name]
        return self.meta[lo:hi]

    def _upload(self, values: dict[str, np.ndarray]) -> None:
        host = self.meta_cpu.numpy()
        for name, v in values.items():
            lo = self.seg[name][0]
            host[lo:lo + len(v)] = v
        self.meta.copy_(self.meta_cpu, non_blocking=True)

    def advance(self, lengths: np.ndarray) -> np.ndarray:
        """Positions advance by `lengths` (kept tokens); leaving the band moves back `span`."""
        old = self.kv_lens.copy()
        new = old + lengths
        self.kv_lens = np.where(new > self.hi, new - self.span, new)
        return old


class SpecLoop(_Loop):
    """EAGLE-3 chain speculation on static buffers; phases run eagerly or as CUDA graphs.

    Args:
        target, draft: models on the same device. batch_size: requests. context_len: static
        attention window (cached tokens). num_steps: draft depth s. cuda_graph: capture graphs.
    """

    def __init__(self, target: TargetModel, draft: DraftModel, batch_size: int, context_len: int,
                 num_steps: int, cuda_graph: bool):
        if draft.shape.lm_head_vocab_size > target.shape.vocab_size:
            raise ValueError(f"draft vocabulary {draft.shape.lm_head_vocab_size} exceeds the target's "
                             f"{target.shape.vocab_size}: draft ids are used as target ids")
        if draft.shape.hidden_size != target.shape.hidden_size:
            raise ValueError(f"draft hidden_size {draft.shape.hidden_size} != target's "
                             f"{target.shape.hidden_size} (the fc reads target hidden states)")
        super().__init__(target, batch_size, context_len, num_steps)
        b, s, n, dev = batch_size, num_steps, num_steps + 1, target.device
        self.target, self.draft = target, draft
        self.tcache = target.new_cache(b, context_len + n)
        self.dcache = draft.new_cache(b, context_len + n)
        vocab, h = draft.shape.lm_head_vocab_size, draft.shape.hidden_size
        gen = torch.Generator(device=dev).manual_seed(0)
        self.verify_ids = torch.randint(0, vocab, (b, n), device=dev, generator=gen)
        self.target_tokens = torch.randint(0, vocab, (b, n), device=dev, generator=gen)
        self.aux = torch.randn(b * n, len(target.aux_layer_ids) * h, device=dev, dtype=target.dtype, generator=gen)
        self.bonus = torch.zeros(b, dtype=torch.int64, device=dev)
        self.hidden0 = torch.zeros(b, h, device=dev, dtype=target.dtype)
        self._segments({"ext_lens": b, "ext_pos": b * n, "step_lens": s * b, "ver_pos": b * n, "last_idx": b})
        self.extend_len = 1
        self._commit(np.zeros(b, dtype=np.int64))  # first cycle: extend over 1 token at the start slot
        if cuda_graph:
            self._capture_all()

    # ---- phases on static buffers (eager, or captured once) -------------------------------
    def _extend(self, length: int) -> None:
        b, n = self.b, self.s + 1
        ids = self.verify_ids[:, :length].reshape(-1)
        aux = self.aux.view(b, n, -1)[:, :length].reshape(b * length, -1)
        _, hidden = self.draft.forward(ids, self.dcache, self.row("ext_lens"), self.row("ext_pos")[:b * length],
                                       length, self.c, aux=aux)
        idx = self.row("last_idx").view(b, 1)
        torch.gather(self.target_tokens, 1, idx, out=self.bonus.view(b, 1))
        h = hidden.shape[-1]
        torch.gather(hidden.view(b, length, h), 1, idx.view(b, 1, 1).expand(b, 1, h), out=self.hidden0.view(b, 1, h))

    def _step(self, d: int, ids: torch.Tensor, hidden: torch.Tensor):
        lens = self.row("step_lens")[d * self.b:(d + 1) * self.b]
        top, hidden = self.draft.forward(ids, self.dcache, lens, lens, 1, self.c, hidden=hidden)
        return top.view(-1), hidden

    def _verify(self, drafts: list[torch.Tensor]) -> None:
        b = self.b
        torch.cat([self.bonus.view(b, 1)] + [t.view(b, 1) for t in drafts], dim=1, out=self.verify_ids)
        ver_lens = self.row("step_lens")[:b]  # verify starts where draft step 0 wrote
        tokens = self.target.forward(self.verify_ids.view(-1), self.tcache, ver_lens, self.row("ver_pos"),
                                     self.s + 1, self.c, aux_out=self.aux)
        self.target_tokens.copy_(tokens.view(b, -1))

    def _accept(self) -> torch.Tensor:
        return self.target.ops.accept(self.verify_ids[:, 1:], self.target_tokens[:, :self.s])

    def _capture_all(self) -> None:
        """Capture every phase; the warm-up calls' writes are undone, so graph and eager runs
        start from the same state."""
        state = [self.verify_ids, self.target_tokens, self.aux] + self.tcache.k + self.tcache.v \
            + self.dcache.k + self.dcache.v
        saved = [t.clone() for t in state]
        self.graph = True
        self.g_extend = {n: _capture(self._extend, n)[0] for n in range(1, self.s + 2)}
        self.g_steps, self.step_ids, outs = [], [], (self.bonus, self.hidden0)
        for d in range(self.s):  # step d reads step d-1's graph outputs: no copies between steps
            g, outs = _capture(self._step, d, *outs)
            self.g_steps.append(g)
            self.step_ids.append(outs[0])
        self.g_verify, _ = _capture(self._verify, self.step_ids)
        self.g_accept, self.accept_out = _capture(self._accept)
        for t, v in zip(state, saved):
            t.copy_(v)

    # ---- one cycle ----------------------------------------------------------------------------
    def run_draft_extend(self) -> None:
        self.g_extend[self.extend_len].replay() if self.graph else self._extend(self.extend_len)

    def run_draft(self) -> None:
        if self.graph:
            for g in self.g_steps:
                g.replay()
            return
        ids, hidden, self.step_ids = self.bonus, self.hidden0, []
        for d in range(self.s):
            ids, hidden = self._step(d, ids, hidden)
            self.step_ids.append(ids)

    def run_verify(self) -> None:
        self.g_verify.replay() if self.graph else self._verify(self.step_ids)

    def run_accept(self) -> list[int]:
        """Accept on the GPU, then the device->host sync. Returns accepted drafts per request."""
        return self.read_accept(self.launch_accept())

    def launch_accept(self) -> torch.Tensor:
        """Enqueue the accept (graph replay or eager); returns its (b,) int64 output on the device."""
        if self.graph:
            self.g_accept.replay()
            return self.accept_out
        return self._accept()

    def read_accept(self, out: torch.Tensor) -> list[int]:
        """Device->host copy of the accept output (the sync); accepted drafts per request.

        Raises:
            RuntimeError: a count outside 0..num_steps (corrupt buffers).
        """
        self.wait_gpu()
        accepted = out.tolist()
        if any(not 0 <= a <= self.s for a in accepted):
            raise RuntimeError(f"GPU accept returned {accepted}, outside 0..{self.s}: corrupt buffers")
        return accepted

    def _commit(self, lengths: np.ndarray) -> None:
        """Host bookkeeping: advance positions by `lengths` (0 = a finished request keeps its
        slot) and upload next cycle's positions, extend length and gather index."""
        b, s, n = self.b, self.s, self.s + 1
        old = self.advance(lengths)
        self.extend_len = int(max(1, lengths.max()))
        ar = np.arange(n)
        self._upload({
            "ext_lens": old,
            "ext_pos": (old[:, None] + ar[:self.extend_len]).reshape(-1),
            "step_lens": (self.kv_lens[None, :] + np.arange(s)[:, None]).reshape(-1),
            "ver_pos": (self.kv_lens[:, None] + ar).reshape(-1),
            "last_idx": np.maximum(lengths - 1, 0)})

    PHASES = ("draft_extend", "draft", "verify", "accept", "sync")

    def cycle(self, accept_lengths: np.ndarray, clock: _Clock | None = None) -> list:
        """Run one cycle keeping `accept_lengths` (b,) tokens per request; returns clock marks
        [start, after draft_extend, after draft, after verify, after accept, after the sync]
        (the gaps are PHASES)."""
        marks = [clock.mark()] if clock else []
        for phase in (self.run_draft_extend, self.run_draft, self.run_verify):
            phase()
            if clock:
                marks.append(clock.mark())
        out = self.launch_accept()
        if clock:
            marks.append(clock.mark())
        self.read_accept(out)
        if clock:
            marks.append(clock.mark())
        self._commit(np.asarray(accept_lengths, dtype=np.int64))
        return marks


class DecodeLoop(_Loop):
    """No-speculation baseline: one target forward over b tokens + argmax + sync per step."""

    def __init__(self, target: TargetModel, batch_size: int, context_len: int, cuda_graph: bool):
        super().__init__(target, batch_size, context_len, 0)
        self.target = target
        self.tcache = target.new_cache(batch_size, context_len + 1)
        self.ids = torch.zeros(batch_size, dtype=torch.int64, device=target.device)
        self._segments({"lens": batch_size})
        self._upload({"lens": self.kv_lens})
        if cuda_graph:
            self.graph, (self.g_decode, self.out) = True, _capture(self._decode)

    def _decode(self) -> torch.Tensor:
        lens = self.row("lens")
        tokens = self.target.forward(self.ids, self.tcache, lens, lens, 1, self.c)
        self.ids.copy_(tokens)
        return tokens

    PHASES = ("decode", "sync")

    def cycle(self, accept_lengths: np.ndarray | None = None, clock: _Clock | None = None) -> list:
        """One decode step; marks [start, after the forward, after the token's sync] (PHASES)."""
        marks = [clock.mark()] if clock else []
        if self.graph:
            self.g_decode.replay()
            out = self.out
        else:
            out = self._decode()
        if clock:
            marks.append(clock.mark())
        self.wait_gpu()
        out.tolist()
        if clock:
            marks.append(clock.mark())
        self.advance(np.ones(self.b, dtype=np.int64))
        self._upload({"lens": self.kv_lens})
        return marks


def generate(loop: SpecLoop, max_new_tokens: int, accept_lengths: np.ndarray) -> tuple[np.ndarray, int]:
    """Run cycles until every request has emitted exactly `max_new_tokens` tokens.

    A request keeps min(accept_length, tokens still owed) in each cycle, so the cycle that
    reaches max_new_tokens is truncated; a finished request keeps its batch slot (static shapes)
    and keeps 0 tokens until the others finish.

    Args:
        accept_lengths: (num_cycles, batch_size) oracle draws, one row per cycle (enough rows).

    Returns:
        ((batch_size,) tokens emitted per request, cycles run).
    """
    emitted = np.zeros(loop.b, dtype=np.int64)
    num_cycles = 0
    while (emitted < max_new_tokens).any():
        kept = np.minimum(accept_lengths[num_cycles], max_new_tokens - emitted)
        loop.cycle(kept)
        emitted += kept
        num_cycles += 1
    return emitted, num_cycles


class LiveSession:
    """Models and loops kept across run points: models per (target, draft) shape pair, loops
    (their KV caches and captured graphs) per (speculative, batch, num_steps, context, graph).

    Weights use fixed seeds (TARGET_WEIGHT_SEED, DRAFT_WEIGHT_SEED); a new shape pair frees the
    old models and loops first.
    """

    def __init__(self, device: str = "cuda"):
        self.device = torch.device(device)
        self.dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        self._key, self.target, self.draft, self._loops = None, None, None, {}

    def loop(self, scenario: Scenario, speculative: bool) -> SpecLoop | DecodeLoop:
        graph = scenario.serving_engine.cuda_graph
        if graph and self.device.type != "cuda":
            raise RuntimeError("serving_engine.cuda_graph: true needs a CUDA device; on CPU run eager "
                               "(serving_engine.cuda_graph: false)")
        key = (scenario.target.model_dump_json(), scenario.draft.model_dump_json())
        if key != self._key:
            self._key, self.target, self.draft, self._loops = None, None, None, {}
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            self.target = TargetModel(scenario.target, self.device, self.dtype, TARGET_WEIGHT_SEED,
                                      max(1, scenario.draft.num_fc_input_hidden_states))
            share = (scenario.draft.hidden_size == scenario.target.hidden_size
                     and scenario.draft.vocab_size == scenario.target.vocab_size)
            self.draft = DraftModel(scenario.draft, self.device, self.dtype, DRAFT_WEIGHT_SEED,
                                    self.target.embed if share else None)
            self._key = key
        w = scenario.workload
        lkey = (speculative, w.batch_size, scenario.spec.num_steps, w.context_len, graph)
        if lkey not in self._loops:
            with torch.no_grad():
                self._loops[lkey] = (SpecLoop(self.target, self.draft, w.batch_size, w.context_len,
                                              scenario.spec.num_steps, graph) if speculative else
                                     DecodeLoop(self.target, w.batch_size, w.context_len, graph))
        return self._loops[lkey]


def _tiny_models(dev: torch.device):
    from calibration.shapes import LOOP_TINY, eagle3_draft

    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    draft = eagle3_draft(LOOP_TINY, draft_vocab_size=128)
    return TargetModel(LOOP_TINY, device=dev, dtype=dtype, seed=0), DraftModel(draft, device=dev, dtype=dtype, seed=1)


class _BusyGraph:
    """A graph followed by a GPU sleep of a fixed number of cycles (stands in for a big model)."""

    def __init__(self, graph, sleep_cycles: int):
        self.graph, self.sleep_cycles = graph, sleep_cycles

    def replay(self) -> None:
        self.graph.replay()
        torch.cuda._sleep(self.sleep_cycles)


def _sleep_cycles_for(busy_us: float) -> tuple[int, float]:
    """(cycles, measured us) of a torch.cuda._sleep lasting about busy_us."""
    probe = 1_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(probe)
    end.record()
    end.synchronize()
    cycles = int(busy_us * probe / (start.elapsed_time(end) * US_PER_MS))
    samples = []
    for _ in range(5):
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * US_PER_MS)
    return cycles, statistics.median(samples)


def measure_loop_overhead_us(device, speculative: bool, num_steps: int = 4, batch_size: int = 1,
                             num_cycles: int = 200, busy_us: float = 0.0) -> dict[str, float]:
    """What a live-loop cycle costs beyond its GPU work: tiny models, CUDA graphs where possible.

    wall_us: mean wall time per cycle of the loop exactly as `run_live` times it (phase marks
    included); gpu_us: the same cycle's graphs replayed back to back (GPU time only);
    overhead_us = wall_us - gpu_us: device->host sync, graph launches, the loop's bookkeeping.
    On CPU (no graphs) gpu_us is 0 and the overhead is the whole eager cycle.
    busy_us > 0 (CUDA only) adds a GPU sleep of that length to the verify (or decode) graph, so the
    host waits milliseconds at the sync as it does with real models; the sleep counts as GPU time.
    """
    dev = torch.device(device)
    graph = dev.type == "cuda"
    target, draft = _tiny_models(dev)
    c = 256
    if speculative:
        loop = SpecLoop(target, draft, batch_size, c, num_steps, graph)
        graphs = None  # chosen after the timed cycles, when the extend length matches the buffers
    else:
        loop = DecodeLoop(target, batch_size, c, graph)
        graphs = [loop.g_decode] if graph else []
    # (a speculative cycle's graphs are picked after the timed cycles: the draft-extend graph
    # must match the extend length the buffers were last set up for)
    sleep_us = 0.0
    if graph and busy_us > 0:
        cycles, sleep_us = _sleep_cycles_for(busy_us)
        if speculative:
            loop.g_verify = _BusyGraph(loop.g_verify, cycles)
        else:
            loop.g_decode = _BusyGraph(loop.g_decode, cycles)
            graphs = [loop.g_decode.graph]
    rng = np.random.default_rng(0)
    lengths = (rng.integers(1, num_steps + 2, size=(num_cycles + 20, batch_size)) if speculative
               else np.ones((num_cycles + 20, batch_size), dtype=np.int64))
    clock = _Clock(dev)
    with torch.no_grad():
        for row in lengths[:20]:
            loop.cycle(row)
        clock.sync()
        clock.reset()
        t0 = time.perf_counter()
        for row in lengths[20:]:
            loop.cycle(row, clock)
        clock.sync()
        wall_us = (time.perf_counter() - t0) * US_PER_S / num_cycles
        if speculative:
            graphs = []
            if graph:
                verify = loop.g_verify.graph if isinstance(loop.g_verify, _BusyGraph) else loop.g_verify
                graphs = [loop.g_extend[loop.extend_len]] + loop.g_steps + [verify, loop.g_accept]
        gpu_us = 0.0
        if graphs:
            reps = 50
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                for g in graphs:
                    g.replay()
            end.record()
            torch.cuda.synchronize(dev)
            gpu_us = start.elapsed_time(end) * US_PER_MS / reps + sleep_us
    return {"wall_us": wall_us, "gpu_us": gpu_us, "overhead_us": wall_us - gpu_us, "busy_us": sleep_us}


def measure_host_schedule_us(device, num_steps: int = 4, batch_size: int = 1, reps: int = 200) -> float:
    """Host time of the live loop's per-cycle bookkeeping alone (`SpecLoop._commit`), median, in us."""
    dev = torch.device(device)
    target, draft = _tiny_models(dev)
    loop = SpecLoop(target, draft, batch_size, 256, num_steps, False)
    rng = np.random.default_rng(0)
    samples = []
    for row in rng.integers(1, num_steps + 2, size=(reps, batch_size)):
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        loop._commit(row)
        samples.append((time.perf_counter() - t0) * US_PER_S)
    return float(np.median(samples))


def hardware_info(device: torch.device) -> HardwareInfo:
    """`build_profile.collect_hardware_info` for the one GPU a live run uses (CPU: the host)."""
    info = collect_hardware_info()
    if device.type == "cuda":
        info.update(gpu_name=torch.cuda.get_device_name(device), gpu_count=1, interconnect="single GPU")
    return HardwareInfo(**info)


def _check(scenario: Scenario) -> None:
    if scenario.tp_size != 1 or scenario.draft_tp_size != 1:
        raise ValueError(f"live runs are single-GPU: tp_size={scenario.tp_size}, "
                         f"draft TP size={scenario.draft_tp_size}; both must be 1")
    if scenario.spec.topk != 1:
        raise ValueError(f"live runs draft chains only (topk=1), got topk={scenario.spec.topk}")


def _time_repeats(loop, rows: np.ndarray, repeats: int, clock: _Clock | None,
                  start=None, end=None) -> tuple[list, dict[str, float]]:
    """Time `repeats` runs of the cycles `rows` ((num_cycles, b) accept lengths). Each run starts
    after `start()` and ends after `end()` (default: a device sync; a TP group passes its
    barrier). clock None (a TP rank that does not time) marks nothing. Returns
    ([(num_tokens, elapsed_us)] per repeat, summed us per phase of loop.PHASES)."""
    start = start or clock.sync
    end = end or clock.sync
    phase_sum_us = dict.fromkeys(loop.PHASES, 0.0)
    runs = []
    for _ in range(repeats):
        start()
        if clock:
            clock.reset()
        start_s = time.perf_counter()
        marks = [loop.cycle(row, clock) for row in rows]
        end()
        elapsed_us = (time.perf_counter() - start_s) * US_PER_S
        for m in marks:
            for name, a, z in zip(loop.PHASES, m, m[1:]):
                phase_sum_us[name] += clock.us(a, z)
        runs.append((int(rows.sum()), elapsed_us))
    return runs, phase_sum_us


def live_record(scenario: Scenario, speculative: bool, timed: np.ndarray, runs: list,
                phase_sum_us: dict[str, float], paired: float | None, hardware: HardwareInfo) -> LiveRun:
    """The LiveRun of timed runs: `timed` (num_cycles, b) accept lengths replayed by every run,
    `runs` [(num_tokens, elapsed_us)] per repeat, `phase_sum_us` summed over all runs' cycles.
    Totals pool the repeats; host = wall time per cycle not in any phase."""
    num_cycles, repeats, s = len(timed), len(runs), scenario.spec.num_steps
    num_tokens, elapsed_us = sum(r[0] for r in runs), sum(r[1] for r in runs)
    phase_us = {k: v / (repeats * num_cycles) for k, v in phase_sum_us.items()}
    phase_us["host"] = max(0.0, elapsed_us / (repeats * num_cycles) - sum(phase_us.values()))
    return LiveRun(
        scenario=scenario, speculative=speculative, num_cycles=num_cycles, num_tokens=num_tokens,
        elapsed_us=elapsed_us, tok_per_s=num_tokens / elapsed_us * US_PER_S,
        repeat_tok_per_s=[n / e * US_PER_S for n, e in runs], repeat_num_tokens=[n for n, _ in runs],
        repeat_elapsed_us=[e for _, e in runs], paired_baseline_tok_per_s=paired,
        mean_accept_length=float(timed.mean()),
        accept_length_counts=np.bincount(timed.reshape(-1), minlength=s + 2)[1:].tolist() if speculative else [],
        phase_us=phase_us, hardware=hardware,
        created_utc=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        git_commit=git_commit(), command_line=shlex.join([sys.executable] + sys.argv))


def run_live(scenario: Scenario, speculative: bool, num_cycles: int, warmup_cycles: int,
             device: str = "cuda", repeats: int = 1, session: LiveSession | None = None,
             paired_baseline: bool = False) -> LiveRun:
    """Run `scenario` for real and measure it: tokens/s, accept lengths, mean us per phase.

    Warm-up cycles run first (untimed); then `repeats` timed runs of the same `num_cycles`
    cycles (one accept-length sequence drawn by the seeded oracle, replayed by every repeat, so
    repeats differ in timing only), wall clock between device syncs. The record pools all
    repeats: num_tokens and elapsed_us are totals, tok_per_s = num_tokens / elapsed_us, and
    per-repeat figures are kept (`repeat_*`). Phases: CUDA events on the GPU, perf_counter on
    CPU; `host` is the rest of the wall time per cycle.

    Args:
        scenario: what to run (target, draft, spec, acceptance, batch_size, context_len,
            serving_engine.cuda_graph, seed); stored unchanged in the record.
        speculative: False runs the no-speculation baseline of the same scenario.
        device: 'cuda' (bf16) or 'cpu' (float32; eager only).
        session: models and loops to reuse across points (the grid passes one).
        paired_baseline: (speculative only) also time the baseline of the same target right
            after, `repeats` x `num_cycles` decode steps, into `paired_baseline_tok_per_s`.

    Raises:
        ValueError: tp_size or draft TP size != 1, topk != 1, context_len < 2 * (num_steps + 1).
        RuntimeError: cuda_graph on a CPU device; a corrupt GPU accept result.
    """
    _check(scenario)
    session = session or LiveSession(device)
    loop = session.loop(scenario, speculative)
    b, s = scenario.workload.batch_size, scenario.spec.num_steps
    lengths = (oracle_accept_lengths(scenario, warmup_cycles + num_cycles) if speculative
               else np.ones((warmup_cycles + num_cycles, b), dtype=np.int64))
    clock = _Clock(session.device)
    paired = None
    with torch.no_grad():
        for i in range(warmup_cycles):
            loop.cycle(lengths[i])
        timed = lengths[warmup_cycles:]
        runs, phase_sum_us = _time_repeats(loop, timed, repeats, clock)
        if speculative and paired_baseline:
            base = session.loop(scenario, False)
            ones = np.ones((warmup_cycles + num_cycles, b), dtype=np.int64)
            for row in ones[:warmup_cycles]:
                base.cycle(row)
            base_runs, _ = _time_repeats(base, ones[warmup_cycles:], repeats, clock)
            paired = sum(r[0] for r in base_runs) / sum(r[1] for r in base_runs) * US_PER_S
    return live_record(scenario, speculative, timed, runs, phase_sum_us, paired, hardware_info(session.device))


def merge_repeats(records: list[LiveRun]) -> LiveRun:
    """One record from single runs of one point taken at different times (interleaved passes
    of a grid): repeats = the runs, in order; totals pooled, phase means averaged (every run has
    the same num_cycles), paired baselines pooled over the runs that have one.

    Raises:
        ValueError: no records, or records of different scenarios, cycle counts or accept draws.
    """
    if not records:
        raise ValueError("merge_repeats needs at least one record")
    first = records[0]
    for r in records[1:]:
        if (r.scenario != first.scenario or r.speculative != first.speculative or r.num_cycles != first.num_cycles
                or r.accept_length_counts != first.accept_length_counts):
            raise ValueError("merge_repeats: records differ in scenario, num_cycles or accept draws")
    reps = [(n, e) for r in records for n, e in zip(r.repeat_num_tokens or [r.num_tokens],
                                                     r.repeat_elapsed_us or [r.elapsed_us])]
    num_tokens, elapsed_us = sum(n for n, _ in reps), sum(e for _, e in reps)
    weights = [len(r.repeat_num_tokens or [0]) for r in records]
    phase_us = {k: sum(w * r.phase_us.get(k, 0.0) for w, r in zip(weights, records)) / sum(weights)
                for k in first.phase_us}
    base = [(r.paired_baseline_tok_per_s, w) for r, w in zip(records, weights) if r.paired_baseline_tok_per_s]
    paired = (sum(w for _, w in base) / sum(w / t for t, w in base)) if base else None  # pooled: harmonic
    return first.model_copy(update=dict(
        num_tokens=num_tokens, elapsed_us=elapsed_us, tok_per_s=num_tokens / elapsed_us * US_PER_S,
        repeat_tok_per_s=[n / e * US_PER_S for n, e in reps], repeat_num_tokens=[n for n, _ in reps],
        repeat_elapsed_us=[e for _, e in reps], paired_baseline_tok_per_s=paired, phase_us=phase_us,
        created_utc=records[-1].created_utc))
