"""What the run loop asks of an engine backend, and what one instrumented step hands back.

An engine backend is one started engine (one configuration: target, draft, `num_steps` or none)
that the run loop drives step by step. Times are microseconds on the backend's own clock
(`clock_us`): wall time for a real engine, a simulated clock for the fake one.

`EngineSpec` is what the rest of calibration knows of an engine kind: how to start its backend
for a plan, and the few facts in which engines differ (the registry in
calibration/engines/backends/__init__.py holds one per engine).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from simulator.units import US_PER_MS, US_PER_S


@dataclass
class StepTimes:
    """GPU and host figures of one engine step, us (None where the backend did not see that part).

    GPU spans come from CUDA events on the model runner's stream: `gpu_period_us` from one step's
    start to the next's, `target_forward_us` the target's forward (decode or verify), `sample_us`
    the logits and (rejection) sampling, `propose_us` the whole draft phase, `draft_extend_us` its
    first draft forward over the verified tokens, `draft_steps_us` the remaining num_steps - 1
    draft forwards together. Host: `host_period_us` between the engine's step starts,
    `host_blocked_us` the time the host waited on the GPU's output within the step;
    `host_cpu_us` the CPU time the engine's stepping thread used between the step starts, and
    `process_cpu_us` that of all the process's threads (a host-bound step whose wall period grows
    while its thread's CPU time does not was waiting: for the GIL, or for a core).
    """

    gpu_period_us: float | None = None
    target_forward_us: float | None = None
    sample_us: float | None = None
    propose_us: float | None = None
    draft_extend_us: float | None = None
    draft_steps_us: float | None = None
    host_period_us: float | None = None
    host_blocked_us: float | None = None
    host_cpu_us: float | None = None
    process_cpu_us: float | None = None
    target_tokens_padded: int | None = None
    draft_extend_tokens_padded: int | None = None


SPANS = {"target_forward_us": ("fwd0", "fwd1"), "sample_us": ("smp0", "smp1"), "propose_us": ("prop0", "prop1"),
         "draft_extend_us": ("ext0", "ext1"), "draft_steps_us": ("dec0", "dec1")}


def window_step_times(steps: list[dict], tokens: dict[str, str]) -> list[StepTimes]:
    """StepTimes of a window's recorded steps (a real engine's hooks: each step a dict of its
    host start `host_t` (s), host wait `blocked_s`, CUDA events `ev` by name - `exec` at the step's
    start, SPANS' pairs around its phases - and padded token counts), the events already complete.

    Args:
        tokens: StepTimes field -> the step's key holding it (e.g. target_tokens_padded -> 'tokens').
    """
    out = []
    for i, s in enumerate(steps):
        nxt = steps[i + 1] if i + 1 < len(steps) else None
        t = StepTimes(host_period_us=(nxt["host_t"] - s["host_t"]) * US_PER_S if nxt else None,
                      host_blocked_us=s.get("blocked_s", 0.0) * US_PER_S,
                      host_cpu_us=_delta_us(s, nxt, "cpu_t"), process_cpu_us=_delta_us(s, nxt, "proc_t"),
                      **{name: s.get(key) for name, key in tokens.items()})
        ev = s.get("ev")
        if ev:
            for name, (a, b) in SPANS.items():
                if a in ev and b in ev:
                    setattr(t, name, ev[a].elapsed_time(ev[b]) * US_PER_MS)
            if nxt and "ev" in nxt:
                t.gpu_period_us = ev["exec"].elapsed_time(nxt["ev"]["exec"]) * US_PER_MS
        out.append(t)
    return out


def _delta_us(step: dict, nxt: dict | None, key: str) -> float | None:
    if nxt is None or key not in step or key not in nxt:
        return None
    return (nxt[key] - step[key]) * US_PER_S


PROBE_REPEATS = 5


def _probe_work(n: int = 20_000) -> int:
    """A fixed piece of interpreter work of the kind an engine's host step does (calls, attribute and
    dict access, small lists)."""
    acc, d = 0, {}
    for i in range(n):
        key = i & 255
        d[key] = d.get(key, 0) + i
        acc += len((key, i, acc & 7))
    return acc


def host_speed_probe_us() -> float:
    """The calling thread's core speed as interpreter work sees it: the median time of a fixed piece of
    Python work over PROBE_REPEATS runs, us (a host-bound engine step on the same core should move
    with it)."""
    times = []
    for _ in range(PROBE_REPEATS):
        t0 = time.perf_counter()
        _probe_work()
        times.append((time.perf_counter() - t0) * US_PER_S)
    return float(sorted(times)[len(times) // 2])


_ALLOWED_CPUS: list[int] = []  # the CPUs this process could run on before fastest_cpu first pinned a thread


def probe_cpus(cpus: list[int]) -> dict[int, float]:
    """Each CPU's host probe, us: the calling thread pinned to each in turn (Linux: pid 0 is the calling
    thread, so the process's other threads keep their masks), and left on the last."""
    import os
    probes = {}
    for c in cpus:
        os.sched_setaffinity(0, {c})
        probes[c] = host_speed_probe_us()
    return probes


