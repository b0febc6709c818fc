"""MoE routed experts at small token counts: grouped-GEMM time and the HBM bandwidth it reaches.

    specdecsim calibrate moe --out moe.json [--shape kimi-k2-tp8 --shape qwen3-30b-a3b-tp1 | --shape all]
                             [--dtype bf16|fp8] [--device cuda]

Why: the simulator prices `moe_experts` (simulator/costs/moe_ops.py) by roofline: the weights of
the E(1 - (1 - k/E)^T) distinct experts that T tokens touch, read at the profile's bandwidth
efficiency. At the token counts of decode and verify (1-9 per request) each expert sees about
one token, and a fused kernel may read its weights far below the bandwidth a large copy
reaches; that efficiency is what the Kimi-K2 case (docs/cases/kimi-k2-pcie.md) cannot know.

What: one MoE layer's routed experts as SGLang / vLLM run them, tokens sorted by expert,
gate_up GEMM, SiLU-and-mul, down GEMM, weighted sum back per token:
- bf16: `torch._grouped_mm` (PyTorch's grouped GEMM, CUTLASS on Hopper);
- fp8: weights in float8_e4m3fn with one fp32 scale per expert and output channel (rowwise),
  activations quantised per token (rowwise, dynamic, inside the timed layer), and
  `torch._scaled_grouped_mm` (one grouped fp8 kernel per GEMM) where the device has it
  (kernel `scaled_grouped_mm`); else a Python loop of `torch._scaled_mm` over the experts that
  have tokens (kernel `scaled_mm_loop`: one fp8 GEMM launch per touched expert, not a grouped
  kernel; each row says which ran). The weights are never dequantised. Rowwise scales, not
  DeepSeek-V3's 128x128 blocks: `_scaled_grouped_mm` takes rowwise scales; the weight bytes
  differ by under 0.1%.
Routing is uniform top-k (seeded), ROUTINGS samples per token count rotated across replays; timed
as a CUDA graph of the whole layer (calibration.timing.time_gpu_us). Routing itself (router GEMM,
top-k, sort) is a separate op in the simulator's list and is not timed here. Per point:
latency_us, distinct experts (mean over the routing samples), weight bytes read, achieved GB/s and
its ratio to the device-copy bandwidth of the profile (`roofline.hbm_bandwidth_gb_per_s`).

Shapes (per TP rank, weights split over TP as SGLang's fused MoE does without expert
parallelism), from each model's config.json:
- kimi-k2-tp8: 384 experts, top-8, hidden 7168, moe_intermediate 2048 / 8 = 256 (Kimi-K2,
  ../shared/CASES.md);
- deepseek-v3-tp8: 256 experts, top-8, hidden 7168, moe_intermediate 2048 / 8 = 256 (DeepSeek-V3);
- qwen3-30b-a3b-tp1: 128 experts, top-8, hidden 2048, moe_intermediate 768 (Qwen3-30B-A3B);
- tiny, and `<shape>-tiny` (`tiny_variant`: same top-k, at most 32 experts, hidden 64,
  intermediate 32) for CPU tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from calibration.timing import TimingSettings, time_cpu_us, time_gpu_us
from simulator.costs.moe_ops import expected_distinct_experts
from simulator.units import BYTES_PER_GB, US_PER_S

NUM_TOKENS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 32, 64)
ROUTINGS = 8


@dataclass(frozen=True)
class MoeShape:
    """One MoE layer's routed experts on one TP rank."""

    name: str
    num_experts: int
    experts_per_token: int
    hidden_size: int
    intermediate_per_rank: int


