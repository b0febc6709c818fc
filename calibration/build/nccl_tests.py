"""Import nccl-tests logs (`all_reduce_perf`, `broadcast_perf`, `all_gather_perf`, `sendrecv_perf`)
as CollectiveTables, and merge them into a CalibrationProfile.

The log is read by `calibration.build.nccl_tests_log` (what a log looks like, and how its command
line is found, are described there); this module maps each run to a table.

Column -> profile field mapping (one CollectiveTable per run in the log):

- `op`: from `# Collective test starting: X_perf`, else the command's `X_perf`, else the file name
  (all_reduce / broadcast / all_gather / sendrecv); `op=` overrides. Other collectives are refused.
- `world_size`: distinct ranks in the `#  Rank` lines (ranks in rank 0's group when
  NCCL_TESTS_SPLIT_MASK splits them), else nThread x nGpus from the parameter line (which cannot
  see MPI processes); `world_size=` overrides.
- `mode`: `graph` when `graph: K` (or `-G K` in the command) has K > 0, else `eager`.
- `size_bytes` (per-rank input bytes): nccl-tests' `size` is the largest buffer of the operation,
  max(send bytes, receive bytes). For allreduce, broadcast and sendrecv that is the per-rank message,
  so size_bytes = size. For all_gather it is the gathered output, world_size x the per-rank input,
  so size_bytes = size / world_size (= count x dtype bytes, since `count` is per rank; both are
  checked). Rows of size 0 are dropped.
- `latency_us`: the out-of-place `time` column (in us per the units line; ms is converted), or the
  in-place one with `in_place=True`. It is nccl-tests' mean over `iters` (x `agg iters`), not a
  median; p10/p90 are not in the log and stay unset.
- provenance: `measured` with the command when the log has one (or `command=` is given), else
  `published` with the log file as source; the note says which columns and conversions were used.

Leaves out: the CSV (`-F`) and JSON outputs, per-datatype selection (`-d all` logs repeat sizes and are
refused), and bandwidth columns (latency is what the profile stores).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Sequence

from calibration.build.nccl_tests_log import NcclTestsLogError, NcclTestsRow, NcclTestsRun, read_nccl_tests_runs
from simulator.profile import COLLECTIVE_OPS, CalibrationProfile, CollectiveTable, Provenance, load_profile, save_profile

# nccl-tests binary -> profile op name.
PROGRAM_OPS = {"all_reduce_perf": "allreduce", "broadcast_perf": "broadcast",
               "all_gather_perf": "all_gather", "sendrecv_perf": "send_recv"}
# File-name fragments that name an op, tried in order (lower case, '-' read as '_').
FILENAME_OPS = (("all_reduce", "allreduce"), ("allreduce", "allreduce"), ("broadcast", "broadcast"),
                ("all_gather", "all_gather"), ("allgather", "all_gather"), ("sendrecv", "send_recv"),
                ("send_recv", "send_recv"))
# nccl-tests `type` column -> bytes per element (src/common.cu test_typenames, plus fp8 names).
DTYPE_BYTES = {"int8": 1, "uint8": 1, "char": 1, "f8e4m3": 1, "f8e5m2": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
               "half": 2, "float16": 2, "bfloat16": 2, "int32": 4, "uint32": 4, "int": 4, "float": 4,
               "float32": 4, "int64": 8, "uint64": 8, "double": 8, "float64": 8}

def _op_of(run: NcclTestsRun, op: str | None) -> str:
    if op is not None:
        if op not in COLLECTIVE_OPS:
            raise NcclTestsLogError(run.source, None, f"op {op!r} is not one of {', '.join(COLLECTIVE_OPS)}")
        return op
    if run.program:
        if run.program not in PROGRAM_OPS:
            raise NcclTestsLogError(run.source, run.first_line_no,
                                    f"{run.program} is not a collective the profile models; supported: "
                                    f"{', '.join(PROGRAM_OPS)}")
        return PROGRAM_OPS[run.program]
    name = Path(run.source).name.lower().replace("-", "_")
    for fragment, name_op in FILENAME_OPS:
        if fragment in name:
            return name_op
    raise NcclTestsLogError(run.source, run.first_line_no,
                            "cannot tell which collective this run measured: no '# Collective test starting' "
                            "line, no command line and the file name does not say; pass op=")


def _world_size_of(run: NcclTestsRun, world_size: int | None) -> tuple[int, str]:
    """(world size, how it was found)."""
    if world_size is not None:
        return world_size, "world size given by the user"
    if run.ranks:
        group0 = run.ranks[min(run.ranks)][0]
        members = [r for r, (g, _) in run.ranks.items() if g == group0]
        how = f"world size = {len(members)} '#  Rank' lines"
        if len(members) != len(run.ranks):
            how += f" of group {group0} ({len(run.ranks)} ranks in {len({g for g, _ in run.ranks.values()})} groups)"
        return len(members), how
    if run.num_threads and run.num_gpus_per_thread:
        return (run.num_threads * run.num_gpus_per_thread,
                "world size = nThread x nGpus (no '#  Rank' lines; MPI processes would not be counted)")
    raise NcclTestsLogError(run.source, run.first_line_no,
                            "cannot tell the world size: no '#  Rank' lines and no '# nThread .. nGpus ..' "
                            "line; pass world_size=")


def _mode_of(run: NcclTestsRun, mode: str | None) -> tuple[str, str]:
    if mode is not None:
        return mode, "mode given by the user"
    if "graph" in run.params:
        return ("graph", f"CUDA graph (graph: {run.params['graph']})") if int(run.params["graph"]) > 0 \
            else ("eager", "eager (graph: 0)")
    if run.command:
        m = re.search(r"(?:-G|--cudagraph)[ =]?(\d+)", run.command)
        if m:
            return ("graph" if int(m.group(1)) > 0 else "eager"), f"mode from the command (-G {m.group(1)})"
    return "eager", "mode ASSUMED eager: the log has no parameter line saying 'graph: K'"


def _per_rank_bytes(run: NcclTestsRun, row: NcclTestsRow, op: str, world_size: int) -> int:
    """Per-rank input bytes of one row (see the module docstring)."""
    per_rank = row.size_bytes
    if op == "all_gather":
        if row.size_bytes % world_size:
            raise NcclTestsLogError(run.source, row.line_no, f"all_gather size {row.size_bytes} is not a "
                                    f"multiple of world size {world_size}; pass world_size=")
        per_rank = row.size_bytes // world_size
    elt = DTYPE_BYTES.get(row.dtype.lower())
    if elt is not None and row.size_bytes and row.count * elt != per_rank:
        hint = (f"; {row.size_bytes // (row.count * elt)} ranks would fit, pass world_size="
                if op == "all_gather" and row.count else "")
        raise NcclTestsLogError(run.source, row.line_no, f"count {row.count} x {elt} bytes ({row.dtype}) != "
                                f"{per_rank} per-rank bytes derived for {op} at world size {world_size}{hint}")
    return per_rank


def run_to_table(run: NcclTestsRun, *, in_place: bool = False, op: str | None = None,
                 world_size: int | None = None, mode: str | None = None,
                 command: str | None = None) -> CollectiveTable:
    """One CollectiveTable from one run (mapping in the module docstring).

    Raises:
        NcclTestsLogError: unknown op or world size, repeated sizes, a missing or non-positive time.
    """
    op_name = _op_of(run, op)
    world, world_how = _world_size_of(run, world_size)
    if world < 2:
        raise NcclTestsLogError(run.source, run.first_line_no, f"world size {world}: a collective table needs "
                                "at least 2 ranks")
    mode_name, mode_how = _mode_of(run, mode)
    half = "in-place" if in_place else "out-of-place"
    if in_place and run.num_halves < 2:
        raise NcclTestsLogError(run.source, run.header_line_no, "in-place time asked for but the header has "
                                "only one time column")
    sizes, latencies, seen, num_empty = [], [], {}, 0
    for row in run.rows:
        if row.size_bytes == 0:
            num_empty += 1
            continue
        size = _per_rank_bytes(run, row, op_name, world)
        if size in seen:
            raise NcclTestsLogError(run.source, row.line_no, f"size {row.size_bytes} repeats line {seen[size]} "
                                    "(several datatypes or ops in one run?); keep one datatype per log")
        if sizes and size < sizes[-1]:
            raise NcclTestsLogError(run.source, row.line_no, f"size {row.size_bytes} smaller than the row before")
        seen[size] = row.line_no
        t_us = row.in_place_time_us if in_place else row.out_of_place_time_us
        if t_us is None or t_us <= 0:
            raise NcclTestsLogError(run.source, row.line_no, f"{half} time is {t_us}; need a positive time")
        sizes.append(size)
        latencies.append(t_us)
    if not sizes:
        raise NcclTestsLogError(run.source, run.first_line_no, "every row has size 0")
    return CollectiveTable(op=op_name, world_size=world, mode=mode_name, size_bytes=sizes, latency_us=latencies,
                           provenance=_provenance(run, command, half, world_how, mode_how, op_name, num_empty))


def _provenance(run: NcclTestsRun, command: str | None, half: str, world_how: str, mode_how: str,
                op: str, num_empty: int) -> Provenance:
    size_rule = ("size_bytes = nccl-tests size / world_size (size is the gathered output)" if op == "all_gather"
                 else "size_bytes = nccl-tests size")
    iters = run.params.get("iters")
    parts = [f"nccl-tests {run.program or op}" + (f" {run.version}" if run.version else ""),
             f"latency_us = {half} {'cputime' if 'cputime' in run.params else 'time'} column, mean over "
             f"{iters or '?'} iters (agg iters {run.params.get('agg iters', '?')}), not a median", size_rule,
             world_how, mode_how]
    gpus = sorted({name for _, name in run.ranks.values()})
    if gpus:
        parts.append(f"GPUs: {', '.join(gpus)}")
    if run.avg_busbw_gb_per_s is not None:
        parts.append(f"avg busbw {run.avg_busbw_gb_per_s:g} GB/s")
    if run.num_out_of_bounds:
        parts.append(f"WARNING: {run.num_out_of_bounds} out-of-bounds values (validation failed)")
    if num_empty:
        parts.append(f"{num_empty} row(s) of size 0 dropped")
    parts.append(f"first line {run.first_line_no}")
    cmd = command or run.command
    if cmd:
        return Provenance(kind="measured", command=cmd, source=run.source, note="; ".join(parts))
    return Provenance(kind="published", source=run.source,
                      note="; ".join(parts + ["command line not in the log"]))


def parse_nccl_tests_log(text: str, source: str, *, in_place: bool = False, op: str | None = None,
                         world_size: int | None = None, mode: str | None = None,
                         command: str | None = None) -> list[CollectiveTable]:
    """CollectiveTables from the text of one nccl-tests log (one per run in it).

    Args:
        text: the log (stdout of `all_reduce_perf` etc., possibly several runs concatenated).
        source: file name or citation, used in errors and provenance.
        in_place: take the in-place time column instead of the out-of-place one.
        op, world_size, mode, command: override what the log says (or does not say).

    Returns:
        Tables with size_bytes = per-rank input bytes and latency_us in microseconds.

    Raises:
        NcclTestsLogError: naming the file and line that cannot be read.

    Source: nccl-tests README.md, doc/PERFORMANCE.md, src/common.cu (output format, size convention).
    """
    tables = [run_to_table(r, in_place=in_place, op=op, world_size=world_size, mode=mode, command=command)
              for r in read_nccl_tests_runs(text, source)]
    _check_unique(tables)
    return tables


def _check_unique(tables: Iterable[CollectiveTable]) -> None:
    seen: dict[tuple, str] = {}
    for t in tables:
        key = (t.op, t.world_size, t.mode)
        if key in seen:
            raise NcclTestsLogError(t.provenance.source or "?", None,
                                    f"two runs give the table {key} (also from {seen[key]}); import one of them")
        seen[key] = t.provenance.source or "?"


def read_nccl_tests_file(path: Path, **kwargs) -> list[CollectiveTable]:
    """parse_nccl_tests_log on a file (kwargs as there).

    Raises:
        FileNotFoundError: no such file.
        NcclTestsLogError: as parse_nccl_tests_log.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"nccl-tests log not found: {path}")
    return parse_nccl_tests_log(path.read_text(errors="replace"), str(path), **kwargs)


