"""calibration.build.nccl_tests (and nccl_tests_log, which reads the logs): the sample logs in
tests/data/nccl_tests/ (invented numbers, written in nccl-tests' documented output format) are read
exactly; bad logs fail naming the line."""

import subprocess
import sys
from pathlib import Path

import pytest

from calibration.build.nccl_tests import import_into_profile, parse_nccl_tests_log, read_nccl_tests_file
from calibration.build.nccl_tests_log import NcclTestsLogError, read_nccl_tests_runs
from simulator.profile import CollectiveTable, Provenance, load_profile, save_profile
from tests.conftest import flat_profile

DATA = Path(__file__).parent / "data" / "nccl_tests"
ALL_REDUCE = DATA / "all_reduce_perf_8gpu_pcie.log"
BROADCAST = DATA / "broadcast_perf_8gpu.log"
ALL_GATHER = DATA / "all_gather_perf_4gpu_graph.log"


def _one(path: Path, **kwargs) -> CollectiveTable:
    tables = read_nccl_tests_file(path, **kwargs)
    assert len(tables) == 1
    return tables[0]


def test_all_reduce_log_reads_out_of_place_times_exactly():
    t = _one(ALL_REDUCE)
    assert (t.op, t.world_size, t.mode) == ("allreduce", 8, "eager")
    assert t.size_bytes == [7168 * 2 ** k for k in range(14)]
    assert t.latency_us[:3] == [55.31, 56.42, 58.07]
    assert t.size_bytes[1] == 14336 and t.latency_us[1] == 56.42
    assert t.latency_us[-1] == 5611.0 and t.size_bytes[-1] == 58720256
    assert t.p10_latency_us is None and t.p90_latency_us is None
    assert t.provenance.kind == "measured"
    assert t.provenance.command == "./build/all_reduce_perf -b 7168 -e 56M -f 2 -g 8 -d bfloat16"
    assert "out-of-place" in t.provenance.note and "NVIDIA H200" in t.provenance.note


def test_in_place_option_takes_the_second_time_column():
    t = _one(ALL_REDUCE, in_place=True)
    assert t.latency_us[:2] == [54.87, 55.96] and t.latency_us[-1] == 5607.4
    assert "in-place" in t.provenance.note


def test_broadcast_without_command_is_published_with_the_log_as_source():
    t = _one(BROADCAST)
    assert (t.op, t.world_size, t.mode) == ("broadcast", 8, "eager")  # 8 MPI ranks of nGpus 1
    assert t.size_bytes[0] == 1024 and t.size_bytes[-1] == 64 * 2 ** 20 and len(t.size_bytes) == 17
    assert t.latency_us[0] == 28.61 and t.latency_us[-1] == 8494.3
    assert t.provenance.kind == "published" and t.provenance.source == str(BROADCAST)


def test_all_gather_sizes_become_per_rank_input_bytes_and_graph_mode_is_detected():
    t = _one(ALL_GATHER)
    assert (t.op, t.world_size, t.mode) == ("all_gather", 4, "graph")  # -t 2 -g 2, graph: 10
    assert t.size_bytes[0] == 8192 // 4 and t.size_bytes[-1] == 67108864 // 4
    assert t.latency_us[0] == 21.37 and t.latency_us[-1] == 1436.4
    assert "size / world_size" in t.provenance.note


def test_world_size_falls_back_to_nthread_times_ngpus_without_rank_lines():
    text = "\n".join(l for l in ALL_GATHER.read_text().splitlines() if "Rank" not in l)
    (t,) = parse_nccl_tests_log(text, "ag.log")
    assert t.world_size == 4 and "nThread x nGpus" in t.provenance.note


def test_a_wrong_world_size_is_caught_by_the_count_column():
    with pytest.raises(NcclTestsLogError, match="count .* pass world_size"):
        parse_nccl_tests_log(ALL_GATHER.read_text(), "ag.log", world_size=8)


def test_op_comes_from_the_file_name_when_the_log_does_not_say():
    text = "\n".join(l for l in BROADCAST.read_text().splitlines() if "Collective test starting" not in l)
    (t,) = parse_nccl_tests_log(text, "logs/broadcast-run3.txt")
    assert t.op == "broadcast"
    with pytest.raises(NcclTestsLogError, match="cannot tell which collective"):
        parse_nccl_tests_log(text, "logs/run3.txt")


