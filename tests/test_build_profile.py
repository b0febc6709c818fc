"""calibration.build.profile / calibration.calibrate on CPU: a tiny calibration gives a valid profile."""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from calibration import provenance  # noqa: E402
from calibration.bench import ops as bench_ops  # noqa: E402
from calibration.build import profile as build_profile  # noqa: E402
from calibration.build.store import PointStore  # noqa: E402
from calibration.calibrate import run_calibration  # noqa: E402
from calibration.shapes import eagle3_draft  # noqa: E402
from calibration.timing import TimingSettings  # noqa: E402
from simulator.config import ModelShape  # noqa: E402
from simulator.costs.forward_ops import target_forward_ops  # noqa: E402
from simulator.profile import CalibrationProfile, load_profile, save_profile  # noqa: E402

TINY = ModelShape(name="tiny", hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=64, vocab_size=100)
GRID = bench_ops.OpGrid(num_tokens=(1, 2), attn_batch_size=(1,), attn_num_tokens=(1, 2), attn_context_len=(4, 8),
                        forward_num_tokens=(1, 2), forward_context_len=(4, 8))
FAST = TimingSettings(num_replays=3, num_warmup=1)


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory) -> tuple[CalibrationProfile, Path, Path]:
    d = tmp_path_factory.mktemp("cal")
    profile = run_calibration(d / "tiny.json", d / "points.jsonl", quick=True, resume=True,
                              models=[TINY, eagle3_draft(TINY)], tp_sizes=[1, 2], device="cpu",
                              grid=GRID, settings=FAST, command_line="pytest")
    return profile, d / "tiny.json", d / "points.jsonl"


def test_tiny_calibration_writes_a_profile_that_round_trips(calibrated, tmp_path):
    profile, path, _ = calibrated
    assert load_profile(path) == profile
    save_profile(profile, tmp_path / "again.json")
    assert load_profile(tmp_path / "again.json") == profile
    assert profile.name == "tiny" and profile.command_line == "pytest"
    assert {f.mode for f in profile.forwards} == {"eager", "graph"}
    assert {"decomposition:tiny:tp1:graph", "decomposition:tiny:tp1:eager"} <= set(profile.notes)


def test_every_measured_op_key_has_a_full_table(calibrated):
    profile, _, points = calibrated
    keys = {o.key for o in bench_ops.enumerate_points([TINY, eagle3_draft(TINY)], [1, 2], GRID)
            for o in [o[1]]}
    assert {t.key for t in profile.ops} == keys
    attn = next(t for t in profile.ops if t.key.startswith("attention:h=4"))
    assert attn.axes == ["batch_size", "num_tokens", "context_len"]
    assert attn.grid == {"batch_size": [1.0], "num_tokens": [1.0, 2.0], "context_len": [4.0, 8.0]}
    assert len(attn.latency_us) == 4


def test_a_missing_grid_point_fails_loudly(calibrated):
    records = PointStore(calibrated[2]).records()
    del records[next(k for k in records if k.startswith("op:attention:"))]
    with pytest.raises(ValueError, match="missing"):
        build_profile.build_profile(records, "holey")


def test_without_collectives_the_link_is_assumed_with_a_source(calibrated):
    roofline = calibrated[0].roofline
    assert roofline.provenance.kind == "assumed" and "H200" in roofline.provenance.source
    assert roofline.link_bandwidth_gb_per_s == build_profile.ASSUMED_LINK_BANDWIDTH_GB_PER_S


def test_collective_points_become_tables_and_fit_the_link(calibrated):
    records = PointStore(calibrated[2]).records()
    base_us, bw_gb_per_s = 8.0, 300.0
    for world_size in (2, 4):
        for size_bytes in (1 << 10, 1 << 16, 1 << 20, 1 << 24):
            ring_bytes = size_bytes * 2 * (world_size - 1) / world_size
            lat = base_us + ring_bytes / (bw_gb_per_s * 1e3)  # GB/s -> bytes/us
            records[f"coll:allreduce:{world_size}:graph:{size_bytes}"] = {
                "op": "allreduce", "world_size": world_size, "mode": "graph", "size_bytes": size_bytes,
                "latency_us": lat, "p10_latency_us": lat * 0.9, "p90_latency_us": lat * 1.1, "command": "torchrun"}
    profile = build_profile.build_profile(records, "with-coll")
    assert [(t.op, t.world_size, t.mode) for t in profile.collectives] == [("allreduce", 2, "graph"),
                                                                            ("allreduce", 4, "graph")]
    assert profile.collectives[0].size_bytes == [1 << 10, 1 << 16, 1 << 20, 1 << 24]
    assert profile.roofline.provenance.kind == "fitted"
    assert profile.roofline.link_bandwidth_gb_per_s == pytest.approx(bw_gb_per_s, rel=1e-6)
    assert profile.roofline.collective_base_latency_us == pytest.approx(base_us, rel=1e-6)


def _synthetic_records(forward_scale: float) -> dict:
    """Every op point 1 us; whole forward = (number of compute ops) * forward_scale us."""
    records = {"meta:model:tiny": TINY.model_dump(mode="json")}
    for n in (1, 2):
        for c in (4, 8):
            ops = [o for o in target_forward_ops(TINY, 1, 1, n, c) if not o.is_collective]
            for o in ops:
                records[bench_ops.point_key(o.key, o.axes)] = {"op_key": o.key, "axes": dict(o.axes),
                                                               "latency_us": 1.0, "mode": "graph"}
            records[f"fwd:tiny:1:graph:{n}:{c}"] = {"model": "tiny", "tp_size": 1, "mode": "graph", "num_tokens": n,
                                                   "context_len": c, "latency_us": len(ops) * forward_scale}
    return records


