"""vLLM model runner V1's timers (calibration/engines/backends/vllm.py `_install_v1_hooks`) on a fake
runner with V1's method names and a fake clock for CUDA events: no vLLM, no GPU."""

import sys
import types

import pytest

from calibration.engines.backends.base import EngineInfo
from calibration.engines.backends.vllm import VllmBackend
from tests.conftest import TINY_TARGET


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
    from calibration.engines.backends.vllm import _TimedDraftModel
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
    from calibration.engines.backends.base import machine_cpu_ticks, window_step_times
    steps = [{"host_t": 1.0, "cpu_t": 0.5, "proc_t": 2.0}, {"host_t": 1.010, "cpu_t": 0.506, "proc_t": 2.012},
             {"host_t": 1.030}]
    out = window_step_times(steps, {})
    assert abs(out[0].host_period_us - 10_000) < 1e-6 and abs(out[0].host_cpu_us - 6_000) < 1e-6
    assert abs(out[0].process_cpu_us - 12_000) < 1e-6
    assert out[1].host_cpu_us is None and out[2].host_period_us is None
    ticks = machine_cpu_ticks()
    assert ticks is None or 0 <= ticks[0] <= ticks[1]


def test_a_window_records_how_busy_the_machine_was(tmp_path):
    from calibration.engines.backends.fake import FakeBackend
    from calibration.engines.points import RepeatLine
    from calibration.engines.run_loop import PointPlan, measure_point, prompt_pool
    b = FakeBackend(1, seed=0, max_model_len=512)
    res = measure_point(b, PointPlan(batch_size=2, prompt_len=16, acceptance_rate=0.7, timed_steps=8, repeats=1),
                        prompt_pool(2, 16), 512)
    frac = res["repeats"][0]["machine_cpu_busy_frac"]
    assert frac is None or 0.0 <= frac <= 1.0
    RepeatLine.model_validate(res["repeats"][0])


def test_v1_speculative_steps_are_judged_by_the_gpus_idle_share():
    """vLLM 0.26's model runner V1 waits for the GPU inside a speculative step, not at the output copy
    the wait hook times (about 10 us a step at every batch on the H200). Its graph replays' spans are
    GPU time; where they fill all but 10% of the GPU's period the host's work is unmeasured and the
    step is the most it took (host_pace_us); where the GPU idled more (batch 1 of one process: 31-38%)
    the host paced the step, its work is the step and the idle gap no GPU work. A process without V1's
    timers has only its step. The baseline's wait is timed as on V2."""
    import gzip
    import json
    from pathlib import Path

    import pytest

    from calibration.engines.build import V1_GPU_IDLE_FRAC, V1_RUNNER, engine_point
    d = Path(__file__).resolve().parents[1] / "data" / "engine_runs" / "h200_vllm_0.26.0_qwen3-30b-a3b"
    lines = [json.loads(s) for f in ("points_2026-12-03.jsonl.gz", "points_2026-12-04.jsonl.gz")
             for s in gzip.open(d / f, "rt")]
    runner = {ln["label"]: ln["info"]["model_runner"] for ln in lines if ln["kind"] == "engine"}
    assert runner["calibrate_s3_r2"].startswith(V1_RUNNER)

    def point(label, batch, prompt=1024):
        return next(ln["point"] for ln in lines if ln["kind"] == "point" and ln["label"] == label
                    and ln["point"]["batch_size"] == batch and ln["point"]["prompt_len"] == prompt)
    for b in (2, 8, 64):
        raw = point("calibrate_s3_r2", b)
        inst = next(r for r in raw["repeats"] if r["instrumented"])
        assert inst["host_blocked_us"] < 0.01 * inst["elapsed_us"] / inst["num_cycles"]  # the hook saw no wait
        ep = engine_point(raw, "vllm", model_runner=runner["calibrate_s3_r2"])
        assert ep.gpu_bound and ep.host_busy_us is None and ep.host_pace_us == ep.step_us
        assert ep.other_gpu_us <= V1_GPU_IDLE_FRAC * ep.gpu_period_us and ep.gpu_parts_scale is not None
        assert engine_point(raw, "vllm").gpu_bound is False  # without the runner: V2's rule, host-bound
    raw = point("calibrate_s3_r2", 1)
    slow = engine_point(raw, "vllm", model_runner=runner["calibrate_s3_r2"])
    inst = next(r for r in raw["repeats"] if r["instrumented"])["means"]
    assert slow.gpu_bound and slow.other_gpu_us is None and slow.gpu_parts_scale is None
    assert slow.target_forward_us == pytest.approx(inst["target_forward_us"])  # kept as measured
    assert slow.host_busy_us == pytest.approx(slow.step_us, rel=0.01) and slow.host_pace_us is None
    base = engine_point(point("calibrate_s0", 64), "vllm", model_runner=runner["calibrate_s0"])
    assert base.gpu_bound and base.host_busy_us is not None and base.host_busy_us < 0.5 * base.step_us
    assert base.host_pace_us is None
    old = [json.loads(s) for s in gzip.open(d / "points.jsonl.gz", "rt")]
    raw = next(ln["point"] for ln in old if ln["kind"] == "point" and ln["label"] == "calibrate_s3")
    ep = engine_point(raw, "vllm", model_runner=V1_RUNNER + "GPUModelRunner")
    assert ep.host_busy_us is None and ep.host_pace_us == ep.step_us and ep.target_forward_us is None


