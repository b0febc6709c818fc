"""The DES against hand-computed and closed-form results."""

import json

import numpy as np
import pytest

from simulator.acceptance import iid_mean_accept_length
from simulator.analytic import analyze, cycle_time_us
from simulator.acceptance import build_acceptance
from simulator.costs.forward import CostModel
from simulator.simulate import simulate
from tests.conftest import flat_profile, make_scenario

# Kernel counts of the tiny models (simulator/costs/forward_ops.py, tp=1, dense), as calibration/live/loop.py runs them:
# target forward = (embedding, attn_mask, rope_cos_sin) + 12 per layer + (rmsnorm, lm_head, argmax) -> 30 for
#   2 layers; decode adds the token copy -> 31; verify adds the input cat, the EAGLE-3 hidden-state concat
#   and the token copy -> 33
# draft step = 3 + (concat + 12) + 3 = 19; draft extend adds the fc and 2 gathers -> 22; accept = 1
TARGET_KERNELS, DECODE_KERNELS, DRAFT_STEP_KERNELS, EXTEND_KERNELS, ACCEPT_KERNELS = 33, 31, 19, 22, 1


def fixed_accept(s, length):
    p = [0.0] * (s + 1)
    p[length - 1] = 1.0
    return dict(kind="empirical", accept_length_probs=p)


def test_kernel_counts_match_the_op_lists(profile):
    cost = CostModel(make_scenario(), profile)
    assert len(cost.verify_forward().kernels) == TARGET_KERNELS
    assert len(cost.draft_step_forward(0).kernels) == DRAFT_STEP_KERNELS
    assert len(cost.draft_extend_forward(2).kernels) == EXTEND_KERNELS
    assert len(cost.accept_forward().kernels) == ACCEPT_KERNELS
    assert len(cost.decode_forward().kernels) == DECODE_KERNELS


def test_graph_mode_cycle_time_is_the_hand_sum():
    # GPU-bound: graph replay (12 us) < any forward's GPU time, so the cycle is
    # schedule + first replay + all kernels back to back + d2h sync.
    s, floor, replay, sched, d2h = 3, 10.0, 12.0, 40.0, 15.0
    prof = flat_profile(floor_us=floor, graph_replay_us=replay, schedule_us=sched, d2h_us=d2h)
    sc = make_scenario(spec=dict(num_steps=s, topk=1, num_draft_tokens=s + 1), acceptance=fixed_accept(s, 3),
                       workload=dict(batch_size=1, context_len=512, max_new_tokens=3 * 1000), fidelity=dict(num_cycles=50))
    kernels = EXTEND_KERNELS + s * DRAFT_STEP_KERNELS + TARGET_KERNELS + ACCEPT_KERNELS
    cycle = sched + replay + kernels * floor + d2h
    result, _ = simulate(sc, prof)
    assert result.cycle_time_us == pytest.approx(cycle, rel=1e-12)
    assert result.tok_per_s == pytest.approx(3 / cycle * 1e6, rel=1e-12)
    assert result.accept_length.mean == 3.0
    # baseline: schedule + replay + target forward at 1 token + sync
    assert result.baseline_step_us == pytest.approx(sched + replay + DECODE_KERNELS * floor + d2h, rel=1e-12)


def test_eager_host_bound_cycle_time_is_the_hand_sum():
    # Host-bound: 20 us to issue each op, 10 us of GPU each. The GPU waits for every launch,
    # so the last kernel ends one GPU time after the last issue.
    s, launch, floor, sched, d2h = 3, 20.0, 10.0, 40.0, 15.0
    prof = flat_profile(floor_us=floor, launch_us=launch, schedule_us=sched, d2h_us=d2h)
    sc = make_scenario(spec=dict(num_steps=s, topk=1, num_draft_tokens=s + 1), acceptance=fixed_accept(s, 2),
                       workload=dict(batch_size=1, context_len=512, max_new_tokens=2000), fidelity=dict(num_cycles=40),
                       serving_engine=dict(cuda_graph=False))
    kernels = EXTEND_KERNELS + s * DRAFT_STEP_KERNELS + TARGET_KERNELS + ACCEPT_KERNELS
    cycle = sched + kernels * launch + floor + d2h
    result, _ = simulate(sc, prof)
    assert result.cycle_time_us == pytest.approx(cycle, rel=1e-12)
    # GPU-bound eager (launch 4 us < 10 us): first launch, then the GPU runs without gaps
    prof2 = flat_profile(floor_us=floor, launch_us=4.0, schedule_us=sched, d2h_us=d2h)
    result2, _ = simulate(sc, prof2)
    assert result2.cycle_time_us == pytest.approx(sched + 4.0 + kernels * floor + d2h, rel=1e-12)


