"""Predicted vs measured: hold the simulator to live speculative runs.

Each LiveRun record embeds the Scenario that ran. `validate_records` predicts every record from
a profile alone (the closed form of `simulator.analytic`, exact for the deterministic costs the
profile gives) and never reads the record's timings for the prediction. Errors:

- tok_per_s_error_frac = predicted / measured - 1 (per point); measured = the median repeat's
  tok/s where the record's repeats replayed one accept sequence (`LiveRun.median_tok_per_s`);
- speedup_error = predicted speedup - measured speedup. The measured speedup divides by the
  record's own paired baseline (`paired_baseline_tok_per_s`, timed right after the point) where
  it has one, else by the baseline record of the same target, batch_size, context_len and mode;
- repeat spread: (max - min) / median of the per-repeat cycle times (timing only: the repeats of
  a record replay one accept-length sequence); older records without per-repeat times give the
  spread of their repeats' tok/s, which also holds the accept-length draws of each repeat;
- best num_steps: per cell (target, mode, acceptance, batch_size, context_len, tp_size, placement)
  with more than one num_steps, the num_steps with the highest measured tok/s against the
  predicted one (`best_num_steps`: where several records, from several engine processes, measured
  one num_steps, their mean: the most of five noisy records is no measurement of that num_steps);
- faster placement: per cell (target, mode, acceptance, batch_size, context_len, tp_size,
  num_steps) with more than one draft placement, the measured-faster placement against the
  predicted-faster one;
- by batch size (`summarize_by_batch`): the tok/s errors of each (mode, batch_size), and the best
  speedup over num_steps measured and predicted there;
- crossover (`crossovers`): per cell (record set, target, mode, acceptance, context_len, tp_size,
  placement) over more than one batch size, the first batch size whose best speedup over
  num_steps is <= 1 (speculation stops paying; none: it pays at every batch of the grid),
  measured against predicted, in grid steps (the cell's sorted batch sizes; none counts as one
  step past the largest);
- the batch bar (`batch_bar`): median |tok/s error| <= 3% and max <= 8% over >= 4 batch sizes
  reaching >= 32, and every crossover predicted within one grid step.

The live loop's timed cycles count every accepted token (no max_new_tokens truncation), so the
prediction uses the closed form without truncation.

By default the prediction takes the accept-length distribution the oracle actually drew in the
run (`accept_length_counts`, an outcome of the seeded acceptance model, not a timing), so that a
point's error measures the timing model rather than the sampling noise of a short run;
`acceptance="scenario"` predicts from the scenario's acceptance model instead.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simulator import __version__
from simulator.acceptance import build_acceptance
from simulator.analytic import analyze, extend_length_pmf
from simulator.costs.forward import CostModel
from simulator.files import VALIDATION_OUTPUT
from simulator.inputs import UserInputError, format_validation_error, quote, read_json
from simulator.profile import CalibrationProfile
from simulator.evidence.live_records import LiveRun
from simulator.workload_config import EmpiricalAcceptance

MAX_RECORD_FILES = 100_000

@dataclass(frozen=True)
class PointComparison:
    """One live record against its prediction (times in us)."""

    label: str
    source: str
    target: str
    mode: str
    speculative: bool
    num_steps: int
    acceptance: str
    batch_size: int
    context_len: int
    measured_tok_per_s: float
    predicted_tok_per_s: float
    tok_per_s_error_frac: float
    measured_accept_length: float
    predicted_accept_length: float
    measured_repeat_spread_frac: float | None
    measured_phase_us: dict
    predicted_phase_us: dict
    measured_speedup: float | None = None
    predicted_speedup: float | None = None
    tp_size: int = 1
    placement: str = "shared_tp"
    record_set: str = ""  # the folder the record came from: points of different runs never share a cell


def record_files(paths: list[Path]) -> list[Path]:
    """The record files named by `paths` (folders searched for *.json), each once.

    Raises:
        UserInputError: a missing path, more than MAX_RECORD_FILES files, or no file at all.
    """
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files += sorted(p.glob("*.json"))
        elif p.exists():
            files.append(p)  # read_text says what is wrong with anything but a regular file
        else:
            raise UserInputError(f"{p}: no such record file or folder")
        if len(files) > MAX_RECORD_FILES:
            raise UserInputError(f"more than {MAX_RECORD_FILES:,} record files in {', '.join(map(str, paths))}")
    if not files:
        raise UserInputError(f"no *.json records in {', '.join(map(str, paths))}")
    return list({f.resolve(): f for f in files}.values())  # a file given twice counts once


def not_a_live_run(data) -> str | None:
    """Why a JSON file is plainly another kind of file than a LiveRun record (one line), or None."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not a live record (a LiveRun object)"
    if data.get("kind") == "live_serving":
        return "a live serving record: `specdecsim validate-serving` reads it, `validate` reads live runs"
    if isinstance(data.get("specdecsim_output"), str):
        return (f"a specdecsim output ({data['specdecsim_output']}), not a live record: `validate` reads the "
                "live runs (`specdecsim live --out DIR`)")
    if "scenario" not in data:
        keys = ", ".join(list(map(str, data))[:6]) + (", ..." if len(data) > 6 else "")
        return f"not a live record (a LiveRun has a scenario; this file holds {keys or 'nothing'})"
    return None


