"""Read the text of an nccl-tests log (`all_reduce_perf`, `broadcast_perf`, `all_gather_perf`,
`sendrecv_perf` output) into runs: each run's header facts and data rows, as printed.
`calibration.build.nccl_tests` maps the runs to CollectiveTables of a profile.

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

Leaves out: the CSV (`-F`) and JSON outputs (only the printed table is read).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from simulator.units import US_PER_MS

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
