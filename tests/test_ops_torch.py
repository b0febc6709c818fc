"""calibration.models.ops_torch and op_runners: every runnable op name has a runner,
and the ops compute the right thing."""

import dataclasses
import math

import pytest

torch = pytest.importorskip("torch")

from calibration.models import op_runners, ops_torch  # noqa: E402
from simulator.config import ModelShape  # noqa: E402
from simulator.costs import forward_ops  # noqa: E402
from simulator.costs import ops as sim_ops  # noqa: E402

TINY_TARGET = ModelShape(name="tiny", hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                         num_key_value_heads=2, intermediate_size=128, vocab_size=300)
TINY_DRAFT = TINY_TARGET.model_copy(update={"name": "tiny-draft", "num_hidden_layers": 1,
                                            "draft_vocab_size": 100, "num_fc_input_hidden_states": 3})
TINY_MOE = TINY_TARGET.model_copy(update={"name": "tiny-moe", "n_routed_experts": 8, "num_experts_per_tok": 2,
                                          "moe_intermediate_size": 32, "n_shared_experts": 1})
TINY_MLA = TINY_MOE.model_copy(update={"name": "tiny-mla", "kv_lora_rank": 32, "qk_nope_head_dim": 16,
                                       "qk_rope_head_dim": 8, "v_head_dim": 16, "q_lora_rank": 48})


def _all_ops() -> list[sim_ops.Op]:
    out = []
    for tp in (1, 2):
        for m in (TINY_TARGET, TINY_MOE, TINY_MLA):
            out += forward_ops.target_forward_ops(m, tp, 2, 3, 16)
        out += forward_ops.draft_forward_ops(TINY_DRAFT, tp, 2, 3, 16, extend=True)
        out += forward_ops.draft_forward_ops(TINY_DRAFT, tp, 2, 1, 16, extend=False)
    return out + sim_ops.accept_ops(2, 4)


def test_every_runnable_op_name_has_a_runner_that_runs():
    names_run = set()
    for op in {o.key: o for o in _all_ops()}.values():
        if not op_runners.runnable(op):
            with pytest.raises(ValueError):
                op_runners.make_op_runner(op, "cpu", torch.float32)
            continue
        out = op_runners.make_op_runner(op, "cpu", torch.float32)()
        names_run.add(op.name)
        for t in out if isinstance(out, tuple) else (out,):
            assert t is None or not bool(torch.isnan(t.float()).any()), op.key  # masks hold -inf
    assert {"gemm", "lm_head", "fc", "router", "rmsnorm", "rotary", "kv_write", "attention", "attn_mask",
            "silu_mul", "add", "embedding", "argmax", "topk", "topk_route", "accept"} <= names_run


@pytest.mark.parametrize("key", ["mla_attention:h=8,latent=40,kvb=2", "moe_experts:e=8,k=2,h=64,i=32,w=2"])
def test_roofline_only_ops_raise_a_clear_error(key):
    op = sim_ops.Op(name="x", key=key, axes={"num_tokens": 1})
    with pytest.raises(ValueError, match="roofline-only"):
        op_runners.make_op_runner(op, "cpu", torch.float32)


def test_collective_raises():
    with pytest.raises(ValueError, match="collective"):
        op_runners.make_op_runner(sim_ops.collective("allreduce", 1024, 2), "cpu", torch.float32)


def test_runner_shapes_follow_the_op_axes():
    op = sim_ops.gemm("gemm", 5, 32, 48, 2.0)
    assert op_runners.make_op_runner(op, "cpu", torch.float32)().shape == (5, 48)
    op7 = dataclasses.replace(op, axes={"num_tokens": 7})
    assert op_runners.make_op_runner(op7, "cpu", torch.float32)().shape == (7, 48)


def test_fp8_weights_run_as_the_given_dtype_on_cpu_and_say_so():
    runner = op_runners.make_op_runner(sim_ops.gemm("gemm", 4, 32, 48, 1.0), "cpu", torch.float32)
    assert runner().shape == (4, 48) and "fp8" in runner.note


