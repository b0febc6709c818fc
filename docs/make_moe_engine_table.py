"""Print docs/engines.md's tables on MoE kernel time at decode token counts: published engine
fused-MoE kernel times against what the model prices the same MoE layer at
(data/engines/moe_kernel_times_public.yaml), and the DeepSeek-R1 experiment
(data/cases/experiments/dsr1_moe_floor_proxy.yaml, what `specdecsim cases FILE` prints).

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

from simulator.cases import replay_cases  # noqa: E402
from simulator.costs.forward import CostModel  # noqa: E402
from simulator.scenario import load_profile_for, scenario_from_dict  # noqa: E402

DATA = ROOT / "data" / "engines" / "moe_kernel_times_public.yaml"
DRAFT = dict(name="draft", hidden_size=1024, num_hidden_layers=1, num_attention_heads=8, intermediate_size=2048,
             vocab_size=1024)


def target_of(entry: dict) -> dict:
    if "shape" not in entry:
        return {"config_path": str(ROOT / "data" / "models" / f"{entry['model']}.json"), "name": entry["model"]}
    sh = entry["shape"]
    return dict(name=entry["model"], hidden_size=sh["hidden_size"], num_hidden_layers=2, num_attention_heads=64,
                num_key_value_heads=4, intermediate_size=sh["moe_intermediate_size"], vocab_size=1024,
                moe_intermediate_size=sh["moe_intermediate_size"], n_routed_experts=sh["n_routed_experts"],
                num_experts_per_tok=sh["num_experts_per_tok"], weight_dtype_bytes=1.0)


def main() -> None:
    entries = yaml.safe_load(DATA.read_text())["entries"]
    print("| source | box | model, TP | tokens | published us | modelled us | published / modelled |")
    print("|---|---|---|---|---|---|---|")
    for e in entries:
        sc = scenario_from_dict(dict(name=e["id"], profile="h200", target=target_of(e), draft=DRAFT,
                                     tp_size=e["tp_size"], hardware={"box": e["box"]},
                                     spec=dict(num_steps=1, topk=1, num_draft_tokens=2),
                                     acceptance=dict(kind="iid", acceptance_rate=0.5),
                                     serving_engine={"kind": "sglang"}), e["id"], ROOT)
        profile, _ = load_profile_for(sc)
        cost = CostModel(sc, profile)
        for t, us in e["kernel_time_us"].items():
            model = cost.moe_layer_us(int(t))
            print(f"| {e['id']} | {e['box']} | {e['model']} tp{e['tp_size']} | {t} | {us:.2f} | {model:.2f} | "
                  f"{us / model:.1f}x |")
    print()
    experiment = ROOT / "data" / "cases" / "experiments" / "dsr1_moe_floor_proxy.yaml"
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
