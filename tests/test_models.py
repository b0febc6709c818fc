"""calibration.models.llama runs exactly the ops simulator.costs.forward_ops lists, in order (CPU, tiny shapes)."""

import pytest

torch = pytest.importorskip("torch")

from calibration.models import ops_torch  # noqa: E402
from calibration.models.llama import (GLUE_OPS, DraftModel, OpRecorder, TargetModel, describe_call,  # noqa: E402
                                     describe_op, eagle3_aux_layer_ids)
from simulator.config import ModelShape  # noqa: E402
from simulator.costs import forward_ops  # noqa: E402

TARGET = ModelShape(name="tiny-target", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=128, vocab_size=256)
DRAFT = ModelShape(name="tiny-draft", hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=128, vocab_size=256, draft_vocab_size=96,
                   num_fc_input_hidden_states=3)


def recorded(model, fn):
    rec = OpRecorder(ops_torch)
    model.ops = rec
    with torch.no_grad():
        out = fn()
    model.ops = ops_torch
    return rec, out


def inputs(b: int, n: int, kv_lens: list[int], vocab: int):
    ids = torch.arange(b * n) % vocab
    lens = torch.tensor(kv_lens)
    pos = (lens[:, None] + torch.arange(n)).reshape(-1)
    return ids, lens, pos


@pytest.mark.parametrize("b,n,c", [(1, 1, 16), (2, 4, 16), (3, 2, 8)])
def test_target_forward_runs_the_simulators_op_list(b, n, c):
    model = TargetModel(TARGET, seed=0)
    cache = model.new_cache(b, c + n)
    ids, lens, pos = inputs(b, n, [c - i for i in range(b)], TARGET.vocab_size)
    aux = torch.empty(b * n, 3 * TARGET.hidden_size)
    rec, tokens = recorded(model, lambda: model.forward(ids, cache, lens, pos, n, c, aux_out=aux))
    got = [describe_call(c_) for c_ in rec.calls if c_.name not in GLUE_OPS]
    want = [describe_op(op) for op in forward_ops.target_forward_ops(TARGET, 1, b, n, c, num_aux_hidden_states=3)]
    assert got == want
    assert rec.names.count("rope_cos_sin") == 1 and rec.names.count("concat") == 1
    assert tokens.shape == (b * n,) and torch.isfinite(aux).all()


@pytest.mark.parametrize("extend,n", [(False, 1), (True, 1), (True, 3)])
def test_draft_forward_runs_the_simulators_op_list(extend, n):
    b, c = 2, 12
    model = DraftModel(DRAFT, seed=1)
    cache = model.new_cache(b, c + n)
    ids, lens, pos = inputs(b, n, [c, c - 3], DRAFT.vocab_size)
    h = DRAFT.hidden_size
    kw = dict(aux=torch.randn(b * n, 3 * h)) if extend else dict(hidden=torch.randn(b * n, h))
    rec, (top, hidden) = recorded(model, lambda: model.forward(ids, cache=cache, kv_lens=lens, token_pos=pos,
                                                               num_new=n, context_len=c, **kw))
    got = [describe_call(c_) for c_ in rec.calls if c_.name not in GLUE_OPS]
    want = [describe_op(op) for op in forward_ops.draft_forward_ops(DRAFT, 1, b, n, c, extend)]
    assert got == want
    assert rec.names.count("concat") == DRAFT.num_hidden_layers and rec.names.count("rope_cos_sin") == 1
    assert top.shape == (b * n, 1) and int(top.max()) < DRAFT.draft_vocab_size
    assert hidden.shape == (b * n, h) and torch.isfinite(hidden).all()


def test_op_list_check_catches_a_missing_op():
    """The comparison is not vacuous: dropping the mask op from the model breaks it."""
    model = TargetModel(TARGET, seed=0)
    cache = model.new_cache(1, 9)
    ids, lens, pos = inputs(1, 1, [8], TARGET.vocab_size)
    rec, _ = recorded(model, lambda: model.forward(ids, cache, lens, pos, 1, 8))
    got = [describe_call(c_) for c_ in rec.calls if c_.name not in GLUE_OPS + ("attn_mask",)]
    assert got != [describe_op(op) for op in forward_ops.target_forward_ops(TARGET, 1, 1, 1, 8)]


def test_kv_write_lands_at_each_requests_position_and_mask_hides_later_slots():
    b, n, c = 2, 2, 10
    model = TargetModel(TARGET, seed=0)
    cache = model.new_cache(b, c + n)
    before = cache.k[0].clone()
    ids, lens, pos = inputs(b, n, [4, 9], TARGET.vocab_size)
    with torch.no_grad():
        model.forward(ids, cache, lens, pos, n, c)
    changed = (cache.k[0] != before).any(dim=(2, 3))  # (b, max_len)
    assert changed[0].nonzero().flatten().tolist() == [4, 5]
    assert changed[1].nonzero().flatten().tolist() == [9, 10]
    # Slots after a request's position do not influence its output.
    with torch.no_grad():
        t1 = model.forward(ids, cache, lens, pos, n, c)
        cache.k[1][0, 8:] += 100.0
        cache.v[1][0, 8:] += 100.0
        t2 = model.forward(ids, cache, lens, pos, n, c)
    assert torch.equal(t1[:n], t2[:n])


def test_weights_are_seeded_and_nonzero():
    a, b = TargetModel(TARGET, seed=3), TargetModel(TARGET, seed=3)
    assert torch.equal(a.layers[1]["qkv"], b.layers[1]["qkv"])
    assert not torch.equal(a.layers[1]["qkv"], TargetModel(TARGET, seed=4).layers[1]["qkv"])
    assert all((w != 0).all() for w in a.layers[0].values())


def test_eagle3_aux_layers_follow_sglang():
    assert eagle3_aux_layer_ids(32) == (2, 16, 29)
    assert eagle3_aux_layer_ids(16) == (2, 8, 13)
    assert all(0 <= i < 2 for i in eagle3_aux_layer_ids(2))
