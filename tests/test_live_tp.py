"""calibration.models.tp_llama / calibration.live.tp, tp_grid and `specdecsim live --tp` on CPU: 2 gloo
ranks, tiny shapes.

One spawn (module fixture `ranks`) runs every two-rank check and writes each rank's raw results
to JSON; the tests assert on them. The CLI test spawns its own ranks (once; the rerun spawns
only the deleted point).
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as torch_mp  # noqa: E402

from typer.testing import CliRunner  # noqa: E402

from calibration.live import tp as live_tp  # noqa: E402
from calibration.live import tp_grid  # noqa: E402
from calibration.live.loop import DecodeLoop, SpecLoop  # noqa: E402
from calibration.live.run import oracle_accept_lengths  # noqa: E402
from calibration.models.llama import DraftModel, OpRecorder, TargetModel  # noqa: E402
from calibration.models.tp_llama import (TPDraftModel, TPOps, TPTargetModel, check_shardable,  # noqa: E402
                                         describe_tp_call, describe_tp_op)
from simulator.cli import app  # noqa: E402
from simulator.config import ModelShape, Scenario  # noqa: E402
from simulator.costs import forward_ops  # noqa: E402
from simulator.evidence.live_records import LiveRun  # noqa: E402
from test_live import _fake_capture  # noqa: E402  (CPU stand-in for a CUDA graph)

TARGET = ModelShape(name="tiny-target", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=128, vocab_size=256)
DRAFT = ModelShape(name="tiny-draft", hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=128, vocab_size=256, draft_vocab_size=96,
                   num_fc_input_hidden_states=3)
FORWARD_POINTS = [(1, 1, 16), (2, 4, 16), (3, 2, 8)]  # (batch_size, num_new, context_len)
TP = 2


def scenario(placement="shared_tp", num_steps=3, batch_size=2, tp_size=TP, seed=0, cuda_graph=False) -> Scenario:
    return Scenario.model_validate(dict(
        target=TARGET.model_dump(), draft=DRAFT.model_dump(), tp_size=tp_size, placement=placement,
        spec=dict(num_steps=num_steps, num_draft_tokens=num_steps + 1),
        acceptance=dict(kind="iid", acceptance_rate=0.7),
        workload=dict(batch_size=batch_size, context_len=64), serving_engine=dict(cuda_graph=cuda_graph), seed=seed))


def _inputs(b, n, c, vocab):
    ids = (torch.arange(b * n) * 37) % vocab
    lens = torch.tensor([c - i for i in range(b)])
    return ids, lens, (lens[:, None] + torch.arange(n)).reshape(-1)


def _max_diff(a, b) -> float:
    return float((a - b).abs().max())


# ---- what each rank runs ------------------------------------------------------------------------
def _check_forwards(rank: int) -> dict:
    """(a) TP vs single-device forwards, caches and weights; (b) the recorded op programs."""
    out = {"forwards": [], "programs": []}
    full_t, tp_t = TargetModel(TARGET, seed=0), TPTargetModel(TARGET, seed=0)
    full_d, tp_d = DraftModel(DRAFT, seed=1), TPDraftModel(DRAFT, seed=1)
    out["qkv_shape"] = list(tp_t.layers[0]["qkv"].shape)
    out["qkv_sum"] = float(tp_t.layers[0]["qkv"].sum())
    out["lm_head_shape"] = list(tp_d.lm_head.shape)
    h = TARGET.hidden_size
    for b, n, c in FORWARD_POINTS:
        ids, lens, pos = _inputs(b, n, c, TARGET.vocab_size)
        caches = [m.new_cache(b, c + n) for m in (full_t, tp_t, full_d, tp_d)]
        aux = [torch.empty(b * n, 3 * h) for _ in range(2)]
        with torch.no_grad():
            tok_full = full_t.forward(ids, caches[0], lens, pos, n, c, aux_out=aux[0])
            tok_tp = tp_t.forward(ids, caches[1], lens, pos, n, c, aux_out=aux[1])
            pairs = ((full_d, caches[2]), (tp_d, caches[3]))
            ext = [m.forward(ids, cache, lens, pos, n, c, aux=aux[0]) for m, cache in pairs]
            step = [m.forward(ids, cache, lens, pos, n, c, hidden=ext[0][1]) for m, cache in pairs]
        heads = slice(rank, rank + 1)  # 2 KV heads over 2 ranks: rank r holds head r
        out["forwards"].append(dict(
            point=[b, n, c], target_tokens_equal=torch.equal(tok_full, tok_tp), aux_diff=_max_diff(*aux),
            aux_scale=float(aux[0].abs().max()),
            target_cache_diff=max(_max_diff(caches[0].k[i][:, :, heads], caches[1].k[i]) for i in range(2)),
            draft_cache_diff=_max_diff(caches[2].v[0][:, :, heads], caches[3].v[0]),
            draft_top_equal=all(torch.equal(f[0], t[0]) for f, t in (ext, step)),
            draft_hidden_diff=max(_max_diff(f[1], t[1]) for f, t in (ext, step))))
        # (b) op programs, collectives included, in execution order
        rec_t, rec_d = OpRecorder(TPOps()), OpRecorder(TPOps())
        tp_t.ops, tp_d.ops = rec_t, rec_d
        with torch.no_grad():
            tp_t.forward(ids, caches[1], lens, pos, n, c, aux_out=aux[1])
            tp_d.forward(ids, caches[3], lens, pos, n, c, aux=aux[0])
        tp_t.ops, tp_d.ops = TPOps(), TPOps()
        out["programs"].append(dict(point=[b, n, c], target=[list(describe_tp_call(x, TP)) for x in rec_t.calls],
                                    draft=[list(describe_tp_call(x, TP)) for x in rec_d.calls]))
    return out


def _loop_history(loop, lengths) -> list:
    hist = []
    with torch.no_grad():
        for row in lengths:
            loop.cycle(row)
            hist.append(loop.verify_ids.tolist())
    return hist


def _graph_history(rank: int, placement: str, lengths) -> list:
    """Graph-mode wiring of the TP loops (captures emulated on CPU), cycle by cycle."""
    from calibration.live import loop as live_loop
    saved = live_loop.capture_graph, live_tp.capture_graph
    live_loop.capture_graph = live_tp.capture_graph = _fake_capture
    try:
        target = TPTargetModel(TARGET, seed=0, keep_full_embed=True)
        if placement == "shared_tp":
            loop = live_tp.SharedSpecLoop(target, TPDraftModel(DRAFT, seed=1, embed=target.embed), 2, 64, 3, True)
        else:
            draft = DraftModel(DRAFT, seed=1, embed=target.full_embed) if rank == 0 else live_tp.DraftPlaceholder(DRAFT, "cpu")
            loop = live_tp.ColocatedSpecLoop(target, draft, 2, 64, 3, True, TPOps(), rank == 0)
        assert loop.graph
        return _loop_history(loop, lengths)
    finally:
        live_loop.capture_graph, live_tp.capture_graph = saved


def _check_loops(rank: int) -> dict:
    """(c) run_live_tp records, TP loops vs the single-device loop, broadcasts, rank agreement."""
    out = {"records": {}, "history_equal": {}, "broadcasts": None}
    for placement in live_tp.TP_PLACEMENTS:
        sc = scenario(placement, num_steps=3, batch_size=2, seed=7)
        rec = live_tp.run_live_tp(sc, True, num_cycles=5, warmup_cycles=2, device="cpu", repeats=2,
                                  paired_baseline=placement == "shared_tp")
        out["records"][placement] = None if rec is None else rec.model_dump(mode="json")
        # the TP loop emits the single-device loop's drafts and verify tokens, cycle by cycle
        lengths = oracle_accept_lengths(sc, 6)
        session = live_tp.TPLiveSession("cpu")
        tp_loop = session.loop(sc, True)
        if placement == "tp1_colocated":
            tp_loop.comm = OpRecorder(TPOps())
        tp_hist = _loop_history(tp_loop, lengths)
        out.setdefault("accepted_logged", {})[placement] = len(tp_loop.accepted_log)
        target = TargetModel(TARGET, seed=0)
        single = SpecLoop(target, DraftModel(DRAFT, seed=1, embed=target.embed), 2, 64, 3, cuda_graph=False)
        out["history_equal"][placement] = tp_hist == _loop_history(single, lengths)
        out.setdefault("graph_history_equal", {})[placement] = tp_hist == _graph_history(rank, placement, lengths)
        out["history_varies"] = len({json.dumps(h) for h in tp_hist}) > 1
        if placement == "tp1_colocated":
            out["broadcasts"] = [[c.name, list(c.args[0].shape), str(c.args[0].dtype)] for c in tp_loop.comm.calls]
    base = live_tp.run_live_tp(scenario(), False, num_cycles=4, warmup_cycles=1, device="cpu", repeats=1)
    out["baseline"] = None if base is None else base.model_dump(mode="json")
    # rank 1 draws other accept lengths: every rank must refuse the run
    real = live_tp.oracle_accept_lengths
    if rank == 1:
        live_tp.oracle_accept_lengths = lambda sc, n: np.roll(real(sc, n), 1, axis=0)
    try:
        live_tp.run_live_tp(scenario("tp1_colocated", seed=7), True, 5, 2, "cpu", 1)
        out["mismatch_error"] = None
    except RuntimeError as e:
        out["mismatch_error"] = str(e)
    finally:
        live_tp.oracle_accept_lengths = real
    return out


def _ranks_worker(rank: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=TP)
    try:
        res = {"forwards": _check_forwards(rank), "loops": _check_loops(rank)}
    finally:
        dist.destroy_process_group()
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump(res, f)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    d = tmp_path_factory.mktemp("tp")
    torch_mp.spawn(_ranks_worker, args=(str(d / "pg"), str(d)), nprocs=TP, join=True)
    return [json.loads((d / f"rank{r}.json").read_text()) for r in range(TP)]


# ---- (a) forwards equal the single-device ones ------------------------------------------------
def test_tp_forwards_equal_single_device_forwards(ranks):
    for res in ranks:
        f = res["forwards"]
        assert f["qkv_shape"] == [(4 // TP + 2 * 2 // TP) * 16, 64] and f["lm_head_shape"] == [96 // TP, 64]
        assert [x["point"] for x in f["forwards"]] == [list(p) for p in FORWARD_POINTS]
        for x in f["forwards"]:
            assert x["target_tokens_equal"] and x["draft_top_equal"], x
            assert x["aux_diff"] <= 1e-5 * max(1.0, x["aux_scale"]), x
            assert x["target_cache_diff"] < 1e-5 and x["draft_cache_diff"] < 1e-5, x
            assert x["draft_hidden_diff"] < 1e-4, x
    assert ranks[0]["forwards"]["qkv_sum"] != ranks[1]["forwards"]["qkv_sum"]  # different slices


# ---- (b) the op program, collectives included, is the simulator's at tp_size=2 -----------------
def test_tp_op_program_and_allreduce_count_match_the_simulator(ranks):
    for res in ranks:
        for prog in res["forwards"]["programs"]:
            b, n, c = prog["point"]
            want_t = forward_ops.target_forward_ops(TARGET, TP, b, n, c, num_aux_hidden_states=3)
            want_d = forward_ops.draft_forward_ops(DRAFT, TP, b, n, c, True)
            assert prog["target"] == [list(describe_tp_op(op)) for op in want_t]
            assert prog["draft"] == [list(describe_tp_op(op)) for op in want_d]
            allreduces = [x for x in prog["target"] if x[0] == "allreduce"]
            num_sim = sum(op.collective == "allreduce" for op in want_t)
            assert len(allreduces) == num_sim == 1 + 2 * TARGET.num_hidden_layers
            assert [x[0] for x in prog["target"]].count("all_gather") == 1


# ---- (c) run_live_tp ------------------------------------------------------------------------------
@pytest.mark.parametrize("placement", live_tp.TP_PLACEMENTS)
def test_run_live_tp_emits_the_oracles_tokens_on_rank0_only(ranks, placement):
    assert ranks[1]["loops"]["records"][placement] is None and ranks[1]["loops"]["baseline"] is None
    rec = LiveRun.model_validate(ranks[0]["loops"]["records"][placement])
    sc = scenario(placement, num_steps=3, batch_size=2, seed=7)
    assert rec.scenario == sc and rec.speculative and rec.hardware.gpu_count == TP
    timed = oracle_accept_lengths(sc, 2 + 5)[2:]  # every repeat replays the same 5 cycles
    assert rec.accept_length_counts == np.bincount(timed.ravel(), minlength=5)[1:].tolist()
    assert rec.repeat_num_tokens == [int(timed.sum())] * 2 and rec.num_tokens == 2 * int(timed.sum())
    assert rec.tok_per_s == pytest.approx(rec.num_tokens / rec.elapsed_us * 1e6)
    assert set(rec.phase_us) == set(SpecLoop.PHASES) | {"host"} and rec.phase_us["verify"] > 0
    assert (rec.paired_baseline_tok_per_s is not None) == (placement == "shared_tp")
    base = LiveRun.model_validate(ranks[0]["loops"]["baseline"])
    assert not base.speculative and base.num_tokens == 4 * 2 and set(base.phase_us) == set(DecodeLoop.PHASES) | {"host"}


@pytest.mark.parametrize("placement", live_tp.TP_PLACEMENTS)
def test_tp_loops_emit_the_single_device_tokens(ranks, placement):
    for res in ranks:
        assert res["loops"]["history_equal"][placement] and res["loops"]["history_varies"]
        assert res["loops"]["graph_history_equal"][placement]  # graph-mode wiring, captures emulated
        assert res["loops"]["accepted_logged"][placement] == 6  # the rank-agreement digest sees every accept


def test_colocated_broadcasts_draft_tokens_once_per_cycle(ranks):
    for res in ranks:  # 6 cycles, one (batch, num_draft_tokens) int64 broadcast each
        assert res["loops"]["broadcasts"] == [["broadcast", [2, 4], "torch.int64"]] * 6


def test_ranks_that_disagree_on_accept_lengths_fail_together(ranks):
    for res in ranks:
        assert res["loops"]["mismatch_error"] and "disagree" in res["loops"]["mismatch_error"]


def test_rejects_what_it_cannot_run():
    with pytest.raises(ValueError, match="tp_size"):
        live_tp.run_live_tp(scenario(), True, 2, 0, "cpu")  # tp_size 2, one process
    with pytest.raises(ValueError, match="placement"):
        live_tp.check_tp_scenario(scenario("tp1_dedicated"), TP)
    tree = Scenario.model_validate(dict(
        target=TARGET.model_dump(), draft=DRAFT.model_dump(), tp_size=TP,
        spec=dict(num_steps=2, topk=2, num_draft_tokens=4), acceptance=dict(kind="tree", acceptance_rate=0.7)))
    with pytest.raises(ValueError, match="topk"):
        live_tp.check_tp_scenario(tree, TP)
    with pytest.raises(ValueError, match="num_key_value_heads"):
        check_shardable(TARGET.model_copy(update={"num_key_value_heads": 1}), TP, "target")
    with pytest.raises(ValueError, match="num_attention_heads"):
        check_shardable(TARGET, 8, "target")
    with pytest.raises(RuntimeError, match="CUDA"):
        live_tp.TPLiveSession("cpu").loop(scenario(tp_size=1, cuda_graph=True), True)


# ---- (d) the CLI ---------------------------------------------------------------------------------
def _live(argv: list[str]):
    """`specdecsim live ARGV`; asserts it succeeded."""
    result = CliRunner().invoke(app, ["live", *argv])
    assert result.exit_code == 0, result.output
    return result


def test_cli_quick_writes_valid_points_and_resumes(tmp_path):
    argv = ["--tp", "2", "--out", str(tmp_path), "--quick", "--device", "cpu", "--sizes", "tiny",
            "--cycles", "3", "--warmup", "1"]
    _live(argv)
    pts = tp_grid.grid(True, ("tiny",), False, 2)
    assert len(pts) == 5 and {p.placement for p in pts if p.speculative} == set(live_tp.TP_PLACEMENTS)
    assert sorted(f.name for f in tmp_path.glob("*.json")) == sorted(f"{p.name}.json" for p in pts)
    for p in pts:
        rec = LiveRun.model_validate_json((tmp_path / f"{p.name}.json").read_text())
        assert rec.scenario == p.scenario(3, 1) and rec.scenario.tp_size == 2 and rec.hardware.gpu_count == 2
        rows = (oracle_accept_lengths(rec.scenario, 4) if p.speculative else np.ones((4, 1), dtype=np.int64))[1:]
        assert rec.num_tokens == int(rows.sum()) and rec.num_cycles == 3
    stamps = {f.name: f.stat().st_mtime_ns for f in tmp_path.glob("*.json")}
    again = pts[1].name + ".json"
    (tmp_path / again).unlink()
    result = _live(argv)  # resume: only the deleted point runs
    assert "1 to run" in " ".join(result.output.split())  # rich wraps the line where the tmp path ends
    new = {f.name: f.stat().st_mtime_ns for f in tmp_path.glob("*.json")}
    assert set(new) == set(stamps) and {k for k in new if new[k] != stamps[k]} == {again}


@pytest.mark.slow
def test_cli_noise_runs_interleaved_passes_and_pools_them(tmp_path, monkeypatch):
    """Slow tier (spawns ranks: about 5 s of CPU); the default tier's small form of the noise
    grid's planning and pooling is test_noise_passes_plan_rerun_stale_and_pool_small."""
    quick_grid = tp_grid.grid
    monkeypatch.setattr(tp_grid, "grid", lambda quick, *a: quick_grid(True, *a)[:2] + quick_grid(True, *a)[-1:])
    pts = tp_grid.noise_grid(("tiny",), False, 2)
    assert [p.repeats for p in pts] == [3] * 3 and all(p.interleaved for p in pts)
    assert [p.paired_baseline for p in pts] == [True, True, False]
    _live(["--tp", "2", "--out", str(tmp_path), "--noise", "--device", "cpu", "--sizes", "tiny",
           "--cycles", "2", "--warmup", "1"])
    assert not (tmp_path / ".passes").exists()  # every pass pooled, pass files removed
    assert sorted(f.name for f in tmp_path.glob("*.json")) == sorted(f"{p.name}.json" for p in pts)
    for p in pts:
        rec = LiveRun.model_validate_json((tmp_path / f"{p.name}.json").read_text())
        assert p.name.endswith("_rep3") and len(rec.repeat_tok_per_s) == 3 and rec.num_cycles == 2
        assert sum(rec.repeat_num_tokens) == rec.num_tokens and len(set(rec.repeat_num_tokens)) == 1
        assert (rec.paired_baseline_tok_per_s is not None) == p.speculative