def load_records(paths: list[Path]) -> list[tuple[str, LiveRun]]:
    """Read LiveRun JSON files (folders are searched for *.json).

    Raises:
        UserInputError: a file is missing, not JSON, or not a LiveRun (naming the field).
    """
    files = record_files(paths)
    out = []
    for f in files:
        data = read_json(f, "live record (LiveRun JSON)")
        if why := not_a_live_run(data):
            raise UserInputError(f"{f}: {why}")
        try:
            out.append((str(f), LiveRun.model_validate(data, strict=True)))
        except ValidationError as e:
            raise UserInputError(format_validation_error(str(f), e)) from None
    return out


def with_costs_source(records: list[tuple[str, LiveRun]], source: str | None) -> list[tuple[str, LiveRun]]:
    """The records with every scenario's `costs.source` set to `source` (None: unchanged)."""
    if source is None:
        return records
    return [(src, r.model_copy(update={"scenario": r.scenario.model_copy(update={
        "costs": r.scenario.costs.model_copy(update={"source": source})})})) for src, r in records]


def with_engine_profile(records: list[tuple[str, LiveRun]], engine_profile: str) -> list[tuple[str, LiveRun]]:
    """The records with every engine-kind scenario's `serving_engine.engine_profile` set.

    Raises:
        UserInputError: a record of the project's own loop (the live_loop kind has no engine profile).
    """
    out = []
    for src, r in records:
        eng = r.scenario.serving_engine
        if eng.kind == "live_loop":
            raise UserInputError(f"{src}: a live-loop record; an engine profile prices an engine kind's records")
        out.append((src, r.model_copy(update={"scenario": r.scenario.model_copy(update={
            "serving_engine": eng.model_copy(update={"engine_profile": engine_profile})})})))
    return out


def _acceptance_label(rec: LiveRun) -> str:
    a = rec.scenario.acceptance
    if a.kind in ("iid", "tree"):
        return f"{a.kind} {a.acceptance_rate:g}"
    if rec.forced_acceptance_rate is not None:  # the same label at every num_steps of one forced rate
        return f"{a.kind} (forced {rec.forced_acceptance_rate:g})"
    return a.kind


def predicted_phase_us(cost: CostModel, ext_pmf: np.ndarray) -> dict[str, float]:
    """Predicted time per phase per cycle: each phase's forwards issued onto an idle GPU."""
    return {
        "draft": sum(cost.draft_step_forward(i).span_us for i in range(cost.num_draft_forwards)),
        "verify": cost.verify_forward().span_us,
        "accept": cost.accept_forward().span_us,
        "sync": cost.d2h_sync_us,
        "draft_extend": float(sum(p * cost.draft_extend_forward(j).span_us
                                  for j, p in enumerate(ext_pmf, start=1) if p > 0)),
    }


