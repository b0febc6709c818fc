"""Collective latency from a box's links alone: NCCL's tuning model and the custom allreduce.

A collective (allreduce, all_gather, broadcast, send_recv) over `world_size` GPUs of one catalog
box is priced by algorithm, in microseconds:

- NCCL, as its tuning model (NVIDIA/nccl `src/graph/tuning.cc`, ncclTopoTuneModel and
  ncclTopoGetAlgoTime) prices it: for each algorithm (ring, tree) and protocol (LL, LL128,
  Simple), t = base latency + hops x per-hop latency of the link class + bytes / algorithm
  bandwidth, where the algorithm bandwidth is the bus bandwidth times the protocol's efficiency
  (capped per channel) times the ring's n/nsteps (tree: 1/2). NCCL runs the fastest enabled pair,
  and so does the model. NVLS (NVSwitch multicast), CollNet and PAT are left out (single node,
  multicast off as on the project's lent machines).
- the custom allreduce of vLLM (`csrc/custom_all_reduce.cuh`, `vllm/distributed/
  device_communicators/custom_all_reduce.py`; SGLang's `custom_all_reduce.py` is adapted from
  vLLM's): one-shot (each rank reads every peer's buffer, ingress (n-1) x bytes per rank, one
  start and one end barrier) or two-shot (reduce-scatter then all-gather, ingress 2(n-1)/n x
  bytes, one barrier more): t = base + ingress / peer bandwidth (+ base / 2 for two-shot's extra
  barrier, assumed: base holds two barriers).
- eager launch (no CUDA graph): one call after a device sync adds a host launch cost; calls back to
  back (`eager_stream`, how public loops time them) cost max(device latency, host enqueue time per
  call). Both host figures are the project's own lent H200 host's: on that host (2x H200,
  `bash calibration/h200_run.sh comm-stream`) back-to-back eager allreduce is host-bound up to 2 MiB.
- all_to_all: NCCL has no all-to-all kernel; it is n-1 ncclSend/ncclRecv pairs in one group (NCCL
  User Guide, "Point-to-point communication": all-to-all), and its p2p path is outside the tuning
  model. Priced as t = base + (n-1) x per-peer hop latency + (n-1)/n x bytes / bus bandwidth, with
  the base and hop constants of send_recv (ring base; LL hop, or the tree Simple hop as for
  broadcast) and protocols LL and Simple only (p2p runs LL below NCCL_P2P_LL_THRESHOLD, Simple
  above; no LL128): assumed, no all-to-all constant is published. (n-1)/n: the share of a rank's
  send buffer that crosses links (nccl-tests src/alltoall.cu, AlltoAllGetBw).

Link classes, derived from a box's fields (no extra catalog field):
- `nvlink`: interconnect nvswitch, or nvlink_bridge with 2 GPUs (a bridge joins pairs);
- `pcie`: GPU traffic over PCIe inside one NUMA node (world_size <= gpus_per_node / numa_nodes:
  the GPUs are assumed placed on one node);
- `pcie_cross_numa`: PCIe through the CPU interconnect (the group spans NUMA nodes). NCCL's
  tuning model has no separate row for it (hwLat PCI), and no public curve used here gives one:
  it is priced with the `pcie` constants. This is a known gap.

Constants, and where each one comes from:
- NCCL base and per-hop latencies, LL/LL128/tree caps, the tree correction factors: tuning.cc
  (NVIDIA/nccl commit 5067397c2676d5aed50042fc39e5c8ee96eb0027).
- NCCL's PCIe link rate, lanes x per-lane rate / 80 GB/s (Gen5 x16 = 48 GB/s): `src/graph/topo.cc`
  (kvDictPciGen, "Values in 100Mbps, per lane") at the same commit.
- LL128 only over NVLink (tuning.cc: `pEnable &= typeIntra <= PATH_NVB`).
- Fitted (scipy.optimize.least_squares, `simulator.costs.collectives_fit`): the fraction of the
  nominal bus bandwidth NCCL reaches per link class, the custom allreduce's base latency and peer
  bandwidth, and the eager launch cost. The NVLink fraction and the eager cost on the project's own
  2x H200 measurements (data/profiles/h200.json); the PCIe constants on ONE public curve, the case
  marked `fit: true` in data/cases/comm_public.yaml (4x RTX PRO 6000, one NUMA node), which is then
  replayed as "fit, not scored". The custom allreduce over NVLink has no curve: it uses the PCIe
  base latency and the NVLink bus bandwidth (assumed, not validated). The model reads the fitted
  values from data/fits/collectives.json (`fitted_constants`), which `python -m
  simulator.costs.collectives_fit` writes; tests/test_collectives_model.py checks the file is
  what a fresh fit gives.

Left out: NVLS/multicast, multi-node, reduce_scatter, concurrent all-to-all groups sharing links, NCCL's channel search (num_channels is
a parameter: only the per-channel caps use it), message pipelining, contention with compute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from simulator.files import COLLECTIVE_CONSTANTS_OUTPUT
from simulator.profile import CollectiveTarget, data_dir
from simulator.units import BYTES_PER_US_PER_GB_PER_S

COLLECTIVES = ("allreduce", "all_gather", "broadcast", "send_recv", "all_to_all")
ALGORITHMS = ("nccl", "custom", "auto")
LAUNCHES = ("graph", "eager", "eager_stream")
LINK_CLASSES = ("nvlink", "pcie", "pcie_cross_numa")
PROTOCOLS = ("LL", "LL128", "Simple")
PASS_FRAC = 0.15  # a replayed point passes within 15% of the published latency
BANDWIDTH_FIT_MIN_BYTES = 1 << 20  # NVLink bus-bandwidth fraction fitted on sizes from 1 MiB up

# ---- NCCL tuning model constants: NVIDIA/nccl src/graph/tuning.cc (ncclTunerConstantsDefaults) ----
# baseLatencies, us, per algorithm, (LL, LL128, Simple).
NCCL_BASE_LAT_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}
# hwLatencies, us per hop, NVLINK and PCI rows, per algorithm, (LL, LL128, Simple).
NCCL_HW_LAT_US = {"nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)},
                  "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7)}}
# Single-node (N1) columns, GB/s: llMaxBws, perChMaxRingLL128Bws, perChMaxTreeLL128Bws, perChMaxTreeBws.
NCCL_LL_MAX_BW = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 2 * 141.0}
NCCL_PER_CH_RING_LL128_BW = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7, "blackwell": 40.0}
NCCL_PER_CH_TREE_LL128_BW = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7, "blackwell": 55.6}
NCCL_PER_CH_TREE_BW = {"volta": 26.5, "ampere": 24.0, "hopper": 38.7, "blackwell": 70.0}
# treeCorrectionFactor[protocol][log2(bytes / 64)], powers of two from 64 B (tuning.cc).
NCCL_TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
}
# Protocol efficiencies on the bus bandwidth (tuning.cc "model refinements").
NCCL_RING_LL_FRAC = 0.5
NCCL_RING_LL128_FRAC = 0.92
NCCL_TREE_FRAC = 0.92
NCCL_TREE_LL_FRAC = 1.0 / 3.8
NCCL_TREE_LL128_FRAC = 7.0 / 9.0  # single node
# PCIe per-lane rate in units of 100 Mbps, by generation: src/graph/topo.cc kvDictPciGen.
NCCL_PCI_LANE_RATE = {1: 15, 2: 30, 3: 60, 4: 120, 5: 240, 6: 480}
NCCL_PCI_RATE_DIVISOR = 80.0  # topo.cc: bw = width * speed / 80.0 (GB/s)
# Channels (assumed; only the per-channel caps above use them, and they bind in neither default).
DEFAULT_NUM_CHANNELS = {"nvlink": 16, "pcie": 2, "pcie_cross_numa": 2}

# ---- custom allreduce (vLLM csrc/custom_all_reduce.cuh, custom_all_reduce.py) ----
CUSTOM_WORLD_SIZES = (2, 4, 6, 8)          # CustomAllreduce._SUPPORTED_WORLD_SIZES
CUSTOM_MAX_BYTES = 8192 * 1024             # CustomAllreduce(max_size=8192 * 1024); used when size < max
CUSTOM_ALIGN_BYTES = 16                    # should_custom_ar: "input byte size to be multiples of 16"
# One-shot while (world <= 4 and bytes < 512 KiB) or (world <= 8 and bytes < 256 KiB) on full NVLink;
# always one-shot at world 2 (custom_all_reduce.cuh REDUCE_CASE).
CUSTOM_ONE_SHOT_MAX_BYTES = {4: 512 * 1024, 8: 256 * 1024}


@dataclass(frozen=True)
class CommConstants:
    """Fitted constants of the collective model (`simulator.costs.collectives_fit` says how;
    `fitted_constants` reads them).

    nccl_busbw_frac: link class -> fraction of the nominal bus bandwidth NCCL reaches.
    custom_base_us: link class -> custom one-shot base latency (launch + two barriers), us.
    custom_bw_gb_per_s: link class -> peer read bandwidth per rank the custom kernel reaches, GB/s.
    eager_launch_us: host launch cost an eager collective adds, us (one call after a device sync).
    eager_stream_host_us: host time per call of back-to-back eager collectives, us: the floor of
        launch 'eager_stream' (a HOST figure: the Python, c10d and NCCL enqueue path of the machine
        it was measured on).
    sources: constant name -> what it was fitted on.
    """

    nccl_busbw_frac: dict[str, float]
    custom_base_us: dict[str, float]
    custom_bw_gb_per_s: dict[str, float]
    eager_launch_us: float
    sources: dict[str, str] = field(default_factory=dict)
    eager_stream_host_us: float = 0.0


def constants_path() -> Path:
    """The committed fitted constants: data/fits/collectives.json."""
    return data_dir() / "fits" / "collectives.json"


def fitted_constants(path: Path | None = None) -> CommConstants:
    """The model's fitted constants as committed (default `constants_path()`), read once per file.

    Raises:
        UserInputError: the file is unreadable or not a constants file, naming it.
    """
    return _read_constants(Path(path) if path is not None else constants_path())


@lru_cache(maxsize=4)
def _read_constants(path: Path) -> CommConstants:
    from simulator.inputs import UserInputError, read_json
    data = read_json(path, "collective constants file")
    fields = ("nccl_busbw_frac", "custom_base_us", "custom_bw_gb_per_s", "eager_launch_us", "eager_stream_host_us",
              "sources")
    if not isinstance(data, dict) or data.get("specdecsim_output") != COLLECTIVE_CONSTANTS_OUTPUT \
            or any(f not in data for f in fields):
        raise UserInputError(f"{path}: not a collective constants file ({COLLECTIVE_CONSTANTS_OUTPUT}: "
                             f"{', '.join(fields)}); `python -m simulator.costs.collectives_fit` writes it")
    return CommConstants(**{f: data[f] for f in fields})


@dataclass(frozen=True)
class CollectivePrice:
    """One priced collective: latency (us) and what was picked (e.g. 'nccl ring/LL', 'custom one-shot')."""

    latency_us: float
    algorithm: str
    detail: str


# ---- link classes --------------------------------------------------------------------------------
def link_class(box: CollectiveTarget, world_size: int) -> str:
    """The link class a collective over `world_size` GPUs of `box` runs on (module docstring).

    Raises:
        ValueError: world_size < 1 or larger than the box.
    """
    _check_world(box, world_size)
    if box.interconnect == "nvswitch" or (box.interconnect == "nvlink_bridge" and world_size <= 2):
        return "nvlink"
    per_node = max(1, box.gpus_per_node // box.numa_nodes)
    return "pcie" if world_size <= per_node else "pcie_cross_numa"


def _check_world(box: CollectiveTarget, world_size: int) -> None:
    if not isinstance(world_size, (int, np.integer)) or world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
    if world_size > box.gpus_per_node:
        raise ValueError(f"world_size {world_size} is larger than box {box.box} ({box.gpus_per_node} GPUs)")


def _arch(compute_capability: str) -> str:
    """NCCL's compCapIndex: >= 10.0 blackwell, >= 9.0 hopper, >= 8.0 ampere (Ada too), else volta."""
    major, minor = (int(x) for x in compute_capability.split("."))
    cc = 10 * major + minor
    return "blackwell" if cc >= 100 else "hopper" if cc >= 90 else "ampere" if cc >= 80 else "volta"


