"""Shared fixtures: a tiny model, a synthetic profile whose costs are known by hand.

Also: torch runs on one intra-op thread in every test process (set here, before anything imports
torch, and inherited by spawned ranks and subprocesses). The tests' tensors are tiny; on a shared
2-core machine two spinning OpenMP threads made CPU-bound torch tests 5-70x slower in wall time
than one thread whenever the other core was busy (tests/test_batch_forwards.py: 13.8 s against
0.2 s). Set OMP_NUM_THREADS yourself to override.

Tiers: tests marked `slow` (DES-heavy statistical checks at full size, the full fuzz, spawned
gloo ranks of the GPU-shaped calibration) are left out by default (pyproject addopts
`-m "not slow"`); `python -m pytest -q -m slow` runs them (.ci/run runs both tiers).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before any import of torch (see the docstring)
os.environ.setdefault("MKL_NUM_THREADS", "1")
# simulate's LLM.generate table (simulator.serving.run.simulate_generate) is left out of every test's simulate,
# its CLI subprocesses (the fuzz) included, except where a test asks for it: it adds 0.1-0.5 s a call
os.environ.setdefault("SPECDECSIM_GENERATE_MAX_S", "0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import simulator.evidence.cases  # noqa: E402
from tests import cli_cache  # noqa: E402
from simulator.config import Scenario  # noqa: E402
from simulator.profile import (CalibrationProfile, HardwareInfo, HostOverheads, Provenance,  # noqa: E402
                               RooflineParams)

cli_cache.install()  # CliRunner builds specdecsim's command tree once per test process, not per invoke

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


# ---- the shipped published cases, replayed once per session ----------------------------------------
ROOT = Path(__file__).resolve().parents[1]
SHIPPED_CASES = ROOT / "data" / "cases" / "public.yaml"
SHIPPED_COMM_CASES = ROOT / "data" / "cases" / "comm_public.yaml"
_replay_cases = simulator.evidence.cases.replay_cases
_shipped_replays: dict = {}


def replay_shipped_cases(path: Path, engine_overrides: dict | None = None, comm_path: Path | None = None) -> list:
    """simulator.evidence.cases.replay_cases, computed once per session for the shipped case file (with or
    without the shipped communication cases, no engine overrides) and deep-copied to each caller;
    any other call goes straight to replay_cases. The replay is deterministic (closed form and
    least-squares leave-out fits, about 5 s of CPU), and three tests replay the same shipped file
    (tests/test_cases.py twice, docs/make_cases_table.py in tests/test_docs.py)."""
    key = (Path(path).resolve(), None if comm_path is None else Path(comm_path).resolve())
    if engine_overrides is not None or key[0] != SHIPPED_CASES or key[1] not in (None, SHIPPED_COMM_CASES):
        return _replay_cases(path, engine_overrides, comm_path)
    if key not in _shipped_replays:
        _shipped_replays[key] = _replay_cases(path, comm_path=comm_path)
    return copy.deepcopy(_shipped_replays[key])


@pytest.fixture(scope="session")
def shipped_replay():
    """`replay_shipped_cases` (a fixture, so that every test reaches this module's one cache)."""
    return replay_shipped_cases


@pytest.fixture
def memo_shipped_cases(monkeypatch):
    """simulator.evidence.cases.replay_cases is `replay_shipped_cases` for this test (the CLI and the docs
    scripts import it from simulator.evidence.cases when they run)."""
    monkeypatch.setattr(simulator.evidence.cases, "replay_cases", replay_shipped_cases)


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc; none elsewhere)."""
    out = []
    for d in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return out
