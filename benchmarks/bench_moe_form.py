"""The MoE target's fitted forward form against the dense one, on points the fit did not see.

    python benchmarks/bench_moe_form.py

An engine profile prices a (batch, num_steps) it did not measure from its fitted forms
(simulator.engines.forms). The dense roofline reads a fixed weight set; an MoE target's forward reads the
experts its tokens touch, E (1 - (1 - k/E)^N) of E for N independent tokens at top-k, so its weights term
grows with the verify's tokens. Held out: vLLM 0.26.0's Qwen3-30B-A3B + EAGLE-3 on the H100 at num_steps 5
(batch 1-32, experts drawn uniformly by vLLM's routing simulator,
data/engine_runs/h100_vllm_0.26.0_moe_uniform/), priced from a profile fitted on num_steps 0 and 3 (the
baseline of data/engine_runs/h100_vllm_0.26.0_moe/, the verify of the uniform runs): each form's
target forward against the measured one. Then each shipped MoE profile's in-sample fit under both forms.
Nothing here is fitted to the held-out points.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibration.engines.build import build_profile  # noqa: E402
from calibration.engines.plans import model_configs  # noqa: E402
from simulator.costs.engine_native import NativeCosts  # noqa: E402
from simulator.engines.profile import load_engine_profile  # noqa: E402
from simulator.engines.forms import part_rows  # noqa: E402
from simulator.evidence.engine_profile_fit import _fit_family  # noqa: E402
from simulator.model_config import shape_fields_from_hf_config  # noqa: E402
from simulator.profile import data_dir  # noqa: E402

RUNS = ROOT / "data" / "engine_runs"
POINTS = [RUNS / "h100_vllm_0.26.0_moe" / "moe_calibrate_2026-12-07.jsonl.gz",
          RUNS / "h100_vllm_0.26.0_moe_uniform" / "moe_uniform_calibrate_2026-12-07.jsonl.gz"]
HELD_OUT = 5


def _forms(profile):
    """(dense fit, MoE fit) of the profile's target forward."""
    rows = part_rows(profile, "target_forward_us")
    return (_fit_family(rows, ["decode_us", "verify_us"], True, True),
            _fit_family(rows, ["decode_us", "verify_us"], True, True, moe_target=profile.target))


def main() -> None:
    t_cfg, d_cfg = model_configs("qwen3-30b-a3b", "eagle3-qwen3-30b-a3b")
    target, draft = shape_fields_from_hf_config(t_cfg)[0], shape_fields_from_hf_config(d_cfg)[0]
    seen = build_profile(POINTS, "held-out", target, draft,
                         exclude_labels=("calibrate_s3_moe", f"calibrate_s{HELD_OUT}_moe_uniform"))
    full = build_profile(POINTS, "all", target, draft, exclude_labels=("calibrate_s3_moe",))
    dense, moe = _forms(seen)
    prices = {name: NativeCosts(seen.model_copy(update={"fits": {**seen.fits, "target_forward_us": fit}}))
              for name, fit in (("dense", dense), ("moe", moe))}
    print(f"Held out: num_steps {HELD_OUT} of {', '.join(p.name for p in POINTS)} (fitted on num_steps "
          f"{', '.join(map(str, sorted({p.num_steps for p in seen.points})))})\n")
    print("| batch | verify tokens | measured target forward us | dense form | err | MoE form | err |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    errs = {"dense": [], "moe": []}
    for p in sorted(full.points, key=lambda p: p.batch_size):
        if p.num_steps != HELD_OUT or not p.target_forward_us:
            continue
        row = []
        for name, costs in prices.items():
            us = costs.target_forward_us(p.batch_size, HELD_OUT, p.context_len)
            errs[name].append(us / p.target_forward_us - 1)
            row += [f"{us:,.0f}", f"{100 * errs[name][-1]:+.1f}%"]
        print(f"| {p.batch_size} | {p.batch_size * (HELD_OUT + 1)} | {p.target_forward_us:,.0f} | {' | '.join(row)} |")
    d, m = (np.abs(errs[k]) for k in ("dense", "moe"))
    print(f"\nmedian |error|: dense {100 * np.median(d):.1f}% (max {100 * d.max():.1f}%), MoE "
          f"{100 * np.median(m):.1f}% (max {100 * m.max():.1f}%)\n")
    print("Shipped MoE profiles, the target forward's in-sample fit:\n")
    print("| engine profile | points | dense median / max err | MoE median / max err |")
    print("|---|---:|---:|---:|")
    for path in sorted((data_dir() / "engine_profiles").glob("*.json")):
        prof = load_engine_profile(path)
        if not prof.target.get("n_routed_experts"):
            continue
        fits = _forms(prof)
        if fits[1].num_points <= len(fits[1].params):  # as many parameters as points: any form fits them exactly
            print(f"| {path.stem} | {fits[0].num_points} | no more points than parameters | |")
            continue
        print(f"| {path.stem} | {fits[0].num_points} | " + " | ".join(
            f"{100 * f.median_abs_error_frac:.1f}% / {100 * f.max_abs_error_frac:.1f}%" for f in fits) + " |")


if __name__ == "__main__":
    main()