def nominal_bus_bandwidth_gb_per_s(box: CollectiveTarget, cls: str) -> float:
    """Bus bandwidth the links offer before NCCL's efficiency, GB/s.

    nvlink: the box's one-way NVLink bandwidth per GPU (catalog `link_bandwidth_gb_per_s`).
    pcie, pcie_cross_numa: NCCL's PCIe rate, lanes x lane rate / 80 (topo.cc; Gen5 x16 = 48 GB/s).
    """
    if cls == "nvlink":
        return box.link_bandwidth_gb_per_s
    return box.pcie_lanes * NCCL_PCI_LANE_RATE[min(box.pcie_generation, 6)] / NCCL_PCI_RATE_DIVISOR


# ---- NCCL ------------------------------------------------------------------------------------------
def nccl_candidates_us(kind: str, size_bytes: float, world_size: int, box: CollectiveTarget,
                       consts: CommConstants, num_channels: int | None = None,
                       bus_bandwidth_gb_per_s: float | None = None) -> dict[tuple[str, str], float]:
    """Latency of every enabled (algorithm, protocol) NCCL would consider, us (CUDA-graph launch).

    t = base[a][p] + hops x hwLat[class][a][p] + bytes / (1000 x algbw[a][p]) (tuning.cc,
    ncclTopoGetAlgoTime), with ring hops = nsteps (allreduce 2(n-1), all_gather n-1, broadcast n)
    and tree allreduce hops 2(n-1); algbw = busbw x protocol efficiency x n / nsteps (ring) or
    x 1/2 (tree). all_gather's NCCL byte count is the output (n x size_bytes). send_recv (NCCL's
    p2p path is outside the tuning model) is priced as a ring broadcast over 2 ranks (assumed);
    all_to_all as n-1 such peer exchanges in one group, hops n-1, algbw = busbw x n/(n-1), LL and
    Simple only (module docstring; assumed).

    Args:
        kind: one of COLLECTIVES. size_bytes: per-rank input bytes (>= 0). world_size: ranks.
        box: the box's links. consts: fitted constants. num_channels: default DEFAULT_NUM_CHANNELS.
        bus_bandwidth_gb_per_s: override of nominal x fitted fraction (tests use it).

    Returns:
        {(algorithm, protocol): latency_us}; {} for world_size 1.

    Raises:
        ValueError: an unknown kind, size_bytes < 0, or a world_size the box cannot hold.
    """
    if kind not in COLLECTIVES:
        raise ValueError(f"unknown collective kind {kind!r}; known: {', '.join(COLLECTIVES)}")
    if size_bytes < 0:
        raise ValueError(f"size_bytes must be >= 0, got {size_bytes}")
    cls = link_class(box, world_size)
    if world_size == 1:
        return {}
    n = 2 if kind == "send_recv" else world_size
    arch = _arch(box.compute_capability)
    nch = num_channels or DEFAULT_NUM_CHANNELS[cls]
    busbw = bus_bandwidth_gb_per_s
    if busbw is None:
        busbw = nominal_bus_bandwidth_gb_per_s(box, cls) * consts.nccl_busbw_frac[cls]
    hw = "nvlink" if cls == "nvlink" else "pci"
    nbytes = size_bytes * n if kind == "all_gather" else size_bytes
    nsteps = {"allreduce": 2 * (n - 1), "all_gather": n - 1, "all_to_all": n - 1}.get(kind, n)
    if kind == "send_recv":
        nsteps = 1
    out = {}
    for p_idx, proto in enumerate(PROTOCOLS):
        if proto == "LL128" and (cls != "nvlink" or kind == "all_to_all"):
            continue  # LL128 only over NVLink (tuning.cc: typeIntra <= PATH_NVB); p2p has no LL128
        # ring
        bw = busbw
        if proto == "LL":
            bw = min(NCCL_LL_MAX_BW[arch], bw * NCCL_RING_LL_FRAC)
        elif proto == "LL128":
            bw = min(bw * NCCL_RING_LL128_FRAC, nch * NCCL_PER_CH_RING_LL128_BW[arch])
        algbw = bw * n / nsteps
        hop = NCCL_HW_LAT_US[hw]["ring"][p_idx]
        if kind in ("broadcast", "send_recv", "all_to_all") and proto == "Simple":
            hop = NCCL_HW_LAT_US[hw]["tree"][p_idx]  # tuning.cc: broadcast's chunk latency uses tree Simple
        lat = NCCL_BASE_LAT_US["ring"][p_idx] + nsteps * hop
        out[("ring", proto)] = lat + nbytes / (algbw * BYTES_PER_US_PER_GB_PER_S)
        # tree: allreduce only
        if kind != "allreduce":
            continue
        bw = min(busbw * NCCL_TREE_FRAC, nch * NCCL_PER_CH_TREE_BW[arch])
        if proto == "LL":
            bw = min(bw * NCCL_TREE_LL_FRAC, NCCL_LL_MAX_BW[arch])
        elif proto == "LL128":
            bw = min(bw * NCCL_TREE_LL128_FRAC, nch * NCCL_PER_CH_TREE_LL128_BW[arch])
        log_size = int(math.floor(math.log2(nbytes / 64))) if nbytes >= 64 else -1
        if 0 <= log_size < 23:
            bw *= NCCL_TREE_CORRECTION[proto][log_size]
        lat = NCCL_BASE_LAT_US["tree"][p_idx] + 2 * (n - 1) * NCCL_HW_LAT_US[hw]["tree"][p_idx]
        out[("tree", proto)] = lat + nbytes / (bw * 0.5 * BYTES_PER_US_PER_GB_PER_S)
    return out


