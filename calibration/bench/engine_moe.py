"""Time a serving engine's own fused-MoE GEMM kernels on this GPU: SGLang's Triton `fused_moe_kernel`.

    specdecsim calibrate engine-moe --engine-src DIR --out OUT.jsonl [--shape NAME:E:K:N:TOPK:QUANT[:default] ...]
                                    [--tokens 1,2,4,...] [--routings 8]       (calibration/cli/bench.py)

DIR is an unpacked SGLang package (the folder holding `sglang/`, e.g. the contents of the
`sglang` wheel from PyPI); nothing of it is part of this project. From it this loads two files
as they are: `sglang/kernels/ops/moe/fused_moe_triton_kernels.py` (the kernel, its launcher
`invoke_fused_moe_kernel`, the activation `act_and_mul_triton`, the top-k sum
`moe_sum_reduce_triton`) and `sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py`
(the tuned configs shipped for this GPU and Triton version, else SGLang's default config). The
few SGLang helpers those files import from the rest of the package (platform checks, env flags)
are given here as small stand-ins (`_install_stand_ins`): CUDA, not HIP, SM90 when the GPU is,
no deterministic mode, no MoE padding.

What is timed, per shape and token count M (each piece replayed in a CUDA graph, CUDA events):
- gemm1_us: the gate-up grouped GEMM [M x top_k rows] x w13 [E, 2N, K] on fp8 weights;
- act_us: SGLang's Triton SiLU-and-mul over the 2N outputs;
- gemm2_us: the down grouped GEMM x w2 [E, K, N], router weights applied;
- reduce_us: SGLang's Triton top-k sum;
- kernels_us: their sum. Not timed: the engine's token-alignment and activation-quantisation
  kernels (CUDA kernels of sgl-kernel, not in that package; three small kernels a layer).
The activations are quantised outside the timed graphs (block-wise: per token and group of
128; per-tensor: one scale) and the routing is aligned outside them (sorted by expert, padded to
BLOCK_SIZE_M, as SGLang's moe_align_block_size lays it out).
A shape's QUANT is fp8_block128 (128x128 weight blocks, activations per token and 128-group) or
fp8_tensor (one scale per expert, one per activation tensor); a trailing `:default` uses SGLang's
default config even where a tuned file ships (as the engines' "without tuned kernel" runs do).
Routing: `--routings R` different uniform top-k routings are cycled through the replays
(`routing: rotating`: as consecutive layers read different experts, so the touched experts'
weights are not already in L2), and once with one routing replayed (`routing: same`, as the
engines' MoE tuning scripts time it).

Each record: engine, engine_version, gpu, triton, shape name, E, K, N, top_k, quant, tokens,
config (the kernel config used and where it came from), routing, and the times above in us.
Records are appended as they are measured (an interrupted run keeps them; a re-run skips what
the file holds).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import types
from pathlib import Path

DEFAULT_SHAPES = (
    "qwen3-235b-tp8:128:4096:192:8:fp8_tensor:default",  # sglang PR #11730's H200 shape and config
    "qwen3-235b-tp8:128:4096:192:8:fp8_tensor",
    "deepseek-v3-tp8:256:7168:256:8:fp8_block128",
    "kimi-k2-tp8:384:7168:256:8:fp8_block128",
)
DEFAULT_TOKENS = (1, 2, 4, 8, 16, 24, 32, 64)
KERNELS = "sglang/kernels/ops/moe/fused_moe_triton_kernels.py"
CONFIGS = "sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py"


def _install_stand_ins(is_sm90: bool) -> None:
    """Register the SGLang modules the two loaded files import, as small stand-ins (module docstring)."""
    def module(name: str, **attrs) -> None:
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m

    class _Flag:
        def __init__(self, value):
            self.value = value

        def get(self):
            return self.value

    class _Envs:
        def __getattr__(self, name):
            return _Flag(False)

    def _unused(*a, **k):
        raise RuntimeError("stand-in: not used by the timed path (activations are quantised beforehand)")

    def _keep_fp8(a, scale=None, *args, **kwargs):  # activations arrive quantised (module docstring)
        return a, scale

    for pkg in ("sglang", "sglang.kernels", "sglang.kernels.jit", "sglang.kernels.ops",
                "sglang.kernels.ops.quantization", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.moe"):
        module(pkg, __path__=[])
    module("sglang.kernels.jit.utils", is_arch_support_pdl=lambda: is_sm90)
    module("sglang.kernels.ops.quantization.fp8_kernel", per_token_group_quant_fp8=_unused,
           scaled_fp8_quant=_keep_fp8, sglang_per_token_group_quant_fp8=_unused)
    module("sglang.kernels.ops.quantization.int8_kernel", per_token_group_quant_int8=_unused,
           per_token_quant_int8=_unused, sglang_per_token_group_quant_int8=_unused)
    module("sglang.srt.batch_invariant_ops", is_batch_invariant_mode_enabled=lambda: False)
    module("sglang.srt.environ", envs=_Envs())
    module("sglang.srt.layers.moe.utils", get_moe_padding_size=lambda *a: 0)
    import torch
    module("sglang.srt.utils", cpu_has_amx_support=lambda: False, is_cpu=lambda: False, is_cuda=lambda: True,
           is_hip=lambda: False, is_sm90_supported=lambda: is_sm90,
           get_device_name=lambda *a: torch.cuda.get_device_name())
    det = types.SimpleNamespace(deterministic=types.SimpleNamespace(enable_deterministic_inference=False))
    module("sglang.srt.runtime_context", get_exec=lambda: det)


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def align(topk_ids, num_experts: int, block_m: int):
    """(sorted_token_ids, expert_ids, num_tokens_post_padded) for one routing, as the engines lay it
    out: flat (token, slot) indices grouped by expert, each expert's run padded to a multiple of
    block_m with the sentinel numel; one expert id per block; the buffer sized numel + E (block_m - 1)."""
    import torch
    dev = topk_ids.device
    flat = topk_ids.flatten().to(torch.int64)
    numel = flat.numel()
    cap = numel + num_experts * (block_m - 1)
    sorted_ids = torch.full((cap,), numel, dtype=torch.int32, device=dev)
    expert_ids = torch.full((cap // block_m + 1,), -1, dtype=torch.int32, device=dev)
    pos = 0
    for e in torch.unique(flat).tolist():
        idx = torch.nonzero(flat == e).flatten().to(torch.int32)
        n = ((idx.numel() + block_m - 1) // block_m) * block_m
        sorted_ids[pos:pos + idx.numel()] = idx
        expert_ids[pos // block_m:(pos + n) // block_m] = e
        pos += n
    return sorted_ids, expert_ids, torch.tensor([pos], dtype=torch.int32, device=dev)


def quant_block(x, group: int = 128):
    """Per token and group of `group` columns: fp8 e4m3 values and fp32 scales [rows, cols / group]."""
    import torch
    rows, cols = x.shape
    g = x.float().view(rows, cols // group, group)
    scale = g.abs().amax(-1).clamp(min=1e-6) / 448.0
    return (g / scale[..., None]).to(torch.float8_e4m3fn).view(rows, cols), scale.contiguous()


def quant_tensor(x):
    """One fp32 scale for the whole tensor, fp8 e4m3 values."""
    import torch
    scale = x.float().abs().amax().clamp(min=1e-6) / 448.0
    return (x.float() / scale).to(torch.float8_e4m3fn), scale.reshape(1)


def graph_us(fn, reps: int, warmup: int = 3, replays: int = 20) -> float:
    """Mean us per call of `fn(i)` (i = 0..reps-1 inside one captured CUDA graph), over `replays`."""
    import torch
    for i in range(warmup):
        fn(i % reps)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(reps):
            fn(i)
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        g.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0 / (replays * reps)


def measure_shape(kern, cfgmod, shape: str, tokens: list[int], routings: int, done: set, write) -> None:
    import torch
    import triton.language as tl
    name, e, k_dim, n, top_k, quant, *flags = shape.split(":")
    e, k_dim, n, top_k = int(e), int(k_dim), int(n), int(top_k)
    if "default" in flags:
        name += "-default-config"
    block = quant == "fp8_block128"
    block_shape = [128, 128] if block else None
    dev = "cuda"
    torch.manual_seed(0)
    w13 = (torch.randn(e, 2 * n, k_dim, device=dev) * 0.05).to(torch.float8_e4m3fn)
    w2 = (torch.randn(e, k_dim, n, device=dev) * 0.05).to(torch.float8_e4m3fn)
    if block:
        s13 = torch.rand(e, (2 * n + 127) // 128, k_dim // 128, device=dev) * 1e-3
        s2 = torch.rand(e, k_dim // 128, (n + 127) // 128, device=dev) * 1e-3
    else:
        s13, s2 = torch.rand(e, device=dev) * 1e-3, torch.rand(e, device=dev) * 1e-3
    cfgs = None if "default" in flags else cfgmod.get_moe_configs(e, n, "fp8_w8a8", *(block_shape or [0, 0]))
    source = "tuned file" if cfgs else "default"
    for m in tokens:
        for routing in ("rotating", "same"):
            key = (name, m, routing)
            if key in done:
                continue
            if cfgs:
                config = dict(cfgs[min(cfgs, key=lambda b: abs(b - m))])
            else:
                config = cfgmod.get_default_config(m, e, n, k_dim, top_k, "fp8_w8a8", False, block_shape)
            r = routings if routing == "rotating" else 1
            ids = [torch.stack([torch.randperm(e, device=dev)[:top_k] for _ in range(m)]).to(torch.int32)
                   for _ in range(r)]
            weights = [torch.rand(m, top_k, device=dev, dtype=torch.float32) for _ in range(r)]
            aligned = [align(t, e, config["BLOCK_SIZE_M"]) for t in ids]
            x = torch.randn(m, k_dim, device=dev, dtype=torch.bfloat16)
            xq, xs = quant_block(x) if block else quant_tensor(x)
            c1 = torch.empty(m * top_k, 2 * n, device=dev, dtype=torch.bfloat16)
            c2 = torch.empty(m * top_k, n, device=dev, dtype=torch.bfloat16)
            c2q, c2s = quant_block(torch.randn(m * top_k, n, device=dev)) if block else \
                quant_tensor(torch.randn(m * top_k, n, device=dev))
            c3 = torch.empty(m, top_k, k_dim, device=dev, dtype=torch.bfloat16)
            out = torch.empty(m, k_dim, device=dev, dtype=torch.bfloat16)
            common = dict(compute_type=tl.bfloat16, use_fp8_w8a8=True, use_int8_w8a8=False, use_int8_w8a16=False,
                          use_int4_w4a16=False, per_channel_quant=False, block_shape=block_shape)

            def gemm1(i):
                s, ex, npad = aligned[i % r]
                kern.invoke_fused_moe_kernel(xq, w13, None, c1, xs, s13, None, weights[i % r], ids[i % r], s, ex,
                                             npad, False, top_k, config, **common)

            def act(i):
                kern.act_and_mul_triton(c1, c2, config, topk_ids=ids[i % r])

            def gemm2(i):
                s, ex, npad = aligned[i % r]
                kern.invoke_fused_moe_kernel(c2q, w2, None, c3, c2s, s2, None, weights[i % r], ids[i % r], s, ex,
                                             npad, True, 1, config, **common)

            def reduce(i):
                kern.moe_sum_reduce_triton(c3, out, 1.0)

            reps = 8 * r if r > 1 else 8
            t = {f"{label}_us": graph_us(fn, reps) for label, fn in
                 (("gemm1", gemm1), ("act", act), ("gemm2", gemm2), ("reduce", reduce))}
            t["kernels_us"] = sum(t.values())
            write(dict(shape=name, E=e, K=k_dim, N=n, top_k=top_k, quant=quant, tokens=m, routing=routing,
                       config=config, config_source=source, **{k: round(v, 3) for k, v in t.items()}))


def engine_version(engine_src: Path) -> str:
    """The package's version string from sglang/_version.py or sglang/version.py, else 'unknown'."""
    for vfile in (engine_src / "sglang" / "_version.py", engine_src / "sglang" / "version.py"):
        found = re.search(r"__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)", vfile.read_text()) \
            if vfile.is_file() else None
        if found:
            return found.group(1)
    return "unknown"


