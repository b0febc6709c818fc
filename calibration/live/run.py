"""One live run point: a scenario run for real on one GPU and timed into a LiveRun record.

`run_live` takes the loop of `LiveSession.loop` (calibration/live/loop.py), runs warm-up cycles,
then `repeats` timed runs of the same cycles: wall clock between device syncs, the phases with
`timing.Clock` (CUDA events on the GPU, perf_counter on the CPU); `host` is the rest of the wall
time per cycle. `live_record` is the record of timed runs (the TP loop of calibration/live/tp.py
builds its records with it too); `merge_repeats` pools single runs of one point taken at
different times.

Acceptance comes from an oracle (`simulator.acceptance.build_acceptance`), since random weights
agree with nothing: the GPU's accept result is synchronised and range-checked, the oracle's
accept lengths decide how many tokens are kept. The oracle draws from the simulator's
acceptance stream (`SeedSequence(seed).spawn(3)[0]`, as `simulator.simulate.rng_streams`):
per-request rates first, then one (batch_size,) draw per cycle. Same distribution as the
simulator's; not the same sequence (the DES draws homogeneous requests in blocks).

Left out: more than one GPU (calibration/live/tp.py), trees (topk > 1).
"""

from __future__ import annotations

import datetime
import time

import numpy as np
import torch

from calibration.live.loop import DecodeLoop, SpecLoop
from calibration.models.llama import DRAFT_WEIGHT_SEED, TARGET_WEIGHT_SEED, DraftModel, TargetModel
from calibration.provenance import collect_hardware_info, command_line, git_commit
from calibration.timing import Clock
from simulator.config import Scenario
from simulator.evidence.live_records import LiveRun
from simulator.profile import HardwareInfo
from simulator.units import US_PER_S


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


def check_graph_device(scenario: Scenario, device: torch.device) -> None:
    """Raise RuntimeError when `scenario` asks for CUDA graphs (serving_engine.cuda_graph) on a
    device that is not CUDA."""
    if scenario.serving_engine.cuda_graph and device.type != "cuda":
        raise RuntimeError("serving_engine.cuda_graph: true needs a CUDA device; on CPU run eager "
                           "(serving_engine.cuda_graph: false)")


def host_available_bytes() -> int | None:
    """The memory the host has available for a new process (Linux's MemAvailable), bytes; None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def check_host_memory(scenario: Scenario, device: torch.device, dtype: torch.dtype) -> None:
    """Refuse, on a CPU, models and KV cache larger than the memory the host has available (MemAvailable): the
    kernel would kill the process without a word. On CUDA, torch's own out-of-memory error says it.

    Raises:
        RuntimeError: naming the need, the memory available and what to change.
    """
    if device.type != "cpu":
        return
    from simulator.memory import memory_fit
    need = memory_fit(scenario, None, None).total_bytes * dtype.itemsize / 2  # the fit prices bf16
    if (avail := host_available_bytes()) is not None and need > avail:
        raise RuntimeError(f"{scenario.target.name} and its draft need about {need / 1e9:,.1f} GB in {dtype} on the "
                           f"CPU (weights and KV cache), and this host has {avail / 1e9:,.1f} GB available: pick "
                           "smaller model sizes (--sizes) or a GPU")


class LiveSession:
    """Models and loops kept across run points: models per (target, draft) shape pair, loops
    (their KV caches and captured graphs) per (speculative, batch, num_steps, context, graph);
    one baseline loop per (batch, context, graph).

    Weights use fixed seeds (TARGET_WEIGHT_SEED, DRAFT_WEIGHT_SEED); a new shape pair frees the
    old models and loops first.
    """

    def __init__(self, device: str = "cuda"):
        self.device = torch.device(device)
        self.dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        self._key, self.target, self.draft, self._loops = None, None, None, {}

    def loop(self, scenario: Scenario, speculative: bool) -> SpecLoop | DecodeLoop:
        """The loop of `scenario` (built, with its models, on first use; the baseline's when not
        `speculative`).

        Raises:
            RuntimeError: CUDA graphs asked for on a device that is not CUDA.
        """
        check_graph_device(scenario, self.device)
        graph = scenario.serving_engine.cuda_graph
        key = (scenario.target.model_dump_json(), scenario.draft.model_dump_json())
        if key != self._key:
            self._key, self.target, self.draft, self._loops = None, None, None, {}
            check_host_memory(scenario, self.device, self.dtype)
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
        # a baseline loop does not depend on num_steps: one per (batch, context, mode), shared by
        # the paired baselines of every num_steps (its KV cache is the largest buffer at large batch)
        lkey = (speculative, w.batch_size, scenario.spec.num_steps if speculative else 0, w.context_len, graph)
        if lkey not in self._loops:
            with torch.no_grad():
                self._loops[lkey] = (SpecLoop(self.target, self.draft, w.batch_size, w.context_len,
                                              scenario.spec.num_steps, graph) if speculative else
                                     DecodeLoop(self.target, w.batch_size, w.context_len, graph))
        return self._loops[lkey]


def hardware_info(device: torch.device) -> HardwareInfo:
    """`provenance.collect_hardware_info` for the one GPU a live run uses (CPU: the host)."""
    info = collect_hardware_info()
    if device.type == "cuda":
        info.update(gpu_name=torch.cuda.get_device_name(device), gpu_count=1, interconnect="single GPU")
    return HardwareInfo(**info)


def check_single_gpu_scenario(scenario: Scenario) -> None:
    """Raise ValueError for what a single-GPU live run cannot do: tp_size or draft TP size != 1, topk != 1."""
    if scenario.tp_size != 1 or scenario.draft_tp_size != 1:
        raise ValueError(f"live runs are single-GPU: tp_size={scenario.tp_size}, "
                         f"draft TP size={scenario.draft_tp_size}; both must be 1")
    if scenario.spec.topk != 1:
        raise ValueError(f"live runs draft chains only (topk=1), got topk={scenario.spec.topk}")


def time_repeats(loop, rows: np.ndarray, repeats: int, clock: Clock | None,
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
        git_commit=git_commit(), command_line=command_line())


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
    check_single_gpu_scenario(scenario)
    session = session or LiveSession(device)
    loop = session.loop(scenario, speculative)
    b, s = scenario.workload.batch_size, scenario.spec.num_steps
    lengths = (oracle_accept_lengths(scenario, warmup_cycles + num_cycles) if speculative
               else np.ones((warmup_cycles + num_cycles, b), dtype=np.int64))
    clock = Clock(session.device)
    paired = None
    with torch.no_grad():
        for i in range(warmup_cycles):
            loop.cycle(lengths[i])
        timed = lengths[warmup_cycles:]
        runs, phase_sum_us = time_repeats(loop, timed, repeats, clock)
        if speculative and paired_baseline:
            base = session.loop(scenario, False)
            ones = np.ones((warmup_cycles + num_cycles, b), dtype=np.int64)
            for row in ones[:warmup_cycles]:
                base.cycle(row)
            base_runs, _ = time_repeats(base, ones[warmup_cycles:], repeats, clock)
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
