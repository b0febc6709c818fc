"""calibration.live (loop, run, grid) and `specdecsim live`: token counts, oracle acceptance, KV rollback,
op program, LiveRun records (CPU)."""

import dataclasses
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from calibration.live.loop import SpecLoop, generate  # noqa: E402
from calibration.live.run import LiveSession, oracle_accept_lengths, run_live  # noqa: E402
from calibration.models import ops_torch  # noqa: E402
from calibration.models.llama import (GLUE_OPS, LOOP_IO_OPS, DraftModel, OpRecorder, TargetModel,  # noqa: E402
                                      describe_call, describe_op)
from simulator.cli import app  # noqa: E402
from simulator.acceptance import build_acceptance  # noqa: E402
from simulator.config import Scenario  # noqa: E402
from simulator.costs import forward_ops  # noqa: E402
from simulator.costs import ops as sim_ops  # noqa: E402
from simulator.evidence.live_records import LiveRun  # noqa: E402

TARGET = dict(name="tiny-target", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, intermediate_size=128, vocab_size=256)
DRAFT = dict(name="tiny-draft", hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
             num_key_value_heads=2, intermediate_size=128, vocab_size=256, draft_vocab_size=96,
             num_fc_input_hidden_states=3)


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny ops on a shared CPU run faster (and steadier) on one thread."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def scenario(num_steps=3, rate=0.7, batch_size=2, context_len=64, cuda_graph=False, seed=0, **kw) -> Scenario:
    return Scenario.model_validate(dict(
        target=TARGET, draft=DRAFT, spec=dict(num_steps=num_steps, num_draft_tokens=num_steps + 1),
        acceptance=dict(kind="iid", acceptance_rate=rate),
        workload=dict(batch_size=batch_size, context_len=context_len),
        serving_engine=dict(cuda_graph=cuda_graph), seed=seed, **kw))


def spec_loop(num_steps=3, batch_size=2, context_len=512) -> SpecLoop:
    sc = scenario(num_steps, batch_size=batch_size, context_len=context_len)
    target, draft = TargetModel(sc.target), DraftModel(sc.draft)
    return SpecLoop(target, draft, batch_size, context_len, num_steps, cuda_graph=False)


@pytest.mark.parametrize("max_new_tokens", [1, 7, 20])
def test_generate_emits_exactly_max_new_tokens(max_new_tokens):
    loop = spec_loop(num_steps=3, batch_size=3)
    lengths = oracle_accept_lengths(scenario(3, batch_size=3), 64)
    with torch.no_grad():
        emitted, num_cycles = generate(loop, max_new_tokens, lengths)
    assert emitted.tolist() == [max_new_tokens] * 3
    # It stops at the first cycle where every request's untruncated total reaches the target.
    done = (np.cumsum(lengths, axis=0) >= max_new_tokens).all(axis=1)
    assert num_cycles == int(np.argmax(done)) + 1


class SlotRecorder(OpRecorder):
    """Notes at call time (the position buffers are reused) the slots of every kv_write into the
    layer-0 cache `cache_k` (request-major) and every attn_mask's per-request positions."""

    def __init__(self, cache_k):
        super().__init__(ops_torch)
        self.cache_k, self.slots, self.mask_lens = cache_k, [], []

    def __getattr__(self, name):
        fn = super().__getattr__(name)

        def noting(*args, **kwargs):
            if name == "kv_write" and args[0] is self.cache_k:
                self.slots.append(args[4][1].tolist())
            if name == "attn_mask":
                self.mask_lens.append(args[0].tolist())
            return fn(*args, **kwargs)
        return noting


