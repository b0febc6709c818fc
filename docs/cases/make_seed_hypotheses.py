"""Predict the seed case (../shared/CASES.md) under each hypothesis of docs/cases/seed-hypotheses.md.

Per hypothesis: the engine's kernel efficiency (`serving_engine.kernel_efficiency`) is fitted to
the published baseline (90 tok/s) alone with scipy brentq; then predicted, closed form: tok/s at 5
chain steps (published 71.3), the verify forward (21-28 ms), the draft's share of the cycle (< 5%),
the best step count (same per-token acceptance) and its tok/s, and the same with every collective
30% cheaper (a what-if of NCCL tuning; published 94 tok/s after tuning and the best step count).
A third table (added later) gives the H200 NVL hypotheses SGLang's own MoE kernel times, measured
on the lent H200 (data/measurements/h200_sglang_triton_moe.jsonl, `serving_engine.moe_layer_latency_us`).

    python docs/cases/make_seed_hypotheses.py           # print the table
    python docs/cases/make_seed_hypotheses.py --write   # and rewrite the doc's section below its '---'
"""

from __future__ import annotations

import sys
from pathlib import Path

from scipy.optimize import brentq

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator.acceptance import build_acceptance, iid_mean_accept_length  # noqa: E402
from simulator.analytic import analyze  # noqa: E402
from simulator.costs.forward import CostModel  # noqa: E402
from simulator.evidence.importers.moe_bench import load_moe_kernel_times  # noqa: E402
from simulator.profile import CollectiveTable, Provenance  # noqa: E402
from simulator.scenario import load_profile_for, read_scenario_dict, scenario_from_dict  # noqa: E402

DOC = ROOT / "docs" / "cases" / "seed-hypotheses.md"
PUB_BASELINE, PUB_SPEC, PUB_AL, PUB_BEST = 90.0, 71.3, 2.1, 94.0
STEPS = 5
FP8 = {c: "fp8_block128" for c in ("attention", "dense_mlp", "routed_experts", "shared_experts")} | {"lm_head": "bf16"}
INT4 = {"attention": "bf16", "dense_mlp": "bf16", "routed_experts": "int4_g32", "shared_experts": "bf16",
        "lm_head": "bf16"}
DECODE_PATH = {"graph_verify": "full", "verify_attention": "decode"}
PREFILL_PIECEWISE = {"graph_verify": "piecewise", "verify_attention": "prefill"}
PREFILL_FULL = {"graph_verify": "full", "verify_attention": "prefill"}
HYPOTHESES = [
    ("A1", "h200-nvl-pcie-8gpu", FP8, DECODE_PATH),
    ("A2", "h200-nvl-pcie-8gpu", FP8, PREFILL_PIECEWISE),
    ("A3", "h200-nvl-pcie-8gpu", FP8, PREFILL_FULL),
    ("B1", "pcie-rtx-pro-6000-8gpu", INT4, DECODE_PATH),
    ("B2", "pcie-rtx-pro-6000-8gpu", INT4, PREFILL_PIECEWISE),
    ("B3", "pcie-rtx-pro-6000-8gpu", INT4, PREFILL_FULL),
]

# SGLang 0.5.23's Triton MoE kernels for Kimi-K2 TP8 fp8 on the H200 (calibration/bench/engine_moe.py), experts
# differing from call to call as from layer to layer; the A hypotheses' GPU is the H200 NVL (same chip).
MEASURED_MOE = load_moe_kernel_times(ROOT / "data" / "measurements" / "h200_sglang_triton_moe.jsonl", "kimi-k2-tp8")
HYPOTHESES_MEASURED_MOE = [(hid + " + SGLang MoE", box, precision, {**engine, "moe_layer_latency_us": MEASURED_MOE})
                           for hid, box, precision, engine in HYPOTHESES if box == "h200-nvl-pcie-8gpu"]


def alpha_for(al: float, steps: int) -> float:
    """iid acceptance rate whose mean accept length at `steps` is `al` (brentq)."""
    return brentq(lambda a: iid_mean_accept_length(a, steps) - al, 1e-9, 1 - 1e-9)


ALPHA = alpha_for(PUB_AL, STEPS)


BASE = read_scenario_dict(ROOT / "scenarios" / "kimi_k2_tp8_draft_live_loop.yaml")  # its draft section, read once


def scenario(box: str, precision: dict, engine: dict, steps: int = STEPS, efficiency: float = 1.0,
             collective_scale: float = 1.0):
    base = BASE
    data = {
        "name": f"seed {box}", "profile": "h200",
        "target": {"config_path": str(ROOT / "data" / "models" / "kimi-k2.5-text.json"), "name": "kimi-k2",
                   "precision": precision},
        "draft": base["draft"], "tp_size": 8, "placement": "shared_tp", "hardware": {"box": box},
        "spec": {"num_steps": steps, "topk": 1, "num_draft_tokens": steps + 1},
        "acceptance": {"kind": "iid", "acceptance_rate": ALPHA},
        "workload": {"batch_size": 1, "context_len": 2048, "max_new_tokens": 1024},
        "serving_engine": {"kind": "sglang", "version": "2026", **engine, "kernel_efficiency": efficiency},
        "costs": {"collective_latency_scale": collective_scale},
    }
    return scenario_from_dict(data, f"seed hypothesis on {box}", ROOT)