def test_a_measured_point_prices_the_host_at_the_mean_pace_over_processes():
    """Where one process's host paced a V1 step and another's kept pace with its GPU, the host is priced at
    the mean of what each measured (work where it bounded the step, the step where not), so the step is
    the processes' mean, not the slower one's; host_pace_us stays out of the host's fitted form."""
    import pytest

    from simulator.costs.engine_native import NativeCosts
    from simulator.engines.profile import EnginePoint, EngineProfile
    from simulator.evidence.engine_profile_fit import fit_parts
    common = dict(num_steps=3, batch_size=1, prompt_len=1024, context_len=1100.0, mean_accept_length=2.5,
                  gpu_bound=True, target_forward_us=5000.0, sample_us=50.0, propose_us=1000.0,
                  draft_extend_us=100.0, draft_steps_us=400.0)
    slow = EnginePoint(**common, step_us=9000.0, host_busy_us=9000.0)
    fast = EnginePoint(**common, step_us=6400.0, host_pace_us=6400.0, other_gpu_us=300.0)
    base = [EnginePoint(num_steps=0, batch_size=b, prompt_len=1024, context_len=1100.0, mean_accept_length=1.0,
                        gpu_bound=True, step_us=4000.0 + 10 * b, target_forward_us=3800.0 + 10 * b, sample_us=40.0,
                        other_gpu_us=100.0, host_busy_us=1500.0) for b in (1, 8)]
    more = [p.model_copy(update={"batch_size": 8, "step_us": p.step_us + 800, "target_forward_us": 5800.0,
                                 **({"host_busy_us": 7000.0} if p.host_busy_us else {})}) for p in (slow, fast)]
    fields = dict(name="t", engine="vllm", engine_version="0", target=dict(TINY_TARGET), points=[slow, fast, *base, *more])
    prof = EngineProfile(**fields, fits=fit_parts(EngineProfile.model_construct(**fields)))
    assert prof.fits["host_busy_us"].num_points == 2  # the host-paced ones only
    assert NativeCosts(prof).host_us(1, 3, 1100.0) == pytest.approx((9000.0 + 6400.0) / 2)


def test_uniform_expert_routing_turns_on_vllms_routing_simulator(monkeypatch, tmp_path):
    """A vLLM plan with uniform_expert_routing starts the engine with vLLM's own routing simulator
    (each token's experts a uniform draw) and says so in the engine's notes; one without leaves it off."""
    import os

    import calibration.engines.backends.vllm as vb
    from calibration.engines.backends.base import EngineInfo
    from calibration.engines.plans import ProcessPlan, model_configs
    from calibration.engines.worker import start_backend
    seen = {}

    class Fake:
        def __init__(self, *a, **kw):
            seen["env"] = os.environ.get("VLLM_MOE_ROUTING_SIMULATION_STRATEGY")
            self._info = EngineInfo(engine="vllm", engine_version="0")

        def info(self):
            return self._info
    monkeypatch.setattr(vb, "VllmBackend", Fake)
    monkeypatch.setenv("VLLM_MOE_ROUTING_SIMULATION_STRATEGY", "")  # restored (unset) after the test
    monkeypatch.delenv("VLLM_MOE_ROUTING_SIMULATION_STRATEGY")
    t, d = model_configs("qwen3-30b-a3b", "eagle3-qwen3-30b-a3b")
    plan = ProcessPlan(engine="vllm", session="calibrate", label="calibrate_s0", num_steps=0, target_config=t,
                       draft_config=d, points=[dict(batch_size=1, prompt_len=1024, acceptance_rate=None)])
    assert start_backend(plan, tmp_path).info().notes == [] and seen["env"] is None
    b = start_backend(plan.model_copy(update={"uniform_expert_routing": True}), tmp_path)
    assert seen["env"] == "uniform_random" and any("routing simulator" in n for n in b.info().notes)
