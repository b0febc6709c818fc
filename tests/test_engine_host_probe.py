"""The engine campaign's host probe: a window's stepping-thread core speed, pinning the stepping
thread to the fastest CPU, and a profile's note when its calibration ran on cores of two speeds
(the fake engine)."""

from __future__ import annotations

import os

import pytest


def test_a_host_probe_window_records_its_threads_core_speed(tmp_path):
    """PointPlan.host_probe: after each window a fixed piece of Python work is timed in the stepping
    thread (queue vllm-h200-hostprobe), and the points file keeps it."""
    from calibration.engines.backends.fake import FakeBackend
    from calibration.engines.points import read_points_files
    from calibration.engines.run_loop import PointPlan, measure_point, prompt_pool
    from calibration.engines.worker import append_line
    fake = FakeBackend(2)
    res = measure_point(fake, PointPlan(2, 256, 0.7, timed_steps=8, repeats=2, host_probe=True), prompt_pool(2, 256),
                        8192)
    assert "host_probe_us" not in res["repeats"][0]  # a simulated clock: nothing of the host to probe
    fake.simulated_clock = False  # as a real engine
    res = measure_point(fake, PointPlan(2, 256, 0.7, timed_steps=8, repeats=2, host_probe=True), prompt_pool(2, 256),
                        8192)
    assert all(r["host_probe_us"] > 0 for r in res["repeats"])
    from calibration.engines.run_loop import REFILL_STEPS_AFTER_PROBE, max_tokens_for
    plain, probed = (PointPlan(2, 256, 0.7, timed_steps=8, repeats=3, host_probe=h) for h in (False, True))
    assert max_tokens_for(probed, 2, 8192) - max_tokens_for(plain, 2, 8192) == 3 * REFILL_STEPS_AFTER_PROBE * 3
    calls = []  # between a probe and its window, REFILL_STEPS_AFTER_PROBE untimed steps refill the engine's queue
    real_step = fake.step
    fake.host_probe = lambda: (calls.append("probe"), (1234.5, 7))[1]
    fake.step = lambda: (calls.append("step"), real_step())[1]
    measure_point(fake, PointPlan(2, 256, 0.7, timed_steps=8, warmup_steps=2, repeats=2, host_probe=True),
                  prompt_pool(2, 256), 8192)
    probes = [i for i, c in enumerate(calls) if c == "probe"]
    assert len(probes) == 4 and calls[probes[0] + 1:probes[1]] == ["step"] * (REFILL_STEPS_AFTER_PROBE + 8)
    assert calls[probes[1] + 1] == "probe"
    assert calls[probes[2] + 1:probes[3]] == ["step"] * (REFILL_STEPS_AFTER_PROBE + 8)
    fake.step = real_step
    fake.host_probe = lambda: (1234.5, 7)  # an engine stepping in a thread of its own probes there (SGLang)
    res = measure_point(fake, PointPlan(2, 256, 0.7, timed_steps=8, repeats=2, host_probe=True), prompt_pool(2, 256),
                        8192)
    assert [(r["host_probe_us"], r["host_probe_before_us"], r["host_cpu"]) for r in res["repeats"]] == \
        [(1234.5, 1234.5, 7)] * 2
    assert "pinned_cpu" not in res
    pts = tmp_path / "p.jsonl"
    append_line(pts, dict(kind="engine", label="diag_s2_probe", session="calibrate", num_steps=2,
                          info={"engine": "fake"}, startup_s=1.0, created_unix=1.0))
    append_line(pts, dict(kind="point", label="diag_s2_probe", session="calibrate", engine="fake",
                          engine_version="0", point=res, wall_s=1.0))
    assert [r["kind"] for r in read_points_files([pts])] == ["engine", "point"]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pins a thread (Linux)")
def test_a_pinned_point_runs_its_stepping_thread_on_the_fastest_cpu(tmp_path):
    """PointPlan.pin_fastest_cpu (queue vllm-h200-hostspeed): before the warm-up the stepping thread is
    pinned to the CPU whose host probe was fastest; the point records that CPU and every CPU's probe, and
    the other threads of the process keep their masks."""
    import threading

    from calibration.engines.backends import base as backend
    from calibration.engines.backends.fake import FakeBackend
    from calibration.engines.points import read_points_files
    from calibration.engines.run_loop import PointPlan, measure_point, prompt_pool
    from calibration.engines.worker import append_line
    allowed = os.sched_getaffinity(0)
    fake = FakeBackend(2)
    fake.simulated_clock = False
    out = {}

    def run():  # in a thread of its own, so the test's thread keeps its mask whatever happens
        out["res"] = measure_point(fake, PointPlan(2, 256, 0.7, timed_steps=8, repeats=1, host_probe=True,
                                                   pin_fastest_cpu=True), prompt_pool(2, 256), 8192)
        out["mask"] = os.sched_getaffinity(0)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    res = out["res"]
    probes = {int(c): v for c, v in res["cpu_probe_us"].items()}
    assert set(probes) == set(backend._ALLOWED_CPUS) == allowed
    assert res["pinned_cpu"] == min(probes, key=probes.get) and out["mask"] == {res["pinned_cpu"]}
    assert os.sched_getaffinity(0) == allowed  # this thread untouched
    pts = tmp_path / "p.jsonl"
    append_line(pts, dict(kind="engine", label="calibrate_s2_r2", session="calibrate", num_steps=2,
                          info={"engine": "fake"}, startup_s=1.0, created_unix=1.0))
    append_line(pts, dict(kind="point", label="calibrate_s2_r2", session="calibrate", engine="fake",
                          engine_version="0", point=res, wall_s=1.0))
    assert read_points_files([pts])[1]["point"]["pinned_cpu"] == res["pinned_cpu"]


def test_a_profile_says_when_its_calibration_ran_on_cores_of_two_speeds():
    """build.host_speed_note: probes 2.4 and 5.5 ms apart by more than 1.5x name the host-paced points;
    probes that agree, or none at all, add no note."""
    from types import SimpleNamespace as P

    from calibration.engines.build import host_speed_note

    def line(*probes):
        return {"point": {"repeats": [{"host_probe_us": v, "host_probe_before_us": v} for v in probes]}}
    pts = [P(num_steps=2, batch_size=4, gpu_bound=False), P(num_steps=2, batch_size=8, gpu_bound=True),
           P(num_steps=0, batch_size=1, gpu_bound=None)]
    note = host_speed_note([line(2400.0, 2500.0), line(5500.0)], pts)
    assert "2.4-5.5 ms over 6 probes" in note and "(num_steps 2 batch 4)" in note
    assert host_speed_note([line(2400.0, 3000.0)], pts) is None
    assert host_speed_note([{"point": {"repeats": [{}]}}], pts) is None
