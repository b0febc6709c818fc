"""calibration.bench.tp_forwards and `specdecsim calibrate tp-forwards` / `diagnose tp-skew` on CPU: 2 gloo
ranks time a tiny TP target's whole forward."""

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from calibration.bench import tp_forwards  # noqa: E402
from calibration.bench.ops import QUICK_GRID  # noqa: E402
from calibration.build.profile import forward_tables  # noqa: E402
from calibration.build.store import PointStore  # noqa: E402
from calibration.timing import TimingSettings  # noqa: E402
from simulator.cli import app  # noqa: E402
from simulator.config import ModelShape  # noqa: E402

TARGET = ModelShape(name="tiny-target", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=128, vocab_size=256)
DRAFT = TARGET.model_copy(update=dict(name="tiny-draft", num_hidden_layers=1, draft_vocab_size=96,
                                      num_fc_input_hidden_states=3))
ODD = TARGET.model_copy(update=dict(name="odd-heads", num_attention_heads=3, num_key_value_heads=3,
                                    hidden_size=48))
GRID = dataclasses.replace(QUICK_GRID, forward_num_tokens=(1, 3), forward_context_len=(16, 32))
FAST = TimingSettings(num_replays=3, num_warmup=1)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    path = tmp_path_factory.mktemp("tpf") / "points.jsonl"
    n = tp_forwards.measure_tp_forwards(PointStore(path), [TARGET, DRAFT, ODD], [2], GRID, backend="gloo",
                                        command="test", settings=FAST)
    return path, n


def test_every_forward_point_of_the_target_is_stored_once(measured):
    path, n = measured
    recs = PointStore(path).records()
    fwd = {k: r for k, r in recs.items() if k.startswith("fwd:")}
    want = {f"fwd:tiny-target:2:eager:{t}:{c}" for t in (1, 3) for c in (16, 32)}
    want |= {f"fwd:tiny-draft:2:eager:{ph}:{t}:{c}" for ph in ("draft", "draft_extend") for t in (1, 3)
             for c in (16, 32)}
    assert n == len(want) and set(fwd) == want  # the unshardable shape is skipped
    for k, r in fwd.items():
        assert r["tp_size"] == 2 and 0 < r["p10_latency_us"] <= r["latency_us"] <= r["p90_latency_us"]
        model = "TPDraftModel" if "draft" in k else "TPTargetModel"
        assert f"{model} over 2 ranks" in r["impl"] and r["command"] == "test"
    assert recs["meta:model:tiny-target"]["hidden_size"] == 64 and "meta:model:tiny-draft" in recs


def test_points_build_a_tp2_forward_table_with_the_shape(measured):
    path, _ = measured
    tables = forward_tables(PointStore(path).records())
    assert sorted((t.model, t.tp_size, t.mode, t.phase) for t in tables) == [
        ("tiny-draft", 2, "eager", "draft"), ("tiny-draft", 2, "eager", "draft_extend"),
        ("tiny-target", 2, "eager", "forward")]
    for table in tables:
        assert table.num_tokens == [1, 3] and table.context_len == [16, 32]
        assert table.shape["num_attention_heads"] == 4


def test_rerun_measures_only_missing_rows(measured, tmp_path):
    path, _ = measured
    copy = tmp_path / "points.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    copy.write_text("".join(x for x in lines if ":3:32\"" not in x))  # drop one point of row num_tokens=3
    store = PointStore(copy)
    assert not store.done("fwd:tiny-target:2:eager:3:32")
    n = tp_forwards.measure_tp_forwards(store, [TARGET], [2], GRID, backend="gloo", command="test", settings=FAST)
    assert n == 2 and store.done("fwd:tiny-target:2:eager:3:32")  # the whole row (2 contexts) again
    assert tp_forwards.measure_tp_forwards(store, [TARGET], [2], GRID, backend="gloo", settings=FAST) == 0


