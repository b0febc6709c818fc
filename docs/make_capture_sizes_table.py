"""Table of docs/engines/vllm.md: vLLM 0.26.0's no-full-graph cell (num_steps 2 at batch 4: a
12-token verify) at the default CUDA-graph capture sizes and with them rounded up to multiples of 3
(`serving_engine.cudagraph_capture_sizes: rounded_to_query`), each measured on the lent H200 (queues
`vllm-h200-diag-moe` and `vllm-h200-moe-base`: processes diag_s2 and diag_s2_cap3, six 48-step windows
a point) and predicted from the engine-native profile, which was measured at the default list only, at
each point's mean context over its windows (the prompt plus the tokens decoded while it was timed).

    python docs/make_capture_sizes_table.py
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DIAG = ROOT / "data" / "engine_runs" / "h200_vllm_0.26.0_diag"
SCENARIO = ROOT / "scenarios" / "vllm_llama8b_h200.yaml"


def measured() -> list[dict]:
    rows = []
    for f in sorted(DIAG.glob("points_*.jsonl.gz")):
        for line in gzip.open(f, "rt"):
            ln = json.loads(line)
            p = ln.get("point")
            if ln["kind"] != "point" or ln["label"] not in ("diag_s2", "diag_s2_cap3") or p["batch_size"] != 4:
                continue
            reps = [r for r in p["repeats"] if not r["instrumented"] and r["num_incomplete_steps"] == 0]
            steps = [r["elapsed_us"] / r["num_cycles"] for r in reps]
            counts = np.sum([r["accept_length_counts"] for r in reps], axis=0)
            rows.append(dict(label=ln["label"], prompt=p["prompt_len"], rate=p["acceptance_rate"],
                             context=float(np.mean([r["context_len"] for r in reps])), steps=steps,
                             accept=float(counts @ np.arange(1, len(counts) + 1) / counts.sum()),
                             tok_s=float(np.sum([r["num_tokens"] for r in reps]) / np.sum([r["elapsed_us"] for r in reps])
                                         * 1e6)))
    return rows


def predicted(context: float, rate: float, rounded: bool) -> dict:
    sets = ["workload.batch_size=4", "spec.num_steps=2", "spec.num_draft_tokens=3",
            f"workload.context_len={round(context)}", f"acceptance.acceptance_rate={rate}"]
    if rounded:
        sets.append("serving_engine.cudagraph_capture_sizes=rounded_to_query")
    cmd = [sys.executable, "-m", "simulator.cli", "simulate", str(SCENARIO), "--json", "-"]
    for s in sets:
        cmd += ["--set", s]
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT).stdout)


def main() -> None:
    print("| capture sizes | prompt | mean context | measured ms a step (windows) | predicted ms a step | error | "
          "measured tok/s (accept length) | predicted tok/s (accept length) | error |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for m in measured():
        rounded = m["label"] == "diag_s2_cap3"
        out = predicted(m["context"], m["rate"], rounded)
        step = float(np.mean(m["steps"]))
        print(f"| {'rounded to multiples of 3' if rounded else 'default'} | {m['prompt']} | {m['context']:,.0f} | "
              f"{step / 1e3:.2f} ({', '.join(f'{s / 1e3:.1f}' for s in m['steps'])}) | "
              f"{out['cycle_time_us'] / 1e3:.2f} | {out['cycle_time_us'] / step - 1:+.1%} | "
              f"{m['tok_s']:,.0f} ({m['accept']:.2f}) | {out['tok_per_s']:,.0f} ({out['accept_length']['mean'] if isinstance(out['accept_length'], dict) else out['accept_length']:.2f}) | "
              f"{out['tok_per_s'] / m['tok_s'] - 1:+.1%} |")


if __name__ == "__main__":
    main()