@pytest.mark.slow
def test_noise_resume_with_other_cycles_reruns_stale_passes(tmp_path, monkeypatch):
    """Slow tier (spawns ranks twice: about 9 s of CPU); small form in the default tier:
    test_noise_passes_plan_rerun_stale_and_pool_small."""
    quick_grid = tp_grid.grid
    monkeypatch.setattr(tp_grid, "grid", lambda quick, *a: quick_grid(True, *a)[:1] + quick_grid(True, *a)[-1:])
    pts = tp_grid.noise_grid(("tiny",), False, 2)
    passes = tmp_path / ".passes"
    argv = ["--tp", "2", "--out", str(tmp_path), "--noise", "--device", "cpu", "--sizes", "tiny",
            "--cycles", "2", "--warmup", "1"]
    _live(argv[:-4] + ["--cycles", "3", "--warmup", "1"])  # a first run with other cycles...
    passes.mkdir()
    for p in pts:  # ...interrupted before pooling: put its passes back as leftovers
        rec = (tmp_path / f"{p.name}.json").read_text()
        (tmp_path / f"{p.name}.json").unlink()
        for k in range(p.repeats):
            (passes / f"{p.name}.pass{k}.json").write_text(rec)
    _live(argv)  # the stale passes run again with --cycles 2, then pool
    assert not passes.exists()
    for p in pts:
        rec = LiveRun.model_validate_json((tmp_path / f"{p.name}.json").read_text())
        assert rec.num_cycles == 2 and len(rec.repeat_tok_per_s) == 3


