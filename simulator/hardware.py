"""Hardware catalog: GPUs and multi-GPU boxes, each figure with its datasheet source.

One YAML file per GPU under `<data_dir()>/hardware/gpus/<id>.yaml` and one per box type under
`<data_dir()>/hardware/boxes/<id>.yaml`; the file name is the id. A GPU holds vendor peak figures
(memory size and bandwidth, dense tensor throughput per dtype, SMs, L2, power, NVLink and PCIe);
a box says which GPU it carries, how many, and how they are linked (NVSwitch, NVLink bridges or
plain PCIe), with the per-GPU one-way link bandwidth a collective sees.

Conventions (every file follows them; `docs/hardware.md` says more):
- Tensor throughput is DENSE. Datasheets often print the 2:4-sparse figure with an asterisk; the
  catalog stores half of it and says so in the file's notes.
- `fp16` throughput is taken to equal `bf16` (the same tensor-core rate on every GPU here, both
  with fp32 accumulate). On GeForce cards fp32 accumulate runs at half the fp16-accumulate rate;
  the catalog stores the fp32-accumulate figure, because inference engines accumulate in fp32.
- `memory_gb` is 1e9 bytes as datasheets print it; `l2_cache_mb` is the vendor's "MB", which for
  caches is 2**20 bytes.
- `nvlink_bandwidth_gb_per_s` is NVIDIA's total bidirectional figure per GPU; a box's
  `link_bandwidth_gb_per_s` is one way (NVLink total / 2, or the PCIe x16 one-way rate).
- A figure that could not be sourced is null with a note; nothing is guessed.

What it leaves out: clocks, FP64/FP32 vector rates, MIG, power-capped variants, multi-node fabrics.
A scenario's `hardware` section names a GPU and box from here: `apply_hardware` checks it against
the scenario and carries the profile to that GPU (simulator.costs.transfer).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal, Self

from pydantic import Field, ValidationError, model_validator

from simulator.config import COMPONENTS, Scenario, StrictModel
from simulator.costs.transfer import carry_profile
from simulator.profile import CalibrationProfile, CollectiveTarget, GpuRates, data_dir
from simulator.inputs import UserInputError, format_validation_error, read_yaml

Architecture = Literal["ampere", "ada", "hopper", "blackwell"]
FormFactor = Literal["sxm", "pcie"]
MemoryType = Literal["HBM2e", "HBM3", "HBM3e", "GDDR6", "GDDR6X", "GDDR7"]
Interconnect = Literal["nvswitch", "nvlink_bridge", "pcie"]

DTYPES = ("bf16", "fp16", "fp8", "fp4", "int8")
ID_PATTERN = r"^[a-z0-9][a-z0-9.-]*$"

# Field name holding each dtype's dense peak (fp16 shares bf16's: see the module docstring).
_DTYPE_FIELD = {"bf16": "bf16_dense_tflops", "fp16": "bf16_dense_tflops", "fp8": "fp8_dense_tflops",
                "fp4": "fp4_dense_tflops", "int8": "int8_dense_tops"}


def _tensor_rate(description: str):
    return Field(None, ge=1.0, le=100_000.0, description=description)


class GpuSpec(StrictModel):
    """Vendor peak figures of one GPU model; the id is its catalog file name."""

    id: str = Field(pattern=ID_PATTERN, description="Catalog id, e.g. 'h100-sxm' (= the file name).")
    name: str = Field(min_length=1, description="Display name, e.g. 'NVIDIA H100 SXM5 80GB'.")
    architecture: Architecture
    compute_capability: str = Field(pattern=r"^\d{1,2}\.\d$", description="CUDA compute capability, e.g. '9.0'.")
    form_factor: FormFactor
    memory_gb: float = Field(ge=1.0, le=2_000.0, description="Device memory, 1e9 bytes, as the datasheet gives it.")
    memory_type: MemoryType
    memory_bandwidth_gb_per_s: float = Field(ge=10.0, le=100_000.0, description="Peak device-memory bandwidth, GB/s.")
    bf16_dense_tflops: float | None = _tensor_rate("Dense bf16 tensor peak, fp32 accumulate, TFLOP/s.")
    fp8_dense_tflops: float | None = _tensor_rate("Dense fp8 tensor peak, TFLOP/s; null without fp8 tensor cores.")
    fp4_dense_tflops: float | None = _tensor_rate("Dense fp4 tensor peak, TFLOP/s; null before Blackwell.")
    int8_dense_tops: float | None = _tensor_rate("Dense int8 tensor peak, TOP/s.")
    sm_count: int | None = Field(None, ge=1, le=1_000, description="Streaming multiprocessors enabled.")
    l2_cache_mb: float | None = Field(None, ge=0.1, le=1_000.0, description="L2 cache, vendor MB (2**20 bytes).")
    tdp_w: float | None = Field(None, ge=10.0, le=5_000.0, description="Board power / TDP at default settings, W.")
    nvlink_bandwidth_gb_per_s: float | None = Field(
        None, ge=10.0, le=100_000.0, description="Total bidirectional NVLink bandwidth per GPU, GB/s; null: none.")
    nvlink_generation: int | None = Field(None, ge=1, le=10)
    pcie_generation: int = Field(ge=1, le=7)
    pcie_lanes: Literal[1, 2, 4, 8, 16]
    sources: list[str] = Field(min_length=1, description="Citations actually read: title and URL, or a measurement.")
    notes: list[str] = Field(default_factory=list, description="What is derived, assumed or not re-read.")
    device_names: list[str] = Field(default_factory=list, max_length=16, description=(
        "What CUDA calls this GPU (torch.cuda.get_device_name), as seen on a measured machine: an engine "
        "profile measured there is labelled with this id (Catalog.gpu_for_device)."))

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.architecture == "ampere" and self.fp8_dense_tflops is not None:
            raise ValueError(f"fp8_dense_tflops must be null on ampere (no fp8 tensor cores), got {self.fp8_dense_tflops}")
        if self.architecture != "blackwell" and self.fp4_dense_tflops is not None:
            raise ValueError(f"fp4_dense_tflops must be null before blackwell, got {self.fp4_dense_tflops} "
                             f"on {self.architecture}")
        if (self.nvlink_bandwidth_gb_per_s is None) != (self.nvlink_generation is None):
            raise ValueError("nvlink_bandwidth_gb_per_s and nvlink_generation are both set or both null, got "
                             f"{self.nvlink_bandwidth_gb_per_s} and {self.nvlink_generation}")
        rates = [r for r in (self.bf16_dense_tflops, self.fp8_dense_tflops, self.fp4_dense_tflops) if r is not None]
        if rates != sorted(rates):
            raise ValueError(f"dense rates must not fall with precision (bf16 <= fp8 <= fp4), got {rates}")
        return self

    def supports_dtype(self, dtype: str) -> bool:
        """Whether the catalog holds a dense tensor peak for `dtype` (one of DTYPES) on this GPU."""
        field = _DTYPE_FIELD.get(dtype)
        return field is not None and getattr(self, field) is not None

    def dense_tflops(self, dtype: str) -> float:
        """Dense tensor-core peak for `dtype`.

        Args:
            dtype: One of 'bf16', 'fp16' (same rate as bf16), 'fp8', 'fp4', 'int8' (TOP/s).

        Returns:
            Peak in TFLOP/s (TOP/s for int8), dense (no 2:4 sparsity).

        Raises:
            UserInputError: an unknown dtype, or one this GPU has no tensor rate for (fp4 on an A100),
                or one whose figure the catalog could not source (null with a note).

        Source: the GPU's catalog file (`sources`, `notes`).
        """
        field = _DTYPE_FIELD.get(dtype)
        if field is None:
            raise UserInputError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
        value = getattr(self, field)
        if value is None:
            have = [d for d in DTYPES if getattr(self, _DTYPE_FIELD[d]) is not None]
            raise UserInputError(f"{self.id} ({self.architecture}) has no {dtype} tensor rate in the catalog; "
                                 f"it has: {', '.join(have) or 'none'}")
        return value


class BoxSpec(StrictModel):
    """One multi-GPU box type: which GPU, how many, and how they reach each other."""

    id: str = Field(pattern=ID_PATTERN, description="Catalog id, e.g. 'hgx-h100-8gpu' (= the file name).")
    name: str = Field(min_length=1, description="Display name.")
    gpu: str = Field(pattern=ID_PATTERN, description="Catalog id of the GPU it carries.")
    gpus_per_node: int = Field(ge=1, le=72)
    interconnect: Interconnect = Field(description="nvswitch: all-to-all NVLink; nvlink_bridge: bridged groups; "
                                                   "pcie: GPU-to-GPU traffic over PCIe.")
    nvlink_generation: int | None = Field(None, ge=1, le=10, description="Null for a PCIe box.")
    link_bandwidth_gb_per_s: float = Field(
        ge=1.0, le=100_000.0, description="Per-GPU bandwidth a collective sees, one way, GB/s (NVLink total / 2, "
                                          "or the PCIe x16 one-way rate).")
    pcie_generation: int = Field(ge=1, le=7)
    pcie_lanes: Literal[1, 2, 4, 8, 16]
    numa_nodes: int = Field(ge=1, le=16)
    pcie_switches: int | None = Field(None, ge=0, le=64, description="PCIe switches between GPUs and CPUs; null: unknown.")
    p2p: bool = Field(description="Whether GPUs can read each other's memory directly (CUDA peer access).")
    sources: list[str] = Field(min_length=1)
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.interconnect == "pcie" and self.nvlink_generation is not None:
            raise ValueError(f"interconnect 'pcie' needs nvlink_generation null, got {self.nvlink_generation}")
        if self.interconnect != "pcie" and self.nvlink_generation is None:
            raise ValueError(f"interconnect {self.interconnect!r} needs nvlink_generation")
        return self


class Catalog(StrictModel):
    """Every GPU and box of the catalog, by id; every box's GPU is in `gpus`."""

    gpus: dict[str, GpuSpec]
    boxes: dict[str, BoxSpec]

    @model_validator(mode="after")
    def _check_box_gpus(self) -> Self:
        for box in self.boxes.values():
            if box.gpu not in self.gpus:
                raise ValueError(f"box {box.id!r}: gpu {box.gpu!r} is not in the catalog; known: "
                                 f"{', '.join(sorted(self.gpus))}")
        return self

    def gpu(self, name: str) -> GpuSpec:
        """The GPU with catalog id `name` (UserInputError naming the known ids otherwise)."""
        return _entry(self.gpus, "GPU", name)

    def gpu_for_device(self, device_name: str) -> str | None:
        """The catalog id of the GPU CUDA calls `device_name` (a GPU's `device_names`); None where no
        GPU, or more than one, names it."""
        ids = [g.id for g in self.gpus.values() if device_name.strip() in g.device_names]
        return ids[0] if len(ids) == 1 else None

    def box(self, name: str) -> BoxSpec:
        """The box with catalog id `name` (UserInputError naming the known ids otherwise)."""
        return _entry(self.boxes, "box", name)

    def box_gpu(self, name: str) -> GpuSpec:
        """The GPU that box `name` carries, e.g. `catalog.box_gpu('dgx-a100-8gpu').supports_dtype('fp8')`."""
        return self.gpu(self.box(name).gpu)