def predict(rec: LiveRun, profile: CalibrationProfile,
            acceptance: str = "measured") -> tuple[float, float, dict[str, float], float]:
    """(tok_per_s, accept_length, phase_us, baseline tok_per_s) predicted for a record's scenario."""
    update: dict = {}
    counts = np.asarray(rec.accept_length_counts, dtype=float)
    if acceptance == "measured" and rec.speculative and counts.sum() > 0 \
            and len(counts) == rec.scenario.spec.num_steps + 1:
        update["acceptance"] = EmpiricalAcceptance(accept_length_probs=list(counts / counts.sum()))
    sc = rec.scenario.model_copy(update=update)
    cost = CostModel(sc, profile)
    acc = build_acceptance(sc.acceptance, sc.spec)
    an = analyze(sc, cost, acc, truncate=False)
    if not rec.speculative:
        return (an.baseline_tok_per_s, 1.0, {"decode": cost.decode_forward().span_us, "sync": cost.d2h_sync_us},
                an.baseline_tok_per_s)
    ext = extend_length_pmf(acc.pmf(), sc.workload.batch_size)
    return an.tok_per_s, an.mean_accept_length, predicted_phase_us(cost, ext), an.baseline_tok_per_s


def compare(records: list[tuple[str, LiveRun]], profile: CalibrationProfile,
            acceptance: str = "measured") -> list[PointComparison]:
    """PointComparison per record, with measured/predicted speedup where a baseline record pairs up.

    Raises:
        UserInputError: a prediction that is not a finite positive rate, naming the record.
    """
    out = []
    baselines: dict[tuple, float] = {}
    for src, rec in records:
        if not rec.speculative:
            baselines[_pair_key(src, rec)] = rec.median_tok_per_s
    several_sets = len({Path(src).parent for src, _ in records}) > 1
    for src, rec in records:
        tok, al, phases, base_pred = predict(rec, profile, acceptance)
        if not all(np.isfinite([tok, al, base_pred, *phases.values()])) or tok <= 0 or base_pred <= 0:
            raise UserInputError(f"{src}: the prediction from this profile is not a finite positive rate "
                                 f"(tok/s {tok!r}, baseline {base_pred!r}); the record's or the profile's numbers are "
                                 "outside what the model computes")
        sc = rec.scenario
        reps = rec.repeat_cycle_us or rec.repeat_tok_per_s
        spread = (max(reps) - min(reps)) / float(np.median(reps)) if len(reps) > 1 else None
        mode = sc.serving_engine.collective_mode(sc.workload.batch_size)
        base_meas = (rec.paired_baseline_tok_per_s or baselines.get(_pair_key(src, rec))) if rec.speculative else None
        where = f"[{Path(src).parent.name}] " if several_sets else ""
        if sc.tp_size > 1 or any(r.scenario.placement.label != "shared_tp" for _, r in records):
            where += f"tp{sc.tp_size} " + (f"{sc.placement.label} " if rec.speculative else "")
        out.append(PointComparison(
            label=f"{sc.target.name} {mode} b{sc.workload.batch_size} "
                  f"{f'ctx{rec.prompt_len} ' if rec.prompt_len else ''}{where}"
                  + (f"steps={sc.spec.num_steps}"
                     + (f" topk={sc.spec.topk}/{sc.spec.num_draft_tokens}" if sc.spec.topk > 1 else "")
                     + f" {_acceptance_label(rec)}" if rec.speculative else "baseline"),
            tp_size=sc.tp_size, placement=sc.placement.label, record_set=str(Path(src).parent),
            source=Path(src).name, target=sc.target.name, mode=mode, speculative=rec.speculative,
            num_steps=sc.spec.num_steps if rec.speculative else 0, acceptance=_acceptance_label(rec),
            batch_size=sc.workload.batch_size, context_len=rec.prompt_len or sc.workload.context_len,
            measured_tok_per_s=rec.median_tok_per_s, predicted_tok_per_s=tok,
            tok_per_s_error_frac=tok / rec.median_tok_per_s - 1.0,
            measured_accept_length=rec.mean_accept_length, predicted_accept_length=al,
            measured_repeat_spread_frac=spread,
            measured_phase_us={k: v for k, v in rec.phase_us.items() if k in phases},
            predicted_phase_us=phases,
            measured_speedup=rec.median_tok_per_s / base_meas if base_meas else None,
            predicted_speedup=tok / base_pred if base_meas else None,
        ))
    return out


