"""One profile from several points files (e.g. one GPU's op tables + a multi-GPU machine's collectives).

    specdecsim calibrate merge --points data/points/h200.jsonl \
        --points data/points/h200_collectives.jsonl --out data/profiles/h200.json \
        --gpu-count 2 --interconnect "NVLink (NV18) between 2 GPUs (collectives); the rest on one GPU"

Later files win on equal keys. The hardware description can be overridden because the points
come from more than one machine.
"""

from __future__ import annotations

from pathlib import Path

from calibration.build.profile import build_profile
from calibration.build.store import PointStore
from calibration.provenance import command_line
from simulator.profile import CalibrationProfile


def merge_points(points: list[Path], name: str, hardware_update: dict | None = None) -> CalibrationProfile:
    """Build one profile from the points of `points`, merged in order (a later file's point replaces
    an earlier one's), with the hardware fields of `hardware_update` (gpu_count, interconnect,
    topology) replacing the measured ones.

    Raises:
        FileNotFoundError: a points file that does not exist.
        ValueError: a table grid with a hole, or missing host / roofline points (build_profile).
    """
    records: dict[str, dict] = {}
    for p in points:
        if not Path(p).is_file():
            raise FileNotFoundError(f"{p}: no such points file")
        records.update(PointStore(p, writable=False).records())
    prof = build_profile(records, name=name, description=f"merged from {len(points)} points files",
                         command_line=command_line())
    if hardware_update:
        prof = prof.model_copy(update={"hardware": prof.hardware.model_copy(update=hardware_update)})
    return prof
