"""What engine-native calibration costs in GPU minutes, from a campaign's own points file.

    python benchmarks/bench_engine_calibration.py [POINTS.jsonl[.gz]]

Default: the committed vLLM 0.26.0 campaign on the lent H200 (data/engine_runs/h200_vllm_0.26.0/).
Every engine process records its start-up (engine up: weights, torch.compile, CUDA-graph capture)
and every point its wall time (prefill, warm-up and timed windows), so the table is what the GPU
was held for, process by process, without running anything. Rows: each process; then the full
calibration (one `calibrate_*` process per configuration: a repeated process, `_r2`, is not part of
the workflow), the few-run calibration (the same processes' start-ups, but only the few runs' points:
`calibration.engines.plans.few_run_keys`), the live grid, and what else the campaign ran (repeated
processes, the seed case's shards).

A campaign resumed on another machine (a fresh one: no compile cache) pays torch.compile again in
its first process; machine sessions are told apart by a gap of over 30 minutes between engine
starts, and the workflow rows are given as measured and as on one machine (each later session's
first start-up replaced by the median warm start-up).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibration.engines.build import label_variant  # noqa: E402
from calibration.engines.plans import few_run_keys, full_graph_rule  # noqa: E402
from calibration.engines.records import repeat_suffix  # noqa: E402
from calibration.engines.worker import read_lines  # noqa: E402

DEFAULT = ROOT / "data" / "engine_runs" / "h200_vllm_0.26.0" / "points.jsonl.gz"


def main(path: Path) -> None:
    lines = read_lines(path)
    engines = {r["label"]: r for r in lines if r["kind"] == "engine"}
    points = [r for r in lines if r["kind"] == "point"]
    by_label: dict[str, list[dict]] = {}
    for r in points:
        by_label.setdefault(r["label"], []).append(r)
    print(path.relative_to(ROOT) if path.is_absolute() and path.is_relative_to(ROOT) else path)
    w = max([16, *(len(lab) for lab in engines)])
    print(f"{'process':<{w}} {'start-up s':>10} {'points':>7} {'measure s':>10} {'GPU min':>8}")
    totals = {"calibrate": [0.0, 0.0, 0, 0], "live": [0.0, 0.0, 0, 0], "other": [0.0, 0.0, 0, 0]}

    def role(label: str) -> str:
        first = label_variant(label) is not None and not repeat_suffix(label)
        return engines[label]["session"] if first else "other"
    for label, eng in engines.items():
        pts = by_label.get(label, [])
        meas = sum(p["wall_s"] for p in pts)
        print(f"{label:<{w}} {eng['startup_s']:>10.1f} {len(pts):>7} {meas:>10.1f} "
              f"{(eng['startup_s'] + meas) / 60:>8.2f}")
        t = totals[role(label)]
        t[0] += eng["startup_s"]
        t[1] += meas
        t[2] += len(pts)
        t[3] += 1
    cal = [p for p in points if p["session"] == "calibrate" and role(p["label"]) == "calibrate"]
    ks = sorted({p["point"]["num_steps"] for p in cal if p["point"]["num_steps"]})
    keys = set(few_run_keys(ks, sorted({p["point"]["batch_size"] for p in cal}),
                            sorted({p["point"]["prompt_len"] for p in cal}), full_graph_rule()))
    few = [p for p in cal if (p["point"]["num_steps"], p["point"]["batch_size"], p["point"]["prompt_len"]) in keys]
    few_start = sum(e["startup_s"] for lab, e in engines.items() if e["session"] == "calibrate" and lab in
                    {p["label"] for p in few})
    few_meas = sum(p["wall_s"] for p in few)
    order = sorted(engines.values(), key=lambda e: e.get("created_unix", 0))
    firsts = [e["label"] for i, e in enumerate(order)
              if i == 0 or e.get("created_unix", 0) - order[i - 1].get("created_unix", 0) > 1800]
    warm = sorted(e["startup_s"] for e in order if e["label"] not in firsts)
    warm_s = warm[len(warm) // 2] if warm else 0.0
    extra = {lab: engines[lab]["startup_s"] - warm_s for lab in firsts[1:]}  # a second compile, on one machine none
    print()
    print(f"{'workflow':<34} {'processes':>9} {'points':>7} {'GPU min':>8} {'one machine':>12}")
    for name, session in (("full calibration", "calibrate"), ("live grid (validation)", "live"),
                          ("repeats and other processes", "other")):
        s, m, n, procs = totals[session]
        if session == "other" and not procs:
            continue
        again = sum(v for lab, v in extra.items() if role(lab) == session)
        print(f"{name:<34} {procs:>9} {n:>7} {(s + m) / 60:>8.2f} {(s + m - again) / 60:>12.2f}")
    few_labels = {p['label'] for p in few}
    again = sum(v for lab, v in extra.items() if lab in few_labels)
    print(f"{'few-run calibration':<34} {len(few_labels):>9} {len(few):>7} "
          f"{(few_start + few_meas) / 60:>8.2f} {(few_start + few_meas - again) / 60:>12.2f}")
    print(f"\nmachine sessions: {len(firsts)}; the first process of each (a fresh machine: no compile cache yet, "
          "torch.compile's or the engine's own): " + ", ".join(f"{lab} {engines[lab]['startup_s']:.0f} s" for lab in firsts)
          + f"; median start-up of the others {warm_s:.0f} s")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT)