# The published NCCL allreduce on 8 PCIe Gen5 GPUs (CASES.md's related public facts; public_dev.yaml
# comm-rtxpro6000-pcie-8gpu-allreduce): the secondary variant uses it instead of the collective model.
PUBLISHED_ALLREDUCE = CollectiveTable(
    op="allreduce", world_size=8, mode="graph", size_bytes=[14_336, 172_032, 458_752], latency_us=[56.2, 65.7, 93.0],
    provenance=Provenance(kind="published", source="github.com/local-inference-lab/rtx6kpro, models/glm5.1/"
                          "vllm-communicators-kimi-glm-2026-05-07.md (8x RTX PRO 6000, PCIe Gen5, graph replay)"))


_BOX_PROFILES: dict = {}


def box_profile(sc):
    """load_profile_for(sc), loaded once per box: every scenario here names profile h200, tp_size 8
    and placement shared_tp, so the carried profile depends on the box alone (the fits call this
    hundreds of times)."""
    if sc.hardware.box not in _BOX_PROFILES:
        _BOX_PROFILES[sc.hardware.box] = load_profile_for(sc)[0]
    return _BOX_PROFILES[sc.hardware.box]


def run(sc, published_collectives: bool = False):
    profile = box_profile(sc)
    if published_collectives:
        profile = profile.model_copy(update={"collectives_on": None,
                                             "collectives": [PUBLISHED_ALLREDUCE, *profile.collectives]})
    cost = CostModel(sc, profile)
    return analyze(sc, cost, build_acceptance(sc.acceptance, sc.spec), truncate=False), cost


def fit_efficiency(box: str, precision: dict, engine: dict, pub: bool = False) -> float:
    """Kernel efficiency at which the baseline is 90 tok/s (brentq)."""
    def gap(eff: float) -> float:
        return run(scenario(box, precision, engine, efficiency=eff), pub)[0].baseline_tok_per_s - PUB_BASELINE
    lo, hi = 0.05, 20.0
    if gap(lo) > 0 or gap(hi) < 0:
        return float("nan")
    return brentq(gap, lo, hi, xtol=1e-4)


def predict(hyp, pub: bool = False) -> dict:
    hid, box, precision, engine = hyp
    eff = fit_efficiency(box, precision, engine, pub)
    if eff != eff:  # no efficiency in the field's range gives the published baseline
        top = run(scenario(box, precision, engine, efficiency=20.0), pub)[0].baseline_tok_per_s
        return {"id": hid + (" (published allreduce)" if pub else ""), "efficiency": eff, "baseline_at_20": top}
    an, cost = run(scenario(box, precision, engine, efficiency=eff), pub)
    b = an.breakdown_us
    draft = sum(v for k, v in b.items() if k.startswith("draft"))
    best = max(((s, run(scenario(box, precision, engine, s, eff), pub)[0].tok_per_s) for s in range(1, 9)),
               key=lambda x: x[1])
    tuned = max(((s, run(scenario(box, precision, engine, s, eff, 0.7), pub)[0].tok_per_s) for s in range(1, 9)),
                key=lambda x: x[1])
    return {"id": hid + (" (published allreduce)" if pub else ""), "efficiency": eff, "baseline": an.baseline_tok_per_s, "spec": an.tok_per_s,
            "speedup": an.speedup, "verify_ms": cost.verify_forward().span_us / 1000.0,
            "draft_share": draft / an.cycle_time_us, "cycle_ms": an.cycle_time_us / 1000.0,
            "best_steps": best[0], "best_tok_s": best[1], "tuned_steps": tuned[0], "tuned_tok_s": tuned[1]}


