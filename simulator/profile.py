"""Calibration profile schema (versioned JSON) and its loader / atomic writer.

A profile holds what was measured (or taken from published figures) about one machine:
collective latency tables, per-op GPU latency tables, whole-forward tables, host overheads and
the roofline constants used outside the measured range. Every table carries its provenance.
`calibration/` writes profiles; `simulator` only reads them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from simulator.config import StrictModel
from simulator.files import write_json_atomic
from simulator.inputs import read_json

SCHEMA_VERSION = 1
COLLECTIVE_OPS = ("allreduce", "broadcast", "all_gather", "send_recv", "all_to_all")
OP_AXES = ("batch_size", "num_tokens", "context_len")

# Table bounds. Latencies are interpolated in log space (simulator.costs.lookup), so every axis
# value and every latency is > 0; the ranges hold any real GPU and model: a latency of 1 ns
# (below any kernel launch) to 1000 s, tokens and context lengths up to 2**24 and 2**27, messages
# up to 1 TiB.
TableLatencyUs = Annotated[float, Field(ge=1e-3, le=1e9)]
AxisValue = Annotated[float, Field(ge=1, le=2**27)]
MAX_TABLE_POINTS = 1_000_000


class Provenance(StrictModel):
    """How a table or constant was obtained."""

    kind: Literal["measured", "published", "assumed", "fitted"]
    command: str | None = Field(None, description="Command that measured it (kind=measured).")
    source: str | None = Field(None, description="Citation: paper, repo path, datasheet, account.")
    note: str = ""

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.kind == "measured" and not self.command:
            raise ValueError("provenance kind 'measured' needs the command that measured it")
        if self.kind in ("published", "assumed") and not self.source:
            raise ValueError(f"provenance kind {self.kind!r} needs a source")
        return self


class HardwareInfo(StrictModel):
    """The machine a profile describes."""

    gpu_name: str
    catalog_gpu: str | None = Field(None, max_length=200, description="Hardware-catalog id of the GPU "
                                    "(data/hardware/gpus/<id>.yaml); needed to carry the profile to another GPU.")
    catalog_box: str | None = Field(None, max_length=200, description="Hardware-catalog id of the box the "
                                    "collective tables were measured on (data/hardware/boxes/<id>.yaml); needed to "
                                    "price collectives on a box with another interconnect.")
    gpu_count: int = Field(ge=1, le=1_000_000)
    interconnect: str = Field(description="e.g. 'NVLink (NV18)', 'PCIe Gen5', 'single GPU'.")
    topology: str | None = Field(None, description="`nvidia-smi topo -m` output.")
    driver_version: str | None = None
    cuda_version: str | None = None
    torch_version: str | None = None
    nccl_version: str | None = None


class RooflineParams(StrictModel):
    """Constants for latencies outside the measured tables.

    t_us = max(kernel_floor_us, bytes / (hbm_bw * bandwidth_efficiency), flops / (rate * compute_efficiency));
    collectives: collective_base_latency_us + bytes * ring_factor / link_bw.
    """

    # Lower bounds low enough for the CPU test calibration on a loaded 2-core machine (below 1 GFLOP/s
    # and a few GB/s measured there), still positive so every roofline stays finite.
    hbm_bandwidth_gb_per_s: float = Field(ge=0.01, le=1e18, description="0.01..1e18 GB/s.")
    bf16_tflops: float = Field(ge=1e-6, le=1e18, description="1e-6..1e18 TFLOP/s.")
    fp8_tflops: float | None = Field(None, ge=1e-6, le=1e18, description="1e-6..1e18 TFLOP/s.")
    bandwidth_efficiency: float = Field(0.8, ge=0.01, le=1)
    compute_efficiency: float = Field(0.7, ge=0.01, le=1)
    kernel_floor_us: float = Field(3.0, ge=0, le=1000)
    link_bandwidth_gb_per_s: float = Field(ge=0.01, le=1e18, description="Per-GPU bus bandwidth of collectives.")
    collective_base_latency_us: float = Field(ge=0, le=100_000)
    provenance: Provenance


class LoopOverheadCurve(StrictModel):
    """The serving loop's host scheduling time per cycle as a function of the GPU time per cycle.

    Measured on the live loop (tiny models, a GPU sleep standing in for a real model's GPU time;
    calibration.bench.loop_overhead.measure_loop_overhead_curve): a host that waits longer at the
    sync pays more per cycle on some machines. Values are host_schedule_us (already net of the graph replay and
    the device->host sync, which the simulator charges apart); linear in between, clamped at
    the ends (numpy.interp).
    """

    gpu_us: list[Annotated[float, Field(ge=0, le=1e9)]] = Field(
        min_length=2, max_length=MAX_TABLE_POINTS, description="Speculative cycle GPU time, 0..1e9 us.")
    host_schedule_us: list[Annotated[float, Field(ge=0, le=1e6)]] = Field(max_length=MAX_TABLE_POINTS)
    baseline_gpu_us: list[Annotated[float, Field(ge=0, le=1e9)]] = Field(
        min_length=2, max_length=MAX_TABLE_POINTS, description="Decode step GPU time, 0..1e9 us.")
    baseline_host_schedule_us: list[Annotated[float, Field(ge=0, le=1e6)]] = Field(max_length=MAX_TABLE_POINTS)

    @model_validator(mode="after")
    def _check(self) -> Self:
        for xs, ys, name in ((self.gpu_us, self.host_schedule_us, "gpu_us"),
                             (self.baseline_gpu_us, self.baseline_host_schedule_us, "baseline_gpu_us")):
            _check_increasing(name, xs)
            if len(xs) != len(ys):
                raise ValueError(f"{name} has {len(xs)} points but its schedule values {len(ys)}")
        return self


class HostOverheads(StrictModel):
    """Host-side costs: what the CPU spends to issue GPU work and to wait for it."""

    op_launch_us: dict[str, float] = Field(
        default_factory=dict, description="Host time to issue one eager op, by op name (rmsnorm, gemm, ...).")
    default_launch_us: float = Field(ge=0, le=1_000_000, description="Per eager op not in op_launch_us.")
    graph_replay_us: float = Field(ge=0, le=100_000, description="Host time to replay one CUDA graph.")
    graph_kernel_gap_us: float = Field(0.0, ge=0, le=1000, description="GPU idle per kernel inside a graph.")
    d2h_sync_us: float = Field(ge=0, le=100_000, description="Device->host sync (.item()) after the GPU is idle.")
    host_schedule_us: float = Field(ge=0, le=1_000_000, description="Scheduling and bookkeeping per cycle.")
    baseline_host_schedule_us: float | None = Field(
        None, ge=0, le=1_000_000, description="Per decode step without speculation; default host_schedule_us.")
    loop_overhead_curve: LoopOverheadCurve | None = Field(
        None, description="CUDA-graph loops: host_schedule_us by GPU time per cycle; overrides the constants.")
    provenance: Provenance

    @model_validator(mode="after")
    def _check(self) -> Self:
        bad = {k: v for k, v in self.op_launch_us.items() if not 0 <= v <= 1_000_000}
        if bad:
            raise ValueError(f"op_launch_us values must be in [0, 1e6] us, got {bad}")
        return self


def _check_increasing(name: str, values: list[float]) -> None:
    if any(b <= a for a, b in zip(values, values[1:])):
        raise ValueError(f"{name} must be strictly increasing, got {values}")


class CollectiveTable(StrictModel):
    """Latency of one collective by message size, for one world size and launch mode."""

    op: Literal["allreduce", "broadcast", "all_gather", "send_recv", "all_to_all"]
    world_size: int = Field(ge=2, le=1024)
    mode: Literal["eager", "graph"]
    size_bytes: list[Annotated[int, Field(ge=1, le=2**40)]] = Field(
        min_length=1, max_length=MAX_TABLE_POINTS, description="Per-rank message size (input bytes), 1..2**40.")
    latency_us: list[TableLatencyUs] = Field(min_length=1, max_length=MAX_TABLE_POINTS,
                                             description="Median latency, 1e-3..1e9 us.")
    p10_latency_us: list[TableLatencyUs] | None = Field(None, max_length=MAX_TABLE_POINTS)
    p90_latency_us: list[TableLatencyUs] | None = Field(None, max_length=MAX_TABLE_POINTS)
    provenance: Provenance

    @model_validator(mode="after")
    def _check(self) -> Self:
        if any(s <= 0 for s in self.size_bytes):
            raise ValueError("size_bytes must be positive")
        _check_increasing("size_bytes", self.size_bytes)
        for name in ("latency_us", "p10_latency_us", "p90_latency_us"):
            vals = getattr(self, name)
            if vals is not None and len(vals) != len(self.size_bytes):
                raise ValueError(f"{name} has {len(vals)} entries, size_bytes {len(self.size_bytes)}")
        return self


# The op families (a key's part before ':') whose ops are looked up by batch_size and context_len as well
# (simulator.costs.ops: the attentions and their mask; simulator.costs.linear_attention_ops: the delta
# rule, batch and tokens); every other op (GEMMs, elementwise ops) by num_tokens alone.
OP_FAMILY_AXES = {"attention": set(OP_AXES), "mla_attention": set(OP_AXES), "mla_attention_prefill": set(OP_AXES),
                  "attn_mask": set(OP_AXES), "gated_delta_rule": {"batch_size", "num_tokens"}}
TOKEN_AXES = {"num_tokens"}


class OpTable(StrictModel):
    """GPU latency of one op (one key from simulator.costs.ops) on a grid of its axes.

    `latency_us` is the flattened C-order array of shape [len(grid[a]) for a in axes].
    """

    key: str = Field(description="Op key, e.g. 'gemm:k=4096,n=6144,w=2'.")
    axes: list[Literal["batch_size", "num_tokens", "context_len"]] = Field(min_length=1)
    grid: dict[str, list[AxisValue]] = Field(description="Axis values, 1..2**27 each.")
    latency_us: list[TableLatencyUs] = Field(max_length=MAX_TABLE_POINTS, description="1e-3..1e9 us.")
    provenance: Provenance

    @model_validator(mode="after")
    def _check(self) -> Self:
        if sorted(self.grid) != sorted(self.axes) or len(set(self.axes)) != len(self.axes):
            raise ValueError(f"grid keys {sorted(self.grid)} must match axes {self.axes}")
        given = OP_FAMILY_AXES.get(self.key.split(":")[0], TOKEN_AXES)
        if not set(self.axes) <= given:
            raise ValueError(f"axes {self.axes}: op {self.key.split(':')[0]!r} is looked up by "
                             f"{', '.join(a for a in OP_AXES if a in given)} "
                             "only (simulator.costs.ops)")
        size = 1
        for a in self.axes:
            if not self.grid[a] or any(v <= 0 for v in self.grid[a]):
                raise ValueError(f"grid[{a!r}] must be non-empty and positive")
            _check_increasing(f"grid[{a!r}]", self.grid[a])
            size *= len(self.grid[a])
        if len(self.latency_us) != size:
            raise ValueError(f"latency_us has {len(self.latency_us)} entries; grid needs {size}")
        return self


class ForwardTable(StrictModel):
    """Whole-forward GPU latency of one model at one TP size: [batch_size x] num_tokens x context_len.

    A target's table (phase 'forward') prices its verify and decode forwards; a draft's tables
    price its draft step ('draft', num_tokens per request = that step's tokens) and its draft
    extend ('draft_extend', num_tokens = the accepted tokens it catches up on).

    Batch axis (optional): without `batch_size` the table is measured at batch 1 only and
    `latency_us` is [num_tokens index][context_len index] (every profile written before the axis
    existed reads the same). With `batch_size` (requests per forward, strictly increasing)
    `latency_us` is [batch_size index][num_tokens index][context_len index]; `num_tokens` is
    still tokens per request, so a forward runs batch_size x num_tokens tokens. A profile may
    hold both a batch-1 table and a batch-axis table of one (model, tp_size, mode, phase).
    """

    model: str = Field(description="ModelShape.name it applies to.")
    phase: Literal["forward", "draft", "draft_extend"] = Field(
        "forward", description="'forward' (a target: verify and decode), 'draft' or 'draft_extend' (a draft).")
    shape: dict | None = Field(None, description="The measured ModelShape's fields (name aside); a scenario "
                                                 "model of that name but another shape does not use the table.")
    tp_size: int = Field(ge=1, le=1024)
    mode: Literal["eager", "graph"]
    batch_size: list[Annotated[int, Field(ge=1, le=2**20)]] | None = Field(
        None, min_length=1, max_length=4096, description="Requests per forward, 1..2**20; absent: batch 1 only.")
    num_tokens: list[Annotated[int, Field(ge=1, le=2**24)]] = Field(
        min_length=1, max_length=4096, description="Tokens per request in the forward, 1..2**24.")
    context_len: list[Annotated[int, Field(ge=1, le=2**27)]] = Field(
        min_length=1, max_length=4096, description="KV-cache length, 1..2**27.")
    latency_us: list[list[TableLatencyUs]] | list[list[list[TableLatencyUs]]] = Field(
        description="[num_tokens index][context_len index], or [batch_size index][num_tokens index]"
                    "[context_len index] with a batch axis; 1e-3..1e9 us.")
    provenance: Provenance

    @model_validator(mode="after")
    def _check(self) -> Self:
        _check_increasing("num_tokens", self.num_tokens)
        _check_increasing("context_len", self.context_len)
        grid = f"len(num_tokens) x len(context_len) = {len(self.num_tokens)} x {len(self.context_len)} grid"
        three_d = any(isinstance(row, list) and any(isinstance(v, list) for v in row) for row in self.latency_us)
        if self.batch_size is None:
            if three_d:
                raise ValueError("latency_us is a [batch][num_tokens][context_len] grid but batch_size is missing")
            grids = [self.latency_us]
        else:
            _check_increasing("batch_size", self.batch_size)
            if len(self.latency_us) != len(self.batch_size) or not three_d:
                raise ValueError(f"latency_us must hold len(batch_size) = {len(self.batch_size)} {grid}s "
                                 "(the table has a batch_size axis)")
            grids = self.latency_us
        if any(len(g) != len(self.num_tokens) or any(len(row) != len(self.context_len) for row in g) for g in grids):
            raise ValueError(f"latency_us must be a {grid}" + (" per batch size" if self.batch_size else ""))
        return self

    @property
    def batch_sizes(self) -> list[int]:
        """The batch sizes measured: `batch_size`, or [1] for a table without the axis."""
        return self.batch_size if self.batch_size is not None else [1]

    def grid_latency_us(self) -> list[list[list[float]]]:
        """latency_us as [batch index][num_tokens index][context_len index] (one batch: [latency_us])."""
        return self.latency_us if self.batch_size is not None else [self.latency_us]


class GpuRates(StrictModel):
    """Datasheet figures of one GPU that the roofline needs (from the hardware catalog)."""

    gpu: str = Field(description="Catalog id, or a label for a virtual GPU.")
    memory_bandwidth_gb_per_s: float = Field(ge=10, le=100_000)
    bf16_dense_tflops: float = Field(ge=1, le=100_000)
    fp8_dense_tflops: float | None = Field(None, ge=1, le=100_000)
    fp4_dense_tflops: float | None = Field(None, ge=1, le=100_000)
    source: str = Field(description="Where the figures come from (catalog file, datasheet).")

    def rate_tflops(self, compute_dtype: str) -> float:
        """Dense rate of a GEMM whose math runs at `compute_dtype` (bf16, fp8, fp4, int8) on this
        GPU; a dtype it lacks falls back (fp4 -> bf16: weight-only kernels dequantise; int8 -> fp8
        -> bf16)."""
        if compute_dtype == "fp4" and self.fp4_dense_tflops:
            return self.fp4_dense_tflops
        if compute_dtype in ("fp8", "int8") and self.fp8_dense_tflops:
            return self.fp8_dense_tflops
        return self.bf16_dense_tflops


class ProfileTransfer(StrictModel):
    """A profile carried from the GPU it was measured on to another (simulator.costs.transfer)."""

    measured_on: GpuRates
    carried_to: GpuRates


AllreduceChoice = Literal["nccl", "custom", "auto"]


class CollectiveTarget(StrictModel):
    """The links of a catalog box a profile's collectives are priced for (simulator.costs.collectives_model).

    Set on a derived profile whose collective tables were measured on a box with another
    interconnect: the tables no longer apply, the model prices every collective from these fields.
    """

    box: str = Field(description="Catalog box id.")
    measured_on_box: str = Field(description="Catalog box id the profile's collective tables were measured on.")
    interconnect: Literal["nvswitch", "nvlink_bridge", "pcie"]
    gpus_per_node: int = Field(ge=1, le=72)
    numa_nodes: int = Field(ge=1, le=16)
    link_bandwidth_gb_per_s: float = Field(ge=1.0, le=100_000.0, description="Per-GPU one-way link bandwidth, GB/s.")
    pcie_generation: int = Field(ge=1, le=7)
    pcie_lanes: Literal[1, 2, 4, 8, 16]
    p2p: bool = Field(description="CUDA peer access between the GPUs.")
    compute_capability: str = Field(pattern=r"^\d{1,2}\.\d$", description="The GPU's, e.g. '9.0'.")
    allreduce: AllreduceChoice = Field("nccl", description="Scenario hardware.allreduce: nccl, custom or auto.")


class CalibrationProfile(StrictModel):
    """Everything the cost model knows about one machine."""

    schema_version: Literal[1] = SCHEMA_VERSION
    name: str
    description: str = ""
    created_utc: str | None = None
    git_commit: str | None = None
    command_line: str | None = None
    hardware: HardwareInfo
    roofline: RooflineParams
    host: HostOverheads
    collectives: list[CollectiveTable] = Field(default_factory=list)
    ops: list[OpTable] = Field(default_factory=list)
    forwards: list[ForwardTable] = Field(default_factory=list)
    notes: dict[str, str] = Field(default_factory=dict, description="Free-form findings, e.g. decomposition checks.")
    transfer: ProfileTransfer | None = Field(
        None, description="Set on a derived profile: its op and forward tables were measured on `measured_on` "
                          "and are re-priced for `carried_to` at lookup (per-op roofline efficiencies).")
    collectives_on: CollectiveTarget | None = Field(
        None, description="Set on a derived profile carried to a box whose interconnect differs from the one its "
                          "collective tables were measured on: collectives are priced by the collective model.")

    @model_validator(mode="after")
    def _check_unique(self) -> Self:
        seen: set = set()
        for t in self.collectives:
            k = (t.op, t.world_size, t.mode)
            if k in seen:
                raise ValueError(f"duplicate collective table {k}")
            seen.add(k)
        keys = [t.key for t in self.ops]
        dup = {k for k in keys if keys.count(k) > 1}
        if dup:
            raise ValueError(f"duplicate op tables {sorted(dup)}")
        fwd = [(t.model, t.tp_size, t.mode, t.phase, t.batch_size is not None) for t in self.forwards]
        dup = {k for k in fwd if fwd.count(k) > 1}
        if dup:
            raise ValueError(f"duplicate whole-forward tables (model, tp_size, mode, phase, has batch axis) "
                             f"{sorted(dup)}")
        return self


DATA_DIR_ENV = "SPECDECSIM_DATA"
DATA_PACKAGE = "specdecsim_data"  # data/ as installed from a wheel (setup.py maps the folder to this package)


def data_dir() -> Path:
    """The folder of the shipped data (profiles/, engine_profiles/, hardware/, cases/, models/, fits/, ...).

    `$SPECDECSIM_DATA` when set; else the `data/` folder of the checkout this `simulator` package
    lies in (a source checkout, or an editable install of one); else the installed package
    `specdecsim_data`, found through `importlib.resources` (a wheel: `pip install .`). A wheel
    carries the data the commands read and leaves out the raw points, live records and traces
    (data/engine_runs, data/live, data/points, data/traces), which need a checkout.
    """
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env)
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "data").is_dir():
        return checkout / "data"
    installed = _installed_data_dir()
    return installed if installed is not None else checkout / "data"


def _installed_data_dir() -> Path | None:
    """The `specdecsim_data` package's folder (importlib.resources), or None when it is not installed
    or not a folder on disk (a zipped install)."""
    from importlib.resources import files
    try:
        root = files(DATA_PACKAGE)
    except ModuleNotFoundError:
        return None
    return root if isinstance(root, Path) and root.is_dir() else None


def scenarios_dir() -> Path:
    """The shipped example scenarios: `scenarios/` of an installed data package (`specdecsim_data/scenarios`),
    else the checkout's `scenarios/` beside `data/`."""
    inside = data_dir() / "scenarios"
    return inside if inside.is_dir() else data_dir().parent / "scenarios"


def shipped_profiles_dir() -> Path:
    """Folder of the shipped profiles: `data_dir() / "profiles"`."""
    return data_dir() / "profiles"


def resolve_profile_path(ref: str, base_dir: Path | None = None) -> Path:
    """Turn a profile reference into a file path.

    A bare name (`h200`) means `<data_dir()>/profiles/<name>.json`; anything else is a path,
    relative to `base_dir` (the scenario's folder) when not absolute.

    Raises:
        FileNotFoundError: naming the reference and the places looked in.
    """
    looked: list[Path] = []
    if "/" not in ref and not ref.endswith(".json"):
        p = shipped_profiles_dir() / f"{ref}.json"
        looked.append(p)
        if p.is_file():
            return p
    else:
        p = Path(ref)
        candidates = [p] if p.is_absolute() else ([base_dir / p] if base_dir else []) + [p]
        for c in candidates:
            looked.append(c)
            if c.is_file():
                return c
            if c.is_dir():
                raise FileNotFoundError(f"profile {ref!r} is a folder ({c}); give a profile JSON file")
    shipped = sorted(x.stem for x in shipped_profiles_dir().glob("*.json"))
    have = ", ".join(shipped) or "none (run from a checkout, or set $SPECDECSIM_DATA to its data/ folder)"
    raise FileNotFoundError(f"profile {ref!r} not found (looked in: {', '.join(map(str, looked))}); "
                            f"shipped profiles: {have}")


def load_profile(path: Path) -> CalibrationProfile:
    """Read and validate a profile JSON (`simulator.inputs.read_json`; fields validated strictly).

    Raises:
        UserInputError (a ValueError): unreadable, not UTF-8, bad JSON (with line/column).
        pydantic.ValidationError: a field out of range or missing.
    """
    return CalibrationProfile.model_validate(read_json(path, "profile JSON"), strict=True)


def save_profile(profile: CalibrationProfile, path: Path) -> None:
    """Validate-by-construction and write the profile atomically."""
    write_json_atomic(path, profile.model_dump(mode="json", exclude_none=True))
