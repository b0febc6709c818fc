"""The live validation grid: real speculative runs on one GPU, one LiveRun JSON per point.

    specdecsim live --out data/live/h200 [--quick | --noise]
    specdecsim live --batch-grid --out DIR [--sizes 8b] [--batches 1,2,4,8,16,32,64]

Default grid (batch 1, context_len 1024, random bf16 weights):
  targets   Llama-3.1-8B and Llama-3.2-1B shapes, each with an EAGLE-3 one-layer draft
            (target's hidden / heads / kv heads / intermediate, draft_vocab_size 32000);
  modes     eager and CUDA graphs;
  points    num_steps 1..8 x iid acceptance_rate {0.5, 0.7, 0.9}, plus the no-speculation
            baseline of each (size, mode);
  noise     two points (one graph, one eager) run with 3 repeats: run-to-run spread;
            (--noise: every graph batch-1 point with 3 repeats, each speculative point followed
            by a paired baseline of its target, timed in the same minute);
  batch 4   a few points (and their baselines) at batch_size 4.
Batch grid (--batch-grid, `batch_grid`): CUDA graphs, batch_size 1..64 x num_steps 1, 3, 5 at
acceptance 0.7 (each request its own oracle accept lengths; the loop keeps and rolls back each
request's KV on its own), each speculative point with a paired baseline, plus the baseline
point of each batch; 3 repeats in interleaved passes (as --noise). Points at batch >= 16 run
BATCH_LARGE_CYCLES timed cycles (each cycle commits b x E[accept] tokens, so the token count
stays high): the 8B grid is estimated at about 5 minutes on one H200.
Each point is `warmup` untimed cycles then `cycles` timed ones. Points already written (and
valid) are skipped, so an interrupted grid resumes. Budget on one H200: default grid about
3 minutes (<= 7), --quick under 1 minute; the estimate is printed first.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from calibration.live.run import LiveSession, merge_repeats, run_live
from calibration.shapes import SIZES
from simulator.acceptance import build_acceptance
from simulator.config import Scenario
from simulator.costs import forward_ops
from simulator.files import write_json_atomic
from simulator.evidence.live_records import LiveRun
from simulator.workload_config import IidAcceptance, SpecConfig

console = Console()

NUM_STEPS = tuple(range(1, 9))
ACCEPTANCE_RATES = (0.5, 0.7, 0.9)
CONTEXT_LEN = 1024
WARMUP_CYCLES, NUM_CYCLES = 16, 128
QUICK_WARMUP_CYCLES, QUICK_NUM_CYCLES = 4, 32
NOISE_REPEATS = 3
BASELINE_SPEC = (3, 0.7)  # spec fields a baseline's scenario carries (the baseline ignores them)
# Rough H200 constants for the printed estimate only (not used in any record).
EST_HBM_BYTES_PER_S = 3.4e12  # ~70% of 4.8 TB/s
EST_BF16_FLOPS_PER_S = 6.0e14  # ~60% of 989 TFLOP/s dense: large-batch verifies are compute-bound
EST_EAGER_LAUNCH_S, EST_GRAPH_KERNEL_S, EST_HOST_S = 12e-6, 1.5e-6, 60e-6  # per listed op (several kernels)


@dataclass(frozen=True)
class GridPoint:
    """One live run: size key, mode, batch, num_steps and rate (None = baseline), repeats."""

    size: str
    graph: bool
    batch_size: int
    num_steps: int | None
    acceptance_rate: float | None
    repeats: int = 1
    paired_baseline: bool = False
    interleaved: bool = False  # repeats run one per pass over the grid (not back to back)
    max_cycles: int | None = None  # timed cycles at most (fewer at large batch); None: the grid's

    def cycles(self, num_cycles: int, warmup_cycles: int) -> tuple[int, int]:
        """(timed, warm-up) cycles of this point under the grid's counts (max_cycles caps the first)."""
        return (num_cycles if self.max_cycles is None else min(num_cycles, self.max_cycles)), warmup_cycles

    @property
    def speculative(self) -> bool:
        return self.num_steps is not None

    @property
    def name(self) -> str:
        rep = f"_rep{self.repeats}" if self.repeats > 1 else ""
        return point_name(self, f"b{self.batch_size}") + rep

    def scenario(self, num_cycles: int, warmup_cycles: int) -> Scenario:
        target, draft = SIZES[self.size]
        s, a = (self.num_steps, self.acceptance_rate) if self.speculative else BASELINE_SPEC
        return Scenario(
            name=self.name, description="live grid point (calibration/live/grid.py), random bf16 weights",
            profile="h200", target=target, draft=draft, tp_size=1, placement="shared_tp",
            spec=dict(num_steps=s, topk=1, num_draft_tokens=s + 1),
            acceptance=dict(kind="iid", acceptance_rate=a),
            workload=dict(batch_size=self.batch_size, context_len=CONTEXT_LEN),
            fidelity=dict(num_cycles=num_cycles, warmup_cycles=warmup_cycles),
            serving_engine=dict(cuda_graph=self.graph), seed=0)


