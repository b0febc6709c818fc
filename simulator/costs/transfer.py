"""Carry a profile measured on one GPU to another as per-op efficiencies.

An op measured at t_src on the source GPU reached the fraction e = roofline_src / t_src of its
roofline. On the destination GPU it is taken to reach the same fraction of *its* roofline, so

    t_dst = roofline_dst / e = t_src * roofline_dst / roofline_src,
    roofline_g(op) = max(kernel_floor_us, bytes / bandwidth_g, flops / rate_g(compute dtype)),

with bandwidth and dense rates from the two GPUs' datasheets (the hardware catalog, carried in
the profile's `transfer` as `GpuRates`) and the kernel floor (launch-bound small kernels) kept
as measured. An op bound by memory on both GPUs scales by the bandwidth ratio, a compute-bound
op by the rate ratio, a floor-bound op not at all; an op whose bound changes between the GPUs
moves from one law to the other. A whole forward scales by the ratio of its ops' roofline sums.
Host overheads and collective tables are not carried (they belong to the host CPU and the
box's interconnect); the cost model notes that. Collectives on a box with another interconnect
are priced by simulator.costs.collectives_model instead (simulator.hardware.apply_hardware).

Assumption: kernels reach the same fraction of the roofline on both GPUs (same kernel library,
same shapes). Source: the roofline model, Williams, Waterman and Patterson, "Roofline: an
insightful visual performance model", CACM 52(4), 2009.
"""

from __future__ import annotations

from collections.abc import Iterable

from simulator.costs.ops import Op
from simulator.profile import GpuRates, ProfileTransfer
from simulator.units import BYTES_PER_US_PER_GB_PER_S, FLOPS_PER_US_PER_TFLOPS


def roofline_on_us(op: Op, rates: GpuRates, kernel_floor_us: float) -> float:
    """max(floor, bytes / bandwidth, flops / rate) of one compute op on a GPU's datasheet, in us."""
    bw = rates.memory_bandwidth_gb_per_s * BYTES_PER_US_PER_GB_PER_S
    rate = rates.rate_tflops(op.compute_dtype) * FLOPS_PER_US_PER_TFLOPS
    return max(kernel_floor_us, op.bytes / bw, op.flops / rate)


def transfer_ratio(ops: Iterable[Op], transfer: ProfileTransfer, kernel_floor_us: float) -> float:
    """t_dst / t_src of compute ops run back to back (collectives skipped): the ratio of their
    roofline sums on the destination and the source GPU."""
    compute = [op for op in ops if not op.is_collective]
    src = sum(roofline_on_us(op, transfer.measured_on, kernel_floor_us) for op in compute)
    dst = sum(roofline_on_us(op, transfer.carried_to, kernel_floor_us) for op in compute)
    return dst / src if src > 0 else 1.0


def transfer_note(transfer: ProfileTransfer, collectives_own: bool = True) -> str:
    """The output note a carried profile gets (`collectives_own` False: its collectives are priced
    from the box by the collective model, which notes that itself)."""
    own = "host overheads and collectives are" if collectives_own else "host overheads are"
    note = (f"compute carried from {transfer.measured_on.gpu} to {transfer.carried_to.gpu} as per-op roofline "
            f"efficiencies (datasheet figures); {own} the profile's own")
    if transfer.carried_to.fp8_dense_tflops is None:
        note += f"; {transfer.carried_to.gpu} has no fp8 tensor cores: fp8 weights, if any, run weight-only at bf16"
    return note


def carry_profile(profile, measured_on: GpuRates, carried_to: GpuRates):
    """A derived profile: `profile` with its tables re-priced for `carried_to` at lookup.

    Args:
        profile: CalibrationProfile measured on the GPU `measured_on` describes.
        measured_on, carried_to: datasheet figures of the two GPUs.

    Returns:
        A CalibrationProfile with `transfer` set (None when both are the same GPU figures).

    Raises:
        ValueError: the profile is already a derived one (carry the measured profile instead).
    """
    if profile.transfer is not None:
        raise ValueError(f"profile {profile.name!r} is already carried to {profile.transfer.carried_to.gpu}; "
                         "carry the measured profile instead")
    if measured_on == carried_to:
        return profile
    return profile.model_copy(update={"transfer": ProfileTransfer(measured_on=measured_on, carried_to=carried_to),
                                      "name": f"{profile.name}@{carried_to.gpu}"})