def fastest_cpu(cpus: list[int] | None = None) -> tuple[int, dict[int, float]]:
    """The CPU (of `cpus`, default every CPU the process was allowed before the first pin) that runs the
    host probe fastest now, and each one's probe, us; the calling thread is left pinned to that CPU."""
    import os
    if not _ALLOWED_CPUS:
        _ALLOWED_CPUS.extend(sorted(os.sched_getaffinity(0)))
    probes = probe_cpus(sorted(cpus if cpus is not None else _ALLOWED_CPUS))
    best = min(probes, key=probes.get)
    os.sched_setaffinity(0, {best})
    return best, probes


def thread_cpu() -> int | None:
    """The CPU the calling thread last ran on (Linux /proc; None elsewhere)."""
    import threading
    from pathlib import Path
    try:
        stat = Path(f"/proc/self/task/{threading.get_native_id()}/stat").read_text(encoding="ascii")
        return int(stat.rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return None


def machine_cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) jiffies of every CPU of the machine (Linux /proc/stat); None elsewhere. Two of
    them bracket a window: busy / total over it is how loaded the host's cores were."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


class RecordingWindow:
    """start_window / the start of end_window of a hooked engine: its hooks record into `_steps`
    while `_recording`, with CUDA events while `_instrument`."""

    _torch = None

    def start_window(self, instrument: bool) -> None:
        self._steps = []
        self._instrument = instrument
        self._recording = True

    def _begin_step(self) -> None:
        """A step starts: its host time, and where instrumented a CUDA event at its start."""
        step = {"host_t": time.perf_counter(), "cpu_t": time.thread_time(), "proc_t": time.process_time()}
        self._steps.append(step)
        if self._instrument:
            ev = self._torch.cuda.Event(enable_timing=True)
            ev.record()
            step["ev"] = {"exec": ev}

    def _close_window(self) -> list[dict]:
        """Stop recording, wait for the GPU (the events complete), and hand over the steps."""
        self._recording = False
        self._instrument = False
        self._torch.cuda.synchronize()
        steps, self._steps = list(self._steps), []
        return steps


@dataclass
class EngineInfo:
    """What the started engine says about itself (recorded in every point and profile)."""

    engine: str
    engine_version: str
    attention_backend: str = ""
    cudagraph_mode: str = ""
    model_runner: str = ""
    async_scheduling: bool | None = None
    gpu_name: str = ""
    torch_version: str = ""
    cuda_version: str = ""
    max_num_seqs: int = 0
    max_num_batched_tokens: int = 0  # tokens the scheduler places in one step at most (prefill chunks); 0: not read
    enable_prefix_caching: bool | None = None
    mixed_prefill: bool | None = None  # a prefill chunk shares a step with the decode batch (vLLM; SGLang's enable_mixed_chunk)
    cudagraph_capture_sizes: list[int] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)
    startup_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    tp_size: int = 1  # the target's TP group
    draft_tp_size: int | None = None  # the draft's TP as the engine ran it (read from its layers); None: no draft


def module_tp_size(model) -> int | None:
    """The TP size a model's layers were built for: the first submodule's `tp_size` (vLLM's and
    SGLang's parallel linears record it); None where no layer says."""
    modules = getattr(model, "modules", None)
    if modules is None:
        return None
    for m in modules():
        n = getattr(m, "tp_size", None)
        if isinstance(n, int) and not isinstance(n, bool) and n >= 1:
            return n
    return None


def wrap_method(obj, name: str, label: str, info: EngineInfo, recording, before=None, after=None) -> bool:
    """Replace obj.name with a wrapper that, while `recording()` is true, calls `before(args,
    kwargs)` ahead of it and `after(args, kwargs, result)` after it. A missing attribute is noted
    in `info.notes` (the points then lack that part); a hook installed is named in `info.hooks`."""
    orig = getattr(obj, name, None) if obj is not None else None
    if orig is None:
        info.notes.append(f"hook {label}: {name} not found")
        return False

    def wrapped(*args, **kwargs):
        if before is not None and recording():
            before(args, kwargs)
        out = orig(*args, **kwargs)
        if after is not None and recording():
            after(args, kwargs, out)
        return out
    setattr(obj, name, wrapped)
    info.hooks.append(label)
    return True


