"""A closed batch is one draw of the acceptance: the serving DES's wall time over seeds, against vLLM's runs (issue 45).

    python docs/make_closed_batch_draws_table.py

For closed batches of vLLM's H100 end-to-end grid (num_steps 5, 1k prompts, 256 new tokens, acceptance 0.6),
each priced from the H100 engine profile at the i.i.d. rate its two runs realized on average (as
`benchmarks/bench_request_level.py` prices a run), the DES's generate wall time: at the scenario's seed alone
(one draw, what every closed batch was priced with at commit 4a1f1e0), over 40 independent draws (their mean,
standard deviation and range), and the mean of the draws the DES now takes by default
(`simulator.serving.run.num_draws`); beside it the two runs' wall times. Nothing is fitted.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNS = ROOT / "data" / "engine_runs" / "h100_vllm_0.26.0_e2e"
POINTS = [f"e2e_s5_cb_b{b}_p1024_a0.6_n256x2" for b in (1, 4, 16, 64)]
SEEDS = 40


def main() -> None:
    from calibration.engines.plans import model_configs
    from calibration.engines.request_records import request_records
    from simulator.evidence.validate_serving import realized_acceptance_rate
    from simulator.model_config import shape_fields_from_hf_config
    from simulator.scenario import load_profile_for
    from simulator.serving.costs import StepCosts
    from simulator.serving.run import mean_wall_s, num_draws, run_serving
    t_cfg, d_cfg = model_configs("llama-3.1-8b-instruct", "eagle3-llama-3.1-8b")
    target = {"name": "llama-3.1-8b", **shape_fields_from_hf_config(t_cfg)[0]}
    draft = {"name": "eagle3-llama-3.1-8b", **shape_fields_from_hf_config(d_cfg)[0]}
    recs = request_records(sorted(RUNS.glob("e2e_s5_*.jsonl.gz")), target, draft,
                           "vllm-0.26.0-h100-llama-3.1-8b-eagle3", "h200")
    runs = defaultdict(list)
    for name, rec in recs:
        key = name.rsplit("_r", 1)[0]
        if key in POINTS:
            runs[key].append(rec)
    prof = load_profile_for(recs[0][1].scenario, "h200")[0]
    print("| point | batch | runs' wall s | rate realized | DES seed 0 s | DES mean of 40 draws s | sd | range s | "
          "default draws | their mean s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key in POINTS:
        recs_ = runs[key]
        rate = float(np.mean([realized_acceptance_rate(r) for r in recs_]))
        sc = recs_[0].scenario
        sc = sc.model_copy(update={"acceptance": sc.acceptance.model_copy(update={"acceptance_rate": rate})})
        costs = StepCosts(sc, prof)
        walls = np.array([mean_wall_s([run_serving(sc, prof, True, costs, draw=d)]) for d in range(SEEDS)])
        n = num_draws(sc, True)
        meas = " / ".join(f"{r.result.duration_s:.3f}" for r in recs_)
        print(f"| {key} | {sc.serving.num_requests} | {meas} | {rate:.3f} | {walls[0]:.3f} | {walls.mean():.3f} | "
              f"{walls.std() / walls.mean():.1%} | {walls.min():.3f}-{walls.max():.3f} | {n} | {walls[:n].mean():.3f} |")


if __name__ == "__main__":
    main()