def check_engine_src(engine_src: Path) -> None:
    """Raises ValueError naming the file missing from an engine folder (module docstring)."""
    for rel in (KERNELS, CONFIGS):
        if not (engine_src / rel).is_file():
            raise ValueError(f"--engine-src {engine_src}: no {rel} (give the folder that holds sglang/)")


def run(engine_src: Path, out: Path, shapes: list[str], tokens: list[int], routings: int) -> int:
    """Measure `shapes` at `tokens` into `out` (JSON lines, appended; records already there are kept
    and skipped). Returns the number of shapes that failed (each failure's traceback is printed and
    the other shapes go on).

    Raises:
        ValueError: an engine folder without the two files, or no CUDA GPU.
    """
    check_engine_src(engine_src)
    import torch
    import triton
    if not torch.cuda.is_available():
        raise ValueError("no CUDA GPU: the engine's Triton kernels run on a GPU only")
    _install_stand_ins(torch.cuda.get_device_capability()[0] >= 9)
    kern = _load(engine_src / KERNELS, "sglang.kernels.ops.moe.fused_moe_triton_kernels")
    cfgmod = _load(engine_src / CONFIGS, "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config")
    done = set()
    if out.is_file():
        for line in out.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                done.add((rec["shape"], rec["tokens"], rec["routing"]))
    head = dict(engine="sglang", engine_version=engine_version(engine_src), gpu=torch.cuda.get_device_name(),
                triton=triton.__version__)

    def write(rec: dict) -> None:
        with open(out, "a") as f:
            f.write(json.dumps({**head, **rec}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        print(json.dumps(rec), flush=True)

    failed = 0
    for shape in shapes:
        try:
            measure_shape(kern, cfgmod, shape, tokens, routings, done, write)
        except Exception:  # noqa: BLE001 - one shape's failure (a config the kernel rejects) keeps the others
            import traceback
            failed += 1
            print(f"shape {shape} failed:", file=sys.stderr)
            traceback.print_exc()
    return failed


def check_shape(spec: str) -> None:
    """Raises ValueError unless `spec` is NAME:E:K:N:TOPK:QUANT[:default] with positive integers, K a
    multiple of 128 and QUANT fp8_block128 or fp8_tensor."""
    parts = spec.split(":")
    if len(parts) not in (6, 7) or (len(parts) == 7 and parts[6] != "default"):
        raise ValueError(f"--shape {spec!r}: expected NAME:E:K:N:TOPK:QUANT[:default]")
    try:
        e, k, n, top_k = (int(x) for x in parts[1:5])
    except ValueError:
        raise ValueError(f"--shape {spec!r}: E, K, N and TOPK must be integers") from None
    if min(e, k, n, top_k) < 1 or top_k > e or k % 128:
        raise ValueError(f"--shape {spec!r}: E, K, N >= 1, 1 <= TOPK <= E and K a multiple of 128")
    if parts[5] not in ("fp8_block128", "fp8_tensor"):
        raise ValueError(f"--shape {spec!r}: QUANT is fp8_block128 or fp8_tensor")