class EngineBackend(Protocol):
    """One started engine configuration, driven step by step by `calibration.engines.run_loop`."""

    num_steps: int  # draft tokens per request per step; 0 for the no-speculation baseline

    def info(self) -> EngineInfo: ...

    def clock_us(self) -> float: ...

    def start_clock_us(self) -> float:
        """The time now on `clock_us`'s clock (where clock_us is the last step's output time, as SGLang's
        is, a request-level run starts its clock here: the time it submits, not the last output before)."""
        ...

    def set_acceptance(self, acceptance_rate: float | None) -> None:
        """Per-position (conditional) acceptance for the following steps; None for a baseline."""

    def add_requests(self, prompts: list[list[int]], max_tokens: int) -> list[str]:
        """Queue one request per prompt (token ids), each to generate up to max_tokens."""

    def step(self) -> dict[str, int]:
        """Run one engine step; the tokens each request emitted in it ({request id: count})."""

    def abort(self, request_ids: list[str]) -> None:
        """End these requests and step until the engine holds none."""

    def start_window(self, instrument: bool) -> None:
        """Start recording step figures (GPU phases too when `instrument`)."""

    def end_window(self) -> list[StepTimes]:
        """Stop recording; the figures of each engine step since start_window."""

    def shutdown(self) -> None: ...


@dataclass(frozen=True)
class EngineSpec:
    """One engine kind as calibration sees it: its backend's start, and where it differs from the others.

    Attributes:
        name: the engine's name in plans, points files and `--engine` (simulator.engines.fields.CALIBRATED_ENGINES).
        start: (plan, workdir, rank) -> the plan's engine started as this process's backend (in a TP
            group, this rank's); `workdir` is the process's own (calibration.engines.worker.start_backend).
        serving_kind: the simulator's `serving_engine.kind` its live records name (calibration.engines.records).
        requires: modules importable here for it to run (`--engine` and a queue check them before any
            process starts); none for an engine that needs no install.
        in_process: the campaign runs it in this process (no GPU: the fake engine), not a child process a plan.
        own_draft_tp: the draft's TP can be asked apart from the target's (`--draft-tp 1`, a plan's
            draft_tensor_parallel_size); False: the draft runs in the target's TP group.
        tree_and_overlap: the draft tree (`--topk`, `--num-draft-tokens`) and overlap scheduler
            (`--no-overlap`) settings apply; False: a chain of num_steps drafts, its own scheduling.
        mla_attention_backend: a plan's mla_attention_backend (the target's MLA layers' backend) applies.
        host_paced_by_gpu_idle: the engine waits for the GPU inside its step where the output-copy hook
            does not see it (SGLang's EAGLE worker): calibration.engines.build keeps its timed parts as graph
            spans, tells a host-paced step by the GPU's idle share, and without overlap takes the host's
            work as the step less the parts.
        acceptance_per_batch_step: forced acceptance draws one accept length per verify step for the whole
            batch (SGLang's SGLANG_SIMULATE_ACC_LEN); False: i.i.d. per request and draft (vLLM's synthetic
            sampler). calibration.engines.records writes the acceptance its live records ran with from it.
        clock_was_last_output: its clock_us is the last output's time, so its request-level runs before
            start_clock_us (point lines without `clock: submit`) hold no wall times
            (requests_loop.wall_times_valid); False: clock_us was always the time now.
        prefill_graph_edge: with piecewise CUDA graphs on (`cudagraph_mode` holding PIECEWISE), a step of up
            to its largest capture size runs in a graph and a larger one kernel by kernel (vLLM), so the prefill
            fit takes that edge (simulator.evidence.prefill_fit); False: its capture sizes are decode batches only.
    """

    name: str
    start: Callable[..., EngineBackend]  # (ProcessPlan, Path, int)
    serving_kind: str
    requires: tuple[str, ...] = ()
    in_process: bool = False
    own_draft_tp: bool = True
    tree_and_overlap: bool = False
    mla_attention_backend: bool = False
    host_paced_by_gpu_idle: bool = False
    acceptance_per_batch_step: bool = False
    clock_was_last_output: bool = False
    prefill_graph_edge: bool = False
