"""Whole forwards at batch > 1 on CPU (tiny shapes): `bench_batch_forwards`, the batch-axis tables
built from its points beside the batch-1 ones, and `specdecsim calibrate forwards-batch`."""

import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from calibration.bench.forwards import bench_batch_forwards, forward_key  # noqa: E402
from calibration.build.profile import forward_tables  # noqa: E402
from calibration.build.store import PointStore  # noqa: E402
from calibration.shapes import TP_SIZES  # noqa: E402
from calibration.timing import TimingSettings  # noqa: E402
from simulator.cli import app  # noqa: E402
from simulator.costs.lookup import LatencyLookup  # noqa: E402
from tests.conftest import flat_profile  # noqa: E402

TARGET, DRAFT = TP_SIZES["tiny"]
TOKENS = {"forward": (1, 2, 4), "draft": (1,), "draft_extend": (1, 3)}
BATCHES, CONTEXTS = (1, 2, 4), (16, 32)
FAST = TimingSettings(num_replays=3, num_warmup=1)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    path = tmp_path_factory.mktemp("fwdb") / "points.jsonl"
    store = PointStore(path)
    bench_batch_forwards(store, [TARGET, DRAFT], torch.device("cpu"), "test", BATCHES, CONTEXTS, TOKENS, FAST)
    return path


def test_every_batch_point_is_stored_under_its_batch_key(measured):
    recs = PointStore(measured).records()
    for m, phases in ((TARGET, ("forward",)), (DRAFT, ("draft", "draft_extend"))):
        for phase in phases:
            for b in BATCHES:
                for n in TOKENS[phase]:
                    for c in CONTEXTS:
                        rec = recs[forward_key(m.name, 1, "graph", n, c, phase, b)]
                        assert rec["batch_size"] == b and rec["num_tokens"] == n and rec["latency_us"] > 0
    assert forward_key("m", 1, "graph", 4, 1024) == "fwd:m:1:graph:4:1024"  # batch-1 keys as before
    assert forward_key("m", 1, "graph", 4, 1024, "draft", 8) == "fwd:m:1:graph:draft:4:1024:b8"


def test_batch_points_build_batch_axis_tables_beside_the_batch_1_tables(measured):
    recs = PointStore(measured).records()
    # a batch-1 point of the old kind, as the committed points files hold
    recs["fwd:tiny:1:graph:1:16"] = {"model": "tiny", "tp_size": 1, "mode": "graph", "num_tokens": 1,
                                     "context_len": 16, "latency_us": 50.0, "command": "test"}
    tables = {(t.model, t.phase, t.batch_size is not None): t for t in forward_tables(recs)}
    assert tables[("tiny", "forward", False)].batch_size is None
    fwd = tables[("tiny", "forward", True)]
    assert fwd.batch_size == list(BATCHES) and fwd.num_tokens == list(TOKENS["forward"])
    assert fwd.context_len == list(CONTEXTS) and fwd.shape is not None
    key = forward_key("tiny", 1, "graph", 4, 32, "forward", 2)
    assert fwd.latency_us[1][2][1] == recs[key]["latency_us"]
    assert tables[(DRAFT.name, "draft", True)].num_tokens == [1]
    lookup = LatencyLookup(flat_profile(forwards=list(tables.values())), collective_mode="graph")
    assert lookup.find_forward(TARGET, 1, "graph", "forward", 4) is fwd
    assert lookup.forward_us("tiny", 1, "graph", 4, 32, batch_size=2) == pytest.approx(recs[key]["latency_us"])


def test_a_hole_in_the_batch_grid_fails_loudly(measured):
    recs = PointStore(measured).records()
    del recs[forward_key("tiny", 1, "graph", 2, 16, "forward", 4)]
    with pytest.raises(ValueError, match="batch axis.*missing"):
        forward_tables(recs)


def test_cli_forwards_batch_runs_tiny_shapes_on_the_cpu_and_resumes(tmp_path):
    points = tmp_path / "p.jsonl"
    argv = ["calibrate", "forwards-batch", "--points", str(points), "--sizes", "tiny", "--batches", "1,2",
            "--quick", "--device", "cpu"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    recs = PointStore(points).records()
    n = len([k for k in recs if k.startswith("fwd:")])
    assert n == 2 * (6 + 1 + 6)  # batches x (forward 1..6, draft 1, extend 1..6) at context 1024
    again = CliRunner().invoke(app, argv)
    assert again.exit_code == 0 and "stored 0 points" in again.output


@pytest.mark.parametrize("argv, says", [(["--batches", "0,2"], "--batches"), (["--batches", "a"], "--batches"),
                                        (["--sizes", "70b"], "--sizes")])
def test_cli_forwards_batch_refuses_bad_options_in_one_line(tmp_path, argv, says):
    result = CliRunner().invoke(app, ["calibrate", "forwards-batch", "--points", str(tmp_path / "p.jsonl"),
                                      "--device", "cpu", *argv])
    assert result.exit_code == 2 and says in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1
