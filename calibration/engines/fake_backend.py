"""A fake engine with the interface of `VllmBackend` and known costs, on a simulated clock.

CI has no GPU: the run loop, the worker, the campaign, the profile builder, the records and
`validate` are tested end to end through this engine. Its costs follow a structure like vLLM's
(the target's forward padded to CUDA-graph capture sizes, memory-bound below a ridge and
compute-bound above it, attention growing with the context; a draft prefill over every verified
token and num_steps - 1 single-token draft forwards; a scheduler one step ahead, so a step takes
the longer of the GPU's and the host's work), written as plain max() rooflines that the
profile's fitted forms only approximate, so a test of the fit is not a test of an identity.
Acceptance is drawn per request and draft position with the rate asked for.
"""

from __future__ import annotations

import bisect

import numpy as np

from calibration.engines.backend import EngineInfo, StepTimes

CAPTURE_SIZES = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))


def _padded(n: int) -> int:
    i = bisect.bisect_left(CAPTURE_SIZES, n)
    return CAPTURE_SIZES[i] if i < len(CAPTURE_SIZES) else n


class FakeCosts:
    """The fake engine's true costs, us (module docstring)."""

    def __init__(self, scale: float = 1.0):
        self.scale = scale

    def target_forward_us(self, tokens: int, batch_size: int, context_len: float) -> float:
        t = _padded(tokens)
        return self.scale * (60.0 + max(3400.0, 21.0 * t) + 0.0009 * batch_size * context_len * 32 / 4
                             + 0.00004 * (t - batch_size) * context_len)

    def sample_us(self, tokens: int, speculative: bool) -> float:
        return self.scale * ((45.0 if speculative else 25.0) + max(230.0, 1.6 * _padded(tokens)))

    def draft_extend_us(self, tokens: int, batch_size: int, context_len: float) -> float:
        t = _padded(tokens)
        return self.scale * (40.0 + max(250.0, 1.1 * t) + 0.0009 * batch_size * context_len / 4)

    def draft_step_us(self, batch_size: int, context_len: float) -> float:
        return self.scale * (30.0 + max(240.0, 1.0 * _padded(batch_size)) + 0.0009 * batch_size * context_len / 4)

    def other_gpu_us(self, batch_size: int, num_steps: int) -> float:
        return self.scale * (35.0 + 0.4 * batch_size + 0.1 * batch_size * num_steps)

    def host_us(self, batch_size: int, num_steps: int) -> float:
        return 900.0 + 14.0 * batch_size + (350.0 + 3.0 * batch_size * (num_steps + 1) if num_steps else 0.0)


class FakeBackend:
    """A started fake engine (target plus a draft of `num_steps`, or the baseline)."""

    def __init__(self, num_steps: int, seed: int = 0, costs: FakeCosts | None = None, jitter_cv: float = 0.01,
                 max_model_len: int = 8192):
        self.num_steps = num_steps
        self.max_model_len = max_model_len
        self.costs = costs or FakeCosts()
        self.rng = np.random.default_rng(seed)
        self.jitter_cv = jitter_cv
        self.rate = 0.0
        self.now_us = 0.0
        self.requests: dict[str, dict] = {}
        self._next_id = 0
        self._window: list[StepTimes] | None = None
        self._instrument = False

    def info(self) -> EngineInfo:
        return EngineInfo(engine="fake", engine_version="0", attention_backend="FAKE", cudagraph_mode="FULL",
                          model_runner="fake", async_scheduling=True, gpu_name="fake GPU", max_num_seqs=64,
                          cudagraph_capture_sizes=list(CAPTURE_SIZES), hooks=["all"])

    def clock_us(self) -> float:
        return self.now_us

    def set_acceptance(self, acceptance_rate: float | None) -> None:
        self.rate = float(acceptance_rate or 0.0)

    def add_requests(self, prompts: list[list[int]], max_tokens: int) -> list[str]:
        ids = []
        for p in prompts:
            rid = f"r{self._next_id}"
            self._next_id += 1
            self.requests[rid] = dict(prompt_len=len(p), emitted=0, max_tokens=max_tokens, prefilled=False)
            ids.append(rid)
        return ids

    def _jitter(self) -> float:
        return float(max(0.5, 1.0 + self.jitter_cv * self.rng.standard_normal()))

    def step(self) -> dict[str, int]:
        live = {r: q for r, q in self.requests.items() if q["emitted"] < q["max_tokens"]}
        if not live:
            return {}
        pending = [r for r, q in live.items() if not q["prefilled"]]
        if pending:  # one prefill step for every new request
            tokens = sum(live[r]["prompt_len"] for r in pending)
            self.now_us += 500.0 + 0.05 * tokens
            for r in pending:
                live[r]["prefilled"] = True
                live[r]["emitted"] = 1
            return {r: 1 for r in pending}
        k, c = self.num_steps, self.costs
        b = len(live)
        ctx = float(np.mean([q["prompt_len"] + q["emitted"] for q in live.values()]))
        t = StepTimes(target_forward_us=c.target_forward_us(b * (k + 1), b, ctx) * self._jitter(),
                      sample_us=c.sample_us(b * (k + 1), bool(k)) * self._jitter(),
                      target_tokens_padded=_padded(b * (k + 1)))
        gpu = t.target_forward_us + t.sample_us + c.other_gpu_us(b, k) * self._jitter()
        if k:
            t.draft_extend_us = c.draft_extend_us(b * (k + 1), b, ctx) * self._jitter()
            t.draft_steps_us = (k - 1) * c.draft_step_us(b, ctx) * self._jitter()
            t.propose_us = t.draft_extend_us + t.draft_steps_us + 12.0
            t.draft_extend_tokens_padded = _padded(b * (k + 1))
            gpu += t.propose_us
        host = c.host_us(b, k) * self._jitter()
        period = max(gpu, host)
        t.gpu_period_us, t.host_period_us, t.host_blocked_us = period, period, period - host
        self.now_us += period
        out = {}
        for r, q in live.items():
            n = 1
            while n <= k and self.rng.random() < self.rate:
                n += 1
            n = min(n, q["max_tokens"] - q["emitted"])
            q["emitted"] += n
            out[r] = n
        if self._window is not None:
            if not self._instrument:
                t = StepTimes(host_period_us=t.host_period_us, host_blocked_us=t.host_blocked_us)
            self._window.append(t)
        return out

    def abort(self, request_ids: list[str]) -> None:
        for r in request_ids:
            self.requests.pop(r, None)

    def start_window(self, instrument: bool) -> None:
        self._window = []
        self._instrument = instrument

    def end_window(self) -> list[StepTimes]:
        out, self._window = self._window or [], None
        return out

    def shutdown(self) -> None:
        self.requests.clear()
