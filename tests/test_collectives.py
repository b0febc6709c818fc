"""calibration.bench.collectives on CPU: gloo, world size 2, tiny sizes, few repeats (spawn env:
calibration.group)."""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from calibration import group  # noqa: E402
from calibration.bench import collectives  # noqa: E402
from calibration.bench.collectives import CollectiveTiming, measure_collectives, point_key  # noqa: E402
from calibration.build.profile import collective_tables  # noqa: E402
from calibration.build.store import PointStore  # noqa: E402

SIZES = (1024, 4096)
FAST = CollectiveTiming(num_warmup=2, num_repeats=5, timeout_s=60)


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("coll") / "points.jsonl"
    n = measure_collectives(PointStore(path), world_sizes=[2], backend="gloo", command="pytest coll",
                            sizes_bytes=SIZES, timing=FAST)
    return path, n


def test_every_point_is_written_with_ordered_percentiles(measured):
    path, n = measured
    records = PointStore(path).records()
    keys = {point_key(op, 2, "eager", s) for op in ("allreduce", "broadcast", "all_gather") for s in SIZES}
    assert n == 6 and set(records) == keys
    for key, r in records.items():
        assert key == f"coll:{r['op']}:{r['world_size']}:{r['mode']}:{r['size_bytes']}"
        assert 0 < r["p10_latency_us"] <= r["latency_us"] <= r["p90_latency_us"]
        assert r["command"] == "pytest coll" and r["backend"] == "gloo" and r["num_repeats"] == 5


def test_points_build_collective_tables(measured):
    tables = collective_tables(PointStore(measured[0]).records())
    assert sorted((t.op, t.world_size, t.mode) for t in tables) == [
        ("all_gather", 2, "eager"), ("allreduce", 2, "eager"), ("broadcast", 2, "eager")]
    assert all(t.size_bytes == list(SIZES) and t.provenance.command == "pytest coll" for t in tables)


def test_rerun_skips_stored_points_and_measures_only_missing_ones(measured, tmp_path):
    store = PointStore(measured[0])
    assert measure_collectives(store, world_sizes=[2], backend="gloo", sizes_bytes=SIZES, timing=FAST) == 0
    partial = PointStore(tmp_path / "partial.jsonl")
    done = point_key("allreduce", 2, "eager", 1024)
    partial.add(done, {**store.records()[done], "latency_us": 123.0})
    n = measure_collectives(partial, world_sizes=[2], backend="gloo", ops=("allreduce",), sizes_bytes=SIZES,
                            timing=FAST)
    assert n == 1 and partial.records()[done]["latency_us"] == 123.0
    assert point_key("allreduce", 2, "eager", 4096) in partial.records()


def test_nothing_to_measure_without_cuda_unless_gloo_is_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    store = PointStore(tmp_path / "p.jsonl")
    assert measure_collectives(store, world_sizes=[2, 4, 8]) == 0 and len(store) == 0


def test_one_gpu_measures_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    store = PointStore(tmp_path / "p.jsonl")
    assert measure_collectives(store, quick=True) == 0 and len(store) == 0


def test_graph_mode_and_odd_sizes_are_refused_on_gloo(tmp_path):
    store = PointStore(tmp_path / "p.jsonl")
    with pytest.raises(ValueError, match="graph mode needs CUDA"):
        measure_collectives(store, backend="gloo", world_sizes=[2], modes=("graph",), sizes_bytes=SIZES)
    with pytest.raises(ValueError, match="multiples of 4"):
        measure_collectives(store, backend="gloo", world_sizes=[2], sizes_bytes=(1022,))
    with pytest.raises(ValueError, match="in 4..268,435,456"):
        measure_collectives(store, backend="gloo", world_sizes=[2], sizes_bytes=(2**30,))


