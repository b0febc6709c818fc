"""Table of docs/engines/mla.md: an MLA target's verify by context, inside SGLang 0.5.15 on the
lent H200 (DeepSeek-V2-Lite's shape with an EAGLE-3 draft, dummy weights, experts routed uniformly:
queue `sglang-h200-mla`), against (1) the engine-native profile built from the shortest and longest
contexts only (`--context-lens`), at the contexts between, and (2) the op-table `sglang` engine model
(no engine profile: the roofline of MLA's absorbed decode kernels over the latent cache).

    python docs/make_mla_table.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibration.engines.build import build_profile, engine_lines, engine_point  # noqa: E402
from simulator.costs.forward import CostModel  # noqa: E402
from simulator.costs.engine_native import NativeCosts  # noqa: E402
from simulator.profile import load_profile, resolve_profile_path  # noqa: E402
from simulator.scenario import scenario_from_dict  # noqa: E402

RUNS = ROOT / "data" / "engine_runs" / "h200_sglang_0.5.15_deepseek-v2-lite"
TARGET, DRAFT = "deepseek-v2-lite", "eagle3-deepseek-v2-lite"


def shapes() -> tuple[dict, dict]:
    from calibration.cli.engine import _configs
    _, _, t, d = _configs(TARGET, DRAFT)
    def drop(x):
        return {k: v for k, v in x.items() if v is not None and v != [] and k != "config_notes"}
    return drop(t), drop(d)


def measured(paths: list[Path]) -> dict[tuple[int, int, int], tuple[float, float]]:
    """(num_steps, batch, prompt) -> (mean context, target forward us) of the calibration points whose
    forward was timed (GPU-bound or a graph replay's span)."""
    engines, lines = engine_lines(paths, "calibrate")
    out: dict = {}
    for ln in lines:
        ep = engine_point(ln["point"], ln.get("engine"))
        if ep is not None and ep.target_forward_us and ep.gpu_bound is not False:
            out.setdefault((ep.num_steps, ep.batch_size, ep.prompt_len), []).append((ep.context_len, ep.target_forward_us))
    return {k: (float(np.mean([c for c, _ in v])), float(np.mean([t for _, t in v]))) for k, v in out.items()}


def op_table_forward_us(t: dict, d: dict, num_steps: int, batch: int, context: float) -> float:
    """The op-table sglang engine model's target forward (verify at num_steps, decode at 0), GPU us."""
    data = dict(name="mla", profile="h200", tp_size=1, placement="shared_tp", target=t, draft=d,
                spec=dict(method="eagle3", num_steps=max(num_steps, 1), topk=1, num_draft_tokens=max(num_steps, 1) + 1),
                acceptance=dict(kind="iid", acceptance_rate=0.7),
                workload=dict(batch_size=batch, context_len=int(round(context)), max_new_tokens=256),
                serving_engine=dict(kind="sglang", overlap_scheduler=True))
    cost = CostModel(scenario_from_dict(data, "mla.yaml", ROOT / "scenarios"), load_profile(resolve_profile_path("h200")))
    return (cost.verify_forward() if num_steps else cost.decode_forward()).gpu_us


def main() -> None:
    paths = sorted(RUNS.glob("points*.jsonl.gz"))
    if not paths:
        sys.exit(f"{RUNS}: no points files (queue sglang-h200-mla not yet measured)")
    t, d = shapes()
    m = measured(paths)
    prompts = sorted({p for _, _, p in m})
    ends = (prompts[0], prompts[-1])
    prof = build_profile(paths, "ends", t, d, keep=lambda key: key[2] in ends)
    native = NativeCosts(prof)
    print(f"profile from prompts {ends[0]} and {ends[1]} only; {len(prof.points)} points\n")
    print("| forward | batch | prompt | context | measured ms | engine-native, ends only | error | op-table sglang model "
          "| error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    errs_native, errs_op = [], []
    for (k, b, p), (c, us) in sorted(m.items()):
        nat = native.target_forward_us(b, k, c)
        op = op_table_forward_us(t, d, k, b, c)
        mid = p not in ends
        if mid:
            errs_native.append(abs(nat / us - 1))
        errs_op.append(abs(op / us - 1))
        print(f"| {'verify, 4 tokens a request' if k else 'decode'} | {b} | {p} | {c:,.0f} | {us / 1e3:.2f} | "
              f"{nat / 1e3:.2f}{'' if mid else ' (measured)'} | {nat / us - 1:+.1%} | {op / 1e3:.2f} | {op / us - 1:+.1%} |")
    print(f"\nengine-native, ends only, at the contexts between: median |err| {np.median(errs_native):.1%}, "
          f"max {np.max(errs_native):.1%} over {len(errs_native)}; op-table model, every point: median "
          f"{np.median(errs_op):.1%}, max {np.max(errs_op):.1%} over {len(errs_op)}")


if __name__ == "__main__":
    main()
