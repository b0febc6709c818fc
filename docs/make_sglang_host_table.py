"""SGLang's chain steps are the host's (issue 25; docs/engines/host-speed.md, "SGLang's steps are paced
by the host").

    python docs/make_sglang_host_table.py

Reads every calibration process of SGLang 0.5.15's chain at num_steps 3 (Llama-3.1-8B with its EAGLE-3
draft, the overlap scheduler on; data/engine_runs/h200_sglang_0.5.15/points.jsonl.gz and
points_2026-12-03.jsonl.gz: five processes over four machine sessions). Per batch size at the 1k prompt:
each process's step (wall time per step over its uninstrumented windows) and, from its instrumented
window, the GPU's own graph replays (CUDA events around the target's forward, the draft extend and the
sampler: work the host cannot stretch) and the rest of the step (the step less those: the draft loop's
span and the gaps between the phases, where the scheduler's Python runs between replays); then the
spread (max / min - 1) of each over the processes.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibration.engines.build import CHAIN, engine_lines, label_variant  # noqa: E402

RUNS = ROOT / "data" / "engine_runs" / "h200_sglang_0.5.15"
FILES = [RUNS / "points.jsonl.gz", RUNS / "points_2026-12-03.jsonl.gz"]
PROMPT = 1024


def rows() -> dict[int, list[tuple[str, float, float]]]:
    """batch -> [(process, step us, GPU replays us)]."""
    out: dict[int, list] = {}
    for ln in engine_lines(FILES, "calibrate")[1]:
        label = ln["label"]
        if label_variant(label) != CHAIN or ln["point"]["num_steps"] != 3:
            continue
        p = ln["point"]
        ins = [r for r in p["repeats"] if r["instrumented"]]
        plain = [r for r in p["repeats"] if not r["instrumented"]]
        if p["prompt_len"] != PROMPT or not ins or not plain:
            continue
        m = ins[0]["means"]
        out.setdefault(p["batch_size"], []).append(
            (label, statistics.mean(r["elapsed_us"] / r["num_cycles"] for r in plain),
             m["target_forward_us"] + m["draft_extend_us"] + m["sample_us"]))
    return out


def main() -> None:
    data = rows()
    print("| batch | ms a step, each process | GPU replays (target, extend, sampler), ms | the rest of the step, "
          "ms | spread: step | GPU replays | the rest |")
    print("|---:|---|---|---|---:|---:|---:|")
    for b, rs in sorted(data.items()):
        steps, gpu = [r[1] for r in rs], [r[2] for r in rs]
        rest = [a - g for a, g in zip(steps, gpu)]
        ms = lambda vs: ", ".join(f"{v / 1000:.2f}" for v in vs)  # noqa: E731
        print(f"| {b} | {ms(steps)} | {ms(gpu)} | {ms(rest)} | {max(steps) / min(steps) - 1:.1%} | "
              f"{max(gpu) / min(gpu) - 1:.1%} | {max(rest) / min(rest) - 1:.1%} |")
    print(f"\nprocesses: {', '.join(r[0] for r in next(iter(data.values())))}")


if __name__ == "__main__":
    main()
