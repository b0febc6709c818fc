"""Tables of calibration curves for plotting: collective latency vs message size, verify cost vs tokens.

These evaluate the cost model (`simulator.costs`) on a grid so that `simulator.studies.plots` only draws
tables. Rows carry units in their column names.
"""

from __future__ import annotations

import numpy as np

from simulator.config import Scenario
from simulator.costs.forward import CostModel
from simulator.costs.lookup import LatencyLookup
from simulator.profile import CalibrationProfile
from simulator.workload_config import SpecConfig

DEFAULT_WORLD_SIZES = (2, 4, 8)
DEFAULT_VERIFY_TOKENS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32, 48, 64)


def collective_curve_table(profile: CalibrationProfile, op: str = "allreduce", mode: str = "graph",
                           world_sizes: tuple[int, ...] | None = None, min_bytes: int = 1 << 10,
                           max_bytes: int = 1 << 28, num_sizes: int = 37) -> list[dict]:
    """Latency of one collective by message size and world size: the profile's measured points and
    the model's curve (table interpolation inside the measured range, roofline outside).

    Args:
        profile: calibration profile. op: collective name (allreduce, broadcast, ...).
        mode: 'graph' or 'eager' launch mode. world_sizes: default the profile's tables' sizes, else 2, 4, 8.
        min_bytes, max_bytes, num_sizes: log-spaced message sizes of the model curve (bytes per rank).

    Returns:
        Rows {op, world_size, mode, size_bytes, latency_us, source}; source is 'model' or the
        table's provenance kind ('measured', 'published', ...).
    """
    tables = [t for t in profile.collectives if t.op == op]
    if world_sizes is None:
        world_sizes = tuple(sorted({t.world_size for t in tables})) or DEFAULT_WORLD_SIZES
    lookup = LatencyLookup(profile, collective_mode=mode)
    sizes = np.unique(np.geomspace(min_bytes, max_bytes, num_sizes).astype(int))
    rows = []
    for w in world_sizes:
        for s in sizes:
            rows.append(dict(op=op, world_size=w, mode=mode, size_bytes=int(s),
                             latency_us=lookup.collective_us(op, float(s), w), source="model"))
    for t in tables:
        if t.world_size in world_sizes:
            for s, lat in zip(t.size_bytes, t.latency_us):
                rows.append(dict(op=op, world_size=t.world_size, mode=t.mode, size_bytes=int(s),
                                 latency_us=float(lat), source=t.provenance.kind))
    return rows


def verify_curve_table(scenario: Scenario, profile: CalibrationProfile,
                       num_tokens_per_request: tuple[int, ...] = DEFAULT_VERIFY_TOKENS,
                       batch_sizes: tuple[int, ...] | None = None) -> list[dict]:
    """GPU time of the target's verify forward by tokens per request, from the cost model.

    One token per request is the no-speculation decode forward; n > 1 is a chain verify of n
    tokens (`num_steps = n - 1`). The GPU time is the sum of the forward's kernels (compute and
    collectives), as the breakdown counts it.

    Args:
        scenario: the scenario whose target, TP size, context length and profile settings apply.
        profile: calibration profile.
        num_tokens_per_request: verify sizes (1..65).
        batch_sizes: default the scenario's batch size.

    Returns:
        Rows {batch_size, context_len, num_tokens_per_request, num_tokens, verify_us}.
    """
    rows = []
    for b in batch_sizes or (scenario.workload.batch_size,):
        workload = scenario.workload.model_copy(update={"batch_size": int(b)})
        for n in num_tokens_per_request:
            spec = SpecConfig(num_steps=max(1, n - 1), topk=1, num_draft_tokens=max(2, n))
            cost = CostModel(scenario.model_copy(update={"spec": spec, "workload": workload}), profile)
            fwd = cost.decode_forward() if n == 1 else cost.verify_forward()
            rows.append(dict(batch_size=int(b), context_len=workload.context_len, num_tokens_per_request=int(n),
                             num_tokens=int(b * n), verify_us=fwd.gpu_us))
    return rows
