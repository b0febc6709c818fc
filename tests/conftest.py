"""Shared fixtures: a tiny model, a synthetic profile whose costs are known by hand."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.config import Scenario
from simulator.profile import CalibrationProfile, HardwareInfo, HostOverheads, Provenance, RooflineParams

ASSUMED = Provenance(kind="assumed", source="test fixture")

TINY_TARGET = dict(name="tiny-target", hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                   num_key_value_heads=2, intermediate_size=128, vocab_size=256)
TINY_DRAFT = dict(name="tiny-draft", hidden_size=64, num_hidden_layers=1, num_attention_heads=8,
                  num_key_value_heads=2, intermediate_size=128, vocab_size=256, draft_vocab_size=128,
                  num_fc_input_hidden_states=3)


def flat_profile(floor_us: float = 10.0, launch_us: float = 8.0, graph_replay_us: float = 12.0,
                 d2h_us: float = 15.0, schedule_us: float = 40.0, coll_us: float = 5.0,
                 gap_us: float = 0.0, **extra) -> CalibrationProfile:
    """Every compute op costs `floor_us` (huge bandwidth and rate), every collective `coll_us`."""
    return CalibrationProfile(
        name="flat",
        hardware=HardwareInfo(gpu_name="test", gpu_count=8, interconnect="test"),
        roofline=RooflineParams(hbm_bandwidth_gb_per_s=1e15, bf16_tflops=1e15, kernel_floor_us=floor_us,
                                link_bandwidth_gb_per_s=1e15, collective_base_latency_us=coll_us,
                                provenance=ASSUMED),
        host=HostOverheads(default_launch_us=launch_us, graph_replay_us=graph_replay_us,
                           graph_kernel_gap_us=gap_us, d2h_sync_us=d2h_us, host_schedule_us=schedule_us,
                           provenance=ASSUMED),
        **extra)


def make_scenario(**over) -> Scenario:
    """A tiny valid scenario; keyword arguments replace top-level sections."""
    data = dict(name="tiny", profile="flat", target=TINY_TARGET, draft=TINY_DRAFT, tp_size=1,
                placement="shared_tp", spec=dict(num_steps=3, topk=1, num_draft_tokens=4),
                acceptance=dict(kind="iid", acceptance_rate=0.6),
                workload=dict(batch_size=1, context_len=512, max_new_tokens=64), fidelity=dict(num_cycles=500),
                serving_engine=dict(cuda_graph=True), seed=1)
    data.update(over)
    return Scenario.model_validate(data)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture
def profile() -> CalibrationProfile:
    return flat_profile()