def nccl_us(kind: str, size_bytes: float, world_size: int, box: CollectiveTarget, consts: CommConstants,
            **kw) -> CollectivePrice:
    """NCCL's pick: the fastest (algorithm, protocol) of `nccl_candidates_us` (CUDA-graph launch)."""
    cands = nccl_candidates_us(kind, size_bytes, world_size, box, consts, **kw)
    if not cands:
        return CollectivePrice(0.0, "nccl", "world 1")
    (algo, proto), us = min(cands.items(), key=lambda kv: kv[1])
    return CollectivePrice(us, "nccl", f"nccl {algo}/{proto}")


# ---- custom allreduce -------------------------------------------------------------------------------
def custom_enabled(box: CollectiveTarget, world_size: int, size_bytes: float) -> bool:
    """Whether vLLM (and SGLang, adapted from it) runs its custom allreduce here.

    World size in (2, 4, 6, 8); CUDA peer access; all GPUs NVLink-connected or world size 2
    ("not supported on more than two PCIe-only GPUs"); size < 8 MiB and a multiple of 16 bytes.
    Source: vllm/distributed/device_communicators/custom_all_reduce.py (__init__, should_custom_ar).
    """
    fully_connected = box.interconnect == "nvswitch"
    return (world_size in CUSTOM_WORLD_SIZES and box.p2p and (world_size == 2 or fully_connected)
            and size_bytes < CUSTOM_MAX_BYTES and size_bytes % CUSTOM_ALIGN_BYTES == 0)


