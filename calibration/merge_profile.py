"""Build one profile from several points files (e.g. one GPU's op tables + a multi-GPU machine's collectives).

    python -m calibration.merge_profile --points data/points/h200.jsonl \
        --points data/points/h200_collectives.jsonl --out data/profiles/h200.json \
        --gpu-count 2 --interconnect "NVLink (NV18) between 2 GPUs (collectives); op, forward and host tables on one GPU"

Later files win on equal keys. The hardware description can be overridden because the points
come from more than one machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from calibration.build_profile import build_profile
from calibration.store import PointStore
from simulator.profile import save_profile

app = typer.Typer(add_completion=False)


@app.command()
def main(points: list[Path] = typer.Option(..., help="PointStore JSONL files, merged in order."),
         out: Path = typer.Option(..., help="Profile JSON to write (atomically)."),
         name: Optional[str] = typer.Option(None, help="Profile name; default the file stem."),
         gpu_count: Optional[int] = typer.Option(None, help="Override hardware.gpu_count."),
         interconnect: Optional[str] = typer.Option(None, help="Override hardware.interconnect."),
         topology: Optional[str] = typer.Option(None, help="Override hardware.topology.")) -> None:
    """Merge points files and write one profile."""
    records: dict[str, dict] = {}
    for p in points:
        if not p.is_file():
            raise typer.BadParameter(f"{p}: no such points file", param_hint="--points")
        records.update(PointStore(p).records())
    command = "python -m calibration.merge_profile " + " ".join(f"--points {p}" for p in points)
    prof = build_profile(records, name=name or out.stem, description=f"merged from {len(points)} points files",
                         command_line=command)
    update = {k: v for k, v in (("gpu_count", gpu_count), ("interconnect", interconnect), ("topology", topology))
              if v is not None}
    if update:
        prof = prof.model_copy(update={"hardware": prof.hardware.model_copy(update=update)})
    save_profile(prof, out)
    typer.echo(f"wrote {out}: {len(prof.ops)} op tables, {len(prof.forwards)} forward tables, "
               f"{len(prof.collectives)} collective tables")


if __name__ == "__main__":
    app()
