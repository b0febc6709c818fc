"""The TP group's path on one GPU against the single-process calibrations (docs/engines/tp-groups.md,
issue 28).

    python docs/make_tp_table.py

Reads the committed points: the group-of-one processes (`calibrate_s3_group1`, queues
vllm-h200-group1 and sglang-h200-group1) and every single-process num_steps-3 chain calibration of
the same points (Llama-3.1-8B with its EAGLE-3 draft, 1k prompt, acceptance 0.7), and prints per
engine and batch size the step period (the uninstrumented second window, us) of each, the group
run's difference from the nearest of them and from their median, and the TP its draft was built for.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibration.engines.build import engine_lines  # noqa: E402

RUNS = ROOT / "data" / "engine_runs"
ENGINES = {"vllm": ("h200_vllm_0.26.0_group", ["h200_vllm_0.26.0"]),
           "sglang": ("h200_sglang_0.5.15_group", ["h200_sglang_0.5.15"])}
SINGLE = ("calibrate_s3", "calibrate_s3_r2", "calibrate_s3_r3", "calibrate_s3_r4")


def _lines(folder: str) -> list[dict]:
    """Every line of the folder's points files (read and checked as every command reads them)."""
    engines, points = engine_lines(sorted((RUNS / folder).glob("points*.jsonl.gz")))
    return engines + points


def _period_us(point: dict) -> float:
    r = point["repeats"][-1]  # the uninstrumented window
    return r["elapsed_us"] / r["num_cycles"]


def main() -> None:
    print("| engine | batch | group of one: us a step | single processes: us a step | vs nearest | vs median "
          "| draft TP built |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for engine, (group_dir, single_dirs) in ENGINES.items():
        group = {}
        built = None
        for r in _lines(group_dir):
            if r["kind"] == "engine":
                built = r["info"].get("draft_tp_size")
            elif r["kind"] == "point" and r["label"] == "calibrate_s3_group1":
                group[r["point"]["key"]] = r["point"]
        single: dict[str, list[float]] = {}
        for d in single_dirs:
            for r in _lines(d):
                if r["kind"] == "point" and r["label"] in SINGLE and r["point"]["key"] in group:
                    single.setdefault(r["point"]["key"], []).append(_period_us(r["point"]))
        for key, pt in sorted(group.items(), key=lambda kv: kv[1]["batch_size"]):
            g, s = _period_us(pt), sorted(single.get(key, []))
            if not s:
                continue
            near = min(s, key=lambda x: abs(x - g))
            med = statistics.median(s)
            print(f"| {engine} | {pt['batch_size']} | {g:,.0f} | {', '.join(f'{x:,.0f}' for x in s)} | "
                  f"{g / near - 1:+.1%} | {g / med - 1:+.1%} | {built} |")


if __name__ == "__main__":
    main()