def test_positions_advance_by_accept_length_and_next_verify_overwrites_rejected_slots():
    s, b = 3, 2
    loop = spec_loop(num_steps=s, batch_size=b)
    rec = SlotRecorder(loop.tcache.k[0])
    with torch.no_grad():
        loop.cycle(np.array([2, 2]))
        before = loop.kv_lens.copy()
        lengths = np.array([1, 4])
        loop.cycle(lengths)
        after = loop.kv_lens.copy()
        assert (after - before).tolist() == lengths.tolist()
        loop.target.ops = rec
        k1 = loop.tcache.k[-1].clone()
        loop.cycle(np.array([1, 1]))
    # The verify writes s+1 slots from the new position, over the rejected drafts' slots.
    want = [p for r in range(b) for p in range(after[r], after[r] + s + 1)]
    assert rec.slots == [want] and rec.mask_lens == [after.tolist()]
    changed = (loop.tcache.k[-1] != k1).any(dim=(2, 3))  # (batch, slot), last layer
    for r in range(b):
        assert changed[r].nonzero().flatten().tolist() == list(range(after[r], after[r] + s + 1))


def test_draft_extend_covers_the_accepted_tokens_at_the_old_positions():
    s, b = 3, 2
    loop = spec_loop(num_steps=s, batch_size=b)
    rec = SlotRecorder(loop.dcache.k[0])
    with torch.no_grad():
        loop.cycle(np.array([1, 1]))
        old = loop.kv_lens.copy()
        loop.cycle(np.array([3, 2]))
        assert loop.extend_len == 3
        loop.draft.ops = rec
        loop.cycle(np.array([1, 1]))
    new = old + np.array([3, 2])
    extend = [p for r in range(b) for p in range(old[r], old[r] + 3)]  # padded to max = 3
    steps = [[int(new[r] + k) for r in range(b)] for k in range(s)]
    assert rec.slots == [extend] + steps
    assert rec.mask_lens == [old.tolist()] + [(new + k).tolist() for k in range(s)]


def test_positions_stay_in_band_and_wrap_back_by_span():
    loop = spec_loop(num_steps=2, batch_size=1, context_len=16)
    assert loop.hi == 16 - 1 and loop.span == 15 and loop.kv_lens.tolist() == [0]
    with torch.no_grad():
        seen = []
        for _ in range(12):
            loop.cycle(np.array([3]))
            seen.append(int(loop.kv_lens[0]))
    assert seen[:6] == [3, 6, 9, 12, 15, 3]  # 18 > hi=15 -> 18 - 15
    assert all(0 <= p <= loop.hi for p in seen)


def test_one_cycle_runs_the_simulators_op_program():
    s, b, c = 2, 2, 64
    loop = spec_loop(num_steps=s, batch_size=b, context_len=c)
    rec = OpRecorder(ops_torch)
    with torch.no_grad():
        loop.cycle(np.array([3, 1]))  # next cycle extends over 3 tokens per request
        loop.target.ops = loop.draft.ops = rec
        loop.cycle(np.array([1, 1]))
    t, d = loop.target.shape, loop.draft.shape
    want = (forward_ops.draft_forward_ops(d, 1, b, 3, c, True)
            + s * forward_ops.draft_forward_ops(d, 1, b, 1, c, False)
            + forward_ops.target_forward_ops(t, 1, b, s + 1, c, num_aux_hidden_states=3)
            + sim_ops.accept_ops(b, s))
    got = [describe_call(x) for x in rec.calls if x.name not in GLUE_OPS]
    assert got == [describe_op(op) for op in want if op.name not in LOOP_IO_OPS]
    assert rec.names.count("rope_cos_sin") == s + 2


def test_live_accept_lengths_follow_the_oracle():
    sc = scenario(num_steps=3, rate=0.7, batch_size=4, seed=5)
    rec = run_live(sc, True, num_cycles=120, warmup_cycles=2, device="cpu", repeats=2)
    pmf = build_acceptance(sc.acceptance, sc.spec).pmf()
    k = np.arange(1, len(pmf) + 1)
    mean, var = float(k @ pmf), float((k ** 2) @ pmf - (k @ pmf) ** 2)
    n = sum(rec.accept_length_counts)
    assert n == 120 * 4 and len(rec.accept_length_counts) == 4  # repeats replay one sequence
    assert abs(rec.mean_accept_length - mean) < 4 * (var / n) ** 0.5
    drawn = oracle_accept_lengths(sc, 122)[2:]
    counts = np.bincount(drawn.ravel(), minlength=5)[1:]
    assert rec.accept_length_counts == counts.tolist()
    assert rec.repeat_num_tokens == [int(drawn.sum())] * 2 and rec.num_tokens == 2 * int(drawn.sum())


