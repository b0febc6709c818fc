"""A calibration profile built from torch.profiler traces of a loop alone: `profile_from_traces`.

The traces are those `specdecsim diagnose trace` writes (calibration/diagnostics/trace.py): one
Chrome trace per point (the no-speculation baseline and one point per num_steps) of one target
and draft, with host ranges per phase and per cycle, and an index (`TraceIndex`, `index.json`)
saying what each trace ran. Read through `simulator.evidence.importers.load_runs` (traces.py).

What the profile holds, and where each number comes from (all from the traces but the roofline):
- whole-forward tables at the traced context length, batch size 1, the traced mode (graph on
  CUDA): the target's 'forward' over num_tokens 1 (the baseline's decode span) and num_steps + 1
  (each point's verify span); the draft's 'draft' over 1 token (the draft phase's span / num_steps,
  over every cycle of every point) and 'draft_extend' over each extend length the traces ran (the
  index records each traced cycle's length). Each value is the median over cycles of the phase's
  GPU span (first kernel start to last kernel end), minus the kernels the cost model adds around
  a whole forward (the verify's input cat and output copy, the EAGLE-3 hidden-state concat, the
  extend's gathers, the decode's token copy: `simulator.costs.forward`), priced as the cost model
  prices them, so that table + those kernels = the measured span;
- host: graph_replay_us = the mean host time of one cudaGraphLaunch; d2h_sync_us = the median of
  the traces' sync tails (last kernel end to the end of the host's sync range); host_schedule_us
  per point = cycle wall time - the phases' spans - d2h_sync_us - graph_replay_us (the first
  replay of a cycle, which the cost model puts on the critical path) + (measured accept span -
  modelled accept), i.e. what makes the modelled cycle equal the traced one; the profile keeps the
  median over speculative points (baseline_host_schedule_us: the baseline's), the per-point values
  in `notes`. Eager launch costs are not in traces as such: op_launch_us stays empty and
  default_launch_us 0 (in eager mode the launches are inside the measured spans).
- roofline: copied from another profile (default the datasheet one, `h200_datasheet`). It prices
  only what no table covers: the glue kernels above, the accept, and forwards outside the traced
  token counts (per-op sums with no op tables: the roofline). Nothing is derived from it that the
  traces measure.

Left out: op tables, collectives (one GPU), a loop-overhead curve (one constant per loop kind),
batch sizes other than the traced one (the cost model uses whole-forward tables at batch 1 only).
Pure Python: no torch.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from pydantic import Field, ValidationError

from simulator.config import ModelShape, Scenario, StrictModel
from simulator.costs.forward import CostModel
from simulator.evidence.importers import ObservedRun, load_runs
from simulator.files import OUTPUT_KEY, TRACE_INDEX_OUTPUT
from simulator.inputs import UserInputError, format_validation_error, load_json, read_text
from simulator.profile import (CalibrationProfile, ForwardTable, HardwareInfo, HostOverheads, Provenance,
                               load_profile, resolve_profile_path)

INDEX_NAME = "index.json"
DEFAULT_ROOFLINE_PROFILE = "h200_datasheet"
MIN_TABLE_FRAC = 0.1  # a table value never drops below this fraction of the measured span


class TracePoint(StrictModel):
    """One traced point: a trace file and what it ran."""

    file: str = Field(pattern=r"^[A-Za-z0-9_.+-]+$", max_length=255,
                      description="Trace file name, in the index's folder (a bare name: no path separators).")
    speculative: bool
    num_steps: int | None = Field(None, ge=1, le=64, description="Draft steps (None: the baseline).")
    scenario: Scenario = Field(description="The scenario the loop ran (shapes, spec, acceptance oracle, seed).")
    extend_lens: list[int] = Field(default_factory=list, description="Draft-extend length of each traced cycle.")
    accept_lengths: list[list[int]] = Field(default_factory=list,
                                            description="Oracle accept lengths of each traced cycle, per request.")


class TraceIndex(StrictModel):
    """What `specdecsim diagnose trace` traced: the index.json beside the traces."""

    specdecsim_output: str = Field(TRACE_INDEX_OUTPUT, pattern=r"^trace_index/1$")
    model: str = Field(description="Size key of the target and draft pair (8b, 1b, tiny).")
    target: ModelShape
    draft: ModelShape
    batch_size: int = Field(ge=1)
    context_len: int = Field(ge=1)
    cuda_graph: bool
    device: str
    gpu_name: str
    torch_version: str
    warmup_cycles: int = Field(ge=0)
    num_cycles: int = Field(ge=1)
    acceptance_oracle: str = Field(description="How the traced accept lengths were drawn.")
    points: list[TracePoint] = Field(min_length=1)
    git_commit: str | None = None
    command_line: str = Field(min_length=1)
    created_utc: str | None = None


def load_index(folder: Path) -> TraceIndex:
    """The TraceIndex in `folder/index.json`.

    Raises:
        UserInputError: missing, not JSON, or not a trace index (one line).
    """
    path = folder / INDEX_NAME
    data = load_json(read_text(path, "trace index"), str(path))
    if not isinstance(data, dict) or data.get(OUTPUT_KEY) != TRACE_INDEX_OUTPUT:
        raise UserInputError(f"{path}: not a trace index ({OUTPUT_KEY!r}: {TRACE_INDEX_OUTPUT!r} missing); "
                             "expected the index.json that `specdecsim diagnose trace` writes")
    try:
        return TraceIndex.model_validate(data, strict=True)
    except ValidationError as e:
        raise UserInputError(format_validation_error(f"{path} (trace index)", e)) from None


def load_trace_runs(folder: Path, index: TraceIndex) -> dict[str, ObservedRun]:
    """file name -> the ObservedRun of each point's trace (simulator.evidence.importers.load_runs).

    Raises:
        UserInputError: a trace that is missing, not a torch.profiler trace, or has no cycle ranges.
    """
    runs = {}
    for p in index.points:
        (run,) = load_runs(folder / p.file, "torch_profiler_trace")
        runs[p.file] = run
    return runs


def _median(values: list[float], what: str) -> float:
    if not values:
        raise UserInputError(f"traces: no {what} measured")
    return float(statistics.median(values))


def _point_spans(p: TracePoint, run: ObservedRun) -> list[dict[str, float]]:
    if run.cycle_phase_span_us is None or run.cycle_us is None:
        raise UserInputError(f"{run.source_file}: no 'cycle' ranges; expected a trace written by "
                             "`specdecsim diagnose trace`")
    spans = run.cycle_phase_span_us
    if p.speculative and len(p.extend_lens) != len(spans):
        raise UserInputError(f"{run.source_file}: {len(spans)} cycles with kernels, but the index lists "
                             f"{len(p.extend_lens)} extend lengths")
    need = ("draft_extend", "draft", "verify", "accept") if p.speculative else ("decode",)
    for i, c in enumerate(spans):
        missing = [k for k in need if k not in c]
        if missing:
            raise UserInputError(f"{run.source_file}: cycle {i} has no kernel in {', '.join(missing)}")
    return spans


def _tables(index: TraceIndex, runs: dict[str, ObservedRun]) -> dict[str, dict[int, float]]:
    """Measured spans per forward: {'forward' | 'draft' | 'draft_extend': {num_tokens: median us}}."""
    samples: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for p in index.points:
        for i, c in enumerate(_point_spans(p, runs[p.file])):
            if not p.speculative:
                samples["forward"][1].append(c["decode"])
                continue
            samples["forward"][p.num_steps + 1].append(c["verify"])
            samples["draft"][1].append(c["draft"] / p.num_steps)
            samples["draft_extend"][p.extend_lens[i]].append(c["draft_extend"])
    for phase in ("forward", "draft", "draft_extend"):
        if phase not in samples:
            raise UserInputError(f"traces: no {phase} measured (trace a baseline and at least one num_steps)")
    return {ph: {n: _median(v, f"{ph} at {n} tokens") for n, v in sorted(by_n.items())}
            for ph, by_n in samples.items()}


def _table(model: ModelShape, phase: str, values: dict[int, float], index: TraceIndex,
           prov: Provenance) -> ForwardTable:
    ns = sorted(values)
    return ForwardTable(model=model.name, phase=phase,
                        shape=model.model_dump(mode="json", exclude={"name", "config_path", "config_notes"}),
                        tp_size=1, mode="graph" if index.cuda_graph else "eager", num_tokens=ns,
                        context_len=[index.context_len], latency_us=[[max(values[n], 1e-3)] for n in ns],
                        provenance=prov)


def _glue_us(profile: CalibrationProfile, p: TracePoint) -> dict[tuple[str, int], float]:
    """GPU us the cost model adds around each whole forward of point p, and its modelled accept:
    {(phase, num_tokens): us}, phase 'forward', 'draft', 'draft_extend' or 'accept' (0 tokens)."""
    sc = p.scenario.model_copy(update={"costs": p.scenario.costs.model_copy(update={"source": "whole_forward"})})
    cost = CostModel(sc, profile)

    def glue(f) -> float:
        return float(sum(k.gpu_us for k in f.kernels if k.name != "forward"))
    if not p.speculative:
        return {("forward", 1): glue(cost.decode_forward())}
    out = {("forward", p.num_steps + 1): glue(cost.verify_forward()),
           ("draft", 1): glue(cost.draft_step_forward(0)), ("accept", 0): cost.accept_forward().gpu_us}
    for n in set(p.extend_lens):
        out[("draft_extend", n)] = glue(cost.draft_extend_forward(n))
    return out


def profile_from_traces(folder: Path | str, index: TraceIndex | None = None,
                        runs: dict[str, ObservedRun] | None = None,
                        roofline_profile: str = DEFAULT_ROOFLINE_PROFILE, name: str | None = None
                        ) -> CalibrationProfile:
    """The profile of the traced loop on the traced GPU, from its traces alone (module docstring).

    Args:
        folder: the folder `specdecsim diagnose trace --out` wrote (index.json and the traces).
        index, runs: the index and the traces' ObservedRuns by file name, where already read.
        roofline_profile: profile name or path whose roofline prices what no table covers.
        name: the profile's name; default 'traces-<model>'.

    Raises:
        UserInputError: a missing or bad index or trace (one line).
        FileNotFoundError: no such roofline profile.
    """
    folder = Path(folder)
    index = index or load_index(folder)
    if index.batch_size != 1:
        raise UserInputError(f"{folder / INDEX_NAME}: batch_size {index.batch_size}; the cost model reads "
                             "whole-forward tables at batch 1 only: trace with --batch 1")
    runs = runs or load_trace_runs(folder, index)
    measured = _tables(index, runs)
    roofline_src = load_profile(resolve_profile_path(roofline_profile))
    cmd = index.command_line
    src = f"torch.profiler traces in {folder} ({len(index.points)} points, {index.num_cycles} cycles each)"
    prov = Provenance(kind="measured", command=cmd, note=f"from traces: {src}; median phase span per forward over "
                      "cycles, minus the glue kernels the cost model prices around a whole forward")
    graph_launch = [r.graph_launch_us for r in runs.values() if r.graph_launch_us is not None]
    replay_us = statistics.mean(graph_launch) if index.cuda_graph and graph_launch else 0.0
    tails = [r.sync_tail_us for r in runs.values() if r.sync_tail_us is not None]
    d2h_us = float(statistics.median(tails)) if tails else 0.0

    def build(values: dict[str, dict[int, float]], schedule: float = 0.0, base_schedule: float = 0.0,
              notes: dict | None = None) -> CalibrationProfile:
        forwards = [_table(index.target, "forward", values["forward"], index, prov),
                    _table(index.draft, "draft", values["draft"], index, prov),
                    _table(index.draft, "draft_extend", values["draft_extend"], index, prov)]
        host = HostOverheads(default_launch_us=0.0, graph_replay_us=replay_us, d2h_sync_us=d2h_us,
                             host_schedule_us=schedule, baseline_host_schedule_us=base_schedule, provenance=Provenance(
                                 kind="measured", command=cmd, note=f"from traces: {src}; graph_replay_us = mean "
                                 "cudaGraphLaunch host time; d2h_sync_us = median sync tail; host_schedule_us = "
                                 "cycle wall - phase spans - d2h_sync - one replay + (accept measured - modelled); "
                                 "eager launch costs not measured (0: inside the spans)"))
        roof = roofline_src.roofline.model_copy(update={"provenance": roofline_src.roofline.provenance.model_copy(
            update={"note": f"copied from profile {roofline_src.name!r} (not from the traces); prices only the "
                            f"kernels outside the whole-forward tables. {roofline_src.roofline.provenance.note}"})})
        return CalibrationProfile(
            name=name or f"traces-{index.model}", description=f"from traces alone: the {index.model} live loop "
            f"on {index.gpu_name}, batch {index.batch_size}, context {index.context_len}, "
            f"{'CUDA graphs' if index.cuda_graph else 'eager'}; use with costs.source whole_forward",
            created_utc=index.created_utc, git_commit=index.git_commit, command_line=cmd,
            hardware=HardwareInfo(gpu_name=index.gpu_name, gpu_count=1, interconnect="single GPU",
                                  torch_version=index.torch_version),
            roofline=roof, host=host, forwards=forwards, notes=notes or {})

    provisional = build(measured)
    glue: dict[tuple[str, int], list[float]] = defaultdict(list)
    for p in index.points:
        for k, v in _glue_us(provisional, p).items():
            glue[k].append(v)
    tables = {ph: {n: max(us - statistics.mean(glue.get((ph, n), [0.0])), MIN_TABLE_FRAC * us)
                   for n, us in by_n.items()} for ph, by_n in measured.items()}
    spec_s, base_s, notes = [], [], {}
    for p in index.points:
        run, spans = runs[p.file], runs[p.file].cycle_phase_span_us
        phases = ("draft_extend", "draft", "verify", "accept") if p.speculative else ("decode",)
        gpu = statistics.mean(sum(c[k] for k in phases) for c in spans)
        s = run.cycle_us - gpu - d2h_us - replay_us
        if p.speculative:
            s += statistics.mean(c["accept"] for c in spans) - _glue_us(provisional, p)[("accept", 0)]
        (spec_s if p.speculative else base_s).append(max(s, 0.0))
        notes[f"host_schedule_us {p.file}"] = (f"{s:.1f} (cycle {run.cycle_us:.1f} us, phase spans {gpu:.1f} us, "
                                               f"{len(spans)} cycles)")
    if not spec_s or not base_s:
        raise UserInputError("traces: need the baseline and at least one speculative point")
    notes["from traces"] = (f"{src}; oracle: {index.acceptance_oracle}; roofline from {roofline_src.name!r}; "
                            f"tables at context {index.context_len} only, batch {index.batch_size}")
    return build(tables, float(statistics.median(spec_s)), float(statistics.mean(base_s)), notes)
