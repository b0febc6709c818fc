"""What the run loop asks of an engine backend, and what one instrumented step hands back.

An engine backend is one started engine (one configuration: target, draft, `num_steps` or none)
that the run loop drives step by step. Times are microseconds on the backend's own clock
(`clock_us`): wall time for a real engine, a simulated clock for the fake one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class StepTimes:
    """GPU and host figures of one engine step, us (None where the backend did not see that part).

    GPU spans come from CUDA events on the model runner's stream: `gpu_period_us` from one step's
    start to the next's, `target_forward_us` the target's forward (decode or verify), `sample_us`
    the logits and (rejection) sampling, `propose_us` the whole draft phase, `draft_extend_us` its
    first draft forward over the verified tokens, `draft_steps_us` the remaining num_steps - 1
    draft forwards together. Host: `host_period_us` between the engine's step starts,
    `host_blocked_us` the time the host waited on the GPU's output within the step.
    """

    gpu_period_us: float | None = None
    target_forward_us: float | None = None
    sample_us: float | None = None
    propose_us: float | None = None
    draft_extend_us: float | None = None
    draft_steps_us: float | None = None
    host_period_us: float | None = None
    host_blocked_us: float | None = None
    target_tokens_padded: int | None = None
    draft_extend_tokens_padded: int | None = None


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
    cudagraph_capture_sizes: list[int] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)
    startup_s: float = 0.0
    notes: list[str] = field(default_factory=list)


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
