"""Random-weight models for live speculative runs: a Llama-style target and an EAGLE-3 draft.

Both are built only from the functional ops in `calibration/models/ops_torch.py`, called through
`self.ops`, in the order `simulator.costs.forward_ops.target_forward_ops` / `draft_forward_ops` list
them (tp_size = 1), so the simulator's per-op sum and these forwards describe one program.
`OpRecorder` wraps the ops module to log every call; tests compare that log with the list.

A few glue ops that the simulator's op list does not (yet) have run through `self.ops` too,
so they are counted (`GLUE_OPS`): per forward one `rope_cos_sin` (gather cos/sin at the new
tokens' positions), per draft layer one `concat` (embedding ++ hidden, the qkv input), and
per verify one `concat` of the target's three hidden states into the draft's fc input.

KV cache: static tensors (batch_size, max_len, kv_heads, head_dim) per layer (`KVCache`).
Attention always reads the fixed window cache[:, :context_len + num_new] with a mask built
from each request's position (`kv_lens`), so shapes are static (CUDA-graph capturable) and
the attention cost is the simulator's at `context_len`.

Weights are random (seeded): gemm weights ~ N(0, 1/in_features), embeddings ~ N(0, 1), norm
weights 1 + N(0, 0.01); activations stay O(1) per layer and the residual grows like
sqrt(layers), finite in bf16. No zeros anywhere, so no kernel can shortcut.

Left out: tensor parallelism (tp_size = 1 only), MoE and MLA layers, the EAGLE-3 draft-to-
target vocabulary map (draft ids < draft_vocab_size are used as target ids directly), trees.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from calibration.models import ops_torch
from calibration.models.op_runners import parse_key
from simulator.config import ModelShape

ROPE_THETA = 500_000.0  # Llama 3 rope_theta (HF config.json of Llama-3.1-8B).
RMS_EPS = 1e-5  # Llama 3 rms_norm_eps.
# Weight seeds every calibration and live run uses (weights do not depend on a scenario's seed).
TARGET_WEIGHT_SEED, DRAFT_WEIGHT_SEED = 0, 1
GLUE_OPS: tuple[str, ...] = ()  # ops run here that simulator.costs.forward_ops does not list: none
# Ops of simulator.costs.ops that the live loop (calibration/live/loop.py) runs with plain torch between forwards
# (not through ops_torch, so an OpRecorder does not see them).
LOOP_IO_OPS = ("cat_ids", "copy_ids", "gather_ids", "gather_hidden")


def eagle3_aux_layer_ids(num_layers: int, num_states: int = 3) -> tuple[int, ...]:
    """Target layers whose *input* hidden state feeds the EAGLE-3 fc (low, mid, high).

    Source: sglang `models/llama.py` `set_eagle3_layers_to_capture`: layers 2, L // 2, L - 3.
    Clamped to 0..num_layers-1 for tiny test models; other counts are spread evenly.
    """
    if num_states == 3:
        ids = (2, num_layers // 2, num_layers - 3)
    else:
        ids = tuple(round(i * (num_layers - 1) / max(1, num_states - 1)) for i in range(num_states))
    return tuple(min(max(i, 0), num_layers - 1) for i in ids)


@dataclass
class OpCall:
    """One recorded op call: its ops_torch name and the arguments it got."""

    name: str
    args: tuple
    kwargs: dict


class OpRecorder:
    """Stands in for the `ops_torch` module and logs every op call (name + args) in order.

    Usage: `model.ops = OpRecorder(ops_torch)`; run a forward; read `recorder.calls`.
    """

    def __init__(self, ops=ops_torch):
        self._ops = ops
        self.calls: list[OpCall] = []

    def __getattr__(self, name: str):
        fn = getattr(self._ops, name)

        def recorded(*args, **kwargs):
            self.calls.append(OpCall(name, args, kwargs))
            return fn(*args, **kwargs)

        return recorded

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.calls]


def describe_op(op) -> tuple:
    """What a `simulator.costs.ops.Op` says about its kernel: (kind, widths..., token counts).

    gemm-keyed ops (gemm, lm_head, fc): ('gemm', in_features, out_features, num_tokens);
    attention / attn_mask: (kind, batch_size, num_tokens per request, context_len);
    elementwise: (name, width, num_tokens).
    """
    kind, fields = parse_key(op.key)
    if kind == "gemm":
        return ("gemm", int(fields["k"]), int(fields["n"]), op.axes["num_tokens"])
    if kind in ("attention", "attn_mask"):
        return (kind, op.axes["batch_size"], op.axes["num_tokens"], op.axes["context_len"])
    return (kind, int(fields["h"]), op.axes["num_tokens"])


def describe_call(call: OpCall) -> tuple:
    """The `describe_op` tuple read off a recorded ops_torch call's arguments."""
    a, name = call.args, call.name
    if name == "gemm":
        return ("gemm", a[1].shape[1], a[1].shape[0], a[0].shape[0])
    if name == "attention":  # q (b, n, h, d), ..., context_len
        return ("attention", a[0].shape[0], a[0].shape[1], a[3])
    if name == "attn_mask":  # kv_lens (b,), num_new, total_len
        return ("attn_mask", a[0].shape[0], a[1], a[2] - a[1])
    if name == "rotary":
        return ("rotary", (a[0].shape[1] + a[1].shape[1]) * a[0].shape[2], a[0].shape[0])
    if name == "kv_write":  # cache_k, cache_v, k (t, kv, d), ...
        return ("kv_write", 2 * a[2].shape[1] * a[2].shape[2], a[2].shape[0])
    if name == "silu_mul":
        return ("silu_mul", a[0].shape[-1] // 2, a[0].shape[0])
    if name == "embedding":
        return ("embedding", a[1].shape[1], a[0].shape[0])
    if name == "accept":  # (batch_size, compared drafts): tokens = batch_size, width = drafts
        return ("accept", a[0].shape[1], a[0].shape[0])
    if name == "rope_cos_sin":  # token_pos (t,), cos_sin (max_len, 2 * head_dim)
        return ("rope_cos_sin", a[1].shape[1] // 2, a[0].shape[0])
    if name == "concat":  # list of (t, w_i) tensors
        return ("concat", sum(x.shape[-1] for x in a[0]), a[0][0].shape[0])
    return (name, a[0].shape[-1], a[0].shape[0])


@dataclass
class KVCache:
    """Static KV cache of one model for one batch, plus the rope table for its positions.

    Attributes:
        k, v: per layer, (batch_size, max_len, kv_heads, head_dim), random (not zero) at start.
        cos_sin: (max_len, 2 * head_dim) rope cos ++ sin for positions 0..max_len-1.
    """

    k: list[torch.Tensor]
    v: list[torch.Tensor]
    cos_sin: torch.Tensor
    batch_size: int
    max_len: int
    _batch_idx: dict[int, torch.Tensor] = field(default_factory=dict)

    def batch_idx(self, num_new: int) -> torch.Tensor:
        """(batch_size * num_new,) int64 request index of each new token; cached per num_new.

        Built outside CUDA-graph capture as long as the caller warms up eagerly first.
        """
        t = self._batch_idx.get(num_new)
        if t is None:
            dev = self.k[0].device
            t = torch.arange(self.batch_size, device=dev).repeat_interleave(num_new)
            self._batch_idx[num_new] = t
        return t


def rope_table(max_len: int, head_dim: int, device, dtype, theta: float = ROPE_THETA) -> torch.Tensor:
    """(max_len, 2 * head_dim): cos then sin of position * inv_freq, half-rotation layout.

    Source: Su et al. 2021, arXiv 2104.09864; HF Llama `LlamaRotaryEmbedding` (no scaling).
    """
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.outer(torch.arange(max_len, dtype=torch.float64), inv_freq)
    ang = torch.cat([ang, ang], dim=-1)
    return torch.cat([ang.cos(), ang.sin()], dim=-1).to(device=device, dtype=dtype)


class _Base:
    """Weights and the shared decoder layer of both models."""

    def __init__(self, shape: ModelShape, qkv_in: int, device, dtype, seed: int):
        self.shape, self.device, self.dtype = shape, torch.device(device), dtype
        self.ops = ops_torch
        self._gen = torch.Generator(device=self.device).manual_seed(seed)
        m = shape
        self.h, self.kv, self.d = m.num_attention_heads, m.kv_heads, m.attn_head_dim
        self.layers = []
        for _ in range(m.num_hidden_layers):
            self.layers.append(dict(
                in_norm=self._norm(qkv_in),
                qkv=self._linear((self.h + 2 * self.kv) * self.d, qkv_in),
                o=self._linear(m.hidden_size, self.h * self.d),
                post_norm=self._norm(m.hidden_size),
                gate_up=self._linear(2 * m.intermediate_size, m.hidden_size),
                down=self._linear(m.hidden_size, m.intermediate_size)))
        self.final_norm = self._norm(m.hidden_size)

    def _randn(self, *size: int) -> torch.Tensor:
        return torch.randn(*size, device=self.device, dtype=self.dtype, generator=self._gen)

    def _linear(self, out_features: int, in_features: int) -> torch.Tensor:
        """(out_features, in_features) ~ N(0, 1/in_features): unit-variance outputs."""
        return self._randn(out_features, in_features).mul_(in_features ** -0.5)

    def _norm(self, width: int) -> torch.Tensor:
        return self._randn(width).mul_(0.01).add_(1.0)

    def new_cache(self, batch_size: int, max_len: int) -> KVCache:
        """Static KV cache for `batch_size` requests and positions 0..max_len-1, random-filled."""
        size = (batch_size, max_len, self.kv, self.d)
        ks = [self._randn(*size) for _ in self.layers]
        vs = [self._randn(*size) for _ in self.layers]
        return KVCache(ks, vs, rope_table(max_len, self.d, self.device, self.dtype), batch_size, max_len)

    def _layer(self, i: int, x: torch.Tensor, residual: torch.Tensor, cache: KVCache, rope,
               mask: torch.Tensor, context_len: int, num_new: int) -> torch.Tensor:
        """One pre-norm decoder layer; x is the qkv-side input, residual the stream (t, hidden)."""
        o, w = self.ops, self.layers[i]
        t, b = x.shape[0], cache.batch_size
        hd, kvd = self.h * self.d, self.kv * self.d
        pos, cos, sin = rope
        qkv = o.gemm(o.rmsnorm(x, w["in_norm"], RMS_EPS), w["qkv"])
        q = qkv[:, :hd].view(t, self.h, self.d)
        k = qkv[:, hd:hd + kvd].view(t, self.kv, self.d)
        v = qkv[:, hd + kvd:].view(t, self.kv, self.d)
        q, k = o.rotary(q, k, cos, sin)
        o.kv_write(cache.k[i], cache.v[i], k, v, (cache.batch_idx(num_new), pos))
        attn = o.attention(q.view(b, num_new, self.h, self.d), cache.k[i], cache.v[i],
                           context_len, num_new, mask)
        x = o.add(residual, self._reduce(o.gemm(attn.reshape(t, hd), w["o"])))
        mlp = o.gemm(o.silu_mul(o.gemm(o.rmsnorm(x, w["post_norm"], RMS_EPS), w["gate_up"])), w["down"])
        return o.add(x, self._reduce(mlp))

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        """Final norm and lm_head: (tokens, vocab) logits (tensor-parallel models all_gather them)."""
        return self.ops.gemm(self.ops.rmsnorm(x, self.final_norm, RMS_EPS), self.lm_head)

    def _reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Output of a row-parallel linear (o_proj, down_proj): the identity on one device;
        tensor-parallel models (calibration/models/tp_llama.py) allreduce here."""
        return x

    def _prologue(self, ids, table, cache, kv_lens, token_pos, context_len, num_new):
        """embedding, attn_mask (once per forward), rope cos/sin gather (glue)."""
        o = self.ops
        x = o.embedding(ids, table)
        mask = o.attn_mask(kv_lens, num_new, context_len + num_new, self.dtype)
        cos, sin = o.rope_cos_sin(token_pos, cache.cos_sin)
        return x, mask, (token_pos, cos, sin)


class TargetModel(_Base):
    """Llama-style target, tp_size = 1: greedy tokens and the EAGLE-3 hidden states.

    Args:
        shape: target ModelShape (dense GQA; MoE / MLA are rejected).
        device: torch device. dtype: bf16 on CUDA, float32 for CPU tests.
        seed: seeds the weights' torch.Generator.
        num_aux_states: hidden states captured for the draft's fc (EAGLE-3: 3).
    """

    def __init__(self, shape: ModelShape, device="cpu", dtype=torch.float32, seed: int = TARGET_WEIGHT_SEED,
                 num_aux_states: int = 3):
        if shape.is_moe or shape.is_mla:
            raise ValueError(f"{shape.name}: live models support dense GQA only (no MoE / MLA)")
        super().__init__(shape, shape.hidden_size, device, dtype, seed)
        self.embed = self._randn(shape.vocab_size, shape.hidden_size)
        self.lm_head = self._linear(shape.vocab_size, shape.hidden_size)
        self.aux_layer_ids = eagle3_aux_layer_ids(shape.num_hidden_layers, num_aux_states) if num_aux_states else ()

    def forward(self, ids: torch.Tensor, cache: KVCache, kv_lens: torch.Tensor, token_pos: torch.Tensor,
                num_new: int, context_len: int, aux_out: torch.Tensor | None = None) -> torch.Tensor:
        """Target forward over `num_new` tokens per request (decode: 1, verify: num_draft_tokens).

        Args:
            ids: (batch_size * num_new,) int64, request-major.
            cache: this model's KVCache; the new keys/values are written at `token_pos`.
            kv_lens: (batch_size,) int64: each request's position of its first new token.
            token_pos: (batch_size * num_new,) int64: kv_lens[r] + i, computed by the caller.
            num_new: new tokens per request. context_len: static window; attention reads
                context_len + num_new slots (needs token_pos < context_len + num_new).
            aux_out: (batch_size * num_new, num_aux * hidden) buffer to receive the captured
                hidden states (one `concat`); None skips it (baseline decode).

        Returns:
            (batch_size * num_new,) int64 greedy tokens.
        """
        o = self.ops
        x, mask, rope = self._prologue(ids, self.embed, cache, kv_lens, token_pos, context_len, num_new)
        aux = []
        for i in range(len(self.layers)):
            if aux_out is not None and i in self.aux_layer_ids:
                aux += [x] * self.aux_layer_ids.count(i)
            x = self._layer(i, x, x, cache, rope, mask, context_len, num_new)
        tokens = o.argmax(self._logits(x))
        if aux_out is not None:
            o.concat(aux, out=aux_out)
        return tokens


class DraftModel(_Base):
    """EAGLE-3-style draft: fc over target hidden states, decoder layer(s) reading
    concat(embedding, hidden) (2 * hidden wide), its own lm_head over draft_vocab_size.

    Source: Li et al. 2025, arXiv 2503.01840; sglang `models/llama_eagle3.py` (which norms the
    embedding and the hidden apart; here one rmsnorm over the 2 * hidden concat, as
    simulator.costs.forward_ops lists it).

    Args:
        shape: draft ModelShape (num_fc_input_hidden_states >= 1).
        embed: the target's embedding table to share (EAGLE-3 does); None draws its own.
    """

    def __init__(self, shape: ModelShape, device="cpu", dtype=torch.float32, seed: int = DRAFT_WEIGHT_SEED,
                 embed: torch.Tensor | None = None):
        if shape.num_fc_input_hidden_states < 1:
            raise ValueError(f"{shape.name}: the live draft needs num_fc_input_hidden_states >= 1 "
                             "(EAGLE-3: 3)")
        super().__init__(shape, 2 * shape.hidden_size, device, dtype, seed)
        h = shape.hidden_size
        self.embed = embed if embed is not None else self._randn(shape.vocab_size, h)
        self.fc = self._linear(h, shape.num_fc_input_hidden_states * h)
        self.lm_head = self._linear(shape.lm_head_vocab_size, h)

    def forward(self, ids: torch.Tensor, cache: KVCache, kv_lens: torch.Tensor, token_pos: torch.Tensor,
                num_new: int, context_len: int, hidden: torch.Tensor | None = None,
                aux: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """One draft forward: a draft step (hidden given) or the draft extend (aux given).

        Args:
            ids: (batch_size * num_new,) int64 token ids.
            hidden: (batch_size * num_new, hidden): the draft's own previous hidden (steps).
            aux: (batch_size * num_new, num_fc_input_hidden_states * hidden): target hidden
                states, fused by the fc (extend). Exactly one of hidden / aux is given.
            Others as in TargetModel.forward.

        Returns:
            (top token ids (batch_size * num_new, 1) int64, hidden (batch_size * num_new, hidden)
            before the final norm, the next step's input).
        """
        if (hidden is None) == (aux is None):
            raise ValueError("give exactly one of hidden (draft step) or aux (draft extend)")
        o = self.ops
        e, mask, rope = self._prologue(ids, self.embed, cache, kv_lens, token_pos, context_len, num_new)
        if aux is not None:
            hidden = o.gemm(aux, self.fc)
        for i in range(len(self.layers)):
            hidden = self._layer(i, o.concat([e, hidden]), hidden, cache, rope, mask, context_len, num_new)
        _, top_ids = o.topk(self._logits(hidden), 1)
        return top_ids, hidden
