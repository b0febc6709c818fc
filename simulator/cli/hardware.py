"""`specdecsim hardware`: list the GPU and box catalog, or show one entry with its sources."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from simulator.cli.common import console, fail, refuse_folder
from simulator.hardware import BoxSpec, Catalog, GpuSpec, load_catalog
from simulator.scenario import UserInputError


def hardware(
    entry_id: Annotated[Optional[str], typer.Argument(
        metavar="ID", help="A GPU or box id to show with its sources (default: list everything).")] = None,
    json_out: Annotated[Optional[Path], typer.Option(
        "--json", help="Write the catalog (or the one entry) as JSON here.")] = None,
    catalog_dir: Annotated[Optional[Path], typer.Option(
        help="Catalog folder with gpus/ and boxes/ (default: data/hardware).")] = None,
) -> None:
    """List the hardware catalog: GPUs (dense peak figures) and boxes (how the GPUs are linked)."""
    from simulator.files import write_json_atomic

    refuse_folder("--json", json_out)
    try:
        catalog = load_catalog(catalog_dir)
        entry = _find(catalog, entry_id) if entry_id is not None else None
    except UserInputError as e:
        fail(str(e))
    if entry is None:
        console.print(gpu_table(catalog))
        console.print(box_table(catalog))
    else:
        print_entry(entry)
    if json_out is not None:
        data = entry.model_dump(mode="json") if entry is not None else catalog.model_dump(mode="json")
        write_json_atomic(json_out, data)
        console.print(f"wrote {escape(str(json_out))}")


def _find(catalog: Catalog, entry_id: str) -> GpuSpec | BoxSpec:
    """The GPU or box called `entry_id`; one line listing every known id otherwise."""
    if entry_id in catalog.gpus:
        return catalog.gpus[entry_id]
    if entry_id in catalog.boxes:
        return catalog.boxes[entry_id]
    raise UserInputError(f"unknown hardware id {entry_id!r}; GPUs: {', '.join(sorted(catalog.gpus))}; "
                         f"boxes: {', '.join(sorted(catalog.boxes))}")


def _num(value: float | int | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}".rstrip("0").rstrip(".")
    return f"{value:,}"


def gpu_table(catalog: Catalog) -> Table:
    """One row per GPU: memory, bandwidth, dense bf16/fp8/fp4 peaks, SMs, L2, NVLink."""
    t = Table(title="GPUs (dense tensor peaks; '-' = none or not sourced)", title_justify="left")
    t.add_column("id", no_wrap=True)
    t.add_column("name")
    for header in ("mem GB", "GB/s", "bf16 TF/s", "fp8 TF/s", "fp4 TF/s", "SMs", "L2 MB", "NVLink GB/s"):
        t.add_column(header, justify="right")
    for g in sorted(catalog.gpus.values(), key=lambda g: g.id):
        t.add_row(escape(g.id), escape(g.name), _num(g.memory_gb), _num(g.memory_bandwidth_gb_per_s),
                  _num(g.bf16_dense_tflops), _num(g.fp8_dense_tflops), _num(g.fp4_dense_tflops),
                  _num(g.sm_count), _num(g.l2_cache_mb), _num(g.nvlink_bandwidth_gb_per_s))
    return t


def box_table(catalog: Catalog) -> Table:
    """One row per box: GPU, count, interconnect, one-way link bandwidth, NUMA nodes, P2P."""
    t = Table(title="Boxes (link GB/s: per GPU, one way)", title_justify="left")
    t.add_column("id", no_wrap=True)
    t.add_column("gpu", no_wrap=True)
    t.add_column("GPUs", justify="right")
    t.add_column("interconnect")
    t.add_column("link GB/s", justify="right")
    t.add_column("NUMA", justify="right")
    t.add_column("P2P")
    for b in sorted(catalog.boxes.values(), key=lambda b: b.id):
        t.add_row(escape(b.id), escape(b.gpu), str(b.gpus_per_node), b.interconnect,
                  _num(b.link_bandwidth_gb_per_s), str(b.numa_nodes), "yes" if b.p2p else "no")
    return t


def print_entry(entry: GpuSpec | BoxSpec) -> None:
    """Every field of one GPU or box, then its sources and notes."""
    kind = "GPU" if isinstance(entry, GpuSpec) else "box"
    t = Table(title=f"{kind} {escape(entry.id)}", title_justify="left", show_header=False)
    t.add_column("field", no_wrap=True)
    t.add_column("value")
    for field, value in entry.model_dump(mode="json", exclude={"id", "sources", "notes"}).items():
        shown = _num(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value
        t.add_row(field, "-" if shown is None else escape(str(shown)))
    console.print(t)
    console.print("[bold]sources[/]")
    for s in entry.sources:
        console.print(f"  - {escape(s)}", soft_wrap=True)
    if entry.notes:
        console.print("[bold]notes[/]")
        for n in entry.notes:
            console.print(f"  - {escape(n)}", soft_wrap=True)
