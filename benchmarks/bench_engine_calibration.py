"""What engine-native calibration costs in GPU minutes, from a campaign's own points file.

    python benchmarks/bench_engine_calibration.py [POINTS.jsonl[.gz]]

Default: the committed vLLM 0.26.0 campaign on the lent H200 (data/engine_runs/h200_vllm_0.26.0/).
Every engine process records its start-up (engine up: weights, torch.compile, CUDA-graph capture)
and every point its wall time (prefill, warm-up and timed windows), so the table is what the GPU
was held for, process by process, without running anything. Rows: each process; then the full
calibration (every `calibrate_*` process), the few-run calibration (the same processes' start-ups,
but only the few runs' points: `calibration.engines.plans.few_run_keys`) and the live grid.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibration.engines.plans import few_run_keys  # noqa: E402
from calibration.engines.worker import read_lines  # noqa: E402

DEFAULT = ROOT / "data" / "engine_runs" / "h200_vllm_0.26.0" / "points.jsonl.gz"


def main(path: Path) -> None:
    lines = read_lines(path)
    engines = {r["label"]: r for r in lines if r["kind"] == "engine"}
    points = [r for r in lines if r["kind"] == "point"]
    by_label: dict[str, list[dict]] = {}
    for r in points:
        by_label.setdefault(r["label"], []).append(r)
    print(f"{path}")
    print(f"{'process':<16} {'start-up s':>10} {'points':>7} {'measure s':>10} {'GPU min':>8}")
    totals = {"calibrate": [0.0, 0.0, 0], "live": [0.0, 0.0, 0]}
    for label, eng in engines.items():
        pts = by_label.get(label, [])
        meas = sum(p["wall_s"] for p in pts)
        print(f"{label:<16} {eng['startup_s']:>10.1f} {len(pts):>7} {meas:>10.1f} {(eng['startup_s'] + meas) / 60:>8.2f}")
        t = totals[eng["session"]]
        t[0] += eng["startup_s"]
        t[1] += meas
        t[2] += len(pts)
    cal = [p for p in points if p["session"] == "calibrate"]
    ks = sorted({p["point"]["num_steps"] for p in cal if p["point"]["num_steps"]})
    keys = set(few_run_keys(ks, sorted({p["point"]["batch_size"] for p in cal}),
                            sorted({p["point"]["prompt_len"] for p in cal})))
    few = [p for p in cal if (p["point"]["num_steps"], p["point"]["batch_size"], p["point"]["prompt_len"]) in keys]
    few_start = sum(e["startup_s"] for lab, e in engines.items() if e["session"] == "calibrate" and lab in
                    {p["label"] for p in few})
    few_meas = sum(p["wall_s"] for p in few)
    print()
    print(f"{'workflow':<34} {'processes':>9} {'points':>7} {'GPU min':>8}")
    for name, session in (("full calibration", "calibrate"), ("live grid (validation)", "live")):
        s, m, n = totals[session]
        procs = sum(1 for e in engines.values() if e["session"] == session)
        print(f"{name:<34} {procs:>9} {n:>7} {(s + m) / 60:>8.2f}")
    print(f"{'few-run calibration':<34} {len({p['label'] for p in few}):>9} {len(few):>7} "
          f"{(few_start + few_meas) / 60:>8.2f}")
    first = next(iter(engines.values()))
    print(f"\nthe first process ({first['label']}) includes the first torch.compile: {first['startup_s']:.0f} s; "
          "later ones reuse its cache")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT)