def test_record_validates_and_is_consistent():
    sc = scenario(num_steps=2, batch_size=2)
    session = LiveSession("cpu")
    rec = run_live(sc, True, num_cycles=8, warmup_cycles=2, device="cpu", repeats=3, session=session)
    again = LiveRun.model_validate(json.loads(rec.model_dump_json()))
    assert again == rec and rec.scenario == sc and rec.speculative
    assert len(rec.repeat_tok_per_s) == 3 and len(rec.repeat_elapsed_us) == 3
    assert rec.elapsed_us == pytest.approx(sum(rec.repeat_elapsed_us))
    assert min(rec.repeat_tok_per_s) <= rec.tok_per_s <= max(rec.repeat_tok_per_s)  # pooled
    assert rec.tok_per_s == pytest.approx(rec.num_tokens / rec.elapsed_us * 1e6)
    assert len(rec.repeat_cycle_us) == 3 and rec.paired_baseline_tok_per_s is None
    assert set(rec.phase_us) == {"draft_extend", "draft", "verify", "accept", "sync", "host"}
    cycle_us = sum(rec.phase_us.values())
    assert rec.phase_us["verify"] > 0 and cycle_us > rec.phase_us["draft"]
    base = run_live(sc, False, num_cycles=8, warmup_cycles=1, device="cpu", repeats=1, session=session)
    assert not base.speculative and base.num_tokens == 8 * 2 and base.mean_accept_length == 1.0
    assert set(base.phase_us) == {"decode", "sync", "host"}
    paired = run_live(sc, True, num_cycles=8, warmup_cycles=1, device="cpu", repeats=2, session=session,
                      paired_baseline=True)
    assert paired.paired_baseline_tok_per_s is not None and paired.paired_baseline_tok_per_s > 0
    bad = json.loads(rec.model_dump_json())
    bad["repeat_num_tokens"] = bad["repeat_num_tokens"][:2]
    with pytest.raises(ValueError, match="one entry per repeat"):
        LiveRun.model_validate(bad)
    bad = json.loads(rec.model_dump_json())
    bad["tok_per_s"] *= 1.1
    with pytest.raises(ValueError, match="num_tokens / elapsed"):
        LiveRun.model_validate(bad)
    for field, value, match in (("repeat_tok_per_s", [3 * t for t in rec.repeat_tok_per_s], "repeat 0"),
                                ("mean_accept_length", 1.0, "mean of accept_length_counts"),
                                ("num_cycles", 1, "accept_length_counts sum"),
                                ("accept_length_counts", [0, 0, 0], "accept_length_counts sum")):
        bad = json.loads(rec.model_dump_json())
        bad[field] = value
        with pytest.raises(ValueError, match=match):
            LiveRun.model_validate(bad)


def test_graph_mode_needs_cuda():
    if torch.cuda.is_available():
        pytest.skip("CUDA present: graph mode is allowed")
    with pytest.raises(RuntimeError, match="CUDA"):
        run_live(scenario(cuda_graph=True), True, 2, 0, device="cpu", repeats=1)


@pytest.mark.parametrize("bad", [dict(tp_size=2, placement="shared_tp"), dict(context_len=6)])
def test_rejects_what_it_cannot_run(bad):
    if "context_len" in bad:
        sc = scenario(num_steps=3, context_len=bad["context_len"])
    else:
        sc = scenario(**bad)
    with pytest.raises(ValueError):
        run_live(sc, True, 2, 0, device="cpu", repeats=1)


def _fake_capture(fn, *args):
    """CPU stand-in for a CUDA graph: replay re-runs `fn` on the same argument objects and
    writes its results into the tensors the capture returned (a graph's fixed addresses)."""
    out = fn(*args)

    class Replay:
        def replay(self):
            new = fn(*args)
            if isinstance(out, torch.Tensor):
                out.copy_(new)
            elif out is not None:
                for a, b in zip(out, new):
                    a.copy_(b)
    return Replay(), out