def noise_grid() -> list[GridPoint]:
    """Every CUDA-graph batch-1 point (and baseline) of both sizes, each run NOISE_REPEATS times,
    one run per pass over the grid (a point's runs are minutes apart, so host or GPU slowdowns
    that last seconds hit one run, not all): run-to-run noise per point, and a pooled record."""
    pts = []
    for size in ("8b", "1b"):
        pts += [GridPoint(size, True, 1, s, a, NOISE_REPEATS, paired_baseline=True, interleaved=True)
                for s in NUM_STEPS for a in ACCEPTANCE_RATES]
        pts.append(GridPoint(size, True, 1, None, None, NOISE_REPEATS, interleaved=True))
    return pts


BATCH_GRID_SIZES = (1, 2, 4, 8, 16, 32, 64)
BATCH_GRID_STEPS = (1, 3, 5)
BATCH_GRID_RATE = 0.7
BATCH_LARGE = 16  # batch sizes from here run BATCH_LARGE_CYCLES timed cycles
BATCH_LARGE_CYCLES = 64


def batch_grid(sizes: tuple[str, ...] = ("8b",), batch_sizes: tuple[int, ...] = BATCH_GRID_SIZES) -> list[GridPoint]:
    """CUDA-graph points at each batch size: num_steps BATCH_GRID_STEPS at acceptance
    BATCH_GRID_RATE, each with a paired baseline, and the baseline point; NOISE_REPEATS runs each
    in interleaved passes. Batch >= BATCH_LARGE: BATCH_LARGE_CYCLES timed cycles."""
    pts = []
    for size in sizes:
        for b in batch_sizes:
            cap = BATCH_LARGE_CYCLES if b >= BATCH_LARGE else None
            pts += [GridPoint(size, True, b, s, BATCH_GRID_RATE, NOISE_REPEATS, paired_baseline=True, interleaved=True,
                              max_cycles=cap) for s in BATCH_GRID_STEPS]
            pts.append(GridPoint(size, True, b, None, None, NOISE_REPEATS, interleaved=True, max_cycles=cap))
    return pts


def point_name(p, load: str) -> str:
    """A record's file stem: size, mode, the load (b<batch> or serving_c<concurrency>), then
    s<steps>_a<acceptance %> or baseline (a point with `size`, `graph`, `num_steps`, `acceptance_rate`)."""
    mode = "graph" if p.graph else "eager"
    what = f"s{p.num_steps}_a{round(p.acceptance_rate * 100):02d}" if p.num_steps is not None else "baseline"
    return f"{p.size}_{mode}_{load}_{what}"


def grid(quick: bool) -> list[GridPoint]:
    """Points in run order: grouped by size (one model pair in memory), then batch and mode."""
    if quick:
        pts = [GridPoint("1b", g, 1, s, 0.7) for g in (False, True) for s in (1, 4)]
        pts += [GridPoint("1b", g, 1, None, None) for g in (False, True)]
        return pts + [GridPoint("8b", True, 1, 3, 0.7), GridPoint("8b", True, 1, None, None)]
    pts = []
    for size in ("8b", "1b"):
        for g in (False, True):
            pts += [GridPoint(size, g, 1, s, a) for s in NUM_STEPS for a in ACCEPTANCE_RATES]
            pts.append(GridPoint(size, g, 1, None, None))
        if size == "8b":
            pts += [GridPoint(size, g, 1, 4, 0.7, NOISE_REPEATS) for g in (True, False)]
            pts += [GridPoint(size, True, 4, s, 0.7) for s in (1, 3, 5)] + [GridPoint(size, True, 4, None, None)]
        else:
            pts += [GridPoint(size, g, 4, 3, 0.7) for g in (True, False)]
            pts += [GridPoint(size, g, 4, None, None) for g in (True, False)]
    return pts