def test_overlapped_host_schedule_hides_behind_gpu():
    s = 3
    prof = flat_profile(schedule_us=200.0)
    base = dict(spec=dict(num_steps=s, topk=1, num_draft_tokens=s + 1), acceptance=fixed_accept(s, 2),
                workload=dict(batch_size=1, context_len=512, max_new_tokens=2000), fidelity=dict(num_cycles=20))
    serial, _ = simulate(make_scenario(**base), prof)
    over, _ = simulate(make_scenario(**base, serving_engine=dict(cuda_graph=True, host_overhead_overlapped=True)), prof)
    assert serial.cycle_time_us - over.cycle_time_us == pytest.approx(200.0, rel=1e-9)


@pytest.mark.parametrize("a,s", [(0.5, 3), (0.8, 6)])
def test_des_matches_leviathan_and_closed_form(a, s, profile):
    sc = make_scenario(spec=dict(num_steps=s, topk=1, num_draft_tokens=s + 1),
                       acceptance=dict(kind="iid", acceptance_rate=a),
                       workload=dict(batch_size=1, context_len=512, max_new_tokens=100_000), fidelity=dict(num_cycles=20_000))
    r, _ = simulate(sc, profile)
    expected = iid_mean_accept_length(a, s)
    assert r.accept_length.ci95_low <= expected <= r.accept_length.ci95_high
    assert r.tok_per_s == pytest.approx(r.analytic_tok_per_s, rel=0.01)
    assert r.tok_per_s_ci95[0] <= r.analytic_tok_per_s <= r.tok_per_s_ci95[1]


def test_batch_and_heterogeneity_match_closed_form(profile):
    sc = make_scenario(acceptance=dict(kind="iid", acceptance_rate=0.7, rate_concentration=3.0),
                       workload=dict(batch_size=4, context_len=512, max_new_tokens=32), fidelity=dict(num_cycles=20_000))
    r, _ = simulate(sc, profile)
    assert r.tok_per_s == pytest.approx(r.analytic_tok_per_s, rel=0.01)
    assert r.accept_length.ci95_low <= r.analytic_accept_length <= r.accept_length.ci95_high


def test_breakdown_sums_to_cycle_time(profile):
    r, _ = simulate(make_scenario(), profile)
    assert sum(r.breakdown_us.values()) == pytest.approx(r.cycle_time_us, rel=1e-9)
    an = analyze(make_scenario(), CostModel(make_scenario(), profile),
                 build_acceptance(make_scenario().acceptance, make_scenario().spec))
    assert sum(an.breakdown_us.values()) == pytest.approx(an.cycle_time_us, rel=1e-9)


def test_same_seed_same_json_other_seed_differs(profile):
    a, _ = simulate(make_scenario(seed=7), profile)
    b, _ = simulate(make_scenario(seed=7), profile)
    c, _ = simulate(make_scenario(seed=8), profile)
    assert json.dumps(a.model_dump(mode="json")) == json.dumps(b.model_dump(mode="json"))
    assert a.accept_length.mean != c.accept_length.mean


@pytest.mark.parametrize("placement", ["shared_tp", "tp1_colocated", "tp1_dedicated", "tp2"])
def test_kernel_per_rank_equals_forward_granularity_without_jitter(placement, profile):
    base = dict(tp_size=4, placement=placement,
                workload=dict(batch_size=2, context_len=512, max_new_tokens=64), fidelity=dict(num_cycles=200))
    fwd, _ = simulate(make_scenario(**base), profile)
    ker, _ = simulate(make_scenario(**{**base, "fidelity": dict(base["fidelity"], granularity="kernel", per_rank=True)},
                                    serving_engine=dict(cuda_graph=False)),
                      profile)
    fwd_eager, _ = simulate(make_scenario(**base, serving_engine=dict(cuda_graph=False)), profile)
    assert ker.cycle_time_us == pytest.approx(fwd_eager.cycle_time_us, rel=1e-9)
    assert ker.tok_per_s == pytest.approx(fwd_eager.tok_per_s, rel=1e-9)
    assert fwd.tok_per_s > 0


