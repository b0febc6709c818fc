"""Files the tools write: atomic text, JSON and CSV outputs, and which paths they may write.

Every output is written to a temporary file in the target's folder and moved over the target
with `os.replace`, so a reader (or an interrupted run) never sees half a file.

The tools write regular files only, and only where they were asked to:
- `write_text_atomic` refuses a target that exists and is not a regular file (a symbolic link,
  a device such as /dev/null, a FIFO, a socket, a folder): `os.replace` would put a regular
  file in its place;
- `check_output_file` / `check_output_folder` (called by the commands before any work) also
  refuse to replace a file that is not the tool's own output unless the user insists (`--force`).
  Our JSON outputs carry `OUTPUT_KEY` (their kind and schema version, e.g. "simulation/1"); a
  sweep folder holds sweep.json; a figures folder holds an index.html with `HTML_GENERATOR`.
"""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from simulator.inputs import UserInputError, load_json, read_text

OUTPUT_KEY = "specdecsim_output"  # key of every JSON output: "<kind>/<schema version>"
HTML_GENERATOR = '<meta name="generator" content="specdecsim">'
SIMULATION_OUTPUT = "simulation/2"  # 2: TPOT in ms (tpot_ms, baseline_tpot_ms; serving: ttft_ms, ...)
TRACE_OUTPUT = "trace/1"
VALIDATION_OUTPUT = "validation/1"
SERVING_VALIDATION_OUTPUT = "serving_validation/2"  # `specdecsim validate-serving --json` (2: p50s in ms)
SWEEP_OUTPUT = "sweep/1"
HARDWARE_OUTPUT = "hardware/1"
PROFILE_OUTPUT = "profile/1"  # recognised by its keys (the profile schema allows no marker)
DIAGNOSTIC_OUTPUT = "diagnostic/1"
HOST_CORES_OUTPUT = "host_cores/1"  # `specdecsim diagnose host-cores` (a kind of its own: another diagnostic's
# output is not its to replace)
CASES_OUTPUT = "cases/1"
ENGINE_FIT_OUTPUT = "engine_fit/1"
COLLECTIVE_CONSTANTS_OUTPUT = "collective_constants/1"  # data/fits/collectives.json (simulator.costs.collectives_fit)
TRACE_INDEX_OUTPUT = "trace_index/1"  # index.json of `specdecsim diagnose trace`
# Earlier schema versions of a kind, whose files the same command may replace.
_EARLIER_VERSIONS = {SIMULATION_OUTPUT: {"simulation/1"}, SERVING_VALIDATION_OUTPUT: {"serving_validation/1"}}
# Keys that outputs written before OUTPUT_KEY existed carry, by kind (a trace had no marker).
_LEGACY_KEYS = {SIMULATION_OUTPUT: {"version", "scenario", "tok_per_s"},
                SWEEP_OUTPUT: {"version", "grids", "csv"},
                VALIDATION_OUTPUT: {"profile", "summaries", "points"},
                PROFILE_OUTPUT: {"schema_version", "hardware", "roofline", "host"}}


class OutputPathError(UserInputError):
    """An output path the tool may not write (not a regular file, or not its own output)."""