def test_noise_passes_plan_rerun_stale_and_pool_small(ranks, tmp_path, monkeypatch):
    """Small form of the two --noise CLI tests above (slow tier: they spawn ranks): what
    run_tp_grid does around its spawn, on the same 3-point noise grid. plan_runs gives one repeat
    per pass, pass by pass; pass files of other --cycles run again, current ones are kept;
    merge_passes pools 3 passes per point and removes .passes. The pass records are the `ranks`
    fixture's baseline LiveRun (one repeat) under each point's scenario."""
    from calibration.live.grid import merge_passes, plan_runs
    quick_grid = tp_grid.grid
    monkeypatch.setattr(tp_grid, "grid", lambda quick, *a: quick_grid(True, *a)[:2] + quick_grid(True, *a)[-1:])
    pts = tp_grid.noise_grid(("tiny",), False, 2)
    assert [p.repeats for p in pts] == [3] * 3 and all(p.interleaved for p in pts)
    assert [p.paired_baseline for p in pts] == [True, True, False]
    passes = tmp_path / ".passes"
    runs = plan_runs(pts, tmp_path, 2, 1)
    assert [(p.name, reps, path) for p, reps, path in runs] == [
        (p.name, 1, passes / f"{p.name}.pass{k}.json") for k in range(3) for p in pts]
    one = LiveRun.model_validate(ranks[0]["loops"]["baseline"])
    assert len(one.repeat_num_tokens or [one.num_tokens]) == 1
    passes.mkdir()
    for p in pts:  # an interrupted run with --cycles 3 left every pass; pass 0 is redone with --cycles 2
        for k in range(3):
            cycles = (2, 1) if k == 0 else (3, 1)
            rec = one.model_copy(update={"scenario": p.scenario(*cycles)})
            (passes / f"{p.name}.pass{k}.json").write_text(rec.model_dump_json())
    stale = plan_runs(pts, tmp_path, 2, 1)
    assert [(p.name, path.name) for p, _, path in stale] == [
        (p.name, f"{p.name}.pass{k}.json") for k in (1, 2) for p in pts]
    merge_passes(pts, tmp_path)  # passes of two scenarios: not pooled, kept
    assert not list(tmp_path.glob("*.json")) and len(list(passes.iterdir())) == 9
    for p, _, path in stale:  # the reruns, with --cycles 2
        path.write_text(one.model_copy(update={"scenario": p.scenario(2, 1)}).model_dump_json())
    assert plan_runs(pts, tmp_path, 2, 1) == []
    merge_passes(pts, tmp_path)
    assert not passes.exists()
    assert sorted(f.name for f in tmp_path.glob("*.json")) == sorted(f"{p.name}.json" for p in pts)
    for p in pts:
        rec = LiveRun.model_validate_json((tmp_path / f"{p.name}.json").read_text())
        assert p.name.endswith("_rep3") and len(rec.repeat_tok_per_s) == 3 and rec.scenario == p.scenario(2, 1)
        assert sum(rec.repeat_num_tokens) == rec.num_tokens and len(set(rec.repeat_num_tokens)) == 1