def test_unsupported_collective_is_refused():
    text = ALL_REDUCE.read_text().replace("all_reduce_perf", "reduce_scatter_perf")
    with pytest.raises(NcclTestsLogError, match="reduce_scatter_perf is not a collective"):
        parse_nccl_tests_log(text, "rs.log")


def _garble(path: Path, old: str, new: str) -> tuple[str, int]:
    lines = path.read_text().splitlines()
    idx = next(i for i, l in enumerate(lines) if old in l)
    lines[idx] = lines[idx].replace(old, new)
    return "\n".join(lines), idx + 1


def test_a_garbled_time_names_the_file_and_line():
    text, line_no = _garble(ALL_REDUCE, "   56.42 ", "   5x.42 ")
    with pytest.raises(NcclTestsLogError, match=rf"^bad\.log:{line_no}: time '5x\.42' is not a number"):
        parse_nccl_tests_log(text, "bad.log")


def test_a_truncated_row_names_the_line():
    lines = ALL_REDUCE.read_text().splitlines()
    idx = next(i for i, l in enumerate(lines) if l.strip().startswith("229376"))
    lines[idx] = lines[idx][:60]
    with pytest.raises(NcclTestsLogError, match=rf"^cut\.log:{idx + 1}: expected .* columns"):
        parse_nccl_tests_log("\n".join(lines), "cut.log")


def test_a_log_without_rows_is_an_error():
    with pytest.raises(NcclTestsLogError, match="no nccl-tests data rows"):
        parse_nccl_tests_log("# nThread 1 nGpus 8 minBytes 8\nNCCL WARN something broke\n", "empty.log")


def test_noise_lines_between_rows_are_skipped():
    text = ALL_REDUCE.read_text().replace(
        "# Out of bounds", "host-a:4123:4123 [0] NCCL INFO comm 0x55 rank 0 nranks 8 - Destroy COMPLETE\n"
                          "# Out of bounds")
    assert parse_nccl_tests_log(text, "noisy.log")[0].latency_us == _one(ALL_REDUCE).latency_us


def test_two_runs_in_one_log_give_two_tables():
    (ar, bc) = parse_nccl_tests_log(ALL_REDUCE.read_text() + BROADCAST.read_text(), "both.log")
    assert (ar.op, bc.op) == ("allreduce", "broadcast")
    assert bc.provenance.kind == "published"  # the all_reduce command does not leak into the next run
    assert len(read_nccl_tests_runs(ALL_REDUCE.read_text() * 2, "twice.log")) == 2
    with pytest.raises(NcclTestsLogError, match="two runs give the table"):
        parse_nccl_tests_log(ALL_REDUCE.read_text() * 2, "twice.log")


def test_import_into_profile_replaces_same_key_and_round_trips(tmp_path):
    old = CollectiveTable(op="allreduce", world_size=8, mode="eager", size_bytes=[1024], latency_us=[1.0],
                          provenance=Provenance(kind="assumed", source="test"))
    keep = old.model_copy(update={"world_size": 2})
    save_profile(flat_profile(collectives=[old, keep]), tmp_path / "in.json")
    merged = import_into_profile(tmp_path / "in.json", [ALL_REDUCE, BROADCAST, ALL_GATHER], tmp_path / "out.json")
    assert load_profile(tmp_path / "out.json") == merged
    keys = {(t.op, t.world_size, t.mode) for t in merged.collectives}
    assert keys == {("allreduce", 8, "eager"), ("allreduce", 2, "eager"), ("broadcast", 8, "eager"),
                    ("all_gather", 4, "graph")}
    ar8 = next(t for t in merged.collectives if (t.op, t.world_size) == ("allreduce", 8))
    assert ar8.latency_us[1] == 56.42 and ar8.size_bytes[1] == 14336
    assert "nccl_tests:allreduce:8:eager" in merged.notes
    assert load_profile(tmp_path / "in.json").collectives == [old, keep]  # input untouched


def test_importer_does_not_import_torch():
    code = "import calibration.build.nccl_tests, calibration.cli, sys; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)
