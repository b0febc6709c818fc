"""A profile's host speed (EngineProfile.host_probe_us) and a scenario's (serving_engine.host_probe_us): the
host's share of a step scaled by their ratio (simulator.costs.engine_native.NativeCosts.host_ratio)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.costs.engine_native import NativeCosts
from simulator.engines.profile import load_engine_profile
from simulator.inputs import UserInputError
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
SGLANG = "sglang-0.5.15-h100-llama-3.1-8b-eagle3"
VLLM = "vllm-0.26.0-h100-llama-3.1-8b-eagle3"


def test_a_profile_records_the_median_of_its_windows_host_probes():
    """build.host_probe_us: the median of the probes before and after every window; None where none was taken."""
    from calibration.engines.build import host_probe_us

    def line(*pairs):
        return {"point": {"repeats": [{"host_probe_before_us": a, "host_probe_us": b} for a, b in pairs]}}
    assert host_probe_us([line((2400.0, 2500.0), (5500.0, 2600.0)), line((2450.0, 6000.0))]) == pytest.approx(2550.0)
    assert host_probe_us([{"point": {"repeats": [{}]}}]) is None
    assert load_engine_profile(SGLANG).host_probe_us == pytest.approx(2427.6, abs=1.0)


def test_a_host_twice_as_slow_doubles_the_host_work_and_sglangs_host_paced_gpu_gaps_only():
    """SGLang's overlapped worker: its host work, the draft steps' fixed share (engine_carry.PartSplit) and the
    other GPU work of a speculative step move with the host; the target's forward, the draft extend and the
    sampler do not, nor does the baseline's GPU work. The draft step grows by exactly (ratio - 1) x its fixed
    share."""
    prof = load_engine_profile(SGLANG)
    same, slow = NativeCosts(prof), NativeCosts(prof, host_ratio=2.0)
    assert slow.host_paces_gpu and slow.draft_step_fixed_us > 100
    b, c = 8, 1100.0
    for k in (0, 3):
        assert slow.host_us(b, k, c) == pytest.approx(2.0 * NativeCosts(prof, host_ratio=1.0 + 1e-12).host_us(b, k, c))
        assert slow.target_forward_us(b, k, c) == same.target_forward_us(b, k, c)
        assert slow.sample_us(b, k, c) == same.sample_us(b, k, c)
    assert slow.draft_extend_us(b, 3, c) == same.draft_extend_us(b, 3, c)
    assert slow.draft_step_us(b, 3, c) == pytest.approx(same.draft_step_us(b, 3, c) + slow.draft_step_fixed_us)
    assert slow.other_gpu_us(b, 3, c) == pytest.approx(2.0 * same.other_gpu_us(b, 3, c))
    assert slow.other_gpu_us(b, 0, c) == same.other_gpu_us(b, 0, c)
    assert slow.step_us(b, 0, c)[0] == same.step_us(b, 0, c)[0]
    assert slow.step_us(b, 3, c)[0] > same.step_us(b, 3, c)[0]


def test_a_vllm_profile_keeps_its_gpu_parts_on_another_host():
    """vLLM's GPU-bound steps do not wait for its host (its host measure is its own work): only the host work
    scales."""
    prof = load_engine_profile(VLLM)
    same, slow = NativeCosts(prof), NativeCosts(prof, host_ratio=1.5)
    assert not slow.host_paces_gpu
    for k in (0, 3):
        assert slow.step_us(16, k, 2000.0)[0] == same.step_us(16, k, 2000.0)[0]
        assert slow.host_us(16, k, 2000.0) == pytest.approx(1.5 * same.host_us(16, k, 2000.0))


def _scenario(*sets):
    return load_scenario(ROOT / "scenarios" / "sglang_llama8b_h200.yaml",
                         [f"serving_engine.engine_profile={SGLANG}", "hardware.gpu=h100-sxm", *sets])


def test_a_scenario_names_its_hosts_speed_and_the_cycle_follows_it():
    """serving_engine.host_probe_us against the profile's: a slower host gives a longer speculative cycle and a
    note with the ratio; the profile's own host speed gives the cycle as measured; a profile that recorded none
    is not scaled, and a note says so."""
    from simulator.acceptance import build_acceptance
    from simulator.analytic import analyze
    from simulator.costs.forward import CostModel
    from simulator.profile import load_profile, resolve_profile_path

    def run(*sets):
        sc = _scenario(*sets)
        cost = CostModel(sc, load_profile(resolve_profile_path(sc.profile)))
        return analyze(sc, cost, build_acceptance(sc.acceptance, sc.spec), truncate=False).cycle_time_us, cost.notes
    measured, notes = run()
    assert not any("scaled by" in n for n in notes)
    own, _ = run(f"serving_engine.host_probe_us={load_engine_profile(SGLANG).host_probe_us}")
    assert own == pytest.approx(measured, rel=1e-9)
    slow, notes = run("serving_engine.host_probe_us=4855")
    assert slow > 1.02 * measured
    assert any("scaled by 2.000" in n and "4,855.0 us" in n and "prefill's fit kept as measured" in n for n in notes)
    sc = load_scenario(ROOT / "scenarios" / "vllm_llama8b_h200.yaml", ["serving_engine.host_probe_us=5000"])
    cost = CostModel(sc, load_profile(resolve_profile_path(sc.profile)))
    assert any("recorded no host probe" in n for n in cost.notes)


@pytest.mark.parametrize("value", ["0", "-5", "1e9", "nan"])
def test_a_host_probe_outside_its_range_is_refused_naming_the_field(value):
    with pytest.raises(UserInputError) as e:
        _scenario(f"serving_engine.host_probe_us={value}")
    assert "serving_engine.host_probe_us" in str(e.value)


def test_on_a_very_slow_host_the_speculative_steps_host_holds_its_draft_loop_too():
    """The launches SGLang's draft loop waits for are the host's work: on a host 400x slower (a helper's probe of
    1e6 us) the speculative step's host is the baseline's host work plus the draft loop's host-paced share, both
    scaled, so a host-bound speculative step costs more than the baseline's host-bound one (before, both were the
    baseline's host work and the speedup came out as the accept length)."""
    prof = load_engine_profile(SGLANG)
    slow = NativeCosts(prof, host_ratio=400.0)
    b, c = 8, 1100.0
    loop = slow.draft_loop_host_us(b, 3, c)
    assert loop == pytest.approx(2 * slow.draft_step_fixed_us + NativeCosts(prof).other_gpu_us(b, 3, c))
    assert slow.host_us(b, 3, c) == pytest.approx(slow.host_us(b, 0, c) + 400.0 * loop)
    assert slow.draft_loop_host_us(b, 0, c) == 0.0
    assert NativeCosts(load_engine_profile(VLLM), host_ratio=400.0).draft_loop_host_us(b, 3, c) == 0.0