SHAPES = {"kimi-k2-tp8": MoeShape("kimi-k2-tp8", 384, 8, 7168, 2048 // 8),
          "deepseek-v3-tp8": MoeShape("deepseek-v3-tp8", 256, 8, 7168, 2048 // 8),
          "qwen3-30b-a3b-tp1": MoeShape("qwen3-30b-a3b-tp1", 128, 8, 2048, 768),
          "tiny": MoeShape("tiny", 16, 4, 64, 32)}
MODEL_SHAPES = ("qwen3-30b-a3b-tp1", "deepseek-v3-tp8", "kimi-k2-tp8")  # `--shape all`
DTYPES = ("bf16", "fp8")
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite float8_e4m3fn


def tiny_variant(shape: MoeShape) -> MoeShape:
    """A CPU-sized copy of a shape: the same top-k, at most 32 experts, hidden 64, intermediate 32."""
    return MoeShape(f"{shape.name}-tiny", min(shape.num_experts, 32), shape.experts_per_token, 64, 32)


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rowwise fp8: (..., N) -> (x / scale as float8_e4m3fn, scale (...,) fp32), scale = amax / 448."""
    scale = x.abs().amax(dim=-1).float().clamp(min=1e-12) / FP8_MAX
    return (x.float() / scale.unsqueeze(-1)).to(FP8), scale


def fp8_kernel(device: torch.device) -> str | None:
    """The fp8 kernel this device runs: 'scaled_grouped_mm', else 'scaled_mm_loop', else None."""
    a = torch.ones(32, 32, device=device).to(FP8)
    b = torch.ones(2, 32, 32, device=device).to(FP8)
    one = torch.ones(32, device=device)
    try:
        torch._scaled_grouped_mm(a, b.transpose(-2, -1), one, torch.ones(2, 32, device=device),
                                 offs=torch.tensor([16, 32], dtype=torch.int32, device=device),
                                 out_dtype=torch.bfloat16)
        return "scaled_grouped_mm"
    except (RuntimeError, NotImplementedError, AttributeError):
        pass
    try:
        torch._scaled_mm(a, b[0].t(), scale_a=one.unsqueeze(1), scale_b=one.unsqueeze(0), out_dtype=torch.bfloat16)
        return "scaled_mm_loop"
    except (RuntimeError, NotImplementedError, AttributeError):
        return None


class MoeLayer:
    """Routed experts with grouped GEMMs. Weights (E, 2I, H) and (E, H, I), seeded normal / sqrt(in)."""

    def __init__(self, shape: MoeShape, device: torch.device, dtype: torch.dtype, seed: int = 0):
        g = torch.Generator(device=device).manual_seed(seed)
        e, h, i = shape.num_experts, shape.hidden_size, shape.intermediate_per_rank
        self.shape, self.device, self.dtype = shape, device, dtype
        self.w13 = (torch.randn(e, 2 * i, h, device=device, generator=g) / h ** 0.5).to(dtype)
        self.w2 = (torch.randn(e, h, i, device=device, generator=g) / i ** 0.5).to(dtype)

    def routing(self, num_tokens: int, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        """Uniform top-k routing of num_tokens tokens: sorted rows, group ends, weights."""
        e, k = self.shape.num_experts, self.shape.experts_per_token
        ids = np.stack([rng.choice(e, size=k, replace=False) for _ in range(num_tokens)])  # (T, k)
        flat = ids.reshape(-1)
        order = np.argsort(flat, kind="stable")
        offs = np.cumsum(np.bincount(flat, minlength=e)).astype(np.int32)
        return {"token": torch.as_tensor(order // k, device=self.device),
                "offs": torch.as_tensor(offs, device=self.device),
                "weight": torch.full((num_tokens * k, 1), 1.0 / k, device=self.device, dtype=self.dtype),
                "distinct": torch.tensor(float(len(np.unique(flat))))}

    def forward(self, x: torch.Tensor, r: dict[str, torch.Tensor], out: torch.Tensor) -> torch.Tensor:
        """x (T, H) -> out (T, H): sum over each token's k experts of down(silu(gate) * up)."""
        i = self.shape.intermediate_per_rank
        xs = x.index_select(0, r["token"])
        h = torch._grouped_mm(xs, self.w13.transpose(-2, -1), offs=r["offs"])
        a = F.silu(h[:, :i]) * h[:, i:]
        y = torch._grouped_mm(a, self.w2.transpose(-2, -1), offs=r["offs"]) * r["weight"]
        out.zero_()
        return out.index_add_(0, r["token"], y)

    def reference(self, x: torch.Tensor, r: dict[str, torch.Tensor]) -> torch.Tensor:
        """The same layer with one plain matmul per expert (tests)."""
        i = self.shape.intermediate_per_rank
        offs = [0] + r["offs"].tolist()
        xs = x.index_select(0, r["token"])
        ys = []
        for ex in range(self.shape.num_experts):
            rows = xs[offs[ex]:offs[ex + 1]]
            h = rows @ self.w13[ex].T
            ys.append((F.silu(h[:, :i]) * h[:, i:]) @ self.w2[ex].T)
        y = torch.cat(ys) * r["weight"]
        return torch.zeros_like(x).index_add_(0, r["token"], y)


class Fp8MoeLayer(MoeLayer):
    """The routed experts with fp8 weights (rowwise scales per expert and output channel) and fp8
    GEMMs: `kernel` 'scaled_grouped_mm' (one grouped kernel per GEMM) or 'scaled_mm_loop' (one
    `_scaled_mm` per expert with tokens). Activations are quantised per token inside the layer."""

    def __init__(self, shape: MoeShape, device: torch.device, kernel: str, seed: int = 0):
        super().__init__(shape, device, torch.float32, seed)
        self.w13, self.s13 = quantize_rows(self.w13)  # (E, 2I, H) fp8, (E, 2I) fp32
        self.w2, self.s2 = quantize_rows(self.w2)  # (E, H, I) fp8, (E, H) fp32
        self.dtype, self.kernel = torch.bfloat16, kernel

    def routing(self, num_tokens: int, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        r = super().routing(num_tokens, rng)
        r["offs_cpu"] = [0] + r["offs"].tolist()
        return r

    def _gemm(self, a: torch.Tensor, a_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor,
              r: dict) -> torch.Tensor:
        """Grouped (rows of expert e) @ w[e].T in fp8, bf16 out."""
        if self.kernel == "scaled_grouped_mm":
            return torch._scaled_grouped_mm(a, w.transpose(-2, -1), a_scale, w_scale, offs=r["offs"],
                                            out_dtype=torch.bfloat16)
        out = torch.empty(a.shape[0], w.shape[1], device=a.device, dtype=torch.bfloat16)
        offs = r["offs_cpu"]
        for ex in range(self.shape.num_experts):
            lo, hi = offs[ex], offs[ex + 1]
            if hi > lo:
                out[lo:hi] = torch._scaled_mm(a[lo:hi], w[ex].t(), scale_a=a_scale[lo:hi].unsqueeze(1),
                                              scale_b=w_scale[ex].unsqueeze(0), out_dtype=torch.bfloat16)
        return out

    def forward(self, x: torch.Tensor, r: dict[str, torch.Tensor], out: torch.Tensor) -> torch.Tensor:
        i = self.shape.intermediate_per_rank
        xq, xs = quantize_rows(x.index_select(0, r["token"]))
        h = self._gemm(xq, xs, self.w13, self.s13, r)
        aq, as_ = quantize_rows(F.silu(h[:, :i]) * h[:, i:])
        y = self._gemm(aq, as_, self.w2, self.s2, r) * r["weight"]
        out.zero_()
        return out.index_add_(0, r["token"], y.to(out.dtype))

    def reference(self, x: torch.Tensor, r: dict[str, torch.Tensor]) -> torch.Tensor:
        """The same fp8 numbers dequantised to fp32, one matmul per expert (tests)."""
        i = self.shape.intermediate_per_rank
        offs = r["offs_cpu"]
        w13 = self.w13.float() * self.s13.unsqueeze(-1)
        w2 = self.w2.float() * self.s2.unsqueeze(-1)
        xq, xs = quantize_rows(x.index_select(0, r["token"]))
        xs_deq = xq.float() * xs.unsqueeze(-1)
        ys = []
        for ex in range(self.shape.num_experts):
            rows = xs_deq[offs[ex]:offs[ex + 1]]
            h = (rows @ w13[ex].T).to(torch.bfloat16)
            aq, as_ = quantize_rows(F.silu(h[:, :i]) * h[:, i:])
            ys.append(((aq.float() * as_.unsqueeze(-1)) @ w2[ex].T).to(torch.bfloat16))
        y = torch.cat(ys) * r["weight"]
        return torch.zeros(x.shape, dtype=torch.bfloat16).index_add_(0, r["token"], y.to(torch.bfloat16))


def expert_bytes(shape: MoeShape, dtype_bytes: float) -> float:
    """Weight bytes of one expert on one rank: gate_up (2I x H) + down (H x I)."""
    return 3.0 * shape.hidden_size * shape.intermediate_per_rank * dtype_bytes


def make_layer(shape: MoeShape, device: torch.device, dtype: str, seed: int = 0) -> MoeLayer:
    """The layer benchmarked for `dtype` ('bf16': fp32 on CPU, where bf16 grouped GEMMs are slow;
    'fp8': `Fp8MoeLayer` with the device's fp8 kernel, `fp8_kernel`).

    Raises:
        ValueError: an unknown dtype, or fp8 on a device with neither fp8 kernel.
    """
    if dtype == "bf16":
        return MoeLayer(shape, device, torch.bfloat16 if device.type == "cuda" else torch.float32, seed)
    if dtype == "fp8":
        kernel = fp8_kernel(device)
        if kernel is None:
            raise ValueError(f"fp8: neither torch._scaled_grouped_mm nor torch._scaled_mm runs on {device}")
        return Fp8MoeLayer(shape, device, kernel, seed)
    raise ValueError(f"unknown dtype {dtype!r}; one of {', '.join(DTYPES)}")


def bench(shape: MoeShape, device: str = "cuda", num_tokens: tuple[int, ...] = NUM_TOKENS,
          hbm_gb_per_s: float | None = None, seed: int = 0, dtype: str = "bf16") -> list[dict]:
    """One row per token count: latency_us (median), distinct experts, bytes, GB/s, efficiency."""
    dev = torch.device(device)
    layer = make_layer(shape, dev, dtype, seed)
    act_dtype = torch.bfloat16 if (dtype == "fp8" or dev.type == "cuda") else torch.float32
    w_bytes = layer.w13.element_size()
    kernel = getattr(layer, "kernel", "grouped_mm")
    rng = np.random.default_rng(seed)
    rows = []
    with torch.no_grad():
        for t in num_tokens:
            x = torch.randn(t, shape.hidden_size, device=dev, dtype=act_dtype)
            out = torch.empty_like(x)
            routes = [layer.routing(t, rng) for _ in range(ROUTINGS)]
            runners = [lambda r=r: layer.forward(x, r, out) for r in routes]
            settings = TimingSettings(num_replays=20, target_replay_us=300.0)
            stats = time_gpu_us(runners, settings) if dev.type == "cuda" else time_cpu_us(runners, settings)
            distinct = float(np.mean([r["distinct"].item() for r in routes]))
            nbytes = distinct * expert_bytes(shape, w_bytes)
            gbps = nbytes / BYTES_PER_GB / (stats["latency_us"] / US_PER_S)
            rows.append({"shape": shape.name, "num_tokens": t, "latency_us": stats["latency_us"],
                         "p10_latency_us": stats["p10_latency_us"], "p90_latency_us": stats["p90_latency_us"],
                         "distinct_experts": distinct,
                         "expected_distinct_experts": expected_distinct_experts(
                             shape.num_experts, shape.experts_per_token, t),
                         "weight_bytes": nbytes, "achieved_gb_per_s": gbps,
                         "efficiency_vs_copy": gbps / hbm_gb_per_s if hbm_gb_per_s else None,
                         "dtype": dtype if dtype == "fp8" else str(layer.dtype).removeprefix("torch."),
                         "weight_dtype_bytes": w_bytes, "kernel": kernel, "timing_mode": stats["mode"]})
    return rows