def test_nothing_without_two_gpus_and_bad_backend_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert tp_forwards.measure_tp_forwards(PointStore(tmp_path / "p.jsonl"), [TARGET], [2]) == 0
    with pytest.raises(ValueError, match="backend"):
        tp_forwards.measure_tp_forwards(PointStore(tmp_path / "p.jsonl"), [TARGET], [2], backend="mpi")


def test_cli_refuses_bad_arguments(tmp_path):
    for argv, msg in ((["--points", str(tmp_path), "--device", "cpu"], "is a folder"),
                      (["--points", str(tmp_path / "p.jsonl"), "--sizes", "70b", "--device", "cpu"], "--sizes"),
                      (["--points", str(tmp_path / "p.jsonl"), "--tp", "1", "--device", "cpu"], ">= 2"),
                      (["--points", str(tmp_path / "p.jsonl"), "--tp", "100000", "--device", "cpu"], "CPU cores")):
        result = CliRunner().invoke(app, ["calibrate", "tp-forwards", *argv])
        assert result.exit_code == 2 and msg in result.stderr, result.output
        assert len(result.stderr.strip().splitlines()) == 1


def _skew_worker(rank: int, init: str, out: str) -> None:
    """Rank 1's 'forward' takes 5 ms longer than rank 0's; the time kept is the faster rank's."""
    import json
    import time
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=2)
    try:
        t = tp_forwards.time_min_over_ranks(lambda: time.sleep(0.002 + 0.005 * rank), torch.device("cpu"),
                                            TimingSettings(num_replays=5, num_warmup=1))
        with open(f"{out}/rank{rank}.json", "w") as f:
            json.dump(t, f)
    finally:
        dist.destroy_process_group()


def test_each_sample_is_the_fastest_ranks_time(tmp_path):
    import json
    import torch.multiprocessing as torch_mp
    torch_mp.spawn(_skew_worker, args=(str(tmp_path / "pg"), str(tmp_path)), nprocs=2, join=True)
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert got[0] == got[1] and got[0]["mode"] == "cpu_wall"
    assert 2000 <= got[0]["latency_us"] < 6000  # rank 0's 2 ms, not rank 1's 7 ms


def check_diagnose_tp_skew(tmp_path):
    import json
    from calibration.diagnostics import tp_skew as diagnose_tp_skew
    out = tmp_path / "skew.json"
    result = CliRunner().invoke(app, ["diagnose", "tp-skew", "--device", "cpu", "--out", str(out)])
    assert result.exit_code == 0, result.output
    d = json.loads(out.read_text())
    assert d["tp_size"] == 2 and d["backend"] == "gloo"
    assert sorted((r["phase"], r["num_tokens"]) for r in d["rows"]) == sorted(
        (ph, n) for ph in ("forward", "draft") for n in diagnose_tp_skew.NUM_TOKENS)
    for r in d["rows"]:
        assert 0 < r["min_over_ranks_us"] <= r["rank0_us"] and len(r["per_rank_median_us"]) == 2
        assert r["back_to_back_us"] > 0


@pytest.mark.slow
def test_diagnose_tp_skew_runs_on_cpu_and_its_minimum_never_exceeds_rank0(tmp_path):
    """Slow tier: the diagnostic as shipped (5 token counts x 2 phases, 30 samples each: about
    10 s of CPU on 2 cores); the default tier's small form is test_diagnose_tp_skew_small."""
    check_diagnose_tp_skew(tmp_path)


def test_diagnose_tp_skew_small(tmp_path, monkeypatch):
    """test_diagnose_tp_skew_runs_on_cpu_and_its_minimum_never_exceeds_rank0 (slow tier) with 2
    token counts and 3 samples (1 back-to-back run) per row: the same CLI, ranks and checks."""
    from calibration.diagnostics import tp_skew as diagnose_tp_skew
    monkeypatch.setattr(diagnose_tp_skew, "NUM_TOKENS", (1, 3))
    monkeypatch.setattr(diagnose_tp_skew, "NUM_SAMPLES", 3)
    check_diagnose_tp_skew(tmp_path)