def table(rows: list[dict]) -> str:
    head = ("| hypothesis | kernel efficiency (fit to 90 tok/s) | tok/s at 5 steps (pub. 71.3) | error | speedup "
            "(pub. 0.79) | verify ms (pub. 21-28) | draft share (pub. < 5%) | cycle ms | best steps: tok/s | "
            "collectives x0.7: best steps, tok/s (pub. 94) |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        if r["efficiency"] != r["efficiency"]:
            lines.append(f"| {r['id']} | none: at 20 (the field's top) the baseline is {r['baseline_at_20']:.1f} "
                         "tok/s | | | | | | | | |")
            continue
        lines.append(f"| {r['id']} | {r['efficiency']:.3f} | {r['spec']:.1f} | {r['spec'] / PUB_SPEC - 1:+.1%} | "
                     f"{r['speedup']:.2f} | {r['verify_ms']:.1f} | {r['draft_share']:.1%} | {r['cycle_ms']:.1f} | "
                     f"{r['best_steps']}: {r['best_tok_s']:.1f} | {r['tuned_steps']}: {r['tuned_tok_s']:.1f} |")
    return "\n".join(lines)


def passing(rows: list[dict]) -> list[str]:
    return [r["id"] for r in rows if "spec" in r and abs(r["spec"] / PUB_SPEC - 1) <= 0.10 and 21 <= r["verify_ms"] <= 28]


def section(rows: list[dict], rows_pub: list[dict], rows_moe: list[dict]) -> str:
    def verdict(rs):
        ok = passing(rs)
        return (f"Within 10% of 71.3 tok/s with the verify inside 21-28 ms: {', '.join(ok)}.\n" if ok else
                "No hypothesis is within 10% of 71.3 tok/s with the verify inside 21-28 ms.\n")
    return ("\n## Predictions (written by `python docs/cases/make_seed_hypotheses.py --write`)\n\n"
            f"Acceptance: iid rate {ALPHA:.4f} (mean accept length {PUB_AL} at {STEPS} steps). Every hypothesis's "
            "kernel efficiency is fitted to the baseline alone; nothing else is fitted.\n\n"
            "### As written above (collectives from the collective model)\n\n" + table(rows) + "\n\n" + verdict(rows)
            + "\n### Added after the first table: collectives from the published 8-GPU PCIe NCCL curve\n\n"
            "The collective model under-prices NCCL across two NUMA nodes (docs/hardware.md: 22 us against a "
            "published 56 us at 14,336 B), so the first table's efficiency fit absorbs missing communication "
            "time into compute. This variant replaces the model's allreduce by the published curve "
            "(PUBLISHED_ALLREDUCE; all_gather stays the model's); it was added after the first table was seen.\n\n"
            + table(rows_pub) + "\n\n" + verdict(rows_pub) + "\n" + reading(rows, rows_pub)
            + "\n### Added after the first two tables: SGLang's own MoE kernels, measured on the H200\n\n"
            "The A hypotheses run SGLang's Triton fused MoE on fp8 experts. Its kernels, timed on the lent H200 "
            "for Kimi-K2's TP8 shape (calibration/bench/engine_moe.py; docs/engines.md, \"MoE kernel time at decode "
            f"token counts\"), take {MEASURED_MOE[1]:.1f} us per layer at one token and {MEASURED_MOE[8]:.1f} us at "
            "eight, against the model's roofline price of the same layer before any efficiency fit; here they "
            "price the target's routed experts (`moe_layer_latency_us`, not divided by the fitted efficiency), "
            "and the efficiency is fitted to the baseline again. Added after the first two tables were seen.\n\n"
            + table(rows_moe) + "\n\n" + verdict(rows_moe) + "\n" + reading_moe(rows, rows_moe))


def reading_moe(rows: list[dict], rows_moe: list[dict]) -> str:
    """What the measured-MoE table says against the first (numbers from the rows)."""
    first = next((r for r in rows_moe if "spec" in r), None)
    if first is None:
        return ""
    base = next(r for r in rows if first["id"].startswith(r["id"] + " "))
    return (f"Reading: with the MoE layer at SGLang's measured time, {base['id']} fits {first['efficiency']:.3f} "
            f"(was {base['efficiency']:.3f}) and predicts {first['spec']:.1f} tok/s "
            f"({first['spec'] / PUB_SPEC - 1:+.0%}) with a {first['verify_ms']:.1f} ms verify, where it predicted "
            f"{base['spec']:.1f}: the first table's pass came from the one fitted efficiency slowing every kernel "
            "alike, the MoE included, and does not survive pricing the MoE as the engine runs it. With the published "
            "allreduce no efficiency reaches the published baseline: the measured MoE and that allreduce alone "
            "leave too little of the 11.1 ms decode step for the rest.\n")


def reading(rows: list[dict], rows_pub: list[dict]) -> str:
    """What the two tables say together (numbers from the rows)."""
    ok = passing(rows)
    if not ok:
        return ""
    a = next(r for r in rows if r["id"] == ok[0])
    b = next(r for r in rows_pub if r["id"].startswith(ok[0] + " "))
    return (f"Reading: {ok[0]} passes under the protocol written first, but its fitted kernel efficiency "
            f"({a['efficiency']:.3f}) makes every compute kernel {1 / a['efficiency']:.1f}x slower than the profile "
            f"carried to that GPU. With the published allreduce the same hypothesis fits {b['efficiency']:.3f} and "
            f"predicts {b['spec']:.1f} tok/s ({b['spec'] / PUB_SPEC - 1:+.0%}) with a {b['verify_ms']:.1f} ms verify. "
            "So the pass rests on communication time the collective model misses being moved into compute, where it "
            "grows with the verify's tokens; what makes the real 6-token verify cost 21-28 ms (about twice the "
            "decode step) is still not identified by any modelled mechanism.\n")


def main() -> None:
    rows = [predict(h) for h in HYPOTHESES]
    rows_pub = [predict(h, pub=True) for h in HYPOTHESES]
    rows_moe = [predict(h, pub) for pub in (False, True) for h in HYPOTHESES_MEASURED_MOE]
    print(table(rows))
    print(table(rows_pub))
    print(table(rows_moe))
    if "--write" in sys.argv:
        text = DOC.read_text()
        head = text[: text.index("\n---\n") + 5]
        DOC.write_text(head + section(rows, rows_pub, rows_moe))


if __name__ == "__main__":
    main()