def _entry(entries: dict, kind: str, name: str):
    """entries[name], or one UserInputError line naming the unknown id and listing the known ones."""
    if name not in entries:
        raise UserInputError(f"unknown {kind} {name!r}; known: {', '.join(sorted(entries))}")
    return entries[name]


def hardware_dir() -> Path:
    """Default catalog folder: `data_dir() / "hardware"` (with `gpus/` and `boxes/` inside)."""
    return data_dir() / "hardware"


def load_catalog(dir: Path | None = None) -> Catalog:
    """Read and validate every GPU and box file of a catalog folder.

    Args:
        dir: Folder holding `gpus/*.yaml` and `boxes/*.yaml`; default `hardware_dir()`.

    Returns:
        The validated catalog, GPUs and boxes keyed by id (file name without `.yaml`).

    Raises:
        UserInputError: a missing folder, a file that is not YAML or not a mapping, a field out of
            range (one line per problem, naming the file and the field), or a box whose `gpu` is not
            in the catalog (naming the box file).
    """
    root = Path(dir) if dir is not None else hardware_dir()
    gpus = {p.stem: load_entry(p, GpuSpec) for p in _yaml_files(root / "gpus")}
    boxes = {p.stem: load_entry(p, BoxSpec) for p in _yaml_files(root / "boxes")}
    for box_id, box in boxes.items():
        if box.gpu not in gpus:
            raise UserInputError(f"{root / 'boxes' / (box_id + '.yaml')}: gpu: {box.gpu!r} is not in the catalog; "
                                 f"known: {', '.join(sorted(gpus))}")
    return Catalog(gpus=gpus, boxes=boxes)


@lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    """`load_catalog()` of the default folder, read once per process."""
    return load_catalog()


def _yaml_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise UserInputError(f"{folder}: hardware catalog folder not found")
    return sorted(folder.glob("*.yaml"))


def load_entry(path: Path, model: type[GpuSpec] | type[BoxSpec]) -> GpuSpec | BoxSpec:
    """Parse and validate one catalog file as `model`; the id comes from the file name.

    Raises:
        UserInputError: not YAML, not a mapping, an `id` that differs from the file name, or a
            field out of range (one line per problem: '<file>: <field>: <message> (got <value>)').
    """
    data = read_yaml(path, "hardware catalog file")
    if not isinstance(data, dict):
        got = "an empty file" if data is None else type(data).__name__
        raise UserInputError(f"{path}: top level must be a mapping of fields, got {got}")
    if "id" in data and data["id"] != path.stem:
        raise UserInputError(f"{path}: id: {data['id']!r} differs from the file name {path.stem!r}; "
                             f"leave id out, the file name is the id")
    try:
        return model.model_validate({**data, "id": path.stem}, strict=True)  # "3350" / "yes" are not numbers / booleans
    except ValidationError as e:
        raise UserInputError(format_validation_error(str(path), e)) from None


def gpu_rates(gpu: GpuSpec) -> GpuRates:
    """The datasheet figures of a catalog GPU that the roofline needs."""
    return GpuRates(gpu=gpu.id, memory_bandwidth_gb_per_s=gpu.memory_bandwidth_gb_per_s,
                    bf16_dense_tflops=gpu.bf16_dense_tflops, fp8_dense_tflops=gpu.fp8_dense_tflops,
                    fp4_dense_tflops=gpu.fp4_dense_tflops, source=f"hardware catalog: gpus/{gpu.id}.yaml")


