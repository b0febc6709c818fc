"""SGLang's model side, made measurable: stand-ins for kernels the offline bundle leaves out, a check
that SGLang runs the target with its own implementation, and uniform expert routing for MoE targets
with dummy weights (calibration.engines.backends.sglang applies them as it starts the scheduler).
"""

from __future__ import annotations

def stub_dsa_backend() -> str | None:
    """Without nvidia-cutlass-dsl (left out of the bundle: Blackwell / DSA kernels), SGLang's draft
    graph capture still imports its DeepSeek-sparse-attention backend for an isinstance test; a
    stand-in class that no backend is an instance of lets a dense or MLA model start. Returns the
    note to record, or None where CuTe DSL is installed."""
    import importlib.util
    import sys
    import types
    if importlib.util.find_spec("cutlass") is not None:
        return None
    name = "sglang.srt.layers.attention.dsa_backend"
    mod = types.ModuleType(name)
    mod.DeepseekSparseAttnBackend = type("DeepseekSparseAttnBackend", (), {})
    sys.modules.setdefault(name, mod)
    # DeepSeek-V2/V3 (models/deepseek_v2.py) imports the DSA indexer at module level, which imports
    # its CuTe DSL logits kernel: without the stand-in SGLang drops its own DeepSeek class and falls
    # back to the Transformers implementation
    kernel = "sglang.jit_kernel.dsa.cutedsl_paged_mqa_logits"
    kmod = types.ModuleType(kernel)
    kmod.CuteDSLPagedMQALogitsRunner = type("CuteDSLPagedMQALogitsRunner", (), {})

    def pick_dsl_expand(*args, **kwargs):
        raise RuntimeError("DSA's CuTe DSL kernel is not installed (nvidia-cutlass-dsl)")
    kmod.pick_dsl_expand = pick_dsl_expand
    sys.modules.setdefault(kernel, kmod)
    return (f"{name} and {kernel} stood in by empty stand-ins (nvidia-cutlass-dsl not installed; DSA sparse "
            "attention is not used by this model)")


def check_sglang_model(model) -> str:
    """The class SGLang runs the target as; refuses its Transformers fallback (the measurement would
    not be SGLang's own kernels)."""
    cls = type(model)
    where = f"{cls.__module__}.{cls.__name__}"
    if "transformers" in cls.__module__.split(".")[-1] or cls.__module__.startswith("transformers"):
        raise RuntimeError(f"SGLang runs the target through its Transformers fallback ({where}), not its own "
                           "implementation: a module it imports failed (see 'Ignore import error' in the log)")
    return where


ROUTING_SPREAD = 4.0  # router logits + uniform(-4, 4): sigmoid or softmax scores far apart, none saturated


def uniform_routing() -> str:
    """Every token's experts drawn uniformly at random: SGLang's TopK (patched on the class before
    the model is built, which binds its forward) sees its router logits plus uniform noise far
    larger than dummy weights' logits (about 1e-3), so each token's top-k is a fresh uniform draw,
    inside CUDA graphs too (the noise is drawn on the GPU at every replay). Dummy weights would
    otherwise send the same tokens to the same experts, and a verify's tokens touch fewer distinct
    experts than real traffic does (E (1 - (1 - k/E)^T) for T tokens)."""
    from sglang.srt.layers.moe.topk import TopK
    orig = TopK.forward_cuda
    if getattr(orig, "_specdecsim_uniform", False):
        return "uniform expert routing (router logits + uniform noise)"

    def forward_cuda(self, hidden_states, router_logits, **kwargs):
        noise = (self._torch_rand(router_logits) * 2.0 - 1.0) * ROUTING_SPREAD
        return orig(self, hidden_states, router_logits + noise, **kwargs)
    import torch
    TopK._torch_rand = staticmethod(lambda t: torch.rand_like(t, dtype=torch.float32).to(t.dtype))
    forward_cuda._specdecsim_uniform = True
    TopK.forward_cuda = forward_cuda
    return (f"uniform expert routing: router logits + uniform(-{ROUTING_SPREAD:g}, {ROUTING_SPREAD:g}) noise in "
            "SGLang's TopK (each token's experts a fresh uniform draw)")
