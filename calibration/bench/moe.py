"""MoE routed experts at small token counts: grouped-GEMM time and the HBM bandwidth it reaches.

    specdecsim calibrate moe --out moe.json [--shape kimi-k2-tp8] [--device cuda]

Why: the simulator prices `moe_experts` (simulator/costs/ops.py) by roofline: the weights of
the E(1 - (1 - k/E)^T) distinct experts that T tokens touch, read at the profile's bandwidth
efficiency. At the token counts of decode and verify (1-9 per request) each expert sees about
one token, and a fused kernel may read its weights far below the bandwidth a large copy
reaches; that efficiency is what the Kimi-K2 case (docs/cases/kimi-k2-pcie.md) cannot know.

What: one MoE layer's routed experts as SGLang / vLLM run them for bf16 weights, with
`torch._grouped_mm` (PyTorch's grouped GEMM, CUTLASS on Hopper): tokens sorted by expert,
gate_up grouped GEMM, SiLU-and-mul, down grouped GEMM, weighted sum back per token. Routing is
uniform top-k (seeded), ROUTINGS samples per token count rotated across replays; timed as a
CUDA graph of the whole layer (calibration.timing.time_gpu_us). Routing itself (router GEMM, top-k,
sort) is a separate op in the simulator's list and is not timed here. Per point: latency_us,
distinct experts (mean over the routing samples), weight bytes read, achieved GB/s and its
ratio to the device-copy bandwidth of the profile (`roofline.hbm_bandwidth_gb_per_s`).

Shapes (per TP rank, weights split over TP as SGLang's fused MoE does without expert
parallelism): kimi-k2-tp8 = 384 experts, top-8, hidden 7168, moe_intermediate 2048 / 8 = 256
(Kimi-K2 config.json, ../shared/CASES.md); bf16 here (the released weights are fp8: an fp8
kernel reads half the bytes; its efficiency is not measured here).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from calibration.timing import TimingSettings, time_cpu_us, time_gpu_us
from simulator.costs.ops import expected_distinct_experts
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
          "tiny": MoeShape("tiny", 16, 4, 64, 32)}


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


def expert_bytes(shape: MoeShape, dtype_bytes: float) -> float:
    """Weight bytes of one expert on one rank: gate_up (2I x H) + down (H x I)."""
    return 3.0 * shape.hidden_size * shape.intermediate_per_rank * dtype_bytes


def bench(shape: MoeShape, device: str = "cuda", num_tokens: tuple[int, ...] = NUM_TOKENS,
          hbm_gb_per_s: float | None = None, seed: int = 0) -> list[dict]:
    """One row per token count: latency_us (median), distinct experts, bytes, GB/s, efficiency."""
    dev = torch.device(device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    layer = MoeLayer(shape, dev, dtype, seed)
    rng = np.random.default_rng(seed)
    rows = []
    with torch.no_grad():
        for t in num_tokens:
            x = torch.randn(t, shape.hidden_size, device=dev, dtype=dtype)
            out = torch.empty_like(x)
            routes = [layer.routing(t, rng) for _ in range(ROUTINGS)]
            runners = [lambda r=r: layer.forward(x, r, out) for r in routes]
            settings = TimingSettings(num_replays=20, target_replay_us=300.0)
            stats = time_gpu_us(runners, settings) if dev.type == "cuda" else time_cpu_us(runners, settings)
            distinct = float(np.mean([r["distinct"].item() for r in routes]))
            nbytes = distinct * expert_bytes(shape, torch.tensor([], dtype=dtype).element_size())
            gbps = nbytes / BYTES_PER_GB / (stats["latency_us"] / US_PER_S)
            rows.append({"shape": shape.name, "num_tokens": t, "latency_us": stats["latency_us"],
                         "p10_latency_us": stats["p10_latency_us"], "p90_latency_us": stats["p90_latency_us"],
                         "distinct_experts": distinct,
                         "expected_distinct_experts": expected_distinct_experts(
                             shape.num_experts, shape.experts_per_token, t),
                         "weight_bytes": nbytes, "achieved_gb_per_s": gbps,
                         "efficiency_vs_copy": gbps / hbm_gb_per_s if hbm_gb_per_s else None,
                         "dtype": str(dtype).removeprefix("torch."), "timing_mode": stats["mode"]})
    return rows
