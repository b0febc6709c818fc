"""A check of docs/engines.md ("MoE kernel time at decode token counts"): can one law, fitted on SGLang's
Triton fused MoE timed on the lent H200, price an engine's fused MoE at other shapes and GPUs? It was
tried as the engine kinds' default MoE price (issue 26) and is NOT used by the model, for what the
last table shows. The law, per MoE layer and rank:

    t = w_e / r_e + D * w_e / (f * B)

D the distinct experts the tokens touch (uniform routing), w_e one expert's weight bytes on the rank,
B the GPU's datasheet memory bandwidth, r_e and f fitted (scipy least_squares on log error) on
data/measurements/h200_sglang_triton_moe.jsonl (the configs SGLang picks; experts rotating between
calls). Carried to another GPU, B is that GPU's and r_e is kept.

    python docs/make_moe_law_check.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibration.engines.build import engine_lines, engine_point  # noqa: E402
from simulator.costs.moe_ops import expected_distinct_experts  # noqa: E402
from simulator.hardware import default_catalog  # noqa: E402

QUANT_BYTES = {"fp8_tensor": 1.0, "fp8_block128": 1.0}
MEASURED = ROOT / "data" / "measurements" / "h200_sglang_triton_moe.jsonl"
PUBLISHED = ROOT / "data" / "measurements" / "engines" / "moe_kernel_times_public.yaml"
QWEN3_POINTS = ROOT / "data" / "engine_runs" / "h200_vllm_0.26.0_qwen3-30b-a3b" / "points_2026-12-04.jsonl.gz"
PUBLISHED_SHAPES = {  # (experts, hidden, intermediate per rank, top-k, weight bytes): the entries' models at TP8
    "sglang-pr11816-b200-dsr1-tp8-fp8": (256, 7168, 2048 // 8, 8, 1.0),
    "sglang-pr11730-h200-qwen3-235b-tp8-fp8": (128, 4096, 1536 // 8, 8, 1.0)}


def law_us(p, distinct: float, expert_bytes: float, bw_gb_per_s: float) -> float:
    r_e, f = p
    return (expert_bytes / r_e + distinct * expert_bytes / (f * bw_gb_per_s)) / 1e3


def main() -> None:
    cat = default_catalog().gpus
    bw_h200 = cat["h200-sxm"].memory_bandwidth_gb_per_s
    rows = [json.loads(s) for s in MEASURED.read_text().splitlines() if s.strip()]
    rows = [r for r in rows if r["routing"] == "rotating" and not r["shape"].endswith("-default-config")]
    x = [(expected_distinct_experts(r["E"], r["top_k"], r["tokens"]), 3.0 * r["K"] * r["N"] * QUANT_BYTES[r["quant"]])
         for r in rows]
    y = np.array([r["kernels_us"] for r in rows])

    def resid(p):
        return np.log([law_us(p, d, w, bw_h200) for d, w in x]) - np.log(y)

    p = least_squares(resid, [100.0, 0.7], bounds=([1.0, 0.05], [1e4, 1.5])).x
    print(f"fitted on {len(y)} measurements: r_e {p[0]:.1f} GB/s, f {p[1]:.3f} of {bw_h200:g} GB/s\n")
    sets: dict[str, list[float]] = {}
    for r, (d, w), meas in zip(rows, x, y):
        sets.setdefault(f"{r['shape']}, H200 (the fit's own points)", []).append(law_us(p, d, w, bw_h200) / meas - 1)
    for e in yaml.safe_load(PUBLISHED.read_text())["entries"]:
        n_exp, hidden, inter, k, wb = PUBLISHED_SHAPES[e["id"]]
        gpu = {"hgx-b200-8gpu": "b200", "hgx-h200-8gpu": "h200-sxm"}[e["box"]]
        for t, us in e["kernel_time_us"].items():
            pred = law_us(p, expected_distinct_experts(n_exp, k, t), 3.0 * hidden * inter * wb,
                          cat[gpu].memory_bandwidth_gb_per_s)
            sets.setdefault(f"{e['id']} (published, {min(e['kernel_time_us'])}-{max(e['kernel_time_us'])} tokens)",
                            []).append(pred / us - 1)
    print("| shape, GPU | points | median error | min error | max error |")
    print("|---|---:|---:|---:|---:|")
    for name, errs in sets.items():
        print(f"| {name} | {len(errs)} | {np.median(errs):+.1%} | {min(errs):+.1%} | {max(errs):+.1%} |")
    # a wide expert: Qwen3-30B-A3B at TP1 (bf16, intermediate 768), 48 MoE layers, against vLLM's whole step
    cfg = json.loads((ROOT / "data" / "models" / "engine" / "qwen3-30b-a3b.config.json").read_text())
    w_e = 3.0 * cfg["hidden_size"] * cfg["moe_intermediate_size"] * 2.0
    moe_ms = cfg["num_hidden_layers"] * law_us(p, expected_distinct_experts(cfg["num_experts"], cfg["num_experts_per_tok"], 1),
                                               w_e, bw_h200) / 1e3
    engines, lines = engine_lines([QWEN3_POINTS])
    steps = [ep.step_us / 1e3 for ln in lines
             if (ep := engine_point(ln["point"], ln.get("engine"))) is not None and ep.num_steps == 0
             and ep.batch_size == 1 and ep.prompt_len == 1024]
    print("\n| wide expert | the law's MoE alone, ms a step | vLLM's whole decode step, ms (measured, 1k prompt) |")
    print("|---|---:|---:|")
    print(f"| Qwen3-30B-A3B, TP1 bf16, batch 1 ({cfg['num_hidden_layers']} MoE layers) | {moe_ms:.2f} | "
          f"{min(steps):.2f}-{max(steps):.2f} ({len(steps)} points) |")


if __name__ == "__main__":
    main()