def test_jitter_on_ranks_slows_tp_collectives(profile):
    base = dict(tp_size=8, workload=dict(batch_size=1, context_len=512, max_new_tokens=64))
    calm, _ = simulate(make_scenario(**base, fidelity=dict(num_cycles=60, granularity="kernel", per_rank=True)), profile)
    noisy, _ = simulate(make_scenario(**base, fidelity=dict(num_cycles=60, granularity="kernel", per_rank=True,
                                                            jitter_cv=0.3)),
                        profile)
    # E[max of 8 lognormals with mean 1] > 1: the straggler sets the pace at every allreduce
    assert noisy.cycle_time_us > calm.cycle_time_us * 1.05
    assert noisy.baseline_step_us > calm.baseline_step_us * 1.05


def test_colocated_draft_is_cheaper_in_comm_than_sharded(profile):
    base = dict(tp_size=8, workload=dict(batch_size=1, context_len=512, max_new_tokens=64), fidelity=dict(num_cycles=50))
    shared, _ = simulate(make_scenario(**base, placement="shared_tp"), profile)
    colo, _ = simulate(make_scenario(**base, placement="tp1_colocated"), profile)
    assert colo.breakdown_us["draft_comm"] < shared.breakdown_us["draft_comm"]


def test_cycle_time_grows_with_extend_length():
    # no floor and a slow HBM: GPU time follows bytes, which grow with tokens, and exceeds host time
    prof = flat_profile(floor_us=0.0)
    prof = prof.model_copy(update={"roofline": prof.roofline.model_copy(update={"hbm_bandwidth_gb_per_s": 1.0})})
    cost = CostModel(make_scenario(), prof)
    times = [cycle_time_us(cost, j) for j in (1, 2, 3, 4)]
    assert all(b > a for a, b in zip(times, times[1:]))
    assert np.isfinite(times).all()


def test_cycle_granularity_equals_forward_granularity_for_fixed_accept(profile):
    s = 3
    base = dict(spec=dict(num_steps=s, topk=1, num_draft_tokens=s + 1), acceptance=fixed_accept(s, 3),
                workload=dict(batch_size=2, context_len=512, max_new_tokens=30), fidelity=dict(num_cycles=300))
    fwd, _ = simulate(make_scenario(**base), profile)
    cyc, _ = simulate(make_scenario(**{**base, "fidelity": dict(base["fidelity"], granularity="cycle")}), profile)
    for key in ("tok_per_s", "cycle_time_us", "baseline_step_us"):
        assert getattr(cyc, key) == pytest.approx(getattr(fwd, key), rel=1e-12), key
    assert cyc.tpot_ms.p50 == pytest.approx(fwd.tpot_ms.p50, rel=1e-12)
    assert cyc.breakdown_us == pytest.approx(fwd.breakdown_us, rel=1e-12)


@pytest.mark.parametrize("acc", [dict(kind="iid", acceptance_rate=0.65),
                                 dict(kind="iid", acceptance_rate=0.7, rate_concentration=3.0)])
def test_cycle_granularity_matches_closed_form(acc, profile):
    sc = make_scenario(acceptance=acc, workload=dict(batch_size=4, context_len=512, max_new_tokens=48),
                       fidelity=dict(granularity="cycle", num_cycles=200_000))
    r, _ = simulate(sc, profile)
    assert r.tok_per_s == pytest.approx(r.analytic_tok_per_s, rel=0.005)
    # within 4 standard errors (twice the 95% half-width): a 1-in-16,000 false alarm
    half = (r.tok_per_s_ci95[1] - r.tok_per_s_ci95[0]) / 2
    assert abs(r.tok_per_s - r.analytic_tok_per_s) < 2 * half
    half_al = (r.accept_length.ci95_high - r.accept_length.ci95_low) / 2
    assert abs(r.accept_length.mean - r.analytic_accept_length) < 2 * half_al


def test_whole_forward_tables_drive_the_target_when_asked():
    from simulator.profile import ForwardTable
    from tests.conftest import ASSUMED
    table = ForwardTable(model="tiny-target", tp_size=1, mode="graph", num_tokens=[1, 8], context_len=[256, 1024],
                         latency_us=[[100.0, 200.0], [400.0, 800.0]], provenance=ASSUMED)
    prof = flat_profile(forwards=[table])
    sc = make_scenario(costs=dict(source="whole_forward"))  # context 512, num_draft_tokens 4
    cost = CostModel(sc, prof)
    names = [k.name for k in cost.verify_forward().kernels]
    assert names == ["cat_ids", "forward", "concat", "copy_ids"]
    fwd = cost.verify_forward().kernels[1].gpu_us
    assert 100.0 < fwd < 800.0  # interpolated inside the table
    assert fwd == pytest.approx(cost.lookup.forward_us("tiny-target", 1, "graph", 4, 512))
    # no table for the draft: its per-op sum, with a note
    assert len(cost.draft_step_forward(0).kernels) == DRAFT_STEP_KERNELS
    assert any("no whole-forward draft table for tiny-draft" in n for n in cost.notes)