def one_shot(world_size: int, size_bytes: float, fully_connected: bool = True) -> bool:
    """vLLM's kernel choice: one-shot at world 2, or below 512 KiB (world <= 4) / 256 KiB (<= 8); else two-shot.

    Without full NVLink (more than 2 PCIe GPUs, where vLLM itself does not enable the custom
    allreduce and its kernel would be a half butterfly, not modelled) one-shot: the custom PCIe
    kernels of the public curves are one-shot. The switch at a fixed size is vLLM's, not the
    model's crossover, so latency may step down there.

    Source: csrc/custom_all_reduce.cuh (CustomAllreduce::allreduce, REDUCE_CASE).
    """
    if world_size == 2 or not fully_connected:
        return True
    limit = CUSTOM_ONE_SHOT_MAX_BYTES[4] if world_size <= 4 else CUSTOM_ONE_SHOT_MAX_BYTES[8]
    return size_bytes < limit


def custom_allreduce_us(size_bytes: float, world_size: int, box: CollectiveTarget, consts: CommConstants,
                        variant: str | None = None) -> CollectivePrice:
    """Custom allreduce latency (CUDA-graph launch), us.

    one-shot: base + (n-1) x bytes / bw; two-shot: 1.5 x base + 2(n-1)/n x bytes / bw (module
    docstring). `variant` 'one-shot' / 'two-shot' forces one; default vLLM's choice (`one_shot`).

    Raises:
        ValueError: size_bytes < 0, an unknown variant, or a world_size the box cannot hold.
    """
    if size_bytes < 0:
        raise ValueError(f"size_bytes must be >= 0, got {size_bytes}")
    cls = link_class(box, world_size)
    if world_size == 1:
        return CollectivePrice(0.0, "custom", "world 1")
    if variant is None:
        variant = "one-shot" if one_shot(world_size, size_bytes, box.interconnect == "nvswitch") else "two-shot"
    base = consts.custom_base_us[cls]
    bw_gb_per_s = consts.custom_bw_gb_per_s.get(cls)
    if bw_gb_per_s is None:  # no curve (NVLink): the NCCL bus bandwidth of the link (assumed)
        bw_gb_per_s = nominal_bus_bandwidth_gb_per_s(box, cls) * consts.nccl_busbw_frac[cls]
    bw = bw_gb_per_s * BYTES_PER_US_PER_GB_PER_S
    n = world_size
    if variant == "one-shot":
        us = base + (n - 1) * size_bytes / bw
    elif variant == "two-shot":
        us = 1.5 * base + 2 * (n - 1) / n * size_bytes / bw
    else:
        raise ValueError(f"unknown custom allreduce variant {variant!r}; known: one-shot, two-shot")
    return CollectivePrice(us, "custom", f"custom {variant}")