def merge_collective_tables(profile: CalibrationProfile, tables: Sequence[CollectiveTable]) -> CalibrationProfile:
    """A new, validated profile with `tables` replacing those of the same (op, world_size, mode).

    Tables not in the profile are appended; profile.notes gets one `nccl_tests:{op}:{world}:{mode}` entry
    per imported table. Hardware and roofline are left as they are.
    """
    _check_unique(tables)
    new = {(t.op, t.world_size, t.mode): t for t in tables}
    kept = [t for t in profile.collectives if (t.op, t.world_size, t.mode) not in new]
    notes = dict(profile.notes)
    for (op, world, mode), t in new.items():
        extra = (f"; world size {world} > hardware.gpu_count {profile.hardware.gpu_count}"
                 if world > profile.hardware.gpu_count else "")
        notes[f"nccl_tests:{op}:{world}:{mode}"] = f"imported from {t.provenance.source}{extra}"
    data = profile.model_dump(mode="json")
    data["collectives"] = [t.model_dump(mode="json") for t in kept + list(new.values())]
    data["notes"] = notes
    return CalibrationProfile.model_validate(data)


def import_into_profile(profile_path: Path, logs: Sequence[Path], out_path: Path, **kwargs) -> CalibrationProfile:
    """Read nccl-tests logs, merge their tables into a profile and write it atomically.

    Args:
        profile_path: existing profile JSON.
        logs: nccl-tests log files.
        out_path: profile JSON to write (may be profile_path).
        kwargs: in_place, op, world_size, mode, command (see parse_nccl_tests_log).

    Returns:
        The merged profile as written.

    Raises:
        FileNotFoundError: a missing log or profile.
        NcclTestsLogError: a log that cannot be read, or two logs giving the same table.
        pydantic.ValidationError: the merged profile does not validate.
    """
    profile_path = Path(profile_path)
    if not profile_path.is_file():
        raise FileNotFoundError(f"profile not found: {profile_path}")
    tables = [t for log in logs for t in read_nccl_tests_file(Path(log), **kwargs)]
    merged = merge_collective_tables(load_profile(profile_path), tables)
    save_profile(merged, Path(out_path))
    return merged
