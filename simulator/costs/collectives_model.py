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
- Fitted (scipy.optimize.least_squares, `fitted_constants`): the fraction of the nominal bus
  bandwidth NCCL reaches per link class, the custom allreduce's base latency and peer bandwidth,
  and the eager launch cost. The NVLink fraction and the eager cost on the project's own 2x H200
  measurements (data/profiles/h200.json); the PCIe constants on ONE public curve, the case marked
  `fit: true` in data/cases/comm_public.yaml (4x RTX PRO 6000, one NUMA node), which is then
  replayed as "fit, not scored". The custom allreduce over NVLink has no curve: it uses the PCIe
  base latency and the NVLink bus bandwidth (assumed, not validated).

Left out: NVLS/multicast, multi-node, reduce_scatter, concurrent all-to-all groups sharing links, NCCL's channel search (num_channels is
a parameter: only the per-channel caps use it), message pipelining, contention with compute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from simulator.profile import CollectiveTarget
from simulator.schema_base import StrictModel
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
    """Fitted constants of the collective model (see `fitted_constants` for how).

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
    consts = consts or fitted_constants()
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


# ---- fitting -------------------------------------------------------------------------------------------
def default_profile_path() -> Path:
    """The project's own NVLink collective measurements: data/profiles/h200.json (2x H200 NV18)."""
    from simulator.profile import data_dir
    return data_dir() / "profiles" / "h200.json"


def default_stream_points_path() -> Path:
    """The project's own back-to-back eager allreduce points with same-session graph points:
    data/points/h200_collectives_stream.jsonl (`bash calibration/h200_run.sh comm-stream`, 2x H200)."""
    from simulator.profile import data_dir
    return data_dir() / "points" / "h200_collectives_stream.jsonl"


def fit_eager_stream(points_path: Path) -> float:
    """Host us per back-to-back eager call, from a points file holding allreduce
    points in modes graph and eager_stream at the same world size and sizes (one session).

    Model: stream_us = max(graph_us, host), the device time and the host's enqueue time per call,
    whichever is slower; fitted by scipy least_squares on log(model / measured), soft-L1 loss, with
    graph_us the measured graph point of the same size (the device time of that box). A device gap
    between back-to-back kernels was tried as a second parameter: these points do not determine it
    (it fitted to its bound, 0), so it is left out.

    Raises:
        ValueError: the file lacks graph and eager_stream allreduce points of common sizes.
    """
    import json
    graph, stream = {}, {}
    for line in Path(points_path).read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)["record"]
        if rec.get("op") == "allreduce":
            {"graph": graph, "eager_stream": stream}.get(rec.get("mode"), {})[int(rec["size_bytes"])] = rec["latency_us"]
    sizes = sorted(set(graph) & set(stream))
    if not sizes:
        raise ValueError(f"{points_path}: needs allreduce points in modes graph and eager_stream of the same sizes")
    g = np.asarray([graph[s] for s in sizes])
    m = np.asarray([stream[s] for s in sizes])
    host = _robust_fit(lambda x: np.log(np.maximum(g, x[0]) / m), [float(np.median(m))], ([0.0], [1000.0]))[0]
    return float(host)


def default_cases_path() -> Path:
    """The public curves: data/cases/comm_public.yaml."""
    from simulator.profile import data_dir
    return data_dir() / "cases" / "comm_public.yaml"


def _robust_fit(residuals, x0, bounds):
    """least_squares with a soft-L1 loss on log-ratio residuals (an outlier point weighs less)."""
    from scipy.optimize import least_squares  # here: scipy.optimize is slow to import
    return least_squares(residuals, x0=np.asarray(x0, dtype=float), bounds=bounds, loss="soft_l1", f_scale=0.1).x


def fit_nvlink(profile_path: Path) -> tuple[float, float]:
    """(NCCL bus-bandwidth fraction over NVLink, eager launch us) from a profile's allreduce tables.

    The fraction: NCCL model vs the graph allreduce table at its world size, on the sizes >=
    BANDWIDTH_FIT_MIN_BYTES (where the bandwidth term dominates; below, the sourced latencies
    do); the eager cost: the whole eager table vs the graph model plus a constant. Both by scipy least_squares on
    log(predicted / measured), soft-L1 loss.

    Raises:
        ValueError: the profile has no graph and eager allreduce tables or no catalog_box.
    """
    from simulator.hardware import box_links, default_catalog
    from simulator.profile import load_profile
    profile = load_profile(profile_path)
    tables = {t.mode: t for t in profile.collectives if t.op == "allreduce"}
    if "graph" not in tables or "eager" not in tables or profile.hardware.catalog_box is None:
        raise ValueError(f"{profile_path}: needs graph and eager allreduce tables and hardware.catalog_box")
    catalog = default_catalog()
    box = box_links(catalog.box(profile.hardware.catalog_box), catalog.box_gpu(profile.hardware.catalog_box),
                    measured_on_box=profile.hardware.catalog_box)
    graph, eager = tables["graph"], tables["eager"]
    zero = CommConstants({c: 1.0 for c in LINK_CLASSES}, {}, {}, 0.0)
    nominal = nominal_bus_bandwidth_gb_per_s(box, link_class(box, graph.world_size))

    def graph_model(frac: float, sizes) -> np.ndarray:
        return np.array([nccl_us("allreduce", s, graph.world_size, box, zero,
                                 bus_bandwidth_gb_per_s=nominal * frac).latency_us for s in sizes])

    big = [(s, t) for s, t in zip(graph.size_bytes, graph.latency_us) if s >= BANDWIDTH_FIT_MIN_BYTES]
    if not big:
        raise ValueError(f"{profile_path}: the graph allreduce table has no size >= {BANDWIDTH_FIT_MIN_BYTES} B")
    big_sizes, big_meas = [s for s, _ in big], np.asarray([t for _, t in big])
    frac = _robust_fit(lambda x: np.log(graph_model(x[0], big_sizes) / big_meas), [0.6], ([0.05], [1.5]))[0]
    e_model = graph_model(frac, eager.size_bytes)
    e_meas = np.asarray(eager.latency_us)
    launch = _robust_fit(lambda x: np.log((e_model + x[0]) / e_meas), [10.0], ([0.0], [1000.0]))[0]
    return float(frac), float(launch)