# ---- one entry point ---------------------------------------------------------------------------------
def collective_us(kind: str, size_bytes: float, world_size: int, box: CollectiveTarget,
                  algorithm: str = "nccl", launch: str = "graph",
                  consts: CommConstants | None = None, custom_variant: str | None = None) -> CollectivePrice:
    """Latency of one collective on `box`, us.

    Args:
        kind: one of COLLECTIVES. size_bytes: per-rank input bytes. world_size: ranks (1 -> 0 us).
        box: the box's links. algorithm: 'nccl', 'custom' (allreduce only; other kinds use NCCL)
            or 'auto' (custom where vLLM/SGLang enable it, `custom_enabled`, else NCCL).
        launch: 'graph' (CUDA-graph replay), 'eager' (one call after a sync: + consts.eager_launch_us)
            or 'eager_stream' (calls back to back, the host enqueuing ahead: max(latency,
            consts.eager_stream_host_us), the slower of device and host).
        consts: default `fitted_constants()`. custom_variant: 'one-shot' / 'two-shot' forces the
            custom kernel (default vLLM's choice, `one_shot`).

    Returns:
        CollectivePrice with latency_us and what was picked.

    Raises:
        ValueError: an unknown kind, algorithm or launch; size_bytes < 0; world_size < 1 or
            larger than the box.
    """
    if kind not in COLLECTIVES:
        raise ValueError(f"unknown collective kind {kind!r}; known: {', '.join(COLLECTIVES)}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown allreduce algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    if launch not in LAUNCHES:
        raise ValueError(f"unknown launch {launch!r}; known: {', '.join(LAUNCHES)}")
    link_class(box, world_size)  # checks world_size
    if world_size == 1:
        return CollectivePrice(0.0, algorithm, "world 1")
    if consts is None:
        consts = fitted_constants()
    use_custom = kind == "allreduce" and (
        algorithm == "custom" or (algorithm == "auto" and custom_enabled(box, world_size, size_bytes)))
    price = (custom_allreduce_us(size_bytes, world_size, box, consts, variant=custom_variant) if use_custom
             else nccl_us(kind, size_bytes, world_size, box, consts))
    if launch == "eager":
        return CollectivePrice(price.latency_us + consts.eager_launch_us, price.algorithm, price.detail + " + eager")
    if launch == "eager_stream":
        if consts.eager_stream_host_us > price.latency_us:
            return CollectivePrice(consts.eager_stream_host_us, price.algorithm, price.detail + " (host-bound stream)")
        return CollectivePrice(price.latency_us, price.algorithm, price.detail + " (device-bound stream)")
    return price