def test_eager_stream_points_are_stored_but_not_built_into_profile_tables(tmp_path):
    """Mode eager_stream: its points carry ops_per_sample 20 (back-to-back calls) and stay out of the
    profile's collective tables, whose modes are eager and graph."""
    from calibration.build.profile import collective_tables
    store = PointStore(tmp_path / "p.jsonl")
    n = measure_collectives(store, world_sizes=[2], backend="gloo", ops=("allreduce",), sizes_bytes=SIZES[:1],
                            modes=("eager", "eager_stream"), timing=FAST)
    recs = store.records()
    assert n == 2 and recs[point_key("allreduce", 2, "eager_stream", SIZES[0])]["ops_per_sample"] == 20
    assert [t.mode for t in collective_tables(recs)] == ["eager"]
    with pytest.raises(ValueError, match="eager_stream"):
        measure_collectives(store, world_sizes=[2], backend="gloo", modes=("stream",), sizes_bytes=SIZES)


def test_default_sizes_cover_powers_of_two_and_forward_messages():
    sizes = collectives.default_sizes_bytes()
    assert {2 ** k for k in range(10, 27)} <= set(sizes)
    assert {n * h * 2 for n in range(1, 65) for h in (2048, 4096, 7168, 8192)} <= set(sizes)
    assert list(sizes) == sorted(set(sizes))
    quick = collectives.default_sizes_bytes(quick=True)
    assert set(quick) < set(sizes) and 14336 in quick and 64 * 2 ** 20 in quick


def test_spawned_processes_get_multicast_disabled(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    monkeypatch.delenv("NVSHMEM_DISABLE_NVLS", raising=False)
    import os
    with group.spawn_env(12345, "nccl"):
        assert os.environ["NCCL_NVLS_ENABLE"] == "0" and os.environ["NVSHMEM_DISABLE_NVLS"] == "1"
        assert os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
        assert (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]) == ("127.0.0.1", "12345")
    assert os.environ["NCCL_NVLS_ENABLE"] == "1" and "NVSHMEM_DISABLE_NVLS" not in os.environ


def test_the_engines_custom_allreduce_is_asked_for_on_cuda_only(tmp_path):
    """custom_allreduce is vLLM's own kernel (issue 28): refused on gloo in one line, its points kept
    beside the profile's tables, and a vLLM-less host told so."""
    from typer.testing import CliRunner

    from calibration.bench import collectives as C
    from calibration.build.profile import collective_tables
    from simulator.cli import app
    with pytest.raises(ValueError, match="needs CUDA GPUs"):
        C.measure_collectives(PointStore(tmp_path / "p.jsonl"), backend="gloo", world_sizes=[2],
                              ops=("custom_allreduce",))
    r = CliRunner().invoke(app, ["calibrate", "collectives", "--points", str(tmp_path / "q.jsonl"), "--device", "cpu",
                                 "--op", "custom_allreduce"], env={"COLUMNS": "200"})
    assert r.exit_code != 0 and "runs on CUDA GPUs only" in r.output and "Traceback" not in r.output
    rec = {"op": "custom_allreduce", "world_size": 2, "mode": "graph", "size_bytes": 1024, "latency_us": 5.0}
    nccl = {**rec, "op": "allreduce", "latency_us": 9.0}
    tables = collective_tables({C.point_key("custom_allreduce", 2, "graph", 1024): rec,
                                C.point_key("allreduce", 2, "graph", 1024): nccl})
    assert [t.op for t in tables] == ["allreduce"]


def test_custom_allreduce_calls_the_engines_kernel_within_its_size():
    import torch

    from calibration.bench import collectives as C

    class FakeCA:  # vLLM's CustomAllreduce interface, as the bench uses it
        max_size = 4096
        calls = 0

        def should_custom_ar(self, x):
            return x.numel() * x.element_size() < self.max_size

        def custom_all_reduce(self, x):
            FakeCA.calls += 1
            return x

    fn = C._collective("custom_allreduce", 1024, 2, torch.device("cpu"), torch.bfloat16, FakeCA())
    fn()
    assert FakeCA.calls == 1
    with pytest.raises(RuntimeError, match="does not take 8,192 bytes"):
        C._collective("custom_allreduce", 8192, 2, torch.device("cpu"), torch.bfloat16, FakeCA())
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match="vLLM is not importable"):
            C.engine_custom_allreduce(torch.device("cpu"))