def box_links(box: BoxSpec, gpu: GpuSpec, measured_on_box: str | None = None,
              allreduce: str = "nccl") -> CollectiveTarget:
    """The link fields of a catalog box the collective model prices from (simulator.costs.collectives_model).

    Args:
        box, gpu: catalog entries (gpu = the box's GPU). measured_on_box: catalog id of the box the
            profile's collective tables were measured on (default: this box). allreduce: the
            scenario's hardware.allreduce.
    """
    return CollectiveTarget(box=box.id, measured_on_box=measured_on_box or box.id, interconnect=box.interconnect,
                            gpus_per_node=box.gpus_per_node, numa_nodes=box.numa_nodes,
                            link_bandwidth_gb_per_s=box.link_bandwidth_gb_per_s,
                            pcie_generation=box.pcie_generation, pcie_lanes=box.pcie_lanes, p2p=box.p2p,
                            compute_capability=gpu.compute_capability, allreduce=allreduce)


def collectives_target(profile: CalibrationProfile, box: BoxSpec, gpu: GpuSpec, allreduce: str,
                       catalog: Catalog) -> CollectiveTarget | None:
    """The box to price collectives for, or None when the profile's own tables apply.

    The tables apply when the profile does not name the box they were measured on
    (hardware.catalog_box) or that box has the same interconnect as `box`.

    Raises:
        UserInputError: the profile's catalog_box is not in the catalog.
    """
    measured_box = profile.hardware.catalog_box
    if measured_box is None:
        return None
    if measured_box not in catalog.boxes:
        raise UserInputError(f"profile {profile.name!r}: hardware.catalog_box {measured_box!r} is not in the "
                             f"hardware catalog; known: {', '.join(sorted(catalog.boxes))}")
    if catalog.box(measured_box).interconnect == box.interconnect:
        return None
    return box_links(box, gpu, measured_on_box=measured_box, allreduce=allreduce)