def _naive_attention(q, ck, cv, context_len):
    """float64 loop reference: token i of each request sees keys 0..context_len + i."""
    b, n, h, d = q.shape
    group = h // ck.shape[2]
    out = torch.zeros(b, n, h, d, dtype=torch.float64)
    for r in range(b):
        for i in range(n):
            for hh in range(h):
                keys = ck[r, : context_len + i + 1, hh // group].double()
                vals = cv[r, : context_len + i + 1, hh // group].double()
                s = keys @ q[r, i, hh].double() / math.sqrt(d)
                out[r, i, hh] = torch.softmax(s, 0) @ vals
    return out


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("with_mask", [False, True])
def test_attention_matches_naive_softmax(n, with_mask):
    g = torch.Generator().manual_seed(0)
    b, h, kv, d, c = 2, 8, 2, 16, 5
    q = torch.randn(b, n, h, d, generator=g)
    ck, cv = torch.randn(b, c + n + 4, kv, d, generator=g), torch.randn(b, c + n + 4, kv, d, generator=g)
    mask = ops_torch.attn_mask(torch.full((b,), c), n, c + n, torch.float32) if with_mask else None
    got = ops_torch.attention(q, ck, cv, c, n, mask)
    assert got.shape == (b, n, h, d)
    torch.testing.assert_close(got.double(), _naive_attention(q, ck, cv, c), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernel", ["attention_gqa_masked", "attention_folded"])
def test_both_masked_gqa_layouts_match_naive_softmax(kernel):
    g = torch.Generator().manual_seed(4)
    b, n, h, kv, d, c = 2, 3, 8, 2, 16, 5
    q = torch.randn(b, n, h, d, generator=g)
    ck, cv = torch.randn(b, c + n, kv, d, generator=g), torch.randn(b, c + n, kv, d, generator=g)
    mask = ops_torch.attn_mask(torch.full((b,), c), n, c + n, torch.float32)
    got = getattr(ops_torch, kernel)(q, ck.transpose(1, 2), cv.transpose(1, 2), mask)
    torch.testing.assert_close(got.double(), _naive_attention(q, ck, cv, c), rtol=1e-4, atol=1e-5)


def test_attn_mask_hides_later_positions_per_request():
    mask = ops_torch.attn_mask(torch.tensor([2, 4]), 2, 6, torch.float32)
    visible = (mask == 0).int().tolist()
    assert visible[0] == [[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]]
    assert visible[1] == [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]]


def test_accept_matches_a_loop():
    g = torch.Generator().manual_seed(1)
    draft = torch.randint(0, 3, (64, 6), generator=g)
    target = torch.randint(0, 3, (64, 6), generator=g)
    want = []
    for row_d, row_t in zip(draft.tolist(), target.tolist()):
        k = 0
        while k < len(row_d) and row_d[k] == row_t[k]:
            k += 1
        want.append(k)
    got = ops_torch.accept(draft, target)
    assert got.dtype == torch.int64 and got.tolist() == want


def test_elementwise_ops_match_float64_references():
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(5, 16, generator=g), torch.randn(16, generator=g)
    ref = x.double() / torch.sqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    torch.testing.assert_close(ops_torch.rmsnorm(x, w).double(), ref, rtol=1e-5, atol=1e-6)
    gu = torch.randn(5, 32, generator=g)
    gate, up = gu.double()[:, :16], gu.double()[:, 16:]
    torch.testing.assert_close(ops_torch.silu_mul(gu).double(), gate / (1 + torch.exp(-gate)) * up,
                               rtol=1e-5, atol=1e-6)
    weight = torch.randn(24, 16, generator=g)
    torch.testing.assert_close(ops_torch.gemm(x, weight).double(), x.double() @ weight.double().T,
                               rtol=1e-5, atol=1e-5)
    table, ids = torch.randn(10, 4, generator=g), torch.tensor([3, 0, 9])
    assert torch.equal(ops_torch.embedding(ids, table), table[ids])
    logits = torch.randn(4, 50, generator=g)
    assert ops_torch.argmax(logits).tolist() == [int(r.argmax()) for r in logits]
    assert ops_torch.topk(logits, 3)[1][:, 0].tolist() == ops_torch.argmax(logits).tolist()


def test_rotary_rotates_pairs_by_the_position_angle():
    g = torch.Generator().manual_seed(3)
    t, d = 4, 8
    q, k = torch.randn(t, 3, d, generator=g), torch.randn(t, 1, d, generator=g)
    angle = torch.randn(t, d // 2, generator=g).repeat(1, 2)
    q_rot, k_rot = ops_torch.rotary(q, k, angle.cos(), angle.sin())
    half = d // 2
    a = angle[:, :half].unsqueeze(1).double()
    x1, x2 = q.double()[..., :half], q.double()[..., half:]
    want = torch.cat([x1 * a.cos() - x2 * a.sin(), x2 * a.cos() + x1 * a.sin()], dim=-1)
    torch.testing.assert_close(q_rot.double(), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(k_rot.norm(dim=-1), k.norm(dim=-1), rtol=1e-5, atol=1e-6)


def test_kv_write_puts_each_token_at_its_slot():
    ck, cv = torch.zeros(3, 5, 2, 4), torch.zeros(3, 5, 2, 4)
    k, v = torch.randn(2, 2, 4), torch.randn(2, 2, 4)
    ops_torch.kv_write(ck, cv, k, v, (torch.tensor([0, 2]), torch.tensor([4, 1])))
    assert torch.equal(ck[0, 4], k[0]) and torch.equal(cv[2, 1], v[1])
    assert int((ck != 0).any(-1).any(-1).sum()) == 2