def forward_estimate_s(ops: list, graph: bool) -> float:
    """Rough seconds of one forward of `ops` on an H200: per op the larger of its HBM bytes and its
    flops, plus graph gaps (CUDA graph) or the larger of that and kernel launches (eager)."""
    gpu = sum(max(op.bytes / EST_HBM_BYTES_PER_S, op.flops / EST_BF16_FLOPS_PER_S) for op in ops)
    return gpu + len(ops) * EST_GRAPH_KERNEL_S if graph else max(gpu, len(ops) * EST_EAGER_LAUNCH_S)


def estimate_s(p: GridPoint, num_cycles: int, warmup_cycles: int) -> float:
    """Rough wall seconds of one point on an H200 (roofline bytes + launch costs, mean accept)."""
    num_cycles, warmup_cycles = p.cycles(num_cycles, warmup_cycles)
    target, draft = SIZES[p.size]
    b, c = p.batch_size, CONTEXT_LEN
    decode = forward_estimate_s(forward_ops.target_forward_ops(target, 1, b, 1, c), p.graph) + EST_HOST_S
    if not p.speculative:
        cycle = decode
        setup = 3 * cycle if p.graph else 0.0
    else:
        s = p.num_steps
        spec = SpecConfig(num_steps=s, topk=1, num_draft_tokens=s + 1)
        acc = build_acceptance(IidAcceptance(acceptance_rate=p.acceptance_rate), spec)
        ext = max(1, round(acc.mean_accept_length()))
        verify = forward_estimate_s(forward_ops.target_forward_ops(target, 1, b, s + 1, c), p.graph)
        step = forward_estimate_s(forward_ops.draft_forward_ops(draft, 1, b, 1, c, False), p.graph)
        extend = forward_estimate_s(forward_ops.draft_forward_ops(draft, 1, b, ext, c, True), p.graph)
        cycle = verify + s * step + extend + 2 * EST_HOST_S
        setup = 3 * (verify + (2 * s + 2) * step) if p.graph else 0.0
    paired = (warmup_cycles + p.repeats * num_cycles) * decode if p.speculative and p.paired_baseline else 0.0
    return setup + (warmup_cycles + p.repeats * num_cycles) * cycle + paired


def plan_runs(todo: list[GridPoint], out: Path, num_cycles: int, warmup_cycles: int
              ) -> list[tuple[GridPoint, int, Path]]:
    """(point, repeats in this run, file to write) for the points of `todo`, in run order.

    An interleaved point runs one repeat per pass over the grid, into
    `out/.passes/{name}.pass{k}.json` (k < repeats; `merge_passes` pools them); the others run
    their repeats back to back into `out/{name}.json`. Files already there are left out (resume),
    except pass files of another scenario (e.g. other --cycles), which run again and are replaced:
    `merge_repeats` pools only passes of one scenario.
    """
    passes_dir = out / ".passes"
    num_passes = max([p.repeats for p in todo if p.interleaved], default=1)
    runs = [(p, 1, passes_dir / f"{p.name}.pass{k}.json")
            for k in range(num_passes) for p in todo if p.interleaved and k < p.repeats]
    runs += [(p, p.repeats, out / f"{p.name}.json") for p in todo if not p.interleaved]

    def done(p: GridPoint, path: Path) -> bool:
        rec = load_record(path)
        if rec is None:
            return False
        return path.parent != passes_dir or rec.scenario == p.scenario(*p.cycles(num_cycles, warmup_cycles))
    return [r for r in runs if not done(r[0], r[2])]


def merge_passes(todo: list[GridPoint], out: Path) -> None:
    """Pool each interleaved point's pass files into `out/{name}.json` (run.merge_repeats) once
    all its passes are there, then delete them (and `out/.passes` once empty)."""
    passes_dir = out / ".passes"
    for p in todo:
        if not p.interleaved:
            continue
        parts = [load_record(passes_dir / f"{p.name}.pass{k}.json") for k in range(p.repeats)]
        if all(parts):
            try:
                merged = merge_repeats(parts)
            except ValueError as e:  # passes of different runs: keep them, say so, go on
                console.print(f"[red]{p.name}: passes not pooled ({e}); they stay in {passes_dir}")
                continue
            write_json_atomic(out / f"{p.name}.json", merged.model_dump(mode="json"))
            for k in range(p.repeats):
                (passes_dir / f"{p.name}.pass{k}.json").unlink()
    if passes_dir.is_dir() and not any(passes_dir.iterdir()):
        passes_dir.rmdir()


def foreign_records(out: Path, points: list[GridPoint]) -> list[Path]:
    """Files in `out` (and its pass folder) named as a point's record that are not LiveRun
    records: a run would replace them, so the CLI asks for --force first."""
    names = [out / f"{p.name}.json" for p in points]
    names += [out / ".passes" / f"{p.name}.pass{k}.json" for p in points for k in range(p.repeats)]
    return [f for f in names if (f.exists() or f.is_symlink()) and load_record(f) is None]