def _pair_key(src: str, rec: LiveRun) -> tuple:
    sc = rec.scenario
    return (str(Path(src).parent), sc.target.name, sc.workload.batch_size, rec.prompt_len or sc.workload.context_len,
            sc.serving_engine.cuda_graph, sc.tp_size)


@dataclass(frozen=True)
class ModeSummary:
    """Error statistics over the points of one mode."""

    mode: str
    num_points: int
    median_abs_error_frac: float
    max_abs_error_frac: float
    mean_abs_error_frac: float
    max_abs_speedup_error: float | None
    best_num_steps_agree: int
    best_num_steps_cells: int
    median_repeat_spread_frac: float | None
    faster_placement_agree: int = 0
    faster_placement_cells: int = 0


PLACEMENT_NOISE_FRAC = 0.025  # about the median run-to-run spread of the H200 graph grid (docs/validation.md)


def summarize(points: list[PointComparison], placement_noise_frac: float = PLACEMENT_NOISE_FRAC) -> list[ModeSummary]:
    """ModeSummary per mode (graph, eager) over all points of that mode.

    A placement cell counts only where the measured tok/s of its placements differ by more than
    the run-to-run noise: the largest repeat spread of its points, or `placement_noise_frac`
    for points without repeats."""
    out = []
    for mode in sorted({p.mode for p in points}):
        pts = [p for p in points if p.mode == mode]
        err = np.abs([p.tok_per_s_error_frac for p in pts])
        sp = [abs(p.predicted_speedup - p.measured_speedup) for p in pts if p.measured_speedup is not None]
        cells = defaultdict(list)
        for p in pts:
            if p.speculative:
                cells[(p.record_set, p.target, p.acceptance, p.batch_size, p.context_len, p.tp_size,
                       p.placement)].append(p)
        cells = {k: c for k, c in cells.items() if len({p.num_steps for p in c}) > 1}  # a choice to make
        agree = sum(1 for c in cells.values() if len(set(best_num_steps(c))) == 1)
        placed = defaultdict(list)
        for p in pts:
            if p.speculative:
                placed[(p.record_set, p.target, p.acceptance, p.batch_size, p.context_len, p.tp_size,
                        p.num_steps)].append(p)
        placed = {k: c for k, c in placed.items() if len({p.placement for p in c}) > 1
                  and _beyond_noise(c, placement_noise_frac) and _predictions_differ(c)}
        placement_agree = sum(1 for c in placed.values()
                              if max(c, key=lambda p: p.measured_tok_per_s).placement
                              == max(c, key=lambda p: p.predicted_tok_per_s).placement)
        spreads = [p.measured_repeat_spread_frac for p in pts if p.measured_repeat_spread_frac is not None]
        out.append(ModeSummary(mode, len(pts), float(np.median(err)), float(err.max()), float(err.mean()),
                               max(sp) if sp else None, agree, len(cells),
                               float(np.median(spreads)) if spreads else None, placement_agree, len(placed)))
    return out


def mean_by_num_steps(cell: list[PointComparison], value_of) -> dict[int, float]:
    """num_steps -> the mean of value_of over the cell's records of that num_steps (one per engine
    process that measured it)."""
    by: dict[int, list[float]] = defaultdict(list)
    for p in cell:
        by[p.num_steps].append(value_of(p))
    return {k: float(np.mean(v)) for k, v in by.items()}


