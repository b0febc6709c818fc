"""Tables of docs/engines/vllm.md: vLLM's live records predicted three ways.

    python docs/make_engine_validation_table.py

1. the `vllm` engine model as shipped before engine-native calibration (its fused kernels priced
   from the H200 op tables, its fitted host defaults);
2. the engine-native profile measured inside vLLM in separate processes
   (data/engine_profiles/vllm-0.26.0-h200-llama-3.1-8b-eagle3.json);
3. the few-run profile (the baseline at two batch sizes, one point per num_steps), on the records
   it was not built from.
Each over every record, and over the records outside the (num_steps, batch) cells where vLLM ran
no full CUDA graph (the profile's points that recorded no graph replay of the target).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibration.engines.plans import few_run_keys  # noqa: E402
from simulator.engines.profile import load_engine_profile  # noqa: E402
from simulator.profile import load_profile, resolve_profile_path  # noqa: E402
from simulator.evidence.validate import (best_num_steps, compare, crossovers, load_records,  # noqa: E402
                                         with_engine_profile)

RECORDS = ROOT / "data" / "live" / "h200_vllm_0.26.0"
FULL = "vllm-0.26.0-h200-llama-3.1-8b-eagle3"
FEW = "vllm-0.26.0-h200-llama-3.1-8b-eagle3-few"


def stats(points) -> dict:
    err = np.abs([p.tok_per_s_error_frac for p in points])
    cells = defaultdict(list)
    for p in points:
        if p.speculative:
            cells[(p.acceptance, p.batch_size, p.context_len)].append(p)
    cells = {k: c for k, c in cells.items() if len({p.num_steps for p in c}) > 1}
    agree = sum(len(set(best_num_steps(c))) == 1 for c in cells.values())
    by_batch = defaultdict(list)
    for (a, b, c), cell in cells.items():
        by_batch[b].append(len(set(best_num_steps(cell))) == 1)
    sp = [abs(p.predicted_speedup - p.measured_speedup) for p in points if p.measured_speedup is not None]
    xo = crossovers(points)
    return dict(n=len(points), median=float(np.median(err)), max=float(err.max()),
                within8=int((err <= 0.08).sum()), agree=agree, cells=len(cells),
                batches_all_agree=sum(all(v) for v in by_batch.values()), batches=len(by_batch),
                speedup_ok=sum(s <= 0.05 for s in sp), speedup_n=len(sp),
                crossovers_ok=sum(c.within_one_step for c in xo), crossovers=len(xo),
                measured_crossovers=sum(c.measured_crossover is not None for c in xo))


def row(label: str, s: dict) -> str:
    return (f"| {label} | {s['n']} | {s['median']:.2%} | {s['max']:.2%} | {s['within8']} | {s['agree']} of {s['cells']} "
            f"| {s['batches_all_agree']} of {s['batches']} | {s['speedup_ok']} of {s['speedup_n']} | "
            f"{s['crossovers_ok']} of {s['crossovers']} ({s['measured_crossovers']} measured) |")


def main() -> None:
    recs = load_records([RECORDS])
    prof = load_profile(resolve_profile_path("h200"))
    full = load_engine_profile(FULL)
    no_graph = {(p.num_steps, p.batch_size) for p in full.points if p.num_steps and p.target_tokens_padded is None}
    few_keys = set(few_run_keys(sorted({p.num_steps for p in full.points if p.num_steps}),
                                sorted({p.batch_size for p in full.points}), sorted({p.prompt_len for p in full.points}),
                                full.full_graph_verify))
    shipped = [(s, r.model_copy(update={"scenario": r.scenario.model_copy(update={
        "serving_engine": r.scenario.serving_engine.model_copy(update={"engine_profile": None})})})) for s, r in recs]
    runs = {
        "vllm engine model, op tables (before)": compare(shipped, prof),
        "engine-native profile": compare(with_engine_profile(recs, FULL), prof),
        "few-run profile, the other records": [p for p in compare(with_engine_profile(recs, FEW), prof)
                                               if (p.num_steps, p.batch_size, p.context_len) not in few_keys],
    }
    print("| prediction | records | median abs err | max abs err | within 8% | best num_steps (cells) | "
          "batch sizes with every cell's best num_steps right | speedup within 0.05 | crossover within one step |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, pts in runs.items():
        print(row(label, stats(pts)))
        rest = [p for p in pts if (p.num_steps, p.batch_size) not in no_graph]
        print(row(f"{label}, without the no-full-graph cells", stats(rest)))
    print()
    print(f"no-full-graph cells (num_steps, batch): {sorted(no_graph)}; few runs (num_steps, batch, prompt): "
          f"{sorted(few_keys)}")
    scale = [p.gpu_parts_scale for p in full.points if p.gpu_parts_scale]
    host = [p.host_busy_us for p in full.points if p.num_steps]
    host0 = [p.host_busy_us for p in full.points if not p.num_steps]
    print(f"\nprofile: {len(full.points)} points, {sum(bool(p.gpu_bound) for p in full.points)} GPU-bound; CUDA events "
          f"lengthen a step by {1 / float(np.median(scale)) - 1:.1%} (median; {1 / max(scale) - 1:+.1%} to "
          f"{1 / min(scale) - 1:+.1%}); the host's work per step {min(host) / 1e3:.1f}-{max(host) / 1e3:.1f} ms "
          f"speculative, {min(host0) / 1e3:.1f}-{max(host0) / 1e3:.1f} ms baseline")
    cells = defaultdict(list)
    for p in runs["engine-native profile"]:
        if p.speculative:
            cells[(p.acceptance, p.batch_size, p.context_len)].append(p)
    for (acc, b, c), cell in sorted(cells.items()):
        meas = sorted(cell, key=lambda p: -p.measured_tok_per_s)
        best_pred = max(cell, key=lambda p: p.predicted_tok_per_s)
        if meas[0].num_steps != best_pred.num_steps:
            print(f"best num_steps missed at {acc} batch {b} prompt {c}: measured {meas[0].num_steps} "
                  f"({meas[0].measured_tok_per_s:.0f} tok/s) vs {best_pred.num_steps} "
                  f"({best_pred.measured_tok_per_s:.0f} tok/s measured, {meas[0].measured_tok_per_s / best_pred.measured_tok_per_s - 1:+.1%}), "
                  f"predicted {best_pred.num_steps}")
    windows = defaultdict(list)
    from calibration.engines.worker import read_lines
    for ln in read_lines(ROOT / "data" / "engine_runs" / "h200_vllm_0.26.0" / "points.jsonl.gz"):
        if ln.get("kind") == "point" and (ln["point"]["num_steps"], ln["point"]["batch_size"]) in no_graph:
            pt = ln["point"]
            windows[(ln["session"], pt["prompt_len"])] += [r["elapsed_us"] / r["num_cycles"] / 1e3 for r in pt["repeats"]]
    for (session, prompt), ms in sorted(windows.items()):
        print(f"no-full-graph cell, {session}, prompt {prompt}: ms per step by window {', '.join(f'{m:.1f}' for m in ms)}")
    worst = sorted(runs["engine-native profile"], key=lambda p: -abs(p.tok_per_s_error_frac))[:6]
    print("\nworst records, engine-native profile:")
    for p in worst:
        print(f"- {p.label}: measured {p.measured_tok_per_s:.0f} tok/s, predicted {p.predicted_tok_per_s:.0f} "
              f"({p.tok_per_s_error_frac:+.1%}), repeat spread {p.measured_repeat_spread_frac or 0:.1%}")


if __name__ == "__main__":
    main()
