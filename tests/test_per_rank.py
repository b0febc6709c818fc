"""The closed-form kernel engine (simulator.des.per_rank) against the SimPy kernel-by-kernel streams."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.acceptance import build_acceptance
from simulator.costs.forward import CostModel
from simulator.des.simulation import DesRun
from simulator.scenario import load_profile_for, load_scenario
from tests.conftest import make_scenario

ROOT = Path(__file__).resolve().parents[1]


def _both(sc, prof, num_cycles: int, baseline: bool = False):
    """(SimPy kernel streams, closed form) runs of one scenario from the same seeds."""
    cost = CostModel(sc, prof)
    acc = None if baseline else build_acceptance(sc.acceptance, sc.spec)
    runs = []
    for kernel_processes in (True, False):
        run = DesRun(cost, acc, np.random.default_rng(3), np.random.default_rng(4), kernel_processes=kernel_processes)
        run.run(num_cycles, 2)
        runs.append(run)
    return runs


def _assert_same(ref: DesRun, fast: DesRun):
    assert len(ref.cycles) == len(fast.cycles)
    for a, b in zip(ref.cycles, fast.cycles):
        assert a.accept_lengths == b.accept_lengths
        assert b.end_us - b.start_us == pytest.approx(a.end_us - a.start_us, rel=1e-9)
        assert b.end_us == pytest.approx(a.end_us, rel=1e-9)
        assert dict(b.busy_us) == pytest.approx(dict(a.busy_us), rel=1e-9, abs=1e-9)
    assert [r.end_us for r in fast.requests] == pytest.approx([r.end_us for r in ref.requests], rel=1e-9)


@pytest.mark.parametrize("tp_size,placement", [(1, "shared_tp"), (2, "shared_tp"), (8, "shared_tp"),
                                               (4, "tp1_colocated"), (4, "tp1_dedicated"), (4, "tp2"),
                                               (2, "tp1_dedicated")])
@pytest.mark.parametrize("cuda_graph", [True, False])
@pytest.mark.parametrize("per_rank", [True, False])
def test_closed_form_equals_kernel_streams_without_jitter(tp_size, placement, cuda_graph, per_rank, profile):
    sc = make_scenario(tp_size=tp_size, placement=placement, serving_engine=dict(cuda_graph=cuda_graph),
                       workload=dict(batch_size=2, context_len=512, max_new_tokens=16),
                       fidelity=dict(granularity="kernel", per_rank=per_rank, num_cycles=40))
    _assert_same(*_both(sc, profile, 40))
    _assert_same(*_both(sc, profile, 20, baseline=True))


@pytest.mark.parametrize("tp_size", [2, 8])
def test_closed_form_equals_kernel_streams_on_the_tp8_scenario(tp_size):
    path = ROOT / "scenarios" / "tp8_jitter.yaml"
    sc = load_scenario(path, ["fidelity.jitter_cv=0", f"tp_size={tp_size}"])
    prof, _ = load_profile_for(sc, base_dir=path.parent)
    _assert_same(*_both(sc, prof, 6))


@pytest.mark.parametrize("num_cycles", [60, pytest.param(300, marks=pytest.mark.slow)])
def test_jittered_mean_cycle_time_agrees_with_kernel_streams(profile, num_cycles):
    # both runs draw the same accept lengths (rng_accept), so cycle i has the same forwards in
    # both; only the jitter draws differ: the paired difference has mean 0. The slow tier runs
    # 300 cycles (about 3 s of CPU); the default tier 60: the 4-sigma band scales with the
    # cycles, and the straggler's pace (about +17% over the calm run) stays far from the 5% bar.
    sc = make_scenario(tp_size=8, workload=dict(batch_size=1, context_len=512, max_new_tokens=64),
                       fidelity=dict(granularity="kernel", per_rank=True, jitter_cv=0.3, num_cycles=num_cycles))
    ref, fast = _both(sc, profile, num_cycles)
    calm = _both(make_scenario(**{**sc.model_dump(), "fidelity": dict(granularity="kernel", per_rank=True,
                                                                       num_cycles=num_cycles)}), profile, num_cycles)[1]
    t_ref = np.array([c.end_us - c.start_us for c in ref.cycles])
    t_fast = np.array([c.end_us - c.start_us for c in fast.cycles])
    t_calm = np.array([c.end_us - c.start_us for c in calm.cycles])
    diff = t_ref - t_fast
    assert abs(diff.mean()) < 4 * diff.std(ddof=1) / np.sqrt(len(diff))
    assert t_fast.mean() > 1.05 * t_calm.mean()  # the straggler of 8 sets the pace in both
    assert t_ref.mean() > 1.05 * t_calm.mean()


@pytest.mark.parametrize("label, tp_size, gpus", [("shared_tp", 2, 2), ("tp1_colocated", 2, 2), ("tp1", 2, 2),
                                                  ("tp1_dedicated", 2, 3), ("tp1_dedicated", 1, 2)])
def test_placement_num_gpus_counts_the_group_and_a_dedicated_draft_gpu(label, tp_size, gpus, profile):
    """Placement.num_gpus: the TP group, plus the dedicated draft's GPU (numbered tp_size, so the
    GPUs are 0..num_gpus-1, the DES's per-rank streams)."""
    from simulator.config import Placement
    pl = Placement.model_validate(Placement.parse(label, tp_size))
    assert pl.num_gpus(tp_size) == gpus
    assert set(pl.draft_gpus(tp_size)) <= set(range(pl.num_gpus(tp_size)))
    sc = make_scenario(tp_size=tp_size, placement=label, fidelity={"per_rank": True, "granularity": "kernel"})
    assert sorted(int(n) for n in DesRun(CostModel(sc, profile), None, np.random.default_rng(0),
                                         np.random.default_rng(1)).streams) == list(range(gpus))
