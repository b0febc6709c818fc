"""What one GPU of a scenario holds: weights, KV cache and the draft's, against the GPU's memory.

Read from the same ops the cost model prices (simulator.costs.forward_ops), so every architecture
it knows (dense, MoE, MLA, linear attention, weight formats, TP sharding) is counted as it is
priced:
- weights per rank: the bytes every weight-carrying op of a forward reads once (its
  `bytes_fixed`), taken over enough tokens that every routed expert is touched, plus the
  vocab-parallel embedding table (read by rows, so not in a forward's fixed bytes; at the
  activation width: fp8 checkpoints keep it in bf16);
- KV cache per rank: the bytes each cached token costs a decode's attention (its
  `bytes_per_kv_token`: K and V of the rank's heads, or MLA's latent), times the batch's tokens:
  batch x (context + max_new_tokens + the verify's draft tokens);
- the draft the same way (an EAGLE / EAGLE-3 / MTP draft without an embedding table: it reads
  the target's), on the GPU that holds it with the target's shard (shared_tp: 1/TP of it;
  colocated: a 1/draft_tp share on GPU 0; dedicated: on its own GPU, checked alone).

Checked against vLLM 0.26.0's own "Model loading took N GiB" on the lent H200
(data/engine_runs/*/campaign.log.gz; tests/test_memory.py): Llama-3.1-8B, Qwen3-30B-A3B, each
with and without its EAGLE-3 draft.

Usable: the catalog GPU's memory x USABLE_FRACTION (vLLM's default gpu_memory_utilization, 0.9;
the rest is the engine's activations, CUDA graphs and allocator). Left out: activations, CUDA
graphs, a linear-attention layer's per-request state, prefix-cache headroom.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.config import Scenario

USABLE_FRACTION = 0.9  # vLLM's default gpu_memory_utilization (vllm/config/cache.py)
ALL_EXPERTS_TOKENS = 1 << 20  # a forward this long touches every routed expert (moe_ops.expected_distinct_experts)
GB = 1e9


@dataclass
class MemoryFit:
    """Bytes on the fullest GPU and what it can hold."""

    target_weights_bytes: float
    target_kv_bytes: float
    draft_weights_bytes: float
    draft_kv_bytes: float
    usable_bytes: float | None  # None: the GPU's memory is not known (no catalog GPU)
    gpu: str | None

    @property
    def total_bytes(self) -> float:
        return self.target_weights_bytes + self.target_kv_bytes + self.draft_weights_bytes + self.draft_kv_bytes

    @property
    def fits(self) -> bool:
        return self.usable_bytes is None or self.total_bytes <= self.usable_bytes

    def why(self) -> str:
        """One line: what does not fit and by how much."""
        parts = (f"target weights {self.target_weights_bytes / GB:,.1f} GB + KV cache {self.target_kv_bytes / GB:,.1f} GB"
                 f" + draft {(self.draft_weights_bytes + self.draft_kv_bytes) / GB:,.1f} GB")
        return (f"does not fit in GPU memory: {parts} = {self.total_bytes / GB:,.1f} GB per GPU, over the "
                f"{self.usable_bytes / GB:,.1f} GB usable on {self.gpu} ({USABLE_FRACTION:g} of its memory) by "
                f"{(self.total_bytes - self.usable_bytes) / GB:,.1f} GB; raise tp_size, use smaller weights "
                "(weight_dtype_bytes) or lower the batch or context")


SHARES_TARGET_EMBEDDING = ("eagle3", "eagle", "mtp")  # vLLM and SGLang give these drafts the target's table


_WEIGHTS_AND_KV: dict[tuple, tuple[float, float]] = {}  # a sweep asks for the same models again and again


def _weights_and_kv(m, tp: int, embedding: bool = True) -> tuple[float, float]:
    """(weight bytes, KV bytes per cached token) of a model on one of `tp` ranks (cached: building the
    forward's ops takes milliseconds, and a sweep's groups share a few models)."""
    key = (m.model_dump_json(), tp, embedding)
    if key not in _WEIGHTS_AND_KV:
        if len(_WEIGHTS_AND_KV) > 4096:
            _WEIGHTS_AND_KV.clear()
        _WEIGHTS_AND_KV[key] = _weights_and_kv_uncached(m, tp, embedding)
    return _WEIGHTS_AND_KV[key]


def _weights_and_kv_uncached(m, tp: int, embedding: bool) -> tuple[float, float]:
    from simulator.costs.forward_ops import target_forward_ops
    ops = target_forward_ops(m, tp, 1, ALL_EXPERTS_TOKENS, 0)
    weights = sum(op.bytes_fixed for op in ops if not op.is_collective)
    if embedding:  # the table stays bf16 in fp8 checkpoints
        weights += m.vocab_size * m.hidden_size * m.activation_dtype_bytes / tp
    decode = target_forward_ops(m, tp, 1, 1, 1)
    kv_per_token = sum(op.bytes_per_kv_token for op in decode if op.name.startswith("attention"))
    return weights, kv_per_token


def memory_fit(sc: Scenario, gpu_memory_gb: float | None, gpu: str | None) -> MemoryFit:
    """What the fullest GPU of the scenario holds (module docstring)."""
    tp = sc.tp_size
    tw, tkv = _weights_and_kv(sc.target, tp)
    w = sc.workload
    tokens = w.batch_size * (w.context_len + w.max_new_tokens + sc.spec.num_draft_tokens)
    dw = dkv = 0.0
    if sc.draft is not None and sc.spec.method != "ngram":
        p = sc.placement
        share = tp if p.kind.value == "shared_tp" else p.draft_tp_size
        dw, dkv_tok = _weights_and_kv(sc.draft, share, embedding=sc.spec.method not in SHARES_TARGET_EMBEDDING)
        dkv = dkv_tok * tokens
        if p.dedicated:  # on GPUs of its own: the fuller of the two kinds of GPU decides
            if dw + dkv > tw + tkv * tokens:
                tw, tkv, tokens = 0.0, 0.0, 0
            else:
                dw = dkv = 0.0
    usable = gpu_memory_gb * GB * USABLE_FRACTION if gpu_memory_gb else None
    return MemoryFit(tw, tkv * tokens, dw, dkv, usable, gpu)


def scenario_gpu(sc: Scenario, profile) -> tuple[float | None, str | None]:
    """(memory GB, catalog id) of the GPU a scenario runs on: its `hardware` GPU (or its box's),
    else the profile's catalog GPU; (None, None) where neither names a catalog GPU."""
    from simulator.hardware import default_catalog
    from simulator.inputs import UserInputError
    try:
        catalog = default_catalog()
        gid = sc.hardware.gpu or (catalog.box(sc.hardware.box).gpu if sc.hardware.box else None) \
            or getattr(profile.hardware, "catalog_gpu", None)
        if gid is None:
            return None, None
        return float(catalog.gpu(gid).memory_gb), gid
    except (UserInputError, KeyError, AttributeError):
        return None, None


def check_memory(sc: Scenario, profile) -> tuple[MemoryFit, str | None, str | None]:
    """(the fit, an error line where the fullest GPU's weights and KV cache exceed its physical
    memory, a note where they leave less than the engine's reserve)."""
    gb, gid = scenario_gpu(sc, profile)
    fit = memory_fit(sc, gb, gid)
    if gb is None:
        return fit, None, None
    if fit.total_bytes > gb * GB:
        why = fit.why().replace(f"over the {fit.usable_bytes / GB:,.1f} GB usable on {gid} ({USABLE_FRACTION:g} of its "
                                f"memory) by {(fit.total_bytes - fit.usable_bytes) / GB:,.1f} GB",
                                f"over the {gb:,.0f} GB of {gid} by {(fit.total_bytes - gb * GB) / GB:,.1f} GB")
        return fit, f"{sc.name}: {why}", None
    if not fit.fits:
        return fit, None, (f"memory: {fit.total_bytes / GB:,.1f} GB of weights and KV cache per GPU leave "
                           f"{(gb * GB - fit.total_bytes) / GB:,.1f} GB of {gid}'s {gb:,.0f} GB for activations and "
                           f"CUDA graphs, less than vLLM's default reserve ({1 - USABLE_FRACTION:.0%}); an engine at "
                           "its defaults may refuse it")
    return fit, None, None