def test_a_host_probe_no_engine_profile_prices_is_said_to_be_unused():
    """serving_engine.host_probe_us scales an engine profile's host: where none prices the scenario (the op
    tables' engine model), a note says the field is not used rather than ignoring it silently."""
    from simulator.costs.forward import CostModel
    from simulator.profile import load_profile, resolve_profile_path
    sc = load_scenario(ROOT / "scenarios" / "sglang_llama8b_h200.yaml",
                       ["serving_engine={kind: trtllm, host_probe_us: 5000}"])
    cost = CostModel(sc, load_profile(resolve_profile_path(sc.profile)))
    assert any("serving_engine.host_probe_us not used" in n for n in cost.notes)


def test_op_table_knobs_an_engine_profile_prices_over_are_said_to_be_unused():
    """kernel_efficiency, host_cycle_us and the like set the op tables' prices; where the engine profile prices
    the scenario they change nothing, and a note says so (they were ignored silently)."""
    from simulator.costs.forward import CostModel
    from simulator.profile import load_profile, resolve_profile_path
    path = ROOT / "scenarios" / "vllm_llama8b_h200.yaml"
    sc = load_scenario(path, ["serving_engine.kernel_efficiency=20", "serving_engine.host_cycle_us=5"])
    cost = CostModel(sc, load_profile(resolve_profile_path(sc.profile)))
    said = [n for n in cost.notes if "not used: the engine profile" in n]
    assert len(said) == 1 and "kernel_efficiency, serving_engine.host_cycle_us" in said[0]
    plain = load_scenario(path)
    assert not any("not used: the engine profile" in n
                   for n in CostModel(plain, load_profile(resolve_profile_path(plain.profile))).notes)