def check_precision(scenario: Scenario, gpu: GpuSpec) -> None:
    """Refuse weight formats whose kernels the GPU cannot run.

    nvfp4 needs fp4 tensor cores (Blackwell); mxfp4 runs dequantised on GPUs with fp8 tensor
    cores (Hopper's weight-only MXFP4 kernels) but not before; int8 W8A8 needs int8 tensor cores.

    Raises:
        UserInputError: naming the model, the component, the format and the GPU.
    """
    for role, model in (("target", scenario.target), ("draft", scenario.draft)):
        for component in COMPONENTS:
            fmt = getattr(model.precision, component) if model.precision is not None else None
            if fmt is None:
                continue
            needs = {"nvfp4": "fp4", "mxfp4": "fp8", "int8": "int8"}.get(fmt)
            if needs == "fp8" and not (gpu.supports_dtype("fp8") or gpu.supports_dtype("fp4")):
                raise UserInputError(f"{role}.precision.{component}: {fmt} needs a GPU with fp8 or fp4 tensor cores; "
                                     f"{gpu.id} ({gpu.architecture}) has neither")
            if needs in ("fp4", "int8") and not gpu.supports_dtype(needs):
                raise UserInputError(f"{role}.precision.{component}: {fmt} needs {needs} tensor cores; "
                                     f"{gpu.id} ({gpu.architecture}) has none")


def apply_hardware(scenario: Scenario, profile: CalibrationProfile, source: str,
                   catalog: Catalog | None = None) -> CalibrationProfile:
    """Check the scenario's `hardware` section and carry the profile to its GPU.

    Args:
        scenario: validated Scenario. profile: the profile it predicts from.
        source: the scenario's file name, for messages. catalog: default `load_catalog()`.

    Returns:
        `profile` itself when the section is empty or names the profile's own GPU and a box with
        the interconnect its collectives were measured on; else a derived profile carried to the
        named GPU and, where the box's interconnect differs (`collectives_target`), with
        `collectives_on` set so that the collective model prices its collectives.

    Raises:
        UserInputError: an unknown GPU or box; a box whose GPU differs from `hardware.gpu`; a TP
            group (plus a dedicated draft GPU) larger than the box; a weight format the GPU lacks;
            a profile that does not say which catalog GPU it was measured on.
    """
    hw = scenario.hardware
    if hw.gpu is None and hw.box is None:
        return profile
    catalog = catalog or default_catalog()
    try:
        box = catalog.box(hw.box) if hw.box is not None else None
        gpu = catalog.gpu(hw.gpu or box.gpu)
    except UserInputError as e:
        raise UserInputError(f"{source}: hardware: {e}") from None
    if box is not None and box.gpu != gpu.id:
        raise UserInputError(f"{source}: hardware: box {box.id} carries {box.gpu}, not hardware.gpu {gpu.id}")
    need = scenario.placement.num_gpus(scenario.tp_size)
    if box is not None and need > box.gpus_per_node:
        raise UserInputError(f"{source}: tp_size {scenario.tp_size}"
                             f"{' + a dedicated draft GPU' if scenario.placement.dedicated else ''} needs {need} GPUs; "
                             f"box {box.id} has {box.gpus_per_node}")
    try:
        check_precision(scenario, gpu)
    except UserInputError as e:
        raise UserInputError(f"{source}: {e}") from None
    target = collectives_target(profile, box, gpu, hw.allreduce, catalog) if box is not None else None
    carried = _carry_compute(profile, gpu, catalog, source)
    if target is None:
        return carried
    return carried.model_copy(update={"collectives_on": target, "name": f"{carried.name}@{box.id}"})


def _carry_compute(profile: CalibrationProfile, gpu: GpuSpec, catalog: Catalog, source: str) -> CalibrationProfile:
    """`profile` carried to `gpu` (itself when it was measured there); see apply_hardware for the errors."""
    measured_on = profile.hardware.catalog_gpu
    if measured_on == gpu.id:
        return profile
    if measured_on is None:
        raise UserInputError(f"{source}: hardware.gpu {gpu.id}: profile {profile.name!r} does not say which catalog "
                             "GPU it was measured on (hardware.catalog_gpu), so it cannot be carried to another GPU")
    if measured_on not in catalog.gpus:
        raise UserInputError(f"profile {profile.name!r}: hardware.catalog_gpu {measured_on!r} is not in the hardware "
                             f"catalog; known: {', '.join(sorted(catalog.gpus))}")
    try:
        return carry_profile(profile, gpu_rates(catalog.gpu(measured_on)), gpu_rates(gpu))
    except ValueError as e:
        raise UserInputError(f"{source}: {e}") from None