def fit_pcie(cases_path: Path) -> tuple[float, float, float, str]:
    """(NCCL bus-bandwidth fraction over PCIe, custom base us, custom bw GB/s, case id) fitted on the
    one case marked `fit: true` in `cases_path`, by least_squares on log(predicted / published).

    Raises:
        ValueError: not exactly one case has `fit: true`, or it is not on a one-NUMA-node PCIe box.
    """
    from simulator.hardware import box_links, default_catalog
    cases = load_comm_cases(cases_path)
    fit_cases = [c for c in cases if c.get("fit")]
    if len(fit_cases) != 1:
        raise ValueError(f"{cases_path}: exactly one case must have fit: true, got {len(fit_cases)}")
    case = fit_cases[0]
    catalog = default_catalog()
    box = box_links(catalog.box(case["box"]), catalog.box_gpu(case["box"]))
    n = case["world_size"]
    if link_class(box, n) != "pcie":
        raise ValueError(f"{cases_path}: fit case {case['id']} is not on one NUMA node of a PCIe box")
    nominal = nominal_bus_bandwidth_gb_per_s(box, "pcie")
    pts = case["points"]
    nccl_pts = [(p["size_bytes"], p["published_us"]) for p in pts if p["algorithm"] == "nccl"]
    cust_pts = [(p["size_bytes"], p["published_us"]) for p in pts if p["algorithm"] == "custom"]
    zero = CommConstants({c: 1.0 for c in LINK_CLASSES}, {}, {}, 0.0)

    def nccl_res(x):
        return np.log([nccl_us("allreduce", s, n, box, zero, bus_bandwidth_gb_per_s=nominal * x[0]).latency_us / t
                       for s, t in nccl_pts])
    frac = _robust_fit(nccl_res, [0.7], ([0.05], [1.5]))[0]

    def cust_res(x):
        c = CommConstants({}, {"pcie": x[0]}, {"pcie": x[1]}, 0.0)
        return np.log([custom_allreduce_us(s, n, box, c, variant=case.get("custom_variant")).latency_us / t
                       for s, t in cust_pts])
    base, bw = _robust_fit(cust_res, [5.0, 30.0], ([0.1, 1.0], [100.0, 1000.0]))
    return float(frac), float(base), float(bw), case["id"]


@lru_cache(maxsize=4)
def fitted_constants(profile_path: Path | None = None, cases_path: Path | None = None) -> CommConstants:
    """The model's fitted constants (module docstring), fitted once per process.

    Args:
        profile_path: NVLink measurements, default `default_profile_path()`.
        cases_path: public curves with one `fit: true` case, default `default_cases_path()`.
    """
    profile_path = profile_path or default_profile_path()
    cases_path = cases_path or default_cases_path()
    nv_frac, launch = fit_nvlink(profile_path)
    pcie_frac, base, bw, case_id = fit_pcie(cases_path)
    stream_path = default_stream_points_path()
    stream_host = fit_eager_stream(stream_path)
    return CommConstants(
        nccl_busbw_frac={"nvlink": nv_frac, "pcie": pcie_frac, "pcie_cross_numa": pcie_frac},
        custom_base_us={"nvlink": base, "pcie": base, "pcie_cross_numa": base},
        custom_bw_gb_per_s={"pcie": bw, "pcie_cross_numa": bw},
        eager_launch_us=launch,
        eager_stream_host_us=stream_host,
        sources={"eager_stream_host_us": f"fit on {stream_path.name} (eager_stream vs graph, 2x H200; a host figure)",
                 "nccl_busbw_frac.nvlink": f"fit on {profile_path.name} graph allreduce",
                 "eager_launch_us": f"fit on {profile_path.name} eager vs graph allreduce",
                 "nccl_busbw_frac.pcie": f"fit on {case_id} (NCCL points)",
                 "custom_base_us.pcie": f"fit on {case_id} (custom points)",
                 "custom_bw_gb_per_s.pcie": f"fit on {case_id} (custom points)",
                 "pcie_cross_numa": "the pcie constants (no cross-NUMA curve)",
                 "custom nvlink": "base: the pcie fit; bandwidth: the NVLink NCCL bus bandwidth (assumed)"})


