"""vLLM model runner V1's timers (calibration/engines/vllm_backend.py `_install_v1_hooks`) on a fake
runner with V1's method names and a fake clock for CUDA events: no vLLM, no GPU."""

import sys
import types

import pytest

from calibration.engines.backend import EngineInfo
from calibration.engines.vllm_backend import VllmBackend


class Clock:
    t = 0.0


class Event:
    def __init__(self, enable_timing=True):
        self.at = None

    def record(self):
        self.at = Clock.t

    def elapsed_time(self, other):  # ms
        return (other.at - self.at) * 1e3


class FakeTorch:
    class cuda:
        Event = Event

        @staticmethod
        def synchronize():
            pass


class Ids:
    def __init__(self, n):
        self.shape = (n,)


class Drafter:
    def __init__(self):
        self.model = self._model
        self.flag = 0

    @staticmethod
    def _model(**kw):
        Clock.t += 1e-4 if kw["input_ids"].shape[0] > 8 else 5e-5  # 100 us prefill, 50 us a decode step
        return "h"


class Runner:
    """V1's names: execute_model, _model_forward, _sample, propose_draft_token_ids, drafter.model."""

    def __init__(self, num_steps):
        self.drafter, self.num_steps = Drafter(), num_steps

    def execute_model(self, scheduler_output=None, dummy_run=False):
        self._model_forward(input_ids=Ids(16), positions=Ids(16))

    def _model_forward(self, input_ids=None, positions=None):
        Clock.t += 1e-3  # 1 ms target forward

    def _sample(self, logits=None, meta=None):
        Clock.t += 2e-5

    def propose_draft_token_ids(self, *a):
        self.drafter.model(input_ids=Ids(16))
        for _ in range(self.num_steps - 1):
            self.drafter.model(input_ids=Ids(4))


def _backend(num_steps):
    b = object.__new__(VllmBackend)
    b._torch, b.num_steps, b._recording, b._instrument, b._steps = FakeTorch, num_steps, False, False, []
    b._info = EngineInfo(engine="vllm", engine_version="0.26.0")
    b.runner = Runner(num_steps)
    gmr = types.ModuleType("vllm.v1.worker.gpu_model_runner")

    class AsyncGPUModelRunnerOutput:
        def __init__(self):
            self.async_copy_ready_event = types.SimpleNamespace(synchronize=lambda: None)

        def get_output(self):
            return "out"
    gmr.AsyncGPUModelRunnerOutput = AsyncGPUModelRunnerOutput
    return b, gmr


def test_v1_runner_parts_are_timed_by_their_own_names(monkeypatch):
    b, gmr = _backend(3)
    for name in ("vllm", "vllm.v1", "vllm.v1.worker"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.v1.worker.gpu_model_runner", gmr)
    sys.modules["vllm.v1.worker"].gpu_model_runner = gmr
    b._install_hooks()
    assert {"execute_model", "target_forward", "sample", "propose", "draft_forwards", "host_blocked"} <= set(b._info.hooks)
    assert any("model runner V1" in n for n in b._info.notes)
    b.runner.drafter.flag = 7  # attributes pass through the timed stand-in
    assert b.runner.drafter.model.__class__.__name__ == "_TimedDraftModel"
    b.start_window(instrument=True)
    for _ in range(3):
        r = b.runner
        r.execute_model()
        r._sample()
        r.propose_draft_token_ids()
        assert gmr.AsyncGPUModelRunnerOutput().get_output() == "out"
        Clock.t += 1e-5
    steps = b.end_window()
    t = steps[0]
    assert t.target_forward_us == pytest.approx(1000.0) and t.sample_us == pytest.approx(20.0)
    assert t.draft_extend_us == pytest.approx(100.0) and t.draft_steps_us == pytest.approx(100.0)
    assert t.propose_us == pytest.approx(200.0) and t.target_tokens_padded == 16
    assert t.draft_extend_tokens_padded == 16
    assert t.gpu_period_us == pytest.approx(1000.0 + 20.0 + 200.0 + 10.0)


def test_v1_runner_dummy_runs_and_unrecorded_steps_leave_no_events():
    b, _ = _backend(2)
    b._install_v1_hooks()
    b.runner.execute_model(dummy_run=True)
    b.runner.propose_draft_token_ids()
    assert b._steps == []
