"""A lone request joining a running batch in vLLM: the time its prefill adds, measured and priced (issue 45).

    python docs/make_mixed_join_table.py [POINTS.jsonl.gz] [--engine-profile NAME]

For each speculative closed-loop run of the points file (default: the H100's Llama-3.1-8B runs,
data/engine_runs/h100_vllm_0.26.0_e2e/e2e_2026-12-06.jsonl.gz), the joins where one request's whole prompt rode a
decode step with no other prompt within two steps of it. Step times are read from the engine's own step records
(one step's outputs to the next's); with async scheduling a step's record and its work can sit a step apart, so
the time a join adds is the five steps around it less five of the run's median steps at the same batch. Beside it,
two prices from the engine profile's prefill fit: one forward over the prompt and the decode tokens (per_token_us
times both) less the decode step's own forward (its weights read once; what the serving DES adds to the decode
step, serving_engine.mixed_forward 'one'), and the prompt's tokens as a forward of their own after the decode
step's ('apart').
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT = ROOT / "data" / "engine_runs" / "h100_vllm_0.26.0_e2e" / "e2e_2026-12-06.jsonl.gz"
AROUND = 2  # steps on each side of a join


def joins(steps: list[dict], num_steps: int) -> list[tuple[int, int, int, float]]:
    """(step index, prompt tokens, decode requests, extra us) of each lone join of a run's steps."""
    t = np.array([s["t_us"] for s in steps])
    dur = np.diff(t, prepend=t[0])
    sched = [(s["scheduled"] or [[0, 0, 0]])[0] for s in steps]
    big = [i for i, (_, _, top) in enumerate(sched) if top > 1 + num_steps]
    out = []
    for i in big:
        w = range(i - AROUND, i + AROUND + 1)
        if i - AROUND < 1 or i + AROUND >= len(steps) or any(j in big for j in w if j != i):
            continue
        tot, nreq, top = sched[i]
        plain = [dur[j] for j in range(1, len(steps)) if j not in big and sched[j][1] in (nreq - 1, nreq)]
        if plain:
            out.append((i, int(top), int(nreq) - 1, float(dur[list(w)].sum() - len(w) * np.median(plain))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("points", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--engine-profile", default="vllm-0.26.0-h100-llama-3.1-8b-eagle3")
    a = ap.parse_args()
    from simulator.engines.profile import chunk_token_pairs, load_engine_profile
    fit = next(f for f in load_engine_profile(a.engine_profile).prefill if f.speculative)
    prof = load_engine_profile(a.engine_profile)
    print("| process | point | run | joins | prompt tokens | decode requests | measured extra ms (median, range) "
          "| priced: one forward (the DES) ms | priced: apart ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    pooled = []
    for line in gzip.open(a.points, "rt"):
        d = json.loads(line)
        pt = d.get("point")
        if not pt or pt.get("workload") not in ("closed_loop", "poisson") or not pt["num_steps"]:
            continue
        k = pt["num_steps"]
        for r in pt["repeats"]:
            js = joins(r["steps"], k)
            if not js:
                continue
            n = int(np.median([j[1] for j in js]))
            b = int(np.median([j[2] for j in js]))
            ctx = pt["prompt_len"] + pt["max_tokens"] / 2
            fwd = _verify_forward_us(prof, b, k, ctx)
            pairs = chunk_token_pairs(n, 0)
            two = fit.step_prefill_us(n, pairs, n + b * (1 + k))  # apart: the prompt's own forward
            one = fit.step_prefill_us(n, pairs, n + b * (1 + k), 0.0, fwd)  # the serving DES's: one forward over both
            ex = np.array([j[3] for j in js]) / 1e3
            pooled += ex.tolist()
            print(f"| {d['label']} | {pt['key']} | {r['repeat_idx']} | {len(js)} | {n} | {b} | {np.median(ex):.1f} "
                  f"({ex.min():.1f}-{ex.max():.1f}) | {one / 1e3:.1f} | {two / 1e3:.1f} |")
    if pooled:
        print(f"\n{len(pooled)} lone joins: the time each added, median {np.median(pooled):.1f} ms "
              f"(quartiles {np.percentile(pooled, 25):.1f}-{np.percentile(pooled, 75):.1f} ms)")


def _verify_forward_us(prof, batch_size: int, num_steps: int, context_len: float) -> float:
    """The profile's verify forward at this batch (the engine-native cost model's target_forward)."""
    from simulator.costs.engine_native import NativeCosts
    return NativeCosts(prof).target_forward_us(batch_size, num_steps, context_len)


if __name__ == "__main__":
    main()