# ---- public curves -------------------------------------------------------------------------------------
class CommPoint(StrictModel):
    """One published latency of a comm case."""

    size_bytes: int = Field(ge=1, le=2**40, description="Per-rank message bytes, 1..2**40.")
    algorithm: Literal["nccl", "custom"] = Field(description="What the source ran: nccl or custom (a peer-to-peer "
                                                             "allreduce kernel).")
    published_us: float = Field(gt=0, le=1e7, description="The source's latency, us, > 0 and <= 1e7.")


class CommCase(StrictModel):
    """One published collective curve (data/cases/comm_public.yaml)."""

    id: str = Field(min_length=1, max_length=200)
    source: str = Field("", max_length=1000)
    hardware: str = Field("", max_length=1000, description="The source's own words for the machine.")
    box: str = Field(min_length=1, max_length=200, description="A box of the hardware catalog.")
    world_size: int = Field(ge=2, le=64, description="Ranks, 2..64 (at most the box's GPUs).")
    op: Literal[COLLECTIVES] = "allreduce"
    launch: Literal[LAUNCHES] = Field("graph", description="graph, eager or eager_stream (`collective_us`).")
    custom_variant: Literal["one-shot", "two-shot"] | None = None
    fit: bool = Field(False, description="The curve the PCIe constants are fitted on: replayed, not scored.")
    quoted: str = Field("", max_length=10_000)
    notes: list[Annotated[str, Field(max_length=10_000)]] = Field(default_factory=list, max_length=100)
    points: list[CommPoint] = Field(min_length=1, max_length=10_000)


class CommCaseFile(StrictModel):
    """A comm cases file: its `cases`."""

    cases: list[CommCase] = Field(min_length=1, max_length=10_000)


def load_comm_cases(path: Path) -> list[dict]:
    """The `cases` of a comm cases file (data/cases/comm_public.yaml), each as a dict of every
    `CommCase` field (defaults filled in), validated strictly as a scenario file is.

    Raises:
        UserInputError: unreadable, not YAML, an explicit null, or a field out of range, naming the
            file and field (a ValueError).
    """
    from pydantic import ValidationError

    from simulator.inputs import UserInputError, format_validation_error, read_yaml, refuse_nulls
    data = read_yaml(path, "comm cases file")
    refuse_nulls(data, str(path))
    try:
        return [c.model_dump() for c in CommCaseFile.model_validate(data, strict=True).cases]
    except ValidationError as e:
        raise UserInputError(format_validation_error(str(path), e)) from None


def replay_comm_cases(path: Path | str | None = None, consts: CommConstants | None = None) -> list[dict]:
    """Predict every published point of a comm cases file from its box alone.

    Args:
        path: cases file, default data/cases/comm_public.yaml. consts: default `fitted_constants()`.

    Returns:
        One dict per point: case_id, size_bytes, algorithm (nccl/custom), predicted_us,
        published_us, error_frac ((predicted - published) / published), picked (what the model
        ran), and the case's `passed` (every point within PASS_FRAC) and `scored` (False for the
        case the constants were fitted on).

    Raises:
        UserInputError: a bad file (`load_comm_cases`), an unknown box or a world size it cannot
            hold, naming the file and case.
    """
    from simulator.hardware import box_links, default_catalog
    from simulator.inputs import UserInputError
    path = Path(path) if path is not None else default_cases_path()
    consts = consts or fitted_constants()
    catalog = default_catalog()
    rows = []
    for case in load_comm_cases(path):
        case_rows = []
        try:
            box = box_links(catalog.box(case["box"]), catalog.box_gpu(case["box"]))
            prices = [collective_us(case["op"], p["size_bytes"], case["world_size"], box, algorithm=p["algorithm"],
                                    launch=case["launch"], consts=consts, custom_variant=case["custom_variant"])
                      for p in case["points"]]
        except ValueError as e:  # an unknown box, a world size the box cannot hold (UserInputError is one too)
            raise UserInputError(f"{path}: case {case['id']}: {e}") from None
        for p, price in zip(case["points"], prices):
            err = (price.latency_us - p["published_us"]) / p["published_us"]
            case_rows.append({"case_id": case["id"], "size_bytes": p["size_bytes"], "algorithm": p["algorithm"],
                              "predicted_us": price.latency_us, "published_us": p["published_us"],
                              "error_frac": err, "picked": price.detail})
        passed = all(abs(r["error_frac"]) <= PASS_FRAC for r in case_rows)
        for r in case_rows:
            r.update(passed=passed, scored=not case.get("fit", False))
        rows += case_rows
    return rows
