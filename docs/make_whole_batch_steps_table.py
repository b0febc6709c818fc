"""A closed batch's step at the whole batch, in its request-level runs and in the calibration's steady windows
of the same point (issue 45).

    python docs/make_whole_batch_steps_table.py [E2E.jsonl.gz] [CALIBRATE.jsonl.gz]

Defaults: vLLM 0.26.0 on the H100 of 2026-12-07 (data/engine_runs/h100_vllm_0.26.0_more_steps/: request-level
runs at num_steps 2 and 6, and the steady calibration at num_steps 1, 2, 4 and 6 in other engine processes).
Per closed batch of more than one new token: each run's median step while every request of the batch decodes
(the time between the engine's step outputs, its own step records, where `running` is the batch), and the
steady window's step at the same num_steps, batch and prompt (its elapsed time over its cycles; the
instrumented window and the uninstrumented one), so that how far two processes of one point are apart shows.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FOLDER = ROOT / "data" / "engine_runs" / "h100_vllm_0.26.0_more_steps"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("e2e", nargs="?", type=Path, default=FOLDER / "e2e_2026-12-07.jsonl.gz")
    ap.add_argument("calibrate", nargs="?", type=Path, default=FOLDER / "calibrate_2026-12-07.jsonl.gz")
    a = ap.parse_args()
    from calibration.engines.build import engine_lines
    steady: dict[tuple, dict[bool, float]] = {}
    for ln in engine_lines([a.calibrate], "calibrate")[1]:
        pt = ln["point"]
        for r in pt["repeats"]:
            steady.setdefault((pt["num_steps"], pt["batch_size"], pt["prompt_len"]), {})[bool(r["instrumented"])] = \
                r["elapsed_us"] / r["num_cycles"] / 1e3
    engines, lines = engine_lines([a.e2e], "live", requests=True)
    num_steps = {e["label"]: e.get("num_steps", 0) for e in engines}
    print("| num_steps | batch | prompt | acceptance | runs' whole-batch step ms | steady window ms "
          "(instrumented / not) | runs / steady - 1 |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for ln in lines:
        pt = ln["point"]
        if pt["workload"] != "closed_batch" or pt["max_tokens"] <= 1:
            continue
        b, k = pt["batch_size"], num_steps.get(ln["label"], 0)
        runs = []
        for r in pt["repeats"]:
            t = np.array([s["t_us"] for s in r["steps"]])
            whole = np.array([s["running"] for s in r["steps"]])[1:] == b
            runs.append(float(np.median(np.diff(t)[whole])) / 1e3 if whole.any() else float("nan"))
        st = steady.get((k, b, pt["prompt_len"]), {})
        ref = st.get(False, st.get(True))
        win = " / ".join(f"{st[i]:.2f}" if i in st else "-" for i in (True, False))
        apart = " / ".join(f"{x / ref - 1:+.1%}" for x in runs) if ref else "-"
        print(f"| {k} | {b} | {pt['prompt_len']} | {pt.get('acceptance_rate', '-')} | "
              f"{' / '.join(f'{x:.2f}' for x in runs)} | {win} | {apart} |")


if __name__ == "__main__":
    main()
