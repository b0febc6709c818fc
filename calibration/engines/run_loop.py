"""One measured point of an engine: a steady batch of requests decoding at a context.

`measure_point` queues `batch_size` requests whose prompts are `prompt_len` tokens, steps the
engine until every request is decoding, runs `warmup_steps` more, then times `repeats` windows
of `timed_steps` engine steps each. Per window it counts the tokens each request emitted per
step (its accept length: accepted drafts plus the target's own token; 1 for the baseline), the
wall time, and, from the backend, each step's figures (`StepTimes`). The same code drives vLLM
and the fake engine, so what CI tests is what the GPU runs.

Why whole windows of steps: the engine's scheduler runs one step ahead of the GPU (vLLM's async
scheduling), so a step's cost is the period between steps in steady state, not the time of one
call. The host's own work per step is the period less the time it waited on the GPU's output.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from calibration.engines.backends.base import (EngineBackend, StepTimes, fastest_cpu, host_speed_probe_us,
                                         machine_cpu_ticks, thread_cpu)

REFILL_STEPS_AFTER_PROBE = 4  # untimed engine steps between a probe and the window it precedes
MAX_PREFILL_STEPS = 10_000  # steps to wait for every request's first token before giving up
PROMPT_TOKEN_LOW, PROMPT_TOKEN_HIGH = 1000, 100_000  # prompt token ids: ordinary vocabulary entries


@dataclass(frozen=True)
class PointPlan:
    """What to measure: one steady batch (acceptance_rate None for the baseline engine)."""

    batch_size: int
    prompt_len: int
    acceptance_rate: float | None
    timed_steps: int = 48
    warmup_steps: int = 8
    repeats: int = 2
    instrument_first: bool = False  # the first window records GPU phases (CUDA events)
    host_probe: bool = False  # before and after each window, time a fixed piece of Python work in this thread
    # (its core's speed)
    pin_fastest_cpu: bool = False  # before the warm-up, pin the stepping thread to the CPU that runs that work fastest
    # request-level runs (calibration.engines.requests_loop): 'steady' is the window above
    workload: str = "steady"  # 'steady', 'closed_batch' (batch_size requests at once), 'closed_loop' or 'poisson'
    max_tokens: int | None = None  # request-level: tokens each request generates
    concurrency: int | None = None  # closed_loop: requests in flight
    num_requests: int | None = None  # closed_loop, poisson: requests run in all
    request_rate: float | None = None  # poisson: mean arrivals per second (bench serve --request-rate)
    warmup_run_tokens: int = 0  # closed batch / loop: before the measured runs, one unrecorded closed batch of the
    # point's batch (or concurrency) and prompt with this many new tokens (0: none), where the engine pays what it
    # compiles or tunes the first time it meets the shape (vLLM's Triton JIT, SGLang's first multi-request prefill)

    @property
    def key(self) -> str:
        a = "base" if self.acceptance_rate is None else f"a{self.acceptance_rate:g}"
        if self.workload == "closed_batch":
            return f"cb_b{self.batch_size}_p{self.prompt_len}_{a}_n{self.max_tokens}x{self.repeats}"
        if self.workload == "closed_loop":
            return f"cl_c{self.concurrency}_r{self.num_requests}_p{self.prompt_len}_{a}_n{self.max_tokens}x{self.repeats}"
        if self.workload == "poisson":
            return f"po_q{self.request_rate:g}_r{self.num_requests}_p{self.prompt_len}_{a}_n{self.max_tokens}x{self.repeats}"
        return f"b{self.batch_size}_p{self.prompt_len}_{a}_t{self.timed_steps}x{self.repeats}"


def prompt_pool(num_prompts: int, prompt_len: int, seed: int = 0, vocab_size: int | None = None) -> list[list[int]]:
    """Distinct random prompts (token ids below `vocab_size`: a TP shard's embedding holds its
    slice of the vocabulary only); a point at a shorter prompt takes their first tokens, so an engine
    with prefix caching computes each prompt's prefill once per process."""
    high = PROMPT_TOKEN_HIGH if vocab_size is None else min(PROMPT_TOKEN_HIGH, int(vocab_size))
    low = min(PROMPT_TOKEN_LOW, high // 2)
    rng = np.random.default_rng(seed)
    return rng.integers(low, high, size=(num_prompts, prompt_len)).tolist()


def max_tokens_for(plan: PointPlan, num_steps: int, max_model_len: int) -> int:
    """Tokens each request may generate: enough that none finishes inside a timed window."""
    refill = REFILL_STEPS_AFTER_PROBE if plan.host_probe else 0
    steps = plan.warmup_steps + plan.repeats * (plan.timed_steps + refill) + 8
    want = steps * (num_steps + 1) + 16
    room = max_model_len - plan.prompt_len - 1
    if room < want:
        raise ValueError(f"prompt_len {plan.prompt_len} leaves {room} tokens of max_model_len {max_model_len}; "
                         f"the point needs {want} (warm-up + timed steps x {num_steps + 1})")
    return want


def _mean(values) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def summarize_steps(steps: list[StepTimes]) -> dict:
    """Mean of each StepTimes field over a window's steps (None where no step has it); the padded
    token counts as their most common value."""
    out: dict = {}
    for name in StepTimes.__dataclass_fields__:
        vals = [getattr(s, name) for s in steps]
        if name.endswith("_padded"):
            known = [v for v in vals if v is not None]
            out[name] = max(set(known), key=known.count) if known else None
        else:
            out[name] = _mean(vals)
    return out


def measure_point(backend: EngineBackend, plan: PointPlan, pool: list[list[int]], max_model_len: int) -> dict:
    """Measure one point: the repeats' figures and the per-step raw times.

    Returns:
        {'key', 'num_steps', 'batch_size', 'prompt_len', 'acceptance_rate', 'repeats': [...]}, each
        repeat {'repeat_idx', 'instrumented', 'num_cycles', 'num_tokens', 'elapsed_us',
        'accept_length_counts', 'context_len', 'num_incomplete_steps', 'host_busy_us',
        'host_blocked_us', 'machine_cpu_busy_frac' (the host's cores, all of them: /proc/stat),
        'means': summarize_steps(...), 'raw': [asdict(StepTimes) ...]}.

    Raises:
        RuntimeError: the requests never all reach decoding.
    """
    k = backend.num_steps
    b = plan.batch_size
    if len(pool) < b or any(len(p) < plan.prompt_len for p in pool[:b]):
        raise ValueError(f"the prompt pool holds {len(pool)} prompts of {min(map(len, pool))} tokens; the point "
                         f"needs {b} of {plan.prompt_len}")
    backend.set_acceptance(plan.acceptance_rate if k else None)
    ids = backend.add_requests([p[:plan.prompt_len] for p in pool[:b]], max_tokens_for(plan, k, max_model_len))
    emitted = dict.fromkeys(ids, 0)
    try:
        for _ in range(MAX_PREFILL_STEPS):
            for rid, n in backend.step().items():
                emitted[rid] = emitted.get(rid, 0) + n
            if all(emitted[r] > 0 for r in ids):
                break
        else:
            raise RuntimeError(f"{b} requests of {plan.prompt_len} prompt tokens did not all start decoding "
                               f"within {MAX_PREFILL_STEPS} engine steps")
        pinned = {}
        if plan.pin_fastest_cpu and not getattr(backend, "simulated_clock", False):
            cpu, probes = backend.pin_fastest_cpu() if hasattr(backend, "pin_fastest_cpu") else fastest_cpu()
            pinned = dict(pinned_cpu=cpu, cpu_probe_us={str(c): v for c, v in probes.items()})
        for _ in range(plan.warmup_steps):
            for rid, n in backend.step().items():
                emitted[rid] += n
        repeats = [_timed_window(backend, plan, ids, emitted, r) for r in range(plan.repeats)]
    finally:
        backend.abort(ids)
    return dict(key=plan.key, num_steps=k, batch_size=b, prompt_len=plan.prompt_len,
                acceptance_rate=plan.acceptance_rate if k else None, repeats=repeats, **pinned)


def _probe(backend: EngineBackend) -> tuple[float, int | None]:
    """The stepping thread's core speed and CPU (an engine stepping in a thread of its own probes there:
    SGLang's scheduler)."""
    return backend.host_probe() if hasattr(backend, "host_probe") else (host_speed_probe_us(), thread_cpu())


def _timed_window(backend: EngineBackend, plan: PointPlan, ids: list[str], emitted: dict[str, int],
                  repeat_idx: int) -> dict:
    k, b = backend.num_steps, plan.batch_size
    instrument = plan.instrument_first and repeat_idx == 0
    probing = plan.host_probe and not getattr(backend, "simulated_clock", False)  # a real host's speed only
    probe_before = None
    if probing:
        probe_before = _probe(backend)[0]
        # the probe lets the GPU drain what the engine queued a step ahead (vLLM's async scheduling): a window
        # begun on an empty queue ends with the host's lead rebuilt inside it, and its wall time per step
        # comes out about one step / timed_steps short of the GPU's (2% in 48 steps: queue vllm-h200-hostspeed)
        for _ in range(REFILL_STEPS_AFTER_PROBE):
            for rid, n in backend.step().items():
                emitted[rid] += n
    before = float(np.mean([emitted[r] for r in ids]))
    counts = [0] * (k + 1)
    tokens = incomplete = 0
    ticks0 = machine_cpu_ticks()
    backend.start_window(instrument)
    t0 = backend.clock_us()
    for _ in range(plan.timed_steps):
        out = backend.step()
        for rid, n in out.items():
            emitted[rid] += n
            tokens += n
        if len(out) == b and all(1 <= n <= k + 1 for n in out.values()):
            for n in out.values():
                counts[n - 1] += 1
        else:
            incomplete += 1
    elapsed = backend.clock_us() - t0
    probe = cpu = None
    if probing:  # before the window's sync: the stepping thread as it ran
        probe, cpu = _probe(backend)
    steps = backend.end_window()
    ticks1 = machine_cpu_ticks()
    busy = None
    if ticks0 and ticks1 and ticks1[1] > ticks0[1]:
        busy = (ticks1[0] - ticks0[0]) / (ticks1[1] - ticks0[1])
    after = float(np.mean([emitted[r] for r in ids]))
    blocked = [s.host_blocked_us for s in steps if s.host_blocked_us is not None]
    host_busy = elapsed / plan.timed_steps - float(np.sum(blocked)) / plan.timed_steps if blocked else None
    return dict(repeat_idx=repeat_idx, instrumented=instrument, num_cycles=plan.timed_steps, num_tokens=tokens,
                elapsed_us=elapsed, accept_length_counts=counts,
                context_len=plan.prompt_len + (before + after) / 2.0, num_incomplete_steps=incomplete,
                host_busy_us=host_busy, host_blocked_us=float(np.mean(blocked)) if blocked else None,
                machine_cpu_busy_frac=busy, means=summarize_steps(steps), raw=[asdict(s) for s in steps],
                **({"host_probe_us": probe, "host_probe_before_us": probe_before, "host_cpu": cpu} if probing else {}))