def best_num_steps(cell: list[PointComparison]) -> tuple[int, int]:
    """(measured, predicted) best num_steps of one cell: the highest mean tok/s over each num_steps's
    records (module docstring)."""
    meas = mean_by_num_steps(cell, lambda p: p.measured_tok_per_s)
    pred = mean_by_num_steps(cell, lambda p: p.predicted_tok_per_s)
    return max(meas, key=meas.get), max(pred, key=pred.get)


def _predictions_differ(cell: list[PointComparison]) -> bool:
    """The model names a faster placement (not a tie, as at TP 1 where placements cost alike)."""
    tok = sorted(p.predicted_tok_per_s for p in cell)
    return tok[-1] > tok[-2] * (1 + 1e-9)


def _beyond_noise(cell: list[PointComparison], default_noise_frac: float) -> bool:
    tok = [p.measured_tok_per_s for p in cell]
    noise = max((p.measured_repeat_spread_frac for p in cell if p.measured_repeat_spread_frac is not None),
                default=default_noise_frac)
    return (max(tok) - min(tok)) / min(tok) > noise


@dataclass(frozen=True)
class BatchSummary:
    """Error statistics over the points of one mode and batch size; best speedups over num_steps."""

    mode: str
    batch_size: int
    num_points: int
    median_abs_error_frac: float
    max_abs_error_frac: float
    max_abs_speedup_error: float | None
    measured_best_speedup: float | None
    predicted_best_speedup: float | None


def summarize_by_batch(points: list[PointComparison]) -> list[BatchSummary]:
    """BatchSummary per (mode, batch_size), in that order."""
    out = []
    for mode, b in sorted({(p.mode, p.batch_size) for p in points}):
        pts = [p for p in points if p.mode == mode and p.batch_size == b]
        err = np.abs([p.tok_per_s_error_frac for p in pts])
        paired = [p for p in pts if p.measured_speedup is not None]
        out.append(BatchSummary(
            mode, b, len(pts), float(np.median(err)), float(err.max()),
            max((abs(p.predicted_speedup - p.measured_speedup) for p in paired), default=None),
            max((p.measured_speedup for p in paired), default=None),
            max((p.predicted_speedup for p in paired), default=None)))
    return out


@dataclass(frozen=True)
class CrossoverCheck:
    """Where speculation stops paying along batch_size in one cell, measured against predicted.

    Attributes:
        cell: the cell's label (target, mode, acceptance, context, tp, placement, record set).
        batch_sizes: the cell's batch sizes with a paired speedup, ascending (the grid steps).
        measured_crossover, predicted_crossover: the first batch size whose best speedup over
            num_steps is <= 1; None where it pays at every batch size of the grid.
        steps_apart: grid steps between the two (None counts as one step past the largest).
    """

    cell: str
    mode: str
    batch_sizes: list[int]
    measured_crossover: int | None
    predicted_crossover: int | None
    steps_apart: int
    within_one_step: bool


def crossovers(points: list[PointComparison]) -> list[CrossoverCheck]:
    """CrossoverCheck per cell whose speculative points with a measured speedup span >= 2 batch sizes."""
    cells: dict[tuple, list[PointComparison]] = defaultdict(list)
    for p in points:
        if p.speculative and p.measured_speedup is not None:
            cells[(p.record_set, p.target, p.mode, p.acceptance, p.context_len, p.tp_size, p.placement)].append(p)
    out = []
    for (rset, target, mode, acc, c, tp, placement), pts in sorted(cells.items()):
        batches = sorted({p.batch_size for p in pts})
        if len(batches) < 2:
            continue

        def first_not_paying(speedup_of) -> int | None:
            for b in batches:  # the best num_steps's mean speedup over its records (best_num_steps)
                if max(mean_by_num_steps([p for p in pts if p.batch_size == b], speedup_of).values()) <= 1.0:
                    return b
            return None
        meas = first_not_paying(lambda p: p.measured_speedup)
        pred = first_not_paying(lambda p: p.predicted_speedup)
        index = {b: i for i, b in enumerate(batches)}
        apart = abs(index.get(meas, len(batches)) - index.get(pred, len(batches)))
        where = f" [{Path(rset).name}]" if len({q.record_set for q in points}) > 1 else ""
        out.append(CrossoverCheck(f"{target} {mode} {acc} context {c} tp{tp} {placement}{where}", mode, batches,
                                  meas, pred, apart, apart <= 1))
    return out