def test_draft_tables_drive_the_draft_step_and_extend_apart():
    from simulator.profile import ForwardTable
    from tests.conftest import ASSUMED
    grid = dict(tp_size=1, mode="graph", num_tokens=[1, 8], context_len=[256, 1024], provenance=ASSUMED)
    step = ForwardTable(model="tiny-draft", phase="draft", latency_us=[[10.0, 20.0], [40.0, 80.0]], **grid)
    ext = ForwardTable(model="tiny-draft", phase="draft_extend", latency_us=[[30.0, 60.0], [90.0, 180.0]], **grid)
    cost = CostModel(make_scenario(costs=dict(source="whole_forward")), flat_profile(forwards=[step, ext]))
    (k,) = cost.draft_step_forward(0).kernels
    assert k.name == "forward" and k.gpu_us == pytest.approx(cost.lookup.forward_us("tiny-draft", 1, "graph", 1, 512,
                                                                                    "draft"))
    extend = cost.draft_extend_forward(3).kernels
    assert extend[0].name == "forward" and len(extend) > 1  # + the extend's gathers, per op
    assert extend[0].gpu_us == pytest.approx(cost.lookup.forward_us("tiny-draft", 1, "graph", 3, 512, "draft_extend"))
    assert 30.0 < extend[0].gpu_us < 180.0 and k.gpu_us < 20.0 + 1e-9
    # the draft's tables never price the target: no target table -> per-op verify, with a note
    assert "forward" not in [k.name for k in cost.verify_forward().kernels]
    assert any("no whole-forward forward table for tiny-target" in n for n in cost.notes)
    with pytest.raises(KeyError, match="phase=forward"):
        cost.lookup.forward_us("tiny-draft", 1, "graph", 1, 512)


def test_a_table_of_the_same_shape_under_another_name_applies_another_shape_does_not():
    from simulator.profile import ForwardTable
    from tests.conftest import ASSUMED
    sc = make_scenario(costs=dict(source="whole_forward"))
    shape = sc.draft.model_dump(exclude={"name", "config_path"})
    grid = dict(tp_size=1, mode="graph", phase="draft", num_tokens=[1, 8], context_len=[256, 1024],
                latency_us=[[10.0, 20.0], [40.0, 80.0]], provenance=ASSUMED)
    renamed = ForwardTable(model="other-name", shape=shape, **grid)
    cost = CostModel(sc, flat_profile(forwards=[renamed]))
    assert [k.name for k in cost.draft_step_forward(0).kernels] == ["forward"]
    assert any("other-name (same shape) used" in n for n in cost.notes)
    wider = ForwardTable(model="other-name", shape={**shape, "hidden_size": shape["hidden_size"] * 2}, **grid)
    unnamed = ForwardTable(model="no-shape", **grid)  # no recorded shape: only its own name matches
    cost = CostModel(sc, flat_profile(forwards=[wider, unnamed]))
    assert len(cost.draft_step_forward(0).kernels) == DRAFT_STEP_KERNELS


def test_outside_a_tables_grid_the_per_op_sum_is_used_not_a_clamped_table():
    from simulator.profile import ForwardTable
    from tests.conftest import ASSUMED
    table = ForwardTable(model="tiny-target", tp_size=1, mode="graph", num_tokens=[1, 8], context_len=[256, 1024],
                         latency_us=[[100.0, 200.0], [400.0, 800.0]], provenance=ASSUMED)
    prof = flat_profile(forwards=[table])
    inside = CostModel(make_scenario(costs=dict(source="whole_forward")), prof)
    assert "forward" in [k.name for k in inside.verify_forward().kernels]
    long = make_scenario(costs=dict(source="whole_forward"),
                         workload=dict(batch_size=1, context_len=4096, max_new_tokens=64), fidelity=dict(num_cycles=500))
    cost = CostModel(long, prof)
    per_op = CostModel(long.model_copy(update={"costs": long.costs.model_copy(update={"source": "per_op"})}), prof)
    assert cost.verify_forward().gpu_us == pytest.approx(per_op.verify_forward().gpu_us)
    assert any("outside the whole-forward table" in n and "context 4096" in n for n in cost.notes)