def test_graph_mode_wiring_matches_eager(monkeypatch):
    """Graph mode's static buffers (step d reads step d-1's outputs, one extend graph per
    length, verify reads the steps' ids) give the eager tokens, with replays emulated on CPU."""
    from calibration.live import loop as live_loop
    monkeypatch.setattr(live_loop, "capture_graph", _fake_capture)
    sc = scenario(num_steps=3, batch_size=2, context_len=64)
    lengths = oracle_accept_lengths(sc, 8)
    out = []
    for graph in (False, True):
        loop = SpecLoop(TargetModel(sc.target), DraftModel(sc.draft), 2, 64, 3, cuda_graph=graph)
        assert loop.graph == graph
        with torch.no_grad():
            history = []
            for row in lengths:
                loop.cycle(row)
                history.append(loop.verify_ids.clone())
        out.append(torch.stack(history))
    assert torch.equal(out[0], out[1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_graph_mode_matches_eager_on_gpu():
    sc = scenario(num_steps=3, batch_size=2, context_len=64)
    lengths = oracle_accept_lengths(sc, 6)
    out = []
    for graph in (False, True):
        target = TargetModel(sc.target, "cuda", torch.float32)
        draft = DraftModel(sc.draft, "cuda", torch.float32)
        with torch.no_grad():
            loop = SpecLoop(target, draft, 2, 64, 3, cuda_graph=graph)
            for row in lengths:
                loop.cycle(row)
        out.append((loop.verify_ids.cpu(), loop.target_tokens.cpu(), loop.kv_lens.copy()))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])
    assert (out[0][2] == out[1][2]).all()


def test_live_grid_covers_the_brief_within_budget():
    from calibration.live import grid as G
    pts = G.grid(quick=False)
    assert len({p.name for p in pts}) == len(pts)
    spec_b1 = [p for p in pts if p.speculative and p.batch_size == 1 and p.repeats == 1]
    assert len(spec_b1) == 8 * 3 * 2 * 2  # num_steps x rates x sizes x modes
    assert {(p.size, p.graph) for p in pts if not p.speculative and p.batch_size == 1} == {
        (s, g) for s in ("8b", "1b") for g in (False, True)}
    assert {p.graph for p in pts if p.repeats == 3} == {False, True}
    assert any(p.batch_size == 4 for p in pts)
    sc = pts[0].scenario(G.NUM_CYCLES, G.WARMUP_CYCLES)
    assert sc.profile == "h200" and sc.workload.context_len == 1024 and sc.draft.draft_vocab_size == 32000
    # The printed estimate (roofline + launch costs) leaves room under the 7-minute budget.
    assert sum(G.estimate_s(p, G.NUM_CYCLES, G.WARMUP_CYCLES) for p in pts) < 0.5 * 7 * 60
    quick = G.grid(quick=True)
    assert sum(G.estimate_s(p, G.QUICK_NUM_CYCLES, G.QUICK_WARMUP_CYCLES) for p in quick) < 0.5 * 60


