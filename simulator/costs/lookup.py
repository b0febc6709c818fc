"""Profile tables -> latency functions: interpolation inside a table, roofline outside.

Each table axis has its own law inside the measured range:
- `num_tokens` and `batch_size`: log(latency) over log(axis). A 1-D table uses PCHIP
  (shape-preserving, so monotone data stays monotone; Fritsch & Carlson 1980,
  simulator.costs.interp.Pchip, scipy's PchipInterpolator in numpy); a table with more axes is
  multilinear in log space (simulator.costs.interp.Multilinear, as scipy's
  RegularGridInterpolator; monotone along each axis for monotone data).
- `context_len`: latency linear in the context (numpy.interp between the measured contexts).
  Attention reads every cached token, so its work, and a forward's latency, grows linearly with
  the KV length; a table whose latency is exactly a + b * context_len reads back exactly.
With both kinds of axes the log axes are interpolated at each measured context first, then the
context law joins those latencies. A profile carried to a box whose interconnect differs from the
one its collectives were measured on (`profile.collectives_on`) prices collectives from that
box's links instead of its tables (simulator.costs.collectives_model). Outside the range the latency at the nearest measured point is
scaled by the roofline's ratio, `roofline(x) / roofline(x_edge)`, and the lookup records that it
extrapolated. With no table at all the roofline itself is used.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

import numpy as np

from simulator.costs.collectives_model import collective_us as collective_model_us
from simulator.costs.interp import Multilinear, Pchip
from simulator.costs.ops import Op
from simulator.costs.transfer import transfer_note, transfer_ratio
from simulator.profile import CalibrationProfile, CollectiveTable, ForwardTable, RooflineParams
from simulator.units import BYTES_PER_US_PER_GB_PER_S, FLOPS_PER_US_PER_TFLOPS

# Bytes a ring collective moves per rank per byte of input, as nccl-tests reports bus bandwidth.
# Source: nccl-tests doc/PERFORMANCE.md (allreduce 2(n-1)/n, all_gather (n-1)/n, broadcast 1);
# all_to_all: nccl-tests src/alltoall.cu (AlltoAllGetBw: busBw = algBw (n-1)/n), the (n-1)/n of a
# rank's send buffer that goes to its peers (the 1/n for itself stays on the GPU).
_RING_FACTOR = {
    "allreduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: float(n - 1),  # input is one rank's slice: output is n slices
    "broadcast": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
    "all_to_all": lambda n: (n - 1) / n,
}


def roofline_compute_us(op: Op, rf: RooflineParams, axes: dict | None = None) -> float:
    """max(floor, bytes / effective HBM bandwidth, flops / effective rate) in us, at `axes`
    (default: the op's own lookup coordinates)."""
    axes = op.axes if axes is None else axes
    bw = rf.hbm_bandwidth_gb_per_s * BYTES_PER_US_PER_GB_PER_S * rf.bandwidth_efficiency
    # fp8 and int8 GEMMs at the fp8 rate; fp4 (no fp4 rate in a profile) dequantised to bf16
    tflops = rf.fp8_tflops if (op.compute_dtype in ("fp8", "int8") and rf.fp8_tflops) else rf.bf16_tflops
    rate = tflops * FLOPS_PER_US_PER_TFLOPS * rf.compute_efficiency
    return max(rf.kernel_floor_us, op.bytes_at(axes) / bw, op.flops_at(axes) / rate)


def roofline_collective_us(kind: str, size_bytes: float, world_size: int, rf: RooflineParams) -> float:
    """base latency + bytes * ring factor / link bandwidth, in us; 0 for world_size 1."""
    if world_size <= 1:
        return 0.0
    bw = rf.link_bandwidth_gb_per_s * BYTES_PER_US_PER_GB_PER_S
    return rf.collective_base_latency_us + size_bytes * _RING_FACTOR[kind](world_size) / bw


_GEMM_KEY = re.compile(r"gemm:k=(?P<k>[0-9]+),n=(?P<n>[0-9]+),w=(?P<w>[0-9.e+-]+)(?P<rest>.*)")
# Elementwise ops the calibration times (calibration/models/ops_torch.py): their 1-token latency
# is what a small kernel costs in a graph on the profile's machine (`small_kernel_us`).
SMALL_KERNEL_OPS = ("embedding", "rope_cos_sin", "rmsnorm", "kv_write", "add", "silu_mul", "concat")
LINEAR_AXES = ("context_len",)  # latency linear in the axis; every other axis: log-log


class _Interp:
    """Interpolator over a regular grid with the per-axis laws of the module docstring.

    Args:
        axes: axis names, in the order of `values`' dimensions.
        grid: measured values of each axis (strictly increasing, positive).
        values: latency in us, shape [len(grid[a]) for a in axes].
    """

    def __init__(self, axes: list[str], grid: dict[str, list[float]], values: np.ndarray):
        self.axes = axes
        self.lo = {a: float(grid[a][0]) for a in axes}
        self.hi = {a: float(grid[a][-1]) for a in axes}
        shape = [len(grid[a]) for a in axes]
        values = np.asarray(values, dtype=float).reshape(shape)
        keep = [i for i, n in enumerate(shape) if n > 1]
        self.log_axes = [i for i in keep if axes[i] not in LINEAR_AXES]
        lin = [i for i in keep if axes[i] in LINEAR_AXES]
        self.lin_axis = lin[0] if lin else None  # at most one linear axis (context_len)
        self.lin_nodes = np.asarray(grid[axes[self.lin_axis]], dtype=float) if lin else None
        pchip = len(keep) == 1
        logs = [np.log(np.asarray(grid[axes[i]], dtype=float)) for i in self.log_axes]
        # one log-space interpolator (or constant) per measured value of the linear axis
        self.fns = []
        for j in range(len(self.lin_nodes) if lin else 1):
            index = tuple(slice(None) if i in self.log_axes else (j if i == self.lin_axis else 0)
                          for i in range(len(axes)))
            sub = np.log(values[index])
            if not self.log_axes:
                self.fns.append(float(np.exp(sub)))
            elif pchip:
                self.fns.append(Pchip(logs[0], sub))
            else:
                self.fns.append(Multilinear(logs, sub))

    def clamp(self, point: dict[str, float]) -> dict[str, float]:
        return {a: min(max(float(point[a]), self.lo[a]), self.hi[a]) for a in self.axes}

    def _at_node(self, fn, x: list[float]) -> float:
        if isinstance(fn, float):
            return fn
        if isinstance(fn, Pchip):
            return float(np.exp(fn(x[0])))
        return float(np.exp(fn(x)))

    def __call__(self, point: dict[str, float]) -> float:
        """Latency in us at `point` (inside the grid: callers clamp first)."""
        x = [math.log(point[self.axes[i]]) for i in self.log_axes]
        at_nodes = [self._at_node(fn, x) for fn in self.fns]
        if self.lin_axis is None:
            return at_nodes[0]
        return float(np.interp(point[self.axes[self.lin_axis]], self.lin_nodes, at_nodes))


class LatencyLookup:
    """Latency of ops, collectives and whole forwards from one profile.

    Every call returns microseconds. `notes` collects one line per table that was missing or
    extrapolated, so results can say where the prediction leaves measured ground.
    """

    def __init__(self, profile: CalibrationProfile, collective_mode: str):
        self.profile = profile
        self.rf = profile.roofline
        self.collective_mode = collective_mode
        self.notes: set[str] = set()
        # the notes of op shapes with no table (each in `notes` too) -> scaled from the nearest measured GEMM
        self.untabled_op_notes: dict[str, bool] = {}
        self.transfer = profile.transfer
        if self.transfer is not None:
            self.notes.add(transfer_note(self.transfer, collectives_own=profile.collectives_on is None))
        self.collectives_on = profile.collectives_on
        if self.collectives_on is not None:
            t = self.collectives_on
            self.notes.add(f"collectives priced by the collective model from box {t.box}'s links ({t.interconnect}, "
                           f"allreduce {t.allreduce}, {collective_mode} launch), not the profile's tables measured on "
                           f"{t.measured_on_box}")
        self._ops = {t.key: t for t in profile.ops}
        self._colls: dict[tuple, CollectiveTable] = {(t.op, t.world_size, t.mode): t for t in profile.collectives}
        self._op_interp: dict[str, _Interp] = {}
        self._coll_interp: dict[tuple, Pchip | float] = {}
        self._fwd_interp: dict[tuple, _Interp] = {}
        self.op_us = lru_cache(maxsize=None)(self._op_us)
        self._gemm_tables: list[tuple] | None = None
        self._small_kernel_us: float | None = None

    @property
    def small_kernel_us(self) -> float:
        """The typical GPU time of one small kernel in a graph on this profile's machine, in us:
        the median, at the smallest token count, of the profile's measured elementwise tables
        (SMALL_KERNEL_OPS); the roofline's kernel floor when it has none. Engine kernels the
        profile never timed (fused add+RMSNorm, paged attention) cost at least this: at decode
        sizes they are latency-bound, not bandwidth-bound. Kept as measured when the profile is
        carried to another GPU (like the kernel floor, simulator.costs.transfer)."""
        if self._small_kernel_us is None:
            vals = [t.latency_us[0] for t in self.profile.ops
                    if t.key.split(":")[0] in SMALL_KERNEL_OPS and t.axes == ["num_tokens"]]
            self._small_kernel_us = float(np.median(vals)) if vals else float(self.rf.kernel_floor_us)
        return self._small_kernel_us

    # ---- compute ops -------------------------------------------------------------------------
    def _op_us(self, op: Op) -> float:
        """Latency of one compute op on the profile's GPU (the carried-to GPU of a derived profile)."""
        us = self._measured_op_us(op)
        return us * self.transfer_ratio([op]) if self.transfer is not None else us

    def transfer_ratio(self, ops) -> float:
        """t_dst / t_src of these compute ops under the profile's transfer (1 without one)."""
        if self.transfer is None:
            return 1.0
        return transfer_ratio(ops, self.transfer, self.rf.kernel_floor_us)

    def _nearest_gemm(self, op: Op) -> tuple[Op, float] | None:
        """The measured GEMM table nearest to `op` in weight bytes (same weight width and compute
        dtype), as (that GEMM as an Op at op's token count, its measured latency), or None."""
        m = _GEMM_KEY.fullmatch(op.key)
        if m is None:
            return None
        if self._gemm_tables is None:
            self._gemm_tables = []
            for key, table in self._ops.items():
                g = _GEMM_KEY.fullmatch(key)
                if g is not None and table.axes == ["num_tokens"]:
                    self._gemm_tables.append((int(g["k"]), int(g["n"]), g["w"], g["rest"], key))
        k, n, w, rest = int(m["k"]), int(m["n"]), m["w"], m["rest"]
        same = [t for t in self._gemm_tables if t[2] == w and t[3] == rest]
        if not same:
            return None
        tk, tn, _, _, key = min(same, key=lambda t: abs(math.log(t[0] * t[1] / (k * n))))
        t = int(op.axes["num_tokens"])
        near = Op(name=op.name, key=key, axes={"num_tokens": t}, bytes_fixed=tk * tn * op.weight_dtype_bytes,
                  bytes_per_token=op.bytes_per_token * (tk + tn) / (k + n) if (k + n) else 0.0,
                  flops_per_token=2.0 * tk * tn, weight_dtype_bytes=op.weight_dtype_bytes,
                  compute_dtype=op.compute_dtype)
        return near, self._measured_op_us(near)

    def _untabled(self, note: str, scaled: bool) -> None:
        """Note an op shape with no table (`untabled_op_notes`; `scaled`: from the nearest measured GEMM)."""
        self.notes.add(note)
        self.untabled_op_notes[note] = scaled

    def _measured_op_us(self, op: Op) -> float:
        table = self._ops.get(op.key)
        roof = roofline_compute_us(op, self.rf)
        if table is None:
            near = self._nearest_gemm(op)
            if near is not None:
                # a GEMM shape not measured: the nearest measured GEMM's fraction of the roofline
                # (cuBLAS streams weights faster than a device copy, the profile's bandwidth figure)
                self._untabled(f"no table for {op.key}: the nearest measured GEMM ({near[0].key}) scaled by roofline",
                               scaled=True)
                return near[1] * roof / roofline_compute_us(near[0], self.rf)
            self._untabled(f"no table for {op.key}: roofline", scaled=False)
            return roof
        missing = [a for a in table.axes if a not in op.axes]
        if missing:
            raise ValueError(f"op table {op.key} has axes {table.axes} but the op gives {sorted(op.axes)}")
        interp = self._op_interp.get(op.key)
        if interp is None:
            vals = np.asarray(table.latency_us, dtype=float)
            interp = self._op_interp[op.key] = _Interp(table.axes, table.grid, vals)
        point = {a: float(op.axes[a]) for a in table.axes}
        edge = interp.clamp(point)
        inside = interp(edge)
        if edge == point:
            return inside
        self.notes.add(f"{op.key} outside measured {table.axes} range: roofline-scaled")
        return inside * roof / roofline_compute_us(op, self.rf, {**op.axes, **edge})

    # ---- collectives ---------------------------------------------------------------------------
    def collective_us(self, kind: str, size_bytes: float, world_size: int) -> float:
        """Latency of one collective (median), by table or roofline; 0 for world_size 1.

        With `profile.collectives_on` set, by the collective model for that box instead.
        """
        if world_size <= 1:
            return 0.0
        if self.collectives_on is not None:
            t = self.collectives_on
            return collective_model_us(kind, size_bytes, world_size, t, algorithm=t.allreduce,
                                       launch=self.collective_mode).latency_us
        table = self._colls.get((kind, world_size, self.collective_mode))
        if table is None:
            other = "eager" if self.collective_mode == "graph" else "graph"
            table = self._colls.get((kind, world_size, other))
            if table is not None:
                self.notes.add(f"{kind} world {world_size}: no {self.collective_mode} table, used {other}")
        roof = roofline_collective_us(kind, size_bytes, world_size, self.rf)
        if table is None:
            self.notes.add(f"{kind} world {world_size}: no table, roofline")
            return roof
        sizes = table.size_bytes
        if len(sizes) == 1:
            return float(table.latency_us[0]) * roof / roofline_collective_us(kind, sizes[0], world_size, self.rf)
        key = (table.op, table.world_size, table.mode)
        fn = self._coll_interp.get(key)
        if fn is None:
            fn = self._coll_interp[key] = Pchip(np.log(sizes), np.log(table.latency_us))
        s = min(max(size_bytes, sizes[0]), sizes[-1])
        inside = float(np.exp(fn(math.log(s))))
        if s == size_bytes:
            return inside
        self.notes.add(f"{kind} world {world_size}: {size_bytes:.0f} B outside measured sizes: roofline-scaled")
        return inside * roof / roofline_collective_us(kind, s, world_size, self.rf)

    # ---- whole forwards -----------------------------------------------------------------------
    def find_forward(self, model, tp_size: int, mode: str, phase: str = "forward",
                     batch_size: int = 1) -> ForwardTable | None:
        """The whole-forward table for this model (a ModelShape), tp_size, mode and phase ('forward'
        for a target; 'draft' or 'draft_extend' for a draft), or None.

        A table applies when it names the model and, where it recorded a shape, has the model's
        shape; a table recorded under another name with exactly the model's shape applies too
        (the cost depends on the shape, not the name; the cost model notes it where it uses one).

        Batch: a table with a batch axis whose measured batch sizes span `batch_size` comes
        first (at batch 1 too: its batch-1 slice was timed with its other batch sizes); else a
        batch-1 table (no batch axis) when batch_size is 1; else the batch-axis table nearest in
        batch, which the caller finds outside its grid (`table_covers`), or None.
        """
        labels = {"name", "config_path", "config_notes"}  # not the shape
        mine = model.model_dump(exclude=labels)
        fields = type(model).model_fields

        def same_shape(t: ForwardTable) -> bool:
            # a field the table did not record had its default when it was measured
            return t.shape is not None and all(
                mine.get(k) == (t.shape[k] if k in t.shape else fields[k].default)
                for k in (set(mine) | set(t.shape)) - labels)
        cands = [t for t in self.profile.forwards if t.tp_size == tp_size and t.mode == mode and t.phase == phase]
        mine_named, other_named = [], []
        for t in cands:
            if t.model == model.name:
                if t.shape is None or same_shape(t):
                    mine_named.append(t)
                else:
                    self.notes.add(f"whole-forward table for {model.name} was measured with another shape")
            elif same_shape(t):
                other_named.append(t)
        for found in (mine_named, other_named):
            if found:
                return min(found, key=lambda t: _batch_rank(t, batch_size))
        return None

    def has_forward(self, model, tp_size: int, mode: str, phase: str = "forward") -> bool:
        """Whether `find_forward` finds a table."""
        return self.find_forward(model, tp_size, mode, phase) is not None

    def forward_us(self, model: str, tp_size: int, mode: str, num_tokens: int, context_len: int,
                   phase: str = "forward", batch_size: int = 1) -> float:
        """Whole-forward latency from a ForwardTable (see has_forward for `phase`): a batch-axis
        table spanning `batch_size` where there is one, else the batch-1 table.

        Raises:
            KeyError: no table for (model, tp_size, mode, phase), naming the tables there are.
        """
        tables = [t for t in self.profile.forwards
                  if t.model == model and t.tp_size == tp_size and t.mode == mode and t.phase == phase]
        if not tables:
            have = sorted({(t.model, t.tp_size, t.mode, t.phase) for t in self.profile.forwards})
            raise KeyError(f"profile {self.profile.name!r} has no whole-forward table for model "
                           f"{model!r} tp_size={tp_size} mode={mode} phase={phase}; it has {have or 'none'}")
        table = min(tables, key=lambda t: _batch_rank(t, batch_size))
        return self.table_us(table, num_tokens, context_len, batch_size)

    @staticmethod
    def table_covers(table: ForwardTable, num_tokens: int, context_len: int, batch_size: int = 1) -> bool:
        """Whether (batch_size, num_tokens, context_len) lies inside the table's measured grid (a
        table without a batch axis covers batch 1 only)."""
        return (table.num_tokens[0] <= num_tokens <= table.num_tokens[-1]
                and table.context_len[0] <= context_len <= table.context_len[-1]
                and table.batch_sizes[0] <= batch_size <= table.batch_sizes[-1])

    def table_us(self, table: ForwardTable, num_tokens: int, context_len: int, batch_size: int = 1) -> float:
        """Latency from one ForwardTable, interpolated (clamped at its edges, with a note): log-log
        over batch_size and num_tokens, linear over context_len (module docstring)."""
        interp = self._forward_interp(table)
        point = {"batch_size": float(batch_size), "num_tokens": float(num_tokens), "context_len": float(context_len)}
        edge = interp.clamp(point)
        if edge != point:
            self.notes.add(f"forward {table.model} {table.phase}: (batch {batch_size}, {num_tokens} tokens, context "
                           f"{context_len}) outside measured range: clamped")
        return interp(edge)

    def _forward_interp(self, table: ForwardTable) -> _Interp:
        key = (table.model, table.tp_size, table.mode, table.phase, table.batch_size is not None)
        if key not in self._fwd_interp:
            self._fwd_interp[key] = _Interp(
                ["batch_size", "num_tokens", "context_len"],
                {"batch_size": table.batch_sizes, "num_tokens": table.num_tokens, "context_len": table.context_len},
                np.asarray(table.grid_latency_us(), dtype=float))
        return self._fwd_interp[key]


def _batch_rank(table: ForwardTable, batch_size: int) -> tuple:
    """Sort key choosing among one model's forward tables for `batch_size`: a batch-axis table
    spanning it, then a batch-1 table at batch 1, then the batch-axis table nearest in log batch."""
    lo, hi = table.batch_sizes[0], table.batch_sizes[-1]
    spans = lo <= batch_size <= hi
    if table.batch_size is not None and spans:
        return (0, 0.0)
    if spans:
        return (1, 0.0)
    return (2, min(abs(math.log(batch_size / lo)), abs(math.log(batch_size / hi))))
