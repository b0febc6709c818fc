"""The TP-2 prediction written down before any 2-GPU run checks it (issue 46): vLLM 0.26.0, Llama-3.1-8B +
EAGLE-3, a TP group of 2 priced from one GPU's engine profile carried to a rank of TP 2 (the rank's sharded ops
at the shares of the datasheet the engine reached at TP 1; launches, the draft's small kernels and the host's
work as measured) plus the group's allreduces from the box's links (simulator/costs/engine_carry.py,
docs/engines/tp-groups.md, "TP groups from one GPU's profile").

    python docs/make_tp_carry_prediction.py

Rows: the lent H100 pair (nvidia-h100-x2: the H100 profile, box hgx-h100-8gpu's NVLink) and an H200 pair
(the H200 profile, box 2x-h200-nvlink), batch 1, 8 and 32 at a 1k context, num_steps 3 at acceptance 0.7
(closed form: the steady batch), each beside the same profile at TP 1 on the same box. The queue that checks it:
`specdecsim calibrate engine-queue vllm-h200x2-tp DIR` (a machine of two GPUs).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.acceptance import build_acceptance  # noqa: E402
from simulator.analytic import analyze, baseline_step_us  # noqa: E402
from simulator.costs.forward import CostModel  # noqa: E402
from simulator.scenario import load_profile_for, load_scenario  # noqa: E402

SCENARIO = ROOT / "scenarios" / "vllm_llama8b_h200.yaml"
PAIRS = (("2x H100 SXM (NVLink)", "hgx-h100-8gpu", "vllm-0.26.0-h100-llama-3.1-8b-eagle3"),
         ("2x H200 (NVLink)", "2x-h200-nvlink", "vllm-0.26.0-h200-llama-3.1-8b-eagle3"))


def predict(box: str, profile: str, tp: int, batch: int) -> tuple[float, float]:
    """(speculative tok/s, baseline tok/s) of the steady batch, closed form."""
    sc = load_scenario(SCENARIO, [f"hardware.box={box}", f"serving_engine.engine_profile={profile}", f"tp_size={tp}",
                                  f"workload.batch_size={batch}", "workload.context_len=1024", "spec.num_steps=3",
                                  "spec.num_draft_tokens=4", "acceptance.acceptance_rate=0.7"])
    cost = CostModel(sc, load_profile_for(sc)[0])
    res = analyze(sc, cost, build_acceptance(sc.acceptance, sc.spec), truncate=False)
    return res.tok_per_s, batch / baseline_step_us(cost) * 1e6


def main() -> None:
    print("| GPUs | engine profile | batch | TP 1 tok/s | TP 2 tok/s | TP 2 / TP 1 | TP 1 baseline tok/s | "
          "TP 2 baseline tok/s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, box, profile in PAIRS:
        for b in (1, 8, 32):
            (s1, b1), (s2, b2) = predict(box, profile, 1, b), predict(box, profile, 2, b)
            print(f"| {name} | {profile} | {b} | {s1:,.0f} | {s2:,.0f} | {s2 / s1:.2f}x | {b1:,.0f} | {b2:,.0f} |")


if __name__ == "__main__":
    main()