# ---- where outputs may go ---------------------------------------------------------------------------
def _check_parents(path: Path, flag: str) -> None:
    """Refuse a path whose nearest existing parent is not a folder (a regular file, say), or a
    folder this process may not write in (checked before the work, not found after it)."""
    parent = path.parent
    while True:
        try:
            st = parent.stat()
        except FileNotFoundError:
            if parent == parent.parent:
                return
            parent = parent.parent
            continue
        except NotADirectoryError:
            parent = parent.parent
            continue
        except (OSError, ValueError) as e:
            raise OutputPathError(f"{flag} {path}: cannot use {parent}: {getattr(e, 'strerror', None) or e}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise OutputPathError(f"{flag} {path}: {parent} is a file, not a folder")
        _check_writable(parent, path, flag)
        return


def _check_writable(folder: Path, path: Path, flag: str) -> None:
    """Refuse a folder this process may not create files in (os.access: write and search)."""
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputPathError(f"{flag} {path}: cannot write in {folder} (permission denied)")


def _lstat(path: Path, flag: str) -> os.stat_result | None:
    try:
        return path.lstat()
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise OutputPathError(f"{flag} {path}: a part of the path is a file, not a folder") from None
    except (OSError, ValueError) as e:
        raise OutputPathError(f"{flag} {path}: {getattr(e, 'strerror', None) or e}") from None


def _refuse_special(path: Path, st: os.stat_result, flag: str) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise OutputPathError(f"{flag} {path}: is a symbolic link; the tools write regular files only "
                              "(give the path it points to)")
    if stat.S_ISDIR(st.st_mode):
        raise OutputPathError(f"{flag} {path}: is a folder; give a file to write")
    if not stat.S_ISREG(st.st_mode):
        raise OutputPathError(f"{flag} {path}: is not a regular file (a device, FIFO or socket); the tools "
                              "write regular files only")


def _head_marker(path: Path) -> str | None:
    """The OUTPUT_KEY of a streamed trace (`simulator.trace.TraceWriter`), read from its first line
    (`{"displayTimeUnit": ..., "otherData": {...},`), so a trace too large to load is still known."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096).decode("utf-8", errors="replace")
    except OSError:
        return None
    at = head.find('"otherData": ')
    if not head.startswith('{"displayTimeUnit"') or at < 0:
        return None
    try:
        other, _ = json.JSONDecoder().raw_decode(head, at + len('"otherData": '))
    except ValueError:
        return None
    return other.get(OUTPUT_KEY) if isinstance(other, dict) else None


def _output_json(path: Path) -> tuple[dict | None, str | None]:
    """(the JSON object, its OUTPUT_KEY marker) of a file; (None, None) where it is no JSON object."""
    try:
        data = load_json(read_text(path, "output"), str(path))
    except UserInputError:
        return None, None
    if not isinstance(data, dict):
        return None, None
    other = data.get("otherData")
    return data, data.get(OUTPUT_KEY) or (other.get(OUTPUT_KEY) if isinstance(other, dict) else None)


def is_own_output(path: Path, kind: str) -> bool:
    """Whether `path` is a JSON output of this kind that a specdecsim tool wrote (by its content;
    a streamed trace by its first line)."""
    if kind == TRACE_OUTPUT and _head_marker(path) == kind:
        return True
    data, mark = _output_json(path)
    if data is None:
        return False
    return (mark == kind or mark in _EARLIER_VERSIONS.get(kind, ())
            or (mark is None and kind in _LEGACY_KEYS and _LEGACY_KEYS[kind] <= set(data)))


def is_own_html(path: Path) -> bool:
    """Whether `path` is an index.html that `specdecsim plot` wrote."""
    try:
        text = read_text(path, "index.html")
    except UserInputError:
        return False
    return HTML_GENERATOR in text or "<title>specdecsim figures</title>" in text


def check_output_file(path: Path | None, flag: str, kind: str, force: bool = False) -> None:
    """Refuse an output file path before any work is done.

    Allowed: a path that does not exist yet (its folders are made), an empty regular file, a
    JSON output of the same `kind` that a specdecsim tool wrote, and with `force` any regular file.

    Args:
        path: where the command will write (None: the option was not given).
        flag: the option, for messages ('--json'). kind: OUTPUT_KEY value of what is written.
        force: the user insists (`--force`).

    Raises:
        OutputPathError: a folder, symbolic link, device, FIFO or socket; a path under a regular
            file; or another file without `force`.
    """
    if path is None or is_stdout(path):
        return
    path = Path(path)
    _check_parents(path, flag)
    st = _lstat(path, flag)
    if st is None:
        return
    _refuse_special(path, st, flag)
    if force or st.st_size == 0 or is_own_output(path, kind):
        return
    mark = _output_json(path)[1]
    if isinstance(mark, str) and mark != kind:  # another command's output: say whose
        raise OutputPathError(f"{flag} {path}: holds another {mark.split('/')[0]}'s output ({mark}), not a "
                              f"{kind.split('/')[0]} output; --force replaces it")
    raise OutputPathError(f"{flag} {path}: exists and is not a specdecsim {kind.split('/')[0]} output; "
                          "--force replaces it")


def check_output_folder(path: Path, flag: str, marker: str, is_ours, force: bool = False) -> None:
    """Refuse an output folder before any work is done.

    Allowed: a folder that does not exist yet, an empty folder, a folder whose `marker` file a
    specdecsim tool wrote (`is_ours(marker_path)`), and with `force` any folder.

    Raises:
        OutputPathError: a regular file or special file, a path under a regular file, or a folder
            holding other files without `force`.
    """
    path = Path(path)
    _check_parents(path, flag)
    st = _lstat(path, flag)
    if st is None:
        return
    if stat.S_ISLNK(st.st_mode) and path.is_dir():
        st = path.stat()  # a link to a folder: the files go inside it, the link stays
    if not stat.S_ISDIR(st.st_mode):
        raise OutputPathError(f"{flag} {path}: is a file, expected a folder")
    _check_writable(path, path, flag)
    try:
        empty = next(os.scandir(path), None) is None
    except OSError as e:
        raise OutputPathError(f"{flag} {path}: {e.strerror or e}") from None
    if force or empty or is_ours(path / marker):
        return
    raise OutputPathError(f"{flag} {path}: holds files but no {marker} that specdecsim wrote; --force writes "
                          "into it anyway")


# ---- writing --------------------------------------------------------------------------------------
def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` (UTF-8) via a temp file in the same folder and os.replace (`write_bytes_atomic`)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write `data` via a temp file in the same folder and os.replace (`atomic_file`).

    Raises:
        OutputPathError: `path` exists and is not a regular file (folder, symbolic link, device,
            FIFO, socket), or a part of its folder path is a file.
        OSError: the folder cannot be made or written.
    """
    with atomic_file(path) as f:
        f.write(data)


@contextmanager
def atomic_file(path: Path, text: bool = False) -> Iterator[IO]:
    """A file to write `path` through: a temp file in the same folder, moved over `path` with
    os.replace when the block ends without an exception, deleted when it raises (an interrupt
    included), so a reader never sees a partial file. For outputs written piece by piece (a
    streamed trace); `write_bytes_atomic` is the one-call form.

    Args:
        text: open in text mode (UTF-8, newlines as written) instead of binary.

    Raises:
        OutputPathError: `path` exists and is not a regular file (folder, symbolic link, device,
            FIFO, socket), or a part of its folder path is a file.
        OSError: the folder cannot be made or written.
    """
    path = Path(path)
    st = _lstat(path, "output")
    if st is not None:
        _refuse_special(path, st, "output")
    _check_parents(path, "output")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise OutputPathError(f"output {path}: a part of its folder path is a file, not a folder") from None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:100]}.", suffix=".tmp", dir=path.parent)
    except OSError as e:  # name the output asked for, not the temp file beside it
        raise OSError(e.errno, e.strerror, str(path)) from None
    try:
        with (os.fdopen(fd, "w", encoding="utf-8", newline="") if text else os.fdopen(fd, "wb")) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a plain open() would respect the umask
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and e.filename in (None, tmp):  # name the output asked for, not the temp file
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise


def is_stdout(path: str | Path | None) -> bool:
    """True for '-', an output option's name for standard output (`--json -`)."""
    return path is not None and str(path) == "-"


def write_json_atomic(path: Path, data: Any, allow_nan: bool = True) -> None:
    """JSON (indent 1, newline at the end) written atomically; to standard output for '-'.

    Args:
        allow_nan: False for the simulator's outputs: strict JSON has no NaN or infinities and
            `simulator.inputs.load_json` refuses them, so one would make a file no tool reads.

    Raises:
        ValueError: `allow_nan` is False and `data` holds NaN or an infinity.
    """
    text = json.dumps(data, indent=1, allow_nan=allow_nan) + "\n"
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_text_atomic(Path(path), text)


def csv_cell(v: Any) -> Any:
    """A value as `write_csv_atomic` puts it in a cell: None as empty, lists and dicts as JSON."""
    if v is None:
        return ""
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return v


def write_csv_atomic(path: Path, rows: list[dict], columns: list[str]) -> None:
    """CSV (csv module; lists and dicts as JSON, None as empty) written atomically."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: csv_cell(r.get(c)) for c in columns})
    write_text_atomic(Path(path), buf.getvalue())


def csv_lines(rows: Iterable[Sequence]) -> str:
    """Rows as `write_csv_atomic` writes them (csv module, '\\n' after each row), cells as given:
    None is an empty cell, numbers are written by str() (shortest round-trip for floats); lists
    and dicts are for the caller to turn into JSON (`csv_cell`)."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


class StagedFolder:
    """Outputs of one run written beside their final names (`.NAME.staged`), then moved into place
    together with SIGINT and SIGTERM's handlers held back, so a Ctrl-C or a SIGTERM leaves the folder as the
    earlier run left it or as this one leaves it, never a mix (a signal that arrived meanwhile is
    taken once the moves are done). Staged files are removed when the block raises.

    Use:
        with StagedFolder(out_dir) as stage:
            write_csv_atomic(stage.path("sweep.csv"), ...)
            stage.remove("best_num_steps.csv")   # a stale file of the earlier run, removed at commit
    """

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._staged: list[tuple[Path, Path]] = []
        self._removed: list[Path] = []

    def path(self, name: str) -> Path:
        """Where to write `name` (checked as atomic_file checks an output: a regular file or none).

        Raises:
            OutputPathError: the final path is a folder, a link or not a regular file.
        """
        final = self.folder / name
        st = _lstat(final, "output")
        if st is not None:
            _refuse_special(final, st, "output")
        tmp = self.folder / f".{name}.staged"
        self._staged.append((tmp, final))
        return tmp

    def remove(self, name: str) -> None:
        self._removed.append(self.folder / name)

    def __enter__(self) -> StagedFolder:
        self.folder.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            for tmp, _ in self._staged:
                tmp.unlink(missing_ok=True)
            return
        import signal
        pending: list[int] = []
        saved = {}
        try:  # Python runs signal handlers in the main thread: hold them back there while moving
            for sig in (signal.SIGINT, signal.SIGTERM):
                saved[sig] = signal.signal(sig, lambda signum, frame: pending.append(signum))
        except ValueError:  # not the main thread: nothing to hold back
            pass
        try:
            for tmp, final in self._staged:
                if tmp.exists():
                    os.replace(tmp, final)
            for p in self._removed:
                if p.is_file() and not p.is_symlink():
                    p.unlink()
        except BaseException:
            for tmp, _ in self._staged:
                tmp.unlink(missing_ok=True)
            raise
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)
            if pending:
                os.kill(os.getpid(), pending[0])  # taken now, by the handler it was meant for
