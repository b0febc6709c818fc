"""Import nccl-tests logs (`all_reduce_perf`, `broadcast_perf`, `all_gather_perf`, `sendrecv_perf`)
as CollectiveTables, and merge them into a CalibrationProfile.

What a log looks like (nccl-tests README.md, doc/PERFORMANCE.md and src/common.cu, which prints it):

- optional banner lines `# nccl-tests version ...` and `# Collective test starting: all_reduce_perf`;
- a parameter line `# nThread T nGpus G minBytes ... iters: N agg iters: M validation: V graph: K`
  (`graph: K` > 0 means `-G K`: iterations captured in a CUDA graph and replayed);
- `# Using devices`, then one `#  Rank  r Group  g Pid  p on host device  d [bus] GPU name` line per
  GPU of every process, so the number of distinct ranks is the world size (`-g` GPUs per thread x
  `-t` threads per process x MPI processes);
- a column header `size count type redop root time algbw busbw #wrong time algbw busbw #wrong`
  (out-of-place half, then in-place half) and a units line `(B) (elements) ... (us) (GB/s) ...`;
- one data row per message size; `# Out of bounds values : ...` and `# Avg bus bandwidth : ...`.

nccl-tests does not print its own command line. A line that invokes a `*_perf` binary (a shell
prompt such as `$ ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 8`, or `# command: ...`) is taken as
the command; users often keep one at the top of a saved log.

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
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from simulator.profile import COLLECTIVE_OPS, CalibrationProfile, CollectiveTable, Provenance, load_profile, save_profile
from simulator.units import US_PER_MS

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
HALF_FIELDS = 4  # time, algbw, busbw, #wrong per half (out-of-place, in-place)

_PARAMS_RE = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)\b(.*)$")
_RANK_RE = re.compile(r"^#\s*Rank\s+(\d+)\s+Group\s+(\d+)\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                      r"\[[^\]]*\]\s*(.*)$")
_STARTING_RE = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_VERSION_RE = re.compile(r"^#\s*nccl-tests version\s+(\S+)")
_AVG_BW_RE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_OOB_RE = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\S*)")
_COMMAND_COMMENT_RE = re.compile(r"^#\s*(?:command|command line|cmd)\s*:\s*(.+)$", re.IGNORECASE)
_PERF_TOKEN_RE = re.compile(r"(?:^|/)([a-z0-9_]+_perf)$")


class NcclTestsLogError(ValueError):
    """A log that cannot be read; the message starts with `source:line:`."""

    def __init__(self, source: str, line_no: int | None, message: str, line: str | None = None):
        where = f"{source}:{line_no}" if line_no else source
        text = f"{where}: {message}"
        if line is not None:
            text += f": {line.strip()[:120]!r}"
        super().__init__(text)
        self.source, self.line_no = source, line_no


@dataclass(frozen=True)
class NcclTestsRow:
    """One data row as printed (sizes in nccl-tests' own convention, times in us)."""

    line_no: int
    size_bytes: int  # nccl-tests `size`: max(send, receive) bytes of the whole operation
    count: int  # elements per rank (nccl-tests `count`)
    dtype: str
    redop: str | None
    root: int | None
    out_of_place_time_us: float | None
    in_place_time_us: float | None


@dataclass
class NcclTestsRun:
    """One program run inside a log: its header facts and data rows."""

    source: str
    first_line_no: int
    program: str | None = None  # e.g. 'all_reduce_perf'
    command: str | None = None
    version: str | None = None
    num_threads: int | None = None
    num_gpus_per_thread: int | None = None
    params: dict[str, str] = field(default_factory=dict)  # rest of the parameter line, key -> value
    ranks: dict[int, tuple[int, str]] = field(default_factory=dict)  # rank -> (group, GPU name)
    num_halves: int = 0  # time columns in the header: 1 (out-of-place only) or 2
    header_line_no: int | None = None
    time_unit: str = "us"
    rows: list[NcclTestsRow] = field(default_factory=list)
    avg_busbw_gb_per_s: float | None = None
    num_out_of_bounds: int | None = None


def _command_from_line(stripped: str) -> str | None:
    """The command on a shell-prompt or `# command:` line that runs a `*_perf` binary, else None."""
    m = _COMMAND_COMMENT_RE.match(stripped)
    text = m.group(1).strip() if m else None
    if text is None and not stripped.startswith("#"):
        text = re.sub(r"^(?:[$>+%]\s*)+", "", stripped)
    if not text:
        return None
    try:
        tokens = shlex.split(text)
    except ValueError:
        tokens = text.split()
    return text if any(_PERF_TOKEN_RE.search(t) for t in tokens) else None


def _program_of(command: str) -> str | None:
    for t in command.split():
        m = _PERF_TOKEN_RE.search(t)
        if m:
            return m.group(1)
    return None


def _parse_params(rest: str) -> dict[str, str]:
    """'minBytes 8 maxBytes 128 ... graph: 0' -> {'minBytes': '8', ..., 'graph': '0'}."""
    params = {k: v for k, v in re.findall(r"([A-Za-z][A-Za-z ]*?):?\s+(-?[0-9][^\s]*)", rest)}
    return {k.strip(): v for k, v in params.items()}


def _number(token: str, source: str, line_no: int, line: str, what: str) -> float | None:
    if token.upper() == "N/A":
        return None
    try:
        return float(token)
    except ValueError:
        raise NcclTestsLogError(source, line_no, f"{what} {token!r} is not a number", line) from None


def _parse_row(run: NcclTestsRun, line_no: int, line: str) -> NcclTestsRow:
    """A data row, read from the right: halves of (time, algbw, busbw, #wrong) after size, count, type."""
    src, tokens = run.source, line.split()
    n_tail = HALF_FIELDS * run.num_halves
    if not 3 + n_tail <= len(tokens) <= 5 + n_tail:
        raise NcclTestsLogError(src, line_no, f"expected {3 + n_tail} to {5 + n_tail} columns as in the header "
                                f"at line {run.header_line_no}, got {len(tokens)}", line)
    lead, tail = tokens[:len(tokens) - n_tail], tokens[len(tokens) - n_tail:]
    try:
        size_bytes, count = int(lead[0]), int(lead[1])
    except ValueError:
        raise NcclTestsLogError(src, line_no, "size and count must be integers", line) from None
    middle = lead[3:]
    redop = root = None
    if len(middle) == 2:
        redop, root_text = middle
    elif len(middle) == 1:
        root_text = middle[0] if re.fullmatch(r"-?\d+", middle[0]) else None
        redop = None if root_text is not None else middle[0]
    else:
        root_text = None
    if root_text is not None:
        if not re.fullmatch(r"-?\d+", root_text):
            raise NcclTestsLogError(src, line_no, f"root {root_text!r} is not an integer", line)
        root = int(root_text)
    scale = US_PER_MS if run.time_unit == "ms" else 1.0
    times = []
    for h in range(run.num_halves):
        t = _number(tail[HALF_FIELDS * h], src, line_no, line, "time")
        for k in (1, 2):  # algbw, busbw: checked so that a shifted row is caught
            _number(tail[HALF_FIELDS * h + k], src, line_no, line, "bandwidth")
        times.append(None if t is None else t * scale)
    return NcclTestsRow(line_no=line_no, size_bytes=size_bytes, count=count, dtype=lead[2], redop=redop,
                        root=root, out_of_place_time_us=times[0],
                        in_place_time_us=times[1] if len(times) > 1 else None)


def read_nccl_tests_runs(text: str, source: str) -> list[NcclTestsRun]:
    """Split a log into runs and read each one's header facts and rows.

    Lines that belong to neither (NCCL_DEBUG output, mpirun noise, other '#' comments) are skipped.

    Raises:
        NcclTestsLogError: a data row that cannot be read, a row before any column header, or no rows.
    """
    runs: list[NcclTestsRun] = []
    pending: dict[str, str] = {}
    current: NcclTestsRun | None = None

    def start(line_no: int) -> NcclTestsRun:
        nonlocal pending
        run = NcclTestsRun(source=source, first_line_no=line_no, program=pending.get("program"),
                           command=pending.get("command"), version=pending.get("version"))
        if run.program is None and run.command:
            run.program = _program_of(run.command)
        pending = {}
        runs.append(run)
        return run

    for line_no, raw in enumerate(text.splitlines(), start=1):
        s = raw.strip()
        if not s:
            continue
        command = _command_from_line(s)
        if command is not None:
            pending["command"] = command
        elif m := _VERSION_RE.match(s):
            pending["version"] = m.group(1)
        elif m := _STARTING_RE.match(s):
            pending["program"] = m.group(1)
        elif m := _PARAMS_RE.match(s):
            current = start(line_no)
            current.num_threads, current.num_gpus_per_thread = int(m.group(1)), int(m.group(2))
            current.params = _parse_params(m.group(3))
        elif m := _RANK_RE.match(s):
            if current is None or current.rows:
                current = start(line_no)
            current.ranks[int(m.group(1))] = (int(m.group(2)), m.group(6).strip())
        elif s.startswith("#") and {"size", "count"} <= set(s[1:].split()) and (
                "time" in s[1:].split() or "cputime" in s[1:].split()):
            if current is None or current.rows or current.header_line_no is not None:
                current = start(line_no)
            names = s[1:].split()
            current.num_halves = sum(n in ("time", "cputime") for n in names)
            current.header_line_no = line_no
            if "cputime" in names:
                current.params["cputime"] = "1"
        elif s.startswith("#") and "(B)" in s and current is not None and current.header_line_no:
            current.time_unit = "ms" if "(ms)" in s else "us"
        elif m := _AVG_BW_RE.match(s):
            if current is not None:
                current.avg_busbw_gb_per_s = float(m.group(1))
        elif m := _OOB_RE.match(s):
            if current is not None:
                current.num_out_of_bounds = int(m.group(1))
        elif not s.startswith("#") and re.match(r"^\d+\s", s):
            if current is None or current.header_line_no is None:
                raise NcclTestsLogError(source, line_no, "data row before any column header "
                                        "('# size count type ... time algbw busbw ...')", raw)
            current.rows.append(_parse_row(current, line_no, raw))
    runs = [r for r in runs if r.rows]
    if not runs:
        raise NcclTestsLogError(source, None, "no nccl-tests data rows found (expected a '# size count type "
                                "... time algbw busbw' header followed by rows)")
    return runs


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