@pytest.mark.parametrize("scale, verdict", [(1.02, "within"), (1.25, "OUTSIDE")])
def test_decomposition_note_reports_the_per_op_sum_error(scale, verdict):
    records = _synthetic_records(scale)
    notes = build_profile.decomposition_notes(records, build_profile.forward_tables(records))
    note = notes["decomposition:tiny:tp1:graph"]
    assert verdict in note and f"{1 / scale - 1:+.1%}" in note


def test_hardware_info_tolerates_a_cpu_machine():
    info = provenance.collect_hardware_info()
    assert info["gpu_count"] >= 1 and info["gpu_name"]


def test_calibration_refuses_points_measured_on_another_machine(tmp_path):
    store = PointStore(tmp_path / "points.jsonl")
    store.add("meta:hardware", {"gpu_name": "NVIDIA H200", "gpu_count": 1})
    with pytest.raises(ValueError, match="measured on 'NVIDIA H200'"):
        run_calibration(tmp_path / "x.json", tmp_path / "points.jsonl", quick=True, models=[TINY], tp_sizes=[1],
                        device="cpu", grid=GRID, settings=FAST)


def test_calibration_stops_up_front_when_a_model_cannot_fit(monkeypatch, tmp_path):
    import torch
    import calibration.calibrate as run
    monkeypatch.setattr(run, "available_memory_bytes", lambda dev: 10**9)
    big = ModelShape(name="llama-3.1-8b", hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                     num_key_value_heads=8, intermediate_size=14336, vocab_size=128256)
    with pytest.raises(ValueError, match="llama-3.1-8b needs about 3[0-9] GB"):
        run.check_memory([big], torch.device("cpu"), torch.float32, forwards=True)
    run.check_memory([big], torch.device("cpu"), torch.float32, forwards=False)  # op tables only: no check
    run.check_memory([TINY], torch.device("cpu"), torch.float32, forwards=True)
    with pytest.raises(ValueError, match="--no-forwards"):
        run_calibration(tmp_path / "x.json", tmp_path / "p.jsonl", models=[big], tp_sizes=[1], device="cpu",
                        grid=GRID, settings=FAST)
    assert not (tmp_path / "p.jsonl").exists()  # nothing measured, nothing written


def test_loop_schedule_takes_the_median_of_repeats_and_drops_misfired_sleeps():
    from calibration.build.profile import loop_schedule_us
    recs = {"host:graph_replay": {"latency_us": 5.0}, "host:d2h_sync": {"latency_us": 25.0},
            "host:d2h_sync_busy": {"latency_us": 20.0},
            "host:loop_overhead:spec:busy": {"overhead_us": 999.0, "busy_us": 5000.0}}  # old single point
    for i, (o, busy) in enumerate([(300.0, 5000.0), (100.0, 5000.0), (225.0, 4900.0), (50.0, 280.0)]):
        recs[f"host:loop_overhead:spec:busy:rep{i}"] = {"overhead_us": o, "busy_us": busy}
    recs["host:loop_overhead:baseline:rep0"] = {"overhead_us": 80.0}
    out = loop_schedule_us(recs)
    assert out["host_schedule_us"] == pytest.approx(225.0 - 5.0 - 20.0)  # median of 300, 100, 225
    assert out["baseline_host_schedule_us"] == pytest.approx(80.0 - 5.0 - 25.0)  # no busy point: idle one


def test_loop_overhead_curve_from_medians_of_repeats_per_wait():
    from calibration.build.profile import loop_overhead_curve
    recs = {"host:graph_replay": {"latency_us": 5.0}, "host:d2h_sync_busy": {"latency_us": 20.0}}
    for kind in ("spec", "baseline"):
        for wait, gpu, overs in ((0.0, 100.0, (60.0, 80.0, 70.0)), (5000.0, 5100.0, (225.0, 900.0, 125.0))):
            for i, o in enumerate(overs):
                recs[f"host:loop_wait:{kind}:{wait:.0f}:rep{i}"] = {"gpu_us": gpu + i, "overhead_us": o,
                                                                   "busy_us": wait, "busy_target_us": wait}
    recs["host:loop_wait:spec:5000:rep3"] = {"gpu_us": 300.0, "overhead_us": 1.0, "busy_us": 40.0,
                                             "busy_target_us": 5000.0}  # misfired sleep: left out
    c = loop_overhead_curve(recs)
    assert c.gpu_us == [101.0, 5101.0] and c.host_schedule_us == [70.0 - 25.0, 225.0 - 25.0]
    assert c.baseline_host_schedule_us == c.host_schedule_us
    del recs["host:loop_wait:baseline:5000:rep0"], recs["host:loop_wait:baseline:5000:rep1"]
    del recs["host:loop_wait:baseline:5000:rep2"]
    assert loop_overhead_curve(recs) is None  # one wait is not a curve


def test_atomic_writes_respect_the_umask(tmp_path):
    import os
    from simulator.profile import write_json_atomic
    old = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "x.json", {"a": 1})
    finally:
        os.umask(old)
    assert (tmp_path / "x.json").stat().st_mode & 0o777 == 0o644
