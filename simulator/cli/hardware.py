"""`specdecsim hardware`: list the GPU and box catalog, or show one entry with its sources."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from simulator.cli.common import FORCE_HELP, console, fail, json_to_stdout, output_name
from simulator.inputs import UserInputError

if TYPE_CHECKING:
    from simulator.hardware import BoxSpec, Catalog, GpuSpec


def hardware(
    entry_id: Annotated[Optional[str], typer.Argument(
        metavar="ID", help="A GPU or box id to show with its sources (default: list everything).")] = None,
    json_out: Annotated[Optional[Path], typer.Option(
        "--json", help="Write the catalog (or the one entry) as JSON here (\'-\': standard output, the tables then on standard error).")] = None,
    catalog_dir: Annotated[Optional[Path], typer.Option(
        help="Catalog folder with gpus/ and boxes/ (default: data/hardware).")] = None,
    force: Annotated[bool, typer.Option("--force", help=FORCE_HELP)] = False,
) -> None:
    """List the hardware catalog: GPUs (dense peak figures) and boxes (how the GPUs are linked)."""
    json_to_stdout(json_out)
    from simulator.files import HARDWARE_OUTPUT, OUTPUT_KEY, check_output_file, write_json_atomic
    from simulator.hardware import load_catalog

    try:
        check_output_file(json_out, "--json", HARDWARE_OUTPUT, force)
        catalog = load_catalog(catalog_dir)
        entry = _find(catalog, entry_id) if entry_id is not None else None
    except UserInputError as e:
        fail(str(e))
    if json_out is not None:  # written before anything is printed: a path it cannot write prints no tables
        data = entry.model_dump(mode="json") if entry is not None else catalog.model_dump(mode="json")
        write_json_atomic(json_out, {OUTPUT_KEY: HARDWARE_OUTPUT, **data}, allow_nan=False)
    if entry is None:
        console.print(gpu_table(catalog))
        console.print(box_table(catalog))
    else:
        print_entry(entry)
    if json_out is not None:
        console.print(f"wrote {output_name(json_out)}")


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


def _whole(value: float | int | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def gpu_table(catalog: Catalog) -> Table:
    """One row per GPU: memory, bandwidth, dense bf16/fp8/fp4 peaks, SMs, L2, NVLink."""
    t = Table(title="GPUs (dense TFLOP/s; '-' = none or not sourced; names and sources: specdecsim hardware ID)",
              title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("id", no_wrap=True)
    for header in ("GB", "GB/s", "bf16", "fp8", "fp4", "SMs", "L2MB", "NVLink"):
        t.add_column(header, justify="right", no_wrap=True)
    for g in sorted(catalog.gpus.values(), key=lambda g: g.id):
        t.add_row(escape(g.id), *(_whole(v) for v in (
            g.memory_gb, g.memory_bandwidth_gb_per_s, g.bf16_dense_tflops, g.fp8_dense_tflops, g.fp4_dense_tflops,
            g.sm_count, g.l2_cache_mb, g.nvlink_bandwidth_gb_per_s)))
    return t


def box_table(catalog: Catalog) -> Table:
    """One row per box: GPU, count, interconnect (with 'noP2P' where peer-to-peer is off), one-way link
    bandwidth, NUMA nodes."""
    t = Table(title="Boxes (GB/s: link bandwidth per GPU, one way)", title_justify="left", box=box.SIMPLE_HEAD,
              pad_edge=False)
    t.add_column("id", no_wrap=True)
    t.add_column("gpu", no_wrap=True, max_width=22)
    t.add_column("n", justify="right", no_wrap=True, min_width=1)
    t.add_column("link", no_wrap=True)
    t.add_column("GB/s", justify="right", no_wrap=True, min_width=4)
    t.add_column("NUMA", justify="right", no_wrap=True)
    for b in sorted(catalog.boxes.values(), key=lambda b: b.id):
        link = {"nvswitch": "NVSwitch", "nvlink_bridge": "bridge", "pcie": "PCIe"}.get(b.interconnect, b.interconnect)
        link += "" if b.p2p else " noP2P"
        t.add_row(escape(b.id), escape(b.gpu), str(b.gpus_per_node), link,
                  _whole(b.link_bandwidth_gb_per_s), str(b.numa_nodes))
    return t


def print_entry(entry: GpuSpec | BoxSpec) -> None:
    """Every field of one GPU or box, then its sources and notes."""
    from simulator.hardware import GpuSpec
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
