"""Tensor-parallel versions of the live target and draft (`calibration/models/llama.py`), Megatron style.

Sharding over a TP group of `tp_size` ranks (rank r of the group holds slice r), as SGLang / vLLM
run Llama (Shoeybi et al. 2019, arXiv 1909.08053, section 3: column/row parallel linear; sglang
`python/sglang/srt/layers/linear.py`, `layers/vocab_parallel_embedding.py`,
`layers/logits_processor.py`):
  qkv       column-parallel: query heads and KV heads split into contiguous blocks (both must be
            divisible by tp_size; KV heads are never replicated here);
  o_proj    row-parallel (the rank's heads' columns), then one allreduce of (tokens, hidden);
  gate_up   column-parallel (the gate and up halves each split); down row-parallel + allreduce;
  embedding vocab-parallel: a rank looks up the ids in its vocabulary slice, zeroes the others,
            one allreduce (as `simulator.costs.forward_ops` lists it; not replicated);
  lm_head   vocab-parallel, then an all_gather of the logits so every rank takes the same argmax
            / top-1 over the full vocabulary;
  norms     replicated. The draft's fc over the target hidden states: replicated (every rank
            holds the whole (hidden, 3 * hidden) weight, no collective), as the simulator lists it.
So a target forward runs 1 + 2 * num_layers allreduces and 1 all_gather; the op program equals
`simulator.costs.forward_ops.target_forward_ops(shape, tp_size, ...)` / `draft_forward_ops`, collectives
included (`describe_tp_op` / `describe_tp_call` let a test compare them).

Weights: a TP model first builds the single-device model with the same seed (on its own device)
and keeps rank r's slices, so in float32 the TP forward equals the single-device one up to the
allreduce's summation order. KV caches are drawn at full width from the same generator and
sliced, so they match the single-device cache too. The masking of the vocab-parallel embedding
and the all_gather's rank-major -> vocabulary-order copy are glue (plain torch, not counted).

Collectives go through `TPOps` (ops_torch plus `allreduce`, `all_gather`, `broadcast` bound to a
process group), so an `OpRecorder(TPOps(group))` logs them in order with the compute ops.

Left out: padding of vocabularies / heads that do not divide tp_size (ValueError instead),
KV-head replication for kv_heads < tp_size, sequence parallelism, custom allreduce kernels.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from calibration.group import group_rank_world
from calibration.models import ops_torch
from calibration.models.llama import (DRAFT_WEIGHT_SEED, RMS_EPS, TARGET_WEIGHT_SEED, DraftModel, KVCache, OpCall,
                                     TargetModel, describe_call, describe_op, rope_table)
from simulator.config import ModelShape

COLLECTIVE_NAMES = ("allreduce", "all_gather", "broadcast")


def allreduce(x: torch.Tensor, group=None) -> torch.Tensor:
    """Sum `x` over the ranks of `group`, in place (torch.distributed.all_reduce); returns x.
    A single-process group (not initialised) returns x unchanged."""
    if group_rank_world(group)[1] > 1:
        dist.all_reduce(x, group=group)
    return x


def all_gather(x: torch.Tensor, group=None) -> torch.Tensor:
    """Concatenate every rank's (num_tokens, width) along the last dim, rank-major:
    returns (num_tokens, tp_size * width), rank r's block at columns r * width.. (all_gather into
    one tensor, then a glue copy into vocabulary order)."""
    world = group_rank_world(group)[1]
    if world == 1:
        return x
    x = x.contiguous()
    out = torch.empty((world * x.shape[0], *x.shape[1:]), dtype=x.dtype, device=x.device)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.13
    gather(out, x, group=group)
    t, w = x.shape[0], x.shape[-1]
    return out.view(world, t, w).permute(1, 0, 2).reshape(t, world * w)


def broadcast(x: torch.Tensor, src_rank: int = 0, group=None) -> torch.Tensor:
    """Copy `x` of group rank `src_rank` into `x` on every rank of `group`, in place; returns x."""
    if group_rank_world(group)[1] > 1:
        src = src_rank if group is None else dist.get_global_rank(group, src_rank)
        dist.broadcast(x, src=src, group=group)
    return x


class TPOps:
    """The `ops_torch` module plus TP collectives bound to one process group (None = WORLD).

    Compute ops resolve to `ops` (default ops_torch); `allreduce(x)`, `all_gather(x)`,
    `broadcast(x, src_rank)` call this module's functions. Wrap in `llama.OpRecorder` to log
    (and count) every op and collective in order.
    """

    def __init__(self, group=None, ops=ops_torch):
        self.group, self._ops = group, ops

    def __getattr__(self, name: str):
        return getattr(self._ops, name)

    def allreduce(self, x: torch.Tensor) -> torch.Tensor:
        return allreduce(x, self.group)

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        return all_gather(x, self.group)

    def broadcast(self, x: torch.Tensor, src_rank: int = 0) -> torch.Tensor:
        return broadcast(x, src_rank, self.group)


def check_shardable(shape: ModelShape, tp_size: int, role: str) -> None:
    """Raise ValueError naming the first field of `shape` that tp_size does not divide
    (num_attention_heads, num_key_value_heads, intermediate_size, vocab_size, lm_head vocab),
    or MoE / MLA shapes (dense GQA only)."""
    if shape.is_moe or shape.is_mla:
        raise ValueError(f"{role} {shape.name}: TP live models support dense GQA only (no MoE / MLA)")
    fields = {"num_attention_heads": shape.num_attention_heads, "num_key_value_heads": shape.kv_heads,
              "intermediate_size": shape.intermediate_size, "vocab_size": shape.vocab_size,
              "draft_vocab_size (lm_head)": shape.lm_head_vocab_size}
    for name, value in fields.items():
        if value % tp_size:
            raise ValueError(f"{role}.{name}={value} is not divisible by tp_size={tp_size}")


def _block(n: int, world: int, rank: int) -> slice:
    k = n // world
    return slice(rank * k, (rank + 1) * k)


class _TPMixin:
    """Sharded weights and the TP decoder layer, shared by TPTargetModel and TPDraftModel."""

    def _adopt(self, full, group) -> None:
        """Take over `full`'s device, generator and replicated tensors; keep rank slices of the rest."""
        self.tp_rank, self.tp_size = group_rank_world(group)
        self.group, self.ops = group, TPOps(group)
        self.shape, self.device, self.dtype, self._gen = full.shape, full.device, full.dtype, full._gen
        self.d, self.full_kv = full.d, full.kv
        r, w = self.tp_rank, self.tp_size
        h, kv, d, inter = full.h, full.kv, full.d, full.shape.intermediate_size
        self.h, self.kv = h // w, kv // w
        self._kv_block = _block(kv, w, r)
        q_rows, kv_rows = _block(h * d, w, r), _block(kv * d, w, r)
        i_rows = _block(inter, w, r)
        self.layers = []
        for lw in full.layers:
            qkv, gate_up = lw["qkv"], lw["gate_up"]
            k_w, v_w = qkv[h * d:(h + kv) * d], qkv[(h + kv) * d:]
            self.layers.append(dict(
                in_norm=lw["in_norm"],
                qkv=torch.cat([qkv[:h * d][q_rows], k_w[kv_rows], v_w[kv_rows]]),
                o=lw["o"][:, q_rows].clone(memory_format=torch.contiguous_format),
                post_norm=lw["post_norm"],
                gate_up=torch.cat([gate_up[:inter][i_rows], gate_up[inter:][i_rows]]),
                down=lw["down"][:, i_rows].clone(memory_format=torch.contiguous_format)))
        self.final_norm = full.final_norm
        vocab = full.lm_head.shape[0]
        self.lm_head = full.lm_head[_block(vocab, w, r)].clone()

    def _vocab_shard(self, table: torch.Tensor) -> torch.Tensor:
        return table[_block(table.shape[0], self.tp_size, self.tp_rank)].clone()

    def new_cache(self, batch_size: int, max_len: int) -> KVCache:
        """Static KV cache of this rank's KV heads: (batch_size, max_len, kv_heads / tp_size,
        head_dim) per layer, the single-device cache's slice (drawn at full width, then sliced)."""
        size = (batch_size, max_len, self.full_kv, self.d)
        ks = [self._randn(*size)[:, :, self._kv_block].contiguous() for _ in self.layers]
        vs = [self._randn(*size)[:, :, self._kv_block].contiguous() for _ in self.layers]
        return KVCache(ks, vs, rope_table(max_len, self.d, self.device, self.dtype), batch_size, max_len)

    def _prologue(self, ids, table, cache, kv_lens, token_pos, context_len, num_new):
        """Vocab-parallel embedding (+ allreduce), attn_mask, rope cos/sin gather."""
        o = self.ops
        rows = table.shape[0]
        local = ids - self.tp_rank * rows
        outside = (local < 0) | (local >= rows)
        x = o.embedding(local.masked_fill(outside, 0), table)
        x = o.allreduce(x.masked_fill_(outside.unsqueeze(-1), 0.0))
        mask = o.attn_mask(kv_lens, num_new, context_len + num_new, self.dtype)
        cos, sin = o.rope_cos_sin(token_pos, cache.cos_sin)
        return x, mask, (token_pos, cos, sin)

    def _reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Row-parallel linear output (o_proj, down_proj): allreduce over the group; the layer
        itself is the single-device one (models._Base._layer) on this rank's slices."""
        return self.ops.allreduce(x)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        """Final norm, vocab-parallel lm_head, all_gather: (tokens, full vocabulary) on every rank."""
        o = self.ops
        return o.all_gather(o.gemm(o.rmsnorm(x, self.final_norm, RMS_EPS), self.lm_head))


