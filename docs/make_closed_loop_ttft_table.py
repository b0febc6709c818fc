"""A closed loop's TTFT p50 as one draw: the engine's runs against the serving DES's seeds (issue 45).

    python docs/make_closed_loop_ttft_table.py [POINTS.jsonl.gz ...] [--seeds N]

For each speculative closed-loop run of the points files (default: the H100's Llama-3.1-8B runs of 2026-12-07 at
num_steps 2 and 6, data/engine_runs/h100_vllm_0.26.0_more_steps/e2e_2026-12-07.jsonl.gz), the engine's TTFT p50 and
quartiles, and the serving DES's TTFT p50 at each of N seeds (the run's realized acceptance rate, the H100 profile):
how far one draw of the same run moves its median.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT = ROOT / "data" / "engine_runs" / "h100_vllm_0.26.0_more_steps" / "e2e_2026-12-07.jsonl.gz"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("points", nargs="*", type=Path, default=[DEFAULT])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--engine-profile", default="vllm-0.26.0-h100-llama-3.1-8b-eagle3")
    a = ap.parse_args()
    if not 1 <= a.seeds <= 64:
        sys.exit(f"--seeds {a.seeds}: 1..64")
    from calibration.engines.plans import model_configs
    from calibration.engines.request_records import request_records
    from simulator.evidence.validate_serving import realized_acceptance_rate
    from simulator.model_config import shape_fields_from_hf_config
    from simulator.scenario import load_profile_for
    from simulator.serving.run import run_serving
    t_cfg, d_cfg = model_configs("llama-3.1-8b-instruct", "eagle3-llama-3.1-8b")
    target = {"name": "llama-3.1-8b", **shape_fields_from_hf_config(t_cfg)[0]}
    draft = {"name": "eagle3-llama-3.1-8b", **shape_fields_from_hf_config(d_cfg)[0]}
    print("| run | engine TTFT p50 ms (p25-p75) | DES TTFT p50 ms by seed | DES range over the seeds |")
    print("|---|---:|---|---:|")
    for name, rec in request_records(a.points, target, draft, a.engine_profile, "h200"):
        if rec.scenario.serving.arrivals.kind != "closed_loop" or not rec.speculative:
            continue
        sc = rec.scenario
        rate = realized_acceptance_rate(rec)
        sc = sc.model_copy(update={"acceptance": sc.acceptance.model_copy(update={"acceptance_rate": rate})})
        prof = load_profile_for(sc)[0]
        live = rec.serving_records()
        tt = (live.first_token_us - live.arrival_us) / 1e3
        des = []
        for seed in range(a.seeds):
            sim = run_serving(sc.model_copy(update={"seed": seed}), prof, True)
            des.append(float(np.median((sim.first_token_us - sim.arrival_us) / 1e3)))
        print(f"| {name[:-5]} | {np.median(tt):.1f} ({np.percentile(tt, 25):.1f}-{np.percentile(tt, 75):.1f}) | "
              f"{' / '.join(f'{d:.1f}' for d in des)} | {min(des):.1f}-{max(des):.1f} |")


if __name__ == "__main__":
    main()