BATCH_BAR = dict(median_abs_error_frac=0.03, max_abs_error_frac=0.08, min_batch_sizes=4, min_largest_batch=32)


def batch_bar(points: list[PointComparison], checks: list[CrossoverCheck], mode: str = "graph") -> tuple[bool, str]:
    """(met, one line) of the batch bar (module docstring; BATCH_BAR) over the points of `mode`."""
    pts = [p for p in points if p.mode == mode]
    if not pts:
        return False, f"batch bar: no {mode} points"
    batches = sorted({p.batch_size for p in pts})
    err = np.abs([p.tok_per_s_error_frac for p in pts])
    med, worst = float(np.median(err)), float(err.max())
    mine = [c for c in checks if c.mode == mode]
    agree = sum(c.within_one_step for c in mine)
    met = (med <= BATCH_BAR["median_abs_error_frac"] and worst <= BATCH_BAR["max_abs_error_frac"]
           and len(batches) >= BATCH_BAR["min_batch_sizes"] and batches[-1] >= BATCH_BAR["min_largest_batch"]
           and bool(mine) and agree == len(mine))
    return met, (f"batch bar ({mode}: median |err| <= 3%, max <= 8% over >= 4 batch sizes up to >= 32, crossover "
                 f"within one grid step): {'met' if met else 'NOT met'}: median {med:.2%}, max {worst:.2%} over "
                 f"{len(batches)} batch sizes {batches[0]}-{batches[-1]}; crossover within one step in {agree} of "
                 f"{len(mine)} cells")


class ValidationReport(BaseModel):
    """The file `specdecsim validate --json` writes and `specdecsim plot --validate-json` reads."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    specdecsim_output: Literal["validation/1"] = Field(VALIDATION_OUTPUT, description="Kind and schema version.")
    version: str = Field(__version__, description="specdecsim version that wrote it.")
    profile: str = Field(description="Profile the predictions came from.")
    summaries: list[ModeSummary]
    batch_summaries: list[BatchSummary] = Field(default_factory=list, description="Per (mode, batch_size).")
    crossovers: list[CrossoverCheck] = Field(default_factory=list, description="Where speculation stops paying "
                                                                                "along batch_size, per cell.")
    points: list[PointComparison]


def to_json(points: list[PointComparison], summaries: list[ModeSummary], profile_ref: str) -> dict:
    """The ValidationReport of a comparison (with its summaries by batch size and crossovers), as a
    JSON-ready dict."""
    return ValidationReport(profile=profile_ref, summaries=summaries, batch_summaries=summarize_by_batch(points),
                            crossovers=crossovers(points), points=points).model_dump(mode="json")


def load_validation_report(path: Path) -> ValidationReport:
    """Read a ValidationReport JSON (`validate --json`).

    Raises:
        UserInputError: unreadable, not JSON, or not a validation report, naming the file and field.
    """
    data = read_json(path, "validate JSON")
    if not isinstance(data, dict) or data.get("specdecsim_output") != VALIDATION_OUTPUT:
        got = data.get("specdecsim_output") if isinstance(data, dict) else type(data).__name__
        raise UserInputError(f"{path}: not a `specdecsim validate --json` file (specdecsim_output "
                             f"{VALIDATION_OUTPUT!r} expected, got {quote(got)})")
    try:
        return ValidationReport.model_validate(data)
    except ValidationError as e:
        raise UserInputError(format_validation_error(str(path), e)) from None