def test_two_forward_tables_for_one_model_phase_tp_and_mode_are_refused():
    from simulator.profile import ForwardTable
    from tests.conftest import ASSUMED
    t = dict(model="tiny-target", tp_size=1, mode="graph", num_tokens=[1, 8], context_len=[256, 1024],
             latency_us=[[100.0, 200.0], [400.0, 800.0]], provenance=ASSUMED)
    flat_profile(forwards=[ForwardTable(**t), ForwardTable(**t, phase="draft")])  # another phase: fine
    with pytest.raises(ValueError, match="duplicate whole-forward tables"):
        flat_profile(forwards=[ForwardTable(**t), ForwardTable(**t)])


def test_loop_overhead_curve_sets_host_schedule_at_the_cycles_gpu_time():
    from simulator.costs.forward import chain_span_us
    from simulator.profile import LoopOverheadCurve
    s, floor, replay, d2h = 3, 10.0, 12.0, 15.0
    base = flat_profile(floor_us=floor, graph_replay_us=replay, schedule_us=40.0, d2h_us=d2h)
    curve = LoopOverheadCurve(gpu_us=[0.0, 1e6], host_schedule_us=[100.0, 1100.0],
                              baseline_gpu_us=[0.0, 1e6], baseline_host_schedule_us=[50.0, 2050.0])
    prof = base.model_copy(update={"host": base.host.model_copy(update={"loop_overhead_curve": curve})})
    sc = make_scenario(spec=dict(num_steps=s, topk=1, num_draft_tokens=s + 1), acceptance=fixed_accept(s, 3),
                       workload=dict(batch_size=1, context_len=512, max_new_tokens=3 * 1000), fidelity=dict(num_cycles=50))
    cost = CostModel(sc, prof)
    span, base_span = chain_span_us(cost.cycle_forwards(1)), chain_span_us(cost.baseline_forwards())
    assert cost.host_schedule_us == pytest.approx(100.0 + span * 1e-3, rel=1e-12)  # linear in between
    assert cost.baseline_host_schedule_us == pytest.approx(50.0 + base_span * 2e-3, rel=1e-12)
    result, _ = simulate(sc, prof)
    assert result.cycle_time_us == pytest.approx(cost.host_schedule_us + span + d2h, rel=1e-12)
    eager = make_scenario(spec=dict(num_steps=s, topk=1, num_draft_tokens=s + 1), acceptance=fixed_accept(s, 3),
                          serving_engine=dict(cuda_graph=False))
    assert CostModel(eager, prof).host_schedule_us == 40.0  # the curve is of CUDA-graph loops
    with pytest.raises(ValueError, match="strictly increasing"):
        LoopOverheadCurve(gpu_us=[2.0, 1.0], host_schedule_us=[1.0, 1.0], baseline_gpu_us=[0.0, 1.0],
                          baseline_host_schedule_us=[1.0, 1.0])


def test_a_batch_axis_table_prices_forwards_at_batch_above_1_and_outside_it_the_per_op_sum():
    from simulator.profile import ForwardTable
    from tests.conftest import ASSUMED
    batches, tokens, contexts = [1, 2, 4, 8], [1, 2, 4, 8], [256, 1024]
    lat = lambda b, n, c: 100.0 + 10.0 * b * n + 0.01 * b * c  # noqa: E731
    table = ForwardTable(model="tiny-target", tp_size=1, mode="graph", batch_size=batches, num_tokens=tokens,
                         context_len=contexts, provenance=ASSUMED,
                         latency_us=[[[lat(b, n, c) for c in contexts] for n in tokens] for b in batches])
    prof = flat_profile(forwards=[table])

    def at_batch(b: int) -> CostModel:
        return CostModel(make_scenario(costs=dict(source="whole_forward"),
                                       workload=dict(batch_size=b, context_len=512, max_new_tokens=64)), prof)
    for b in batches:  # context 512 between nodes (linear law), 4 tokens at a node
        cost = at_batch(b)
        (fwd,) = [k for k in cost.verify_forward().kernels if k.name == "forward"]
        assert fwd.gpu_us == pytest.approx(lat(b, 4, 512), rel=1e-12)
        (dec,) = [k for k in cost.decode_forward().kernels if k.name == "forward"]
        assert dec.gpu_us == pytest.approx(lat(b, 1, 512), rel=1e-12)
    mid = [k for k in at_batch(3).verify_forward().kernels if k.name == "forward"][0].gpu_us
    assert lat(2, 4, 512) < mid < lat(4, 4, 512)
    outside = at_batch(16)
    assert "forward" not in [k.name for k in outside.verify_forward().kernels]
    assert any("batch 16" in n and "outside the whole-forward table (batch 1-8" in n for n in outside.notes)
