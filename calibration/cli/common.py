"""What the calibration commands share: the consoles and the checks of their options.

Bad input ends with one line naming the option and what it allows, and exit code 2 (printed by
simulator.cli.common.fail, imported when needed: simulator.cli imports this package to mount
its commands). torch is imported only by the checks that need it (`need_torch`, `check_device`).
"""

from __future__ import annotations

import re
from pathlib import Path

from rich.console import Console
from rich.markup import escape

console = Console()
err_console = Console(stderr=True)  # progress and notes, so stdout keeps the tables

TORCH_MISSING = "specdecsim calibrate needs torch: pip install 'specdecsim[calibrate]'"
TP_DEVICES = ("cuda", "cpu")  # spawned ranks: NCCL on GPUs, or gloo CPU processes


def fail(message: str, code: int = 2) -> None:
    """Print `message` as one error line (its whitespace folded, no traceback) and exit."""
    from simulator.cli.common import fail as fail_one_line
    fail_one_line(" ".join(str(message).split()), code)


def need_torch(what: str = "specdecsim calibrate"):
    """The torch module, or exit 2 saying how to install it."""
    try:
        import torch
    except ImportError:
        fail(TORCH_MISSING if what == "specdecsim calibrate" else
             f"{what} needs torch: pip install 'specdecsim[calibrate]'")
    return torch


def check_at_least(option: str, value: int | float | None, minimum: int | float) -> None:
    """Exit 2 when `value` (None: not given) is below `minimum`."""
    if value is not None and value < minimum:
        fail(f"{option} must be >= {minimum}, got {value}")


def check_choice(option: str, value: str | None, allowed: tuple[str, ...]) -> None:
    """Exit 2 when `value` (None: not given) is not one of `allowed`."""
    if value is not None and value not in allowed:
        fail(f"{option} must be one of {', '.join(allowed)}, got {value!r}")


def check_device(device: str, option: str = "--device"):
    """The torch.device of `device`; exit 2 when torch does not parse it, or it names CUDA on a
    machine without a CUDA GPU."""
    torch = need_torch()
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        fail(f"{option} {device!r}: {e}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        fail(f"{option} {device}: no CUDA GPU here (--device cpu runs on the CPU)")
    return dev


def need_cuda(what: str) -> None:
    """Exit 2 when there is no CUDA GPU (`what`: the command that needs one)."""
    torch = need_torch(what)
    if not torch.cuda.is_available():
        fail(f"{what} needs a CUDA GPU; none here")


def check_gpus(option: str, needed: int, hint: str = "--device cpu runs gloo CPU processes") -> None:
    """Exit 2 when fewer than `needed` CUDA GPUs are visible (`option` names what asked for them)."""
    torch = need_torch()
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible < needed:
        fail(f"{option} needs {needed} GPUs; {visible} visible ({hint})")


def check_sizes(option: str, text: str, known: dict) -> tuple[str, ...]:
    """The size keys of a comma-separated `text`; exit 2 unless each is a key of `known`."""
    sizes = tuple(x for x in text.split(",") if x)
    if not sizes or any(x not in known for x in sizes):
        fail(f"{option} must be a comma-separated list of {', '.join(known)}, got {text!r}")
    return sizes


FORCE_HELP = "Replace an existing file that is not this command's own earlier output."


def check_output(option: str, path: Path | None, kind: str, force: bool = False) -> None:
    """Exit 2 (one line) unless `path` may be written: a new path, an empty file, this kind's own
    earlier output, or with `force` any regular file (simulator.files.check_output_file)."""
    from simulator.files import check_output_file
    from simulator.inputs import UserInputError
    try:
        check_output_file(path, option, kind, force)
    except UserInputError as e:
        fail(str(e))


def check_points_file(option: str, path: Path) -> None:
    """Exit 2 unless `path` is a points file (JSONL of {key, record}) or does not exist yet, so a
    benchmark never appends to, or truncates, a file that is not its own."""
    from calibration.build.store import PointStore
    if path.is_dir():
        fail(f"{option} {path} is a folder; give a points file (JSONL)")
    try:
        PointStore.check(path)
    except ValueError as e:
        fail(f"{option}: {e}")


def out_path(option: str, text: str, folder: bool = False) -> Path:
    """An output option as written (typer's Path would drop a trailing '/' and read '' as the working
    folder): exit 2 for an empty one, and, for a file, one that names a folder ('out/')."""
    from simulator.inputs import quote
    if not text.strip():
        fail(f"{option} {quote(text)}: give a {'folder' if folder else 'file'} path")
    if not folder and (text.endswith("/") or Path(text).is_dir()):
        fail(f"{option} {quote(text)}: names a folder; give a file path")
    return Path(text)


def refuse_file(option: str, path: Path) -> None:
    """Exit 2 when an output folder option names something that exists and is not a folder."""
    if path.exists() and not path.is_dir():
        fail(f"{option} {path} exists and is not a folder")


_INT = re.compile(r"[0-9]{1,9}", re.ASCII)  # written in ASCII digits, no sign, no '_', at most 9 of them


def parse_int_list(text: str, low: int, high: int) -> tuple[int, ...] | None:
    """A comma-separated list of integers as written (ASCII digits; spaces around an item allowed),
    sorted and unique; None unless every item is one in low..high: an empty item ('3,', '1,,2', ''),
    another script's digits, '1_0' or a sign are refused, not read."""
    items = [x.strip() for x in text.split(",")]
    if not all(_INT.fullmatch(x) for x in items) or not all(low <= int(x) <= high for x in items):
        return None
    return tuple(sorted({int(x) for x in items}))


def int_list(option: str, text: str, low: int, high: int, what: str = "integers") -> tuple[int, ...]:
    """`parse_int_list`, or exit 2: "OPTION 'TEXT': comma-separated WHAT LOW..HIGH, each written in digits 0-9"."""
    from simulator.inputs import quote
    vals = parse_int_list(text, low, high)
    if vals is None:
        fail(f"{option} {quote(text)}: comma-separated {what} {low}..{high}, each written in digits 0-9")
    return vals


def check_batches(flag: str, batches: str, high: int = 4096) -> tuple[int, ...]:
    """A comma-separated list of batch sizes, sorted and unique (`parse_int_list`); exit 2 unless all
    are in 1..`high`."""
    return must_be_int_list(flag, batches, 1, high)


def must_be_int_list(flag: str, text: str, low: int, high: int) -> tuple[int, ...]:
    """`parse_int_list`, or exit 2: "FLAG must be a comma-separated list of integers in LOW..HIGH ..."."""
    from simulator.inputs import quote
    vals = parse_int_list(text, low, high)
    if vals is None:
        fail(f"{flag} must be a comma-separated list of integers in {low}..{high} (digits 0-9, no empty item), "
             f"got {quote(text)}")
    return vals


def print_profile(profile, out: Path) -> None:
    """One line saying `out` was written and how many op, forward and collective tables the profile has."""
    console.print(f"[green]wrote {escape(str(out))}[/]: {len(profile.ops)} op tables, {len(profile.forwards)} "
                  f"forward tables, {len(profile.collectives)} collective tables")
