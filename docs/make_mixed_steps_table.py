"""Steps past vLLM's CUDA-graph edge in a closed loop: the engine's own and the serving DES's (issue 45).

    python docs/make_mixed_steps_table.py [POINTS.jsonl.gz] [--engine-profile NAME] [--models TARGET DRAFT]

For each closed-loop run of the points file (default: vLLM's MoE target on the H100,
data/engine_runs/h100_vllm_0.26.0_moe/moe_e2e_2026-12-07.jsonl.gz), the engine's steps from its own step records
(the time from one step's outputs to the next's; `scheduled` the tokens each step held) and the DES's steps priced
from the engine profile at the i.i.d. rate the run realized: how many steps held more tokens than the profile's
graph edge (a joining request's prefill riding the decode step), their median time, and the other steps'.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT = ROOT / "data" / "engine_runs" / "h100_vllm_0.26.0_moe" / "moe_e2e_2026-12-07.jsonl.gz"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("points", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--engine-profile", default="vllm-0.26.0-h100-qwen3-30b-a3b-eagle3")
    ap.add_argument("--models", nargs=2, default=["qwen3-30b-a3b", "eagle3-qwen3-30b-a3b"])
    a = ap.parse_args()
    from calibration.engines.build import engine_lines
    from calibration.engines.plans import model_shapes
    from calibration.engines.request_records import request_records
    from simulator.engines.profile import load_engine_profile
    from simulator.evidence.validate_serving import realized_acceptance_rate
    from simulator.scenario import load_profile_for
    from simulator.serving.run import run_serving
    edge = max((f.graph_max_tokens for f in load_engine_profile(a.engine_profile).prefill), default=0)
    target, draft = model_shapes(*a.models)
    recs = dict(request_records([a.points], target, draft, a.engine_profile, "h200"))
    prof = load_profile_for(next(iter(recs.values())).scenario, "h200")[0]
    print(f"graph edge {edge} tokens ({a.engine_profile})")
    print()
    print("| run | engine: steps past the edge | their median ms | other steps' median ms | DES: steps past the "
          "edge | their median ms | other steps' median ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for ln in engine_lines([a.points], "live", requests=True)[1]:
        pt = ln["point"]
        if pt["workload"] != "closed_loop":
            continue
        for rep in pt["repeats"]:
            name = f"{ln['label']}_{pt['key']}_r{rep['repeat_idx']}"
            rec = recs.get(f"{name}.json")
            if rec is None:
                continue
            steps = rep["steps"]
            dur = np.diff([s["t_us"] for s in steps]) / 1e3
            tokens = np.array([sum(x[0] for x in s["scheduled"]) for s in steps[1:]])
            sc = rec.scenario
            if (rate := realized_acceptance_rate(rec)) is not None:
                sc = sc.model_copy(update={"acceptance": sc.acceptance.model_copy(update={"acceptance_rate": rate})})
            sim = run_serving(sc, prof, rec.speculative)
            k = sim.step_num_steps
            sim_tokens = sim.step_prefill_tokens + sim.step_batch_size * np.where(k > 0, k + 1, 1)
            sim_dur = (sim.step_end_us - sim.step_start_us) / 1e3
            cells = []
            for d, n in ((dur, tokens), (sim_dur, sim_tokens)):
                past = n > edge
                cells += [f"{int(past.sum())}", f"{np.median(d[past]):.1f}" if past.any() else "-",
                          f"{np.median(d[~past & (n > 0)]):.1f}"]
            print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