def test_live_grid_writes_one_valid_file_per_point_and_resumes(tmp_path, monkeypatch):
    from calibration.live import grid as G
    t = Scenario.model_validate(dict(target=TARGET, draft=DRAFT, acceptance=dict(kind="iid", acceptance_rate=0.5)))
    monkeypatch.setattr(G, "SIZES", {"1b": (t.target, t.draft)})
    monkeypatch.setattr(G, "CONTEXT_LEN", 64)
    pts = [G.GridPoint("1b", False, 1, 2, 0.7), G.GridPoint("1b", False, 1, None, None),
           G.GridPoint("1b", False, 2, 1, 0.5, repeats=2),
           G.GridPoint("1b", False, 1, 3, 0.9, repeats=3, paired_baseline=True, interleaved=True)]
    monkeypatch.setattr(G, "grid", lambda quick: pts)
    argv = ["live", "--out", str(tmp_path), "--device", "cpu", "--cycles", "4", "--warmup", "1"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert sorted(f.name for f in tmp_path.glob("*.json")) == sorted(f"{p.name}.json" for p in pts)
    rec = LiveRun.model_validate_json((tmp_path / f"{pts[2].name}.json").read_text())
    assert len(rec.repeat_tok_per_s) == 2 and rec.scenario.workload.batch_size == 2
    assert rec.scenario == pts[2].scenario(4, 1)
    inter = LiveRun.model_validate_json((tmp_path / f"{pts[3].name}.json").read_text())
    assert len(inter.repeat_elapsed_us) == 3 and inter.paired_baseline_tok_per_s is not None
    assert inter.num_tokens == 3 * inter.repeat_num_tokens[0] and not (tmp_path / ".passes").exists()
    stamps = {f.name: f.stat().st_mtime_ns for f in tmp_path.glob("*.json")}
    assert CliRunner().invoke(app, argv).exit_code == 0  # resume: nothing left to run
    assert stamps == {f.name: f.stat().st_mtime_ns for f in tmp_path.glob("*.json")}


def test_merge_repeats_pools_runs_and_refuses_other_points():
    from calibration.live.run import merge_repeats
    sc = scenario(num_steps=2, batch_size=1)
    session = LiveSession("cpu")
    runs = [run_live(sc, True, num_cycles=6, warmup_cycles=1, device="cpu", session=session,
                     paired_baseline=True) for _ in range(3)]
    m = merge_repeats(runs)
    assert m.repeat_elapsed_us == [r.elapsed_us for r in runs]
    assert m.elapsed_us == pytest.approx(sum(r.elapsed_us for r in runs))
    assert m.num_tokens == sum(r.num_tokens for r in runs)
    assert m.tok_per_s == pytest.approx(m.num_tokens / m.elapsed_us * 1e6)
    bases = [r.paired_baseline_tok_per_s for r in runs]
    assert min(bases) <= m.paired_baseline_tok_per_s <= max(bases)
    assert m.phase_us["verify"] == pytest.approx(sum(r.phase_us["verify"] for r in runs) / 3)
    other = run_live(scenario(num_steps=3, batch_size=1), True, num_cycles=6, warmup_cycles=1,
                     device="cpu", session=session)
    with pytest.raises(ValueError, match="differ"):
        merge_repeats(runs + [other])


def _one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.mark.parametrize("argv, says", [
    (["--cycles", "0"], "--cycles must be >= 1, got 0"),  # refused, not taken as "the default"
    (["--warmup", "-1"], "--warmup must be >= 0, got -1"),
    (["--tp", "0"], "--tp must be >= 1, got 0"),
    (["--device", "nosuch"], "--device 'nosuch'"),
    (["--quick", "--noise"], "different grids"),
    (["--sizes", "8b"], "--sizes goes with --tp"),
    (["--tp", "2", "--device", "nosuch"], "--device must be one of cuda, cpu"),
    (["--tp", "2", "--device", "cpu", "--sizes", "70b"], "--sizes must be a comma-separated list of"),
])
def test_live_refuses_bad_options_in_one_line(tmp_path, argv, says):
    result = CliRunner().invoke(app, ["live", "--out", str(tmp_path / "out"), *argv])
    assert says in _one_line_error(result)
    assert not (tmp_path / "out").exists()


def test_live_on_a_cpu_runs_the_eager_points_only(tmp_path, monkeypatch):
    """`specdecsim live --quick --device cpu` is a smoke run: the CUDA-graph points are left out
    (said on stderr), the eager ones run and are written."""
    from calibration.live import grid as G
    t = Scenario.model_validate(dict(target=TARGET, draft=DRAFT, acceptance=dict(kind="iid", acceptance_rate=0.5)))
    monkeypatch.setattr(G, "SIZES", {"1b": (t.target, t.draft), "8b": (t.target, t.draft)})
    monkeypatch.setattr(G, "CONTEXT_LEN", 64)
    result = CliRunner().invoke(app, ["live", "--quick", "--device", "cpu", "--out", str(tmp_path),
                                      "--cycles", "2", "--warmup", "1"])
    assert result.exit_code == 0, result.output
    eager = [p for p in G.grid(quick=True) if not p.graph]
    assert len(eager) < len(G.grid(quick=True)) and "CUDA-graph points left out" in result.stderr
    assert sorted(f.name for f in tmp_path.glob("*.json")) == sorted(f"{p.name}.json" for p in eager)


def test_batch_grid_covers_the_brief_within_budget():
    from calibration.live import grid as G
    pts = G.batch_grid()
    assert len({p.name for p in pts}) == len(pts) and all(p.graph and p.size == "8b" for p in pts)
    assert {p.batch_size for p in pts} == {1, 2, 4, 8, 16, 32, 64}
    spec = [p for p in pts if p.speculative]
    assert {(p.num_steps, p.acceptance_rate) for p in spec} == {(1, 0.7), (3, 0.7), (5, 0.7)}
    assert all(p.paired_baseline for p in spec) and len(pts) - len(spec) == 7  # a baseline point per batch
    assert all(p.repeats == G.NOISE_REPEATS and p.interleaved for p in pts)
    assert {p.cycles(G.NUM_CYCLES, G.WARMUP_CYCLES) for p in pts if p.batch_size >= 16} == {(64, 16)}
    sc = pts[-1].scenario(*pts[-1].cycles(G.NUM_CYCLES, G.WARMUP_CYCLES))
    assert sc.workload.batch_size == 64 and sc.fidelity.num_cycles == 64
    # the printed estimate (roofline + launch costs; the H200 ran the batch-1 grids about 1.5x
    # slower than it) leaves room under the 6-minute budget
    assert 1.5 * sum(G.estimate_s(p, G.NUM_CYCLES, G.WARMUP_CYCLES) for p in pts) < 6 * 60


def test_live_batch_grid_on_a_cpu_writes_one_record_per_point_with_per_request_acceptance(tmp_path, monkeypatch):
    from calibration.live import grid as G
    t = Scenario.model_validate(dict(target=TARGET, draft=DRAFT, acceptance=dict(kind="iid", acceptance_rate=0.5)))
    monkeypatch.setattr(G, "SIZES", {"8b": (t.target, t.draft)})
    monkeypatch.setattr(G, "CONTEXT_LEN", 64)
    argv = ["live", "--batch-grid", "--batches", "1,3", "--device", "cpu", "--out", str(tmp_path),
            "--cycles", "3", "--warmup", "1"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    pts = [dataclasses.replace(p, graph=False) for p in G.batch_grid(("8b",), (1, 3))]
    assert sorted(f.name for f in tmp_path.glob("*.json")) == sorted(f"{p.name}.json" for p in pts)
    rec = LiveRun.model_validate_json((tmp_path / "8b_eager_b3_s5_a70_rep3.json").read_text())
    assert rec.scenario.workload.batch_size == 3 and rec.scenario.acceptance.acceptance_rate == 0.7
    assert sum(rec.accept_length_counts) == 3 * 3  # cycles x requests: one draw per request per cycle
    assert len(rec.repeat_elapsed_us) == 3 and rec.paired_baseline_tok_per_s is not None
    stamps = {f.name: f.stat().st_mtime_ns for f in tmp_path.glob("*.json")}
    assert CliRunner().invoke(app, argv).exit_code == 0  # resume: nothing left to run
    assert stamps == {f.name: f.stat().st_mtime_ns for f in tmp_path.glob("*.json")}


@pytest.mark.parametrize("argv, says", [
    (["--batch-grid", "--noise"], "different grids"),
    (["--batches", "1,2"], "--batches goes with --batch-grid"),
    (["--batch-grid", "--batches", "0"], "--batches must be"),
    (["--batch-grid", "--sizes", "70b"], "--sizes must be"),
    (["--batch-grid", "--tp", "2"], "leave out --tp"),
])
def test_live_batch_grid_refuses_bad_options_in_one_line(tmp_path, argv, says):
    result = CliRunner().invoke(app, ["live", "--out", str(tmp_path / "out"), "--device", "cpu", *argv])
    assert says in _one_line_error(result)
    assert not (tmp_path / "out").exists()
