"""SGLang's prefill chunk by chunk on the H100 (issue 45): the runs of the prefill alone that took two chunks.

    python docs/make_prefill_chunks_table.py

Every closed batch of one new token a request (the prefill alone) of data/engine_runs/h100_sglang_0.5.15_requests/
of prompts that divide SGLang's 8,192-token chunk (whole prompts to a chunk) and of 4,096 tokens or more, the runs
that took two chunks and the one-chunk runs beside them: each chunk's time (from the run's submission to the chunk's outputs, then from chunk to chunk), the
dense target (Llama-3.1-8B) and the MoE one (Qwen3-30B-A3B), both repeats. What the profile's prefill fit
(per step + per token + per token pair, simulator.evidence.prefill_fit) prices each chunk at is beside them.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNS = ROOT / "data" / "engine_runs" / "h100_sglang_0.5.15_requests"
FILES = (("Llama-3.1-8B", "calibrate_2026-12-07.jsonl.gz", "sglang-0.5.15-h100-llama-3.1-8b-eagle3"),
         ("Qwen3-30B-A3B", "moe_calibrate_2026-12-07.jsonl.gz", "sglang-0.5.15-h100-qwen3-30b-a3b-eagle3"),
         ("Qwen3-30B-A3B", "moe_e2e_2026-12-07.jsonl.gz", "sglang-0.5.15-h100-qwen3-30b-a3b-eagle3"))
CHUNK = 8192


def main() -> None:
    from simulator.engines.profile import chunk_token_pairs, load_engine_profile
    print("| target | process | batch | prompt | chunks | chunk ms, each repeat | the fit's full chunk, ms |")
    print("|---|---|---:|---:|---:|---|---|")
    for model, name, prof_name in FILES:
        fits = {f.speculative: f for f in load_engine_profile(prof_name).prefill}
        for ln in gzip.open(RUNS / name, "rt"):
            d = json.loads(ln)
            pt = d.get("point")
            if not pt or pt.get("workload") != "closed_batch" or pt.get("max_tokens") != 1:
                continue
            b, p = pt["batch_size"], pt["prompt_len"]
            if b * p < 4096 or CHUNK % p:  # whole prompts to a chunk: each chunk holds CHUNK // p requests
                continue
            per_chunk = max(1, CHUNK // p)
            chunks = -(-b // per_chunk)
            fit = fits[bool(pt["num_steps"])]
            n = min(b, per_chunk) * p
            priced = (fit.per_step_us + fit.per_token_us * n
                      + fit.per_token_pair_us * min(b, per_chunk) * chunk_token_pairs(p, 0)) / 1000
            reps = []
            for r in pt["repeats"]:
                t = [s["t_us"] / 1000 for s in r["steps"]]
                reps.append(" / ".join(f"{x:.0f}" for x in [t[0]] + [b2 - a for a, b2 in zip(t, t[1:])]))
            print(f"| {model} | {d['label']} | {b} | {p} | {chunks} | {'; '.join(reps)} | {priced:.0f} |")


if __name__ == "__main__":
    main()
