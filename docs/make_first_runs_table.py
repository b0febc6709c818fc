"""The first run of a batch size in an SGLang process (issue 45): the table of docs/engines/requests.md.

    python docs/make_first_runs_table.py [POINTS.jsonl.gz ...]

Reads request-level runs (default: SGLang 0.5.15 on the lent H100, queues sglang-requests-2 / -3 / -r2,
data/engine_runs/h100_sglang_0.5.15_requests/) and prints, per closed batch of more than one new token whose
two runs' tok/s are more than 5% apart: each run's tok/s, its first engine step (the batch's prefill, or its
first chunk) and its longest step, in ms, and whether the point is the process's first run at its batch size
and prompt length. The runs' own step times say where the slower run lost its time.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibration.engines.build import engine_lines  # noqa: E402

FOLDER = ROOT / "data" / "engine_runs" / "h100_sglang_0.5.15_requests"
DEFAULT = [FOLDER / f"{name}_2026-12-07.jsonl.gz" for name in ("e2e", "e2e_more", "e2e_r2")]
SPREAD = 0.05  # the two runs' tok/s apart by more than this


def run_figures(rep: dict) -> tuple[float, float, float]:
    """(tok/s, first step ms, longest step ms) of one run."""
    t = np.array([0.0] + [s["t_us"] for s in rep["steps"]])
    dt = np.diff(t) / 1e3
    return rep["num_tokens"] / (rep["elapsed_us"] / 1e6), float(dt[0]), float(dt.max())


def rows(paths: list[Path]) -> list[dict]:
    _, lines = engine_lines(paths, "live", requests=True)
    seen: set[tuple[str, int, int]] = set()
    out = []
    for ln in lines:  # in the order each process ran its points
        pt = ln["point"]
        shape = (ln["label"], pt["batch_size"], pt["prompt_len"])
        first = shape not in seen
        seen.add(shape)
        if pt["workload"] != "closed_batch" or pt["max_tokens"] < 2 or len(pt["repeats"]) < 2:
            continue
        figs = [run_figures(r) for r in pt["repeats"]]
        tok = [f[0] for f in figs]
        if max(tok) / min(tok) - 1 <= SPREAD:
            continue
        out.append(dict(label=ln["label"], key=pt["key"], first=first, figs=figs, spread=max(tok) / min(tok) - 1))
    return out


def main(argv: list[str]) -> None:
    paths = [Path(a) for a in argv] or DEFAULT
    rs = rows(paths)
    print(f"{len(rs)} closed batches whose two runs' tok/s are more than {SPREAD:.0%} apart "
          f"({', '.join(p.name for p in paths)})\n")
    print("| process | point | runs apart | first run at its batch and prompt | run 0 tok/s | first step ms | longest "
          "step ms | run 1 tok/s | first step ms | longest step ms |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rs:
        (a0, f0, m0), (a1, f1, m1) = r["figs"][:2]
        print(f"| {r['label']} | {r['key']} | {r['spread']:.1%} | {'yes' if r['first'] else 'no'} | {a0:,.0f} | "
              f"{f0:.1f} | {m0:.1f} | {a1:,.0f} | {f1:.1f} | {m1:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
