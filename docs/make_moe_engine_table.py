"""Print docs/engines.md's tables on MoE kernel time at decode token counts: published engine
fused-MoE kernel times against what the model prices the same MoE layer at
(data/measurements/engines/moe_kernel_times_public.yaml); SGLang's Triton MoE kernels timed on the lent H200
(data/measurements/h200_sglang_triton_moe.jsonl, `bash calibration/h200_run.sh engine-moe`)
against the model and, for the shape a source published, against that; and the DeepSeek-R1
experiment (data/cases/experiments/dsr1_moe_times_proxy.yaml, what `specdecsim cases FILE` prints).

    python docs/make_moe_engine_table.py

'modelled' is CostModel.moe_layer_us without an engine table: the profile's measured grouped-GEMM
table where one has the shape's key, else the roofline of the touched experts' weights on the
catalog GPU, at least one small kernel. Each row's TP and box are its source's.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from simulator.evidence.cases import replay_cases  # noqa: E402
from simulator.costs.forward import CostModel  # noqa: E402
from simulator.scenario import load_profile_for, scenario_from_dict  # noqa: E402

DATA = ROOT / "data" / "measurements" / "engines" / "moe_kernel_times_public.yaml"
MEASURED = ROOT / "data" / "measurements" / "h200_sglang_triton_moe.jsonl"
# the measured shapes as models: (target, TP), fp8 routed experts in 128x128 blocks as measured (a
# config.json's quantization_config is not read as the weight format: precision says it)
MEASURED_MODELS = {
    "deepseek-v3-tp8": ({"model": "deepseek-v3", "precision": {"routed_experts": "fp8_block128"}}, 8),
    "kimi-k2-tp8": ({"model": "kimi-k2", "shape": {"hidden_size": 7168, "moe_intermediate_size": 2048,
                                                   "n_routed_experts": 384, "num_experts_per_tok": 8},
                     "precision": {"routed_experts": "fp8_block128"}}, 8),  # as docs/cases/make_seed_hypotheses.py
    "qwen3-235b-tp8": ({"model": "qwen3-235b-a22b", "shape": {"hidden_size": 4096, "moe_intermediate_size": 1536,
                                                             "n_routed_experts": 128, "num_experts_per_tok": 8}}, 8),
}
DRAFT = dict(name="draft", hidden_size=1024, num_hidden_layers=1, num_attention_heads=8, intermediate_size=2048,
             vocab_size=1024)


def target_of(entry: dict) -> dict:
    if "shape" not in entry:
        return {"config_path": str(ROOT / "data" / "models" / f"{entry['model']}.json"), "name": entry["model"],
                **({"precision": entry["precision"]} if "precision" in entry else {})}
    sh = entry["shape"]
    return dict(name=entry["model"], hidden_size=sh["hidden_size"], num_hidden_layers=2, num_attention_heads=64,
                num_key_value_heads=4, intermediate_size=sh["moe_intermediate_size"], vocab_size=1024,
                moe_intermediate_size=sh["moe_intermediate_size"], n_routed_experts=sh["n_routed_experts"],
                num_experts_per_tok=sh["num_experts_per_tok"], weight_dtype_bytes=1.0,
                **({"precision": entry["precision"]} if "precision" in entry else {}))


def cost_model(entry: dict, tp: int, box: str) -> CostModel:
    """The cost model of an SGLang scenario of this target at this TP on this catalog box."""
    sc = scenario_from_dict(dict(name=entry["model"], profile="h200", target=target_of(entry), draft=DRAFT,
                                 tp_size=tp, hardware={"box": box}, spec=dict(num_steps=1, topk=1, num_draft_tokens=2),
                                 acceptance=dict(kind="iid", acceptance_rate=0.5), serving_engine={"kind": "sglang"}),
                            entry["model"], ROOT)
    profile, _ = load_profile_for(sc)
    return CostModel(sc, profile)


def main() -> None:
    from simulator.evidence.importers.moe_bench import load_moe_kernel_times
    entries = yaml.safe_load(DATA.read_text())["entries"]
    print("| source | box | model, TP | tokens | published us | modelled us | published / modelled |")
    print("|---|---|---|---|---|---|---|")
    for e in entries:
        cost = cost_model(e, e["tp_size"], e["box"])
        for t, us in e["kernel_time_us"].items():
            model = cost.moe_layer_us(int(t))
            print(f"| {e['id']} | {e['box']} | {e['model']} tp{e['tp_size']} | {t} | {us:.2f} | {model:.2f} | "
                  f"{us / model:.1f}x |")
    print()
    published = {e["model"]: e["kernel_time_us"] for e in entries if e["box"] == "hgx-h200-8gpu"}
    print("| shape (fp8) | tokens | measured us, experts differ per call | same experts every call | "
          "published, whole fused MoE | modelled us |")
    print("|---|---|---|---|---|---|")
    for shape, (entry, tp) in MEASURED_MODELS.items():
        cost = cost_model(entry, tp, "hgx-h200-8gpu")
        rotating, same = load_moe_kernel_times(MEASURED, shape), load_moe_kernel_times(MEASURED, shape, "same")
        tuned_default = load_moe_kernel_times(MEASURED, shape + "-default-config") if shape.startswith("qwen") else {}
        for t, us in rotating.items():
            pub = published.get(entry["model"], {}).get(t)
            pub_txt = "" if pub is None else f"{pub:.2f} (default config; measured with it: {tuned_default[t]:.2f})"
            print(f"| {shape} | {t} | {us:.2f} | {same[t]:.2f} | {pub_txt} | {cost.moe_layer_us(t):.2f} |")
    print()
    experiment = ROOT / "data" / "cases" / "experiments" / "dsr1_moe_times_proxy.yaml"
    print("| DeepSeek-R1 MTP sweep, with the SGLang B200 MoE times | role | published tok/s | predicted | error "
          "| speedup error | within the bars |")
    print("|---|---|---|---|---|---|---|")
    for r in replay_cases(experiment):
        for f in r.figures:
            sp = "" if f.speedup_error is None else f"{f.speedup_error:+.3f}"
            ok = {True: "yes", False: "no", None: ""}[f.passed]
            print(f"| {f.label} | {f.role} | {f.published:.4g} | {f.predicted:.4g} | {f.error_frac:+.1%} | {sp} | {ok} |")


if __name__ == "__main__":
    main()