class TPTargetModel(_TPMixin, TargetModel):
    """Llama-style target sharded over a TP group; same forward signature as TargetModel.

    Args:
        shape: target ModelShape (dense GQA; heads, KV heads, intermediate_size and vocab_size
            divisible by the group size).
        group: torch.distributed process group (None = WORLD; uninitialised = one rank).
        device, dtype, seed, num_aux_states: as TargetModel (same seed = same full weights).
        keep_full_embed: also keep the whole embedding table as `full_embed` (rank 0 of the
            tp1_colocated placement shares it with its whole draft); else full_embed is None.

    Raises:
        ValueError: a field not divisible by the group size (`check_shardable`), MoE / MLA.
    """

    def __init__(self, shape: ModelShape, group=None, device="cpu", dtype=torch.float32,
                 seed: int = TARGET_WEIGHT_SEED, num_aux_states: int = 3, keep_full_embed: bool = False):
        check_shardable(shape, group_rank_world(group)[1], "target")
        full = TargetModel(shape, device, dtype, seed, num_aux_states)
        self._adopt(full, group)
        self.aux_layer_ids = full.aux_layer_ids
        self.embed = self._vocab_shard(full.embed)
        self.full_embed = full.embed if keep_full_embed else None


class TPDraftModel(_TPMixin, DraftModel):
    """EAGLE-3 draft sharded over the same TP group as the target (placement shared_tp).

    Decoder layer(s) and lm_head (over draft_vocab_size) sharded like the target; the fc over
    the target hidden states replicated; the embedding vocab-parallel.

    Args:
        shape: draft ModelShape. group, device, dtype, seed: as TPTargetModel.
        embed: this rank's vocab-parallel slice of the target's embedding to share (EAGLE-3
            does; rows vocab_size / tp_size), or None to draw the draft's own and slice it.

    Raises:
        ValueError: as TPTargetModel; num_fc_input_hidden_states < 1; an `embed` of the wrong size.
    """

    def __init__(self, shape: ModelShape, group=None, device="cpu", dtype=torch.float32,
                 seed: int = DRAFT_WEIGHT_SEED, embed: torch.Tensor | None = None):
        world = group_rank_world(group)[1]
        check_shardable(shape, world, "draft")
        want = (shape.vocab_size // world, shape.hidden_size)
        if embed is not None and tuple(embed.shape) != want:
            raise ValueError(f"draft embed slice has shape {tuple(embed.shape)}; expected {want} "
                             f"(vocab_size / tp_size, hidden_size)")
        # A non-None placeholder makes DraftModel skip drawing its own table (same generator
        # sequence as a single-device draft that shares the target's embedding).
        placeholder = torch.empty(0, device=device, dtype=dtype) if embed is not None else None
        full = DraftModel(shape, device, dtype, seed, placeholder)
        self._adopt(full, group)
        self.fc = full.fc
        self.embed = embed if embed is not None else self._vocab_shard(full.embed)


def describe_tp_op(op, activation_dtype_bytes: float = 2.0) -> tuple:
    """`llama.describe_op`, plus collectives: (name, world_size, elements per rank), the
    elements read off op.size_bytes / activation_dtype_bytes (the model's activation bytes)."""
    if op.is_collective:
        return (op.name, op.world_size, int(op.size_bytes // activation_dtype_bytes))
    return describe_op(op)


def describe_tp_call(call: OpCall, world_size: int) -> tuple:
    """`llama.describe_call`, plus recorded TPOps collectives: (name, world_size, numel of the input)."""
    if call.name in COLLECTIVE_NAMES:
        return (call.name, world_size, call.args[0].numel())
    return describe_call(call)
