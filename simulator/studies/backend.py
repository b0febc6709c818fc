"""Where sweep and search points run: processes on this machine, or tasks on a Ray cluster.

A backend takes a function and a list of chunks (lists of grid points) and gives back
(chunk index, the function's result) as chunks finish, in whatever order they finish. Callers
key results by point index, so the order of completion never reaches an output: a sweep's CSV
is the same bytes on either backend (tests/test_backend.py).

- `LocalBackend(jobs)`: jobs 1 runs the chunks in this process, one after another; jobs > 1
  forks a `concurrent.futures.ProcessPoolExecutor` of that many worker processes.
- `RayBackend(address, num_cpus)`: one Ray task (1 CPU) per chunk, on the cluster at `address`,
  or on a Ray instance started here with `num_cpus` CPUs (default: all) when no address is
  given (Ray then also honours RAY_ADDRESS). A Ray session already open in this process
  (`ray.init` called by the caller, as the tests do) is used as it is and left open.
  Ray is an optional extra (`pip install 'specdecsim[ray]'`), imported only in this module.

What it leaves out: Ray workers import `simulator` and read the files a point names (profiles,
traces, the hardware catalog) at the paths the driver resolved, so every node of a cluster
needs the same install and the same files at the same paths (a shared file system), as a local
instance has. Nothing is shipped to the cluster.

A backend is a context manager: entering it connects (Ray; started here or reached at
`address`), leaving it disconnects, so the several `submit` calls of one sweep share a session.
Entering it again while it is open (or while another Ray session is open) reuses that session.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from typing import Any, Protocol
from urllib.parse import urlsplit

from simulator.inputs import UserInputError, quote

BACKENDS = ("local", "ray")
MAX_JOBS = 4 * (os.cpu_count() or 1)
ADDRESS_TIMEOUT_S = 5.0  # a Ray address that accepts no TCP connection within this is unreachable
RAY_WAIT_S = 0.2  # how often finished Ray tasks are collected (progress granularity)
RAY_EXTRA_HINT = "pip install 'specdecsim[ray]'"

Chunk = list
Done = Iterator[tuple[int, Any]]


class Backend(Protocol):
    """What `simulator.studies.points.run_points` needs of a backend."""

    name: str

    @property
    def num_workers(self) -> int:
        """Chunks that run at once (worker processes, or the Ray cluster's CPUs once entered)."""

    def __enter__(self) -> Backend: ...

    def __exit__(self, *exc: object) -> None: ...

    def submit(self, fn: Callable[[Chunk], Any], chunks: list[Chunk],
               warm_up: Callable[[], None] | None = None) -> Any:
        """A context manager: starts fn(chunk) for every chunk on entry, yields the iterator of
        (chunk index, result) in the order they finish, and stops what is left on exit."""


class LocalBackend:
    """Chunks in this process (jobs 1) or in `jobs` forked worker processes.

    Raises:
        UserInputError: jobs outside 1..MAX_JOBS.
    """

    name = "local"

    def __init__(self, jobs: int = 1):
        if not 1 <= jobs <= MAX_JOBS:
            raise UserInputError(f"--jobs {jobs}: expected 1..{MAX_JOBS} (4 per CPU core here)")
        self.jobs = jobs

    @property
    def num_workers(self) -> int:
        return self.jobs

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    @contextmanager
    def submit(self, fn: Callable[[Chunk], Any], chunks: list[Chunk],
               warm_up: Callable[[], None] | None = None) -> Iterator[Done]:
        """Run fn over the chunks; yields (chunk index, fn(chunk)) as they finish.

        Args:
            fn: picklable function of one chunk (a module-level function or a partial of one).
            chunks: the chunks. warm_up: picklable, idempotent; run here first (forked workers
                inherit what it loaded) and once in each worker process.

        Jobs 1 runs each chunk when the iterator reaches it, in order. Jobs > 1 forks the pool
        and submits every chunk on entry, before the caller starts a progress bar's thread.
        """
        if warm_up is not None:
            warm_up()
        if self.jobs == 1:
            yield ((i, fn(c)) for i, c in enumerate(chunks))
            return
        pool = ProcessPoolExecutor(max_workers=self.jobs, initializer=_worker_init, initargs=(warm_up,))
        try:
            futures = {pool.submit(fn, c): i for i, c in enumerate(chunks)}
            yield ((futures[f], f.result()) for f in as_completed(futures))
        except BaseException:  # Ctrl-C, SIGTERM (simulator.cli.main), an error: end the workers now
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                proc.terminate()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            pool.shutdown(cancel_futures=True)


def _worker_init(warm_up: Callable[[], None] | None) -> None:
    """A pool worker: SIGTERM and Ctrl-C back to their defaults (the parent ends its workers with
    SIGTERM; Ctrl-C in a terminal reaches the parent, which ends them), then the warm-up."""
    import signal
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if warm_up is not None:
        warm_up()


def _run_task(fn: Callable[[Chunk], Any], chunk: Chunk, warm_up: Callable[[], None] | None) -> Any:
    """A Ray task's body: warm the worker (idempotent), run the chunk."""
    if warm_up is not None:
        warm_up()
    return fn(chunk)


def import_ray() -> Any:
    """The `ray` module.

    Raises:
        UserInputError: ray is not installed (one line, with the install command).
    """
    try:
        import ray
    except ImportError:
        raise UserInputError(f"--backend ray: ray is not installed here; {RAY_EXTRA_HINT}") from None
    return ray


def parse_address(address: str, flag: str = "--address") -> tuple[str, int] | None:
    """(host, port) of a Ray address to check for reachability; None for 'auto'.

    Args:
        address: 'host:port', 'ray://host:port' (Ray Client) or 'auto' (the cluster `ray start`
            left on this machine).
        flag: where the address came from, for messages ('--address' or 'RAY_ADDRESS').

    Raises:
        UserInputError: any other form.
    """
    if address == "auto":
        return None
    parts = urlsplit(address if "://" in address else f"//{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if parts.scheme not in ("", "ray") or not host or port is None or parts.path not in ("", "/"):
        raise UserInputError(f"{flag} {quote(address)}: expected host:port, ray://host:port or auto")
    return host, port


# The HTTP/2 client connection preface and an empty SETTINGS frame (RFC 9113 section 3.4): a gRPC
# server (Ray's GCS, the Ray Client server) answers with a SETTINGS frame (type 4).
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
HTTP2_SETTINGS = 4


def answers_http2(host: str, port: int, timeout_s: float = ADDRESS_TIMEOUT_S) -> bool:
    """Whether `host:port` accepts a TCP connection and answers the HTTP/2 preface with a SETTINGS
    frame within `timeout_s`, as Ray's gRPC servers do. Ray itself retries a port that accepts
    connections but is not Ray without end, deaf to Ctrl-C and SIGTERM; this asks first. Under
    RAY_USE_TLS=1 the servers speak TLS first, so only the TCP connection is checked.

    Raises:
        OSError: no TCP connection within `timeout_s` (refused, unknown host, timed out).
    """
    with socket.create_connection((host, port), timeout=timeout_s) as conn:
        if os.environ.get("RAY_USE_TLS", "0").strip().lower() in ("1", "true"):
            return True
        conn.settimeout(timeout_s)
        try:
            conn.sendall(HTTP2_PREFACE)
            head = b""
            while len(head) < 9:  # the first frame header: 3 bytes length, 1 byte type, ...
                chunk = conn.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
        except OSError:  # reset or timed out after the connection was made: not a gRPC server
            return False
    return len(head) == 9 and head[3] == HTTP2_SETTINGS


class RayBackend:
    """One Ray task per chunk, on the cluster at `address` or on a Ray instance started here.

    Args:
        address: see `parse_address`; None follows RAY_ADDRESS when it is set (checked as an
            address is: Ray itself would wait for an unreachable one without end, deaf to Ctrl-C),
            else starts a local instance.
        num_cpus: CPUs of a local instance (None: all); not with an address.

    Raises:
        UserInputError: ray not installed, num_cpus outside 1..MAX_JOBS, num_cpus with an address,
            or an address of the wrong form. On entry: an address that does not answer within
            ADDRESS_TIMEOUT_S, or Ray failing to start or connect.
    """

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None):
        self._ray = import_ray()
        self._flag = "--address"
        if address is None and os.environ.get("RAY_ADDRESS", "").strip():
            address, self._flag = os.environ["RAY_ADDRESS"].strip(), "RAY_ADDRESS"
        if address is not None and num_cpus is not None:
            raise UserInputError(f"--jobs: sets the CPUs of a Ray instance started here; with {self._flag} the "
                                 "cluster's CPUs are used (leave --jobs out)")
        if num_cpus is not None and not 1 <= num_cpus <= MAX_JOBS:
            raise UserInputError(f"--jobs {num_cpus}: expected 1..{MAX_JOBS} (4 per CPU core here)")
        self.address, self.num_cpus = address, num_cpus
        self._endpoint = parse_address(address, self._flag) if address is not None else None
        self._owned: list[bool] = []  # per open `with`: whether it started the session (and ends it)

    @property
    def num_workers(self) -> int:
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def __enter__(self) -> RayBackend:
        ray = self._ray
        if self._endpoint is not None:
            host, port = self._endpoint
            try:
                grpc = answers_http2(host, port)
            except OSError as e:
                raise UserInputError(f"{self._flag} {quote(self.address)}: cannot reach {host}:{port} "
                                     f"({e.strerror or e or 'timed out'})") from None
            if not grpc:
                raise UserInputError(f"{self._flag} {quote(self.address)}: {host}:{port} answers, but not as Ray "
                                     f"does (no gRPC reply within {ADDRESS_TIMEOUT_S:g} s); give the head's GCS port "
                                     "(ray start --port, 6379) or its client port (ray://, 10001)")
        if ray.is_initialized():
            self._owned.append(False)
            return self
        local = {} if self.address is not None else dict(num_cpus=self.num_cpus, include_dashboard=False)
        try:
            ray.init(address=self.address, log_to_driver=False, logging_level="ERROR", **local)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as e:
            where = f"connect to {self._flag} {self.address}" if self.address else "start a local Ray instance"
            first = (str(e).splitlines() or [type(e).__name__])[0]
            raise UserInputError(f"--backend ray: could not {where}: {first}") from None
        self._owned.append(True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._owned.pop():
            self._ray.shutdown()

    @contextmanager
    def submit(self, fn: Callable[[Chunk], Any], chunks: list[Chunk],
               warm_up: Callable[[], None] | None = None) -> Iterator[Done]:
        """Run fn over the chunks as Ray tasks; yields (chunk index, fn(chunk)) as they finish.

        Args: as `LocalBackend.submit`; warm_up runs in the task before each chunk.

        Raises (while iterating):
            UserInputError: the one a task raised (bad point), without Ray's traceback.
        """
        ray = self._ray
        task = ray.remote(num_cpus=1)(_run_task)
        fn_ref, warm_ref = ray.put(fn), ray.put(warm_up)
        refs = [task.remote(fn_ref, c, warm_ref) for c in chunks]
        pending = list(refs)
        try:
            yield self._as_completed(refs, pending)
        finally:
            for ref in pending:
                ray.cancel(ref)

    def _as_completed(self, refs: list, pending: list) -> Done:
        """(chunk index, result) of `refs` as they finish; `pending` is emptied as they do."""
        ray = self._ray
        index = {ref: i for i, ref in enumerate(refs)}
        while pending:
            done, rest = ray.wait(pending, num_returns=len(pending), timeout=RAY_WAIT_S)
            pending[:] = rest
            for ref in done:
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayTaskError as e:
                    if isinstance(e.cause, UserInputError):
                        raise e.cause from None
                    raise
                yield index[ref], result


def make_backend(kind: str = "local", jobs: int | None = None, address: str | None = None) -> Backend:
    """The backend the command line asks for (`--backend`, `--jobs`, `--address`).

    Args:
        kind: 'local' or 'ray'. jobs: local worker processes (None: 1), or the CPUs of a local
            Ray instance (None: all). address: a Ray cluster (only with kind 'ray').

    Raises:
        UserInputError: an unknown kind, an address without ray, and what the backends raise.
    """
    if kind not in BACKENDS:
        raise UserInputError(f"--backend {quote(kind)}: expected one of {', '.join(BACKENDS)}")
    if kind == "local":
        if address is not None:
            raise UserInputError("--address: only with --backend ray")
        return LocalBackend(1 if jobs is None else jobs)
    return RayBackend(address, jobs)