def load_record(path: Path, model: type = LiveRun):
    """The record (a LiveRun, or `model`) at `path`, or None if it is missing or does not validate
    (the point runs again)."""
    try:
        return model.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def print_table(rows: list[tuple[GridPoint, LiveRun]]) -> None:
    """Points with tok/s, speedup over the baseline of the same size/mode/batch, phase means."""
    base = {(p.size, p.graph, p.batch_size): r.tok_per_s for p, r in rows if not p.speculative}
    t = Table(title="live runs (phase columns: mean us per cycle)")
    for col in ("point", "E[accept]", "accept", "tok/s", "speedup", "extend", "draft", "verify",
                "accept_us", "decode", "sync", "host"):
        t.add_column(col, justify="left" if col == "point" else "right")
    for p, r in rows:
        ph = r.phase_us
        theory = (build_acceptance(r.scenario.acceptance, r.scenario.spec).mean_accept_length()
                  if p.speculative else 1.0)
        ref = base.get((p.size, p.graph, p.batch_size))
        spread = ""
        if len(r.repeat_tok_per_s) > 1:
            spread = f" ({min(r.repeat_tok_per_s):.0f}-{max(r.repeat_tok_per_s):.0f})"
        if r.paired_baseline_tok_per_s:
            ref = r.paired_baseline_tok_per_s
        t.add_row(p.name, f"{theory:.2f}", f"{r.mean_accept_length:.2f}", f"{r.tok_per_s:.1f}{spread}",
                  f"{r.tok_per_s / ref:.2f}" if ref else "-",
                  *(f"{ph[k]:.0f}" if k in ph else "-"
                    for k in ("draft_extend", "draft", "verify", "accept", "decode", "sync", "host")))
    Console(width=max(console.width, 150)).print(t)


def cycle_counts(quick: bool, cycles: int | None, warmup: int | None) -> tuple[int, int]:
    """(num_cycles, warmup_cycles) per point: the overrides where given, else the quick or the
    full grid's defaults."""
    num_cycles = cycles if cycles is not None else (QUICK_NUM_CYCLES if quick else NUM_CYCLES)
    warmup_cycles = warmup if warmup is not None else (QUICK_WARMUP_CYCLES if quick else WARMUP_CYCLES)
    return num_cycles, warmup_cycles


def run_grid(points: list[GridPoint], out: Path, num_cycles: int, warmup_cycles: int,
             device: str = "cuda") -> list[tuple[str, str]]:
    """Run every point of `points` whose record is not in `out` yet (resume) on one device, write
    one LiveRun JSON per point (atomically), pool interleaved passes, print the table.

    A point that fails (out of memory, a scenario the loop refuses) is reported and skipped.

    Returns:
        (point name, error) of every point that failed.
    """
    todo = [p for p in points if load_record(out / f"{p.name}.json") is None]
    est = sum(estimate_s(p, num_cycles, warmup_cycles) for p in todo) + 5.0 * len({p.size for p in todo})
    console.print(f"{len(points)} points, {len(points) - len(todo)} already in {out}; {len(todo)} to run, "
                  f"{warmup_cycles} + {num_cycles} cycles each: estimated {est:.0f} s on an H200")
    session = LiveSession(device)
    start, failed = time.perf_counter(), []
    runs = plan_runs(todo, out, num_cycles, warmup_cycles)
    for i, (p, reps, path) in enumerate(runs):
        t0 = time.perf_counter()
        try:
            n, w = p.cycles(num_cycles, warmup_cycles)
            rec = run_live(p.scenario(n, w), p.speculative, n, w, device, reps, session,
                           paired_baseline=p.paired_baseline)
        except (RuntimeError, ValueError) as e:  # OOM or a bad point: keep going, report at the end
            failed.append((p.name, f"{type(e).__name__}: {e}"))
            console.print(f"[red]{p.name}: {failed[-1][1]}")
            continue
        write_json_atomic(path, rec.model_dump(mode="json"))
        console.print(f"[{i + 1}/{len(runs)}] {path.stem}: {rec.tok_per_s:.1f} tok/s, accept "
                      f"{rec.mean_accept_length:.2f} ({time.perf_counter() - t0:.1f} s)")
    merge_passes(todo, out)
    console.print(f"ran {len(todo) - len(failed)} points in {time.perf_counter() - start:.0f} s")
    print_table([(p, r) for p in points if (r := load_record(out / f"{p.name}.json")) is not None])
    return failed
