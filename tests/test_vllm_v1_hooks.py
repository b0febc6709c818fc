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
    from calibration.engines.vllm_backend import _TimedDraftModel
    timed = b.runner.drafter.model
    assert type(timed) is _TimedDraftModel
    # vLLM 0.26's proposer asserts isinstance(self.model, <an EAGLE-3 model class>): the stand-in passes
    assert isinstance(timed, type(timed._model)) and timed.__class__ is type(timed._model)
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


def test_step_times_carry_the_stepping_threads_cpu_time():
    """host_cpu_us / process_cpu_us are the differences of thread_time / process_time between step
    starts; a step without them (a fake engine's) has None, and the last step has no period."""
    from calibration.engines.backend import machine_cpu_ticks, window_step_times
    steps = [{"host_t": 1.0, "cpu_t": 0.5, "proc_t": 2.0}, {"host_t": 1.010, "cpu_t": 0.506, "proc_t": 2.012},
             {"host_t": 1.030}]
    out = window_step_times(steps, {})
    assert abs(out[0].host_period_us - 10_000) < 1e-6 and abs(out[0].host_cpu_us - 6_000) < 1e-6
    assert abs(out[0].process_cpu_us - 12_000) < 1e-6
    assert out[1].host_cpu_us is None and out[2].host_period_us is None
    ticks = machine_cpu_ticks()
    assert ticks is None or 0 <= ticks[0] <= ticks[1]


def test_a_window_records_how_busy_the_machine_was(tmp_path):
    from calibration.engines.fake_backend import FakeBackend
    from calibration.engines.points import RepeatLine
    from calibration.engines.run_loop import PointPlan, measure_point, prompt_pool
    b = FakeBackend(1, seed=0, max_model_len=512)
    res = measure_point(b, PointPlan(batch_size=2, prompt_len=16, acceptance_rate=0.7, timed_steps=8, repeats=1),
                        prompt_pool(2, 16), 512)
    frac = res["repeats"][0]["machine_cpu_busy_frac"]
    assert frac is None or 0.0 <= frac <= 1.0
    RepeatLine.model_validate(res["repeats"][0])
