"""Records of live speculative runs on a GPU, in the simulator's terms.

`specdecsim live` (calibration/live/) writes these (one JSON file per run point); `specdecsim
validate` reads them and predicts each point from a profile alone. The embedded `scenario` is a
full Scenario dict, so the prediction runs the very set-up that was measured.

`LiveServingRun` (`specdecsim live --serving`, calibration/live/serving.py): the live loop run as a
closed-loop server; its scenario's `serving:` section is the workload, its per-request and
per-step facts are `simulator.serving.scheduler.ServingRecords` columns with wall-clock times, and its
`result` is `simulator.serving.metrics.serving_metrics` of them. `specdecsim validate-serving`
runs the serving DES on the same scenario (simulator/evidence/validate_serving.py).
"""

from __future__ import annotations

from statistics import median
from typing import Annotated, Literal, Self

import numpy as np
from pydantic import Field, model_validator

from simulator.config import Scenario, StrictModel, legacy_keys, migrate_legacy_scenario
from simulator.profile import HardwareInfo
from simulator.serving.scheduler import ServingRecords
from simulator.serving.metrics import ServingResult
from simulator.units import US_PER_S

LIVE_PHASES = ("draft", "verify", "accept", "draft_extend", "sync", "host", "decode")
# What a measurement can be: 1 ns to 11.6 days of wall time; 0.001 to 1e9 tokens per second.
ElapsedUs = Annotated[float, Field(ge=1e-3, le=1e12)]
TokPerS = Annotated[float, Field(ge=1e-3, le=1e9)]


class LiveRun(StrictModel):
    """One measured point: a scenario run for real, speculative or baseline.

    Phase times are means per cycle (per decode step for the baseline), in us, measured with
    CUDA events (graph mode) or host timers around synchronised regions (eager diagnostics).
    `sync` (records from 2026-11-29 on) is the device->host copy of the accept result (the
    decoded token) and the host's wake-up after it; older records fold it into `accept`/`decode`.

    Repeats (`repeat_*`, same length): every repeat replays the same accept-length sequence,
    so their spread is timing noise alone; `num_tokens`, `elapsed_us` and `tok_per_s` pool all
    repeats (older records: the lower-median repeat, with `repeat_num_tokens` empty).
    `paired_baseline_tok_per_s`: the no-speculation baseline of the same target timed in the
    same process right after this point's repeats, so a speedup is not skewed by a GPU whose
    speed drifts over minutes.
    """

    schema_version: Literal[1] = 1
    scenario: Scenario
    speculative: bool = Field(description="False = the no-speculation baseline of the same scenario.")
    num_cycles: int = Field(ge=1, le=10**9, description="Timed cycles (decode steps for the baseline), 1..1e9.")
    num_tokens: int = Field(ge=1, le=10**12, description="Tokens emitted over the timed cycles, all requests; "
                                                          "1..1e12.")
    elapsed_us: ElapsedUs = Field(description="Wall time of the timed cycles, 1e-3..1e12 us.")
    tok_per_s: TokPerS = Field(description="System throughput: num_tokens / elapsed; 1e-3..1e9.")
    repeat_tok_per_s: list[TokPerS] = Field(default_factory=list, max_length=10_000,
                                            description="tok_per_s of repeats of this point.")
    repeat_num_tokens: list[Annotated[int, Field(ge=1, le=10**12)]] = Field(
        default_factory=list, max_length=10_000, description="Tokens emitted per repeat.")
    repeat_elapsed_us: list[ElapsedUs] = Field(default_factory=list, max_length=10_000,
                                               description="Wall us per repeat.")
    paired_baseline_tok_per_s: TokPerS | None = Field(
        None, description="Baseline tok/s of the same target measured right after this point.")
    prompt_len: int | None = Field(
        None, ge=1, le=2**27, description="The requests' prompt length, where the run's context grew from it: "
                                          "`workload.context_len` is then the mean KV length over the timed "
                                          "cycles (what the prediction uses), this the point's nominal context "
                                          "(what `validate` groups cells by).")
    mean_accept_length: float = Field(ge=1.0, le=65.0, description="1..num_steps+1.")
    accept_length_counts: list[Annotated[int, Field(ge=0, le=10**15)]] = Field(
        default_factory=list, max_length=65, description="Count of accept_length 1..num_steps+1.")
    forced_acceptance_rate: float | None = Field(
        None, ge=0.0, le=1.0, allow_inf_nan=False,
        description="The per-token acceptance rate the engine's synthetic acceptance was set to, 0..1, where the "
                    "scenario's acceptance is what that forced (SGLang's empirical floor/ceil pmf): `validate` "
                    "groups cells by it, as by an iid rate.")
    phase_us: dict[str, Annotated[float, Field(ge=0, le=1e12)]] = Field(
        default_factory=dict, description="Mean us per cycle by phase, 0..1e12.")
    hardware: HardwareInfo | None = None
    created_utc: str | None = None
    git_commit: str | None = None
    command_line: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _migrate_scenario(cls, data):
        """Records written before the serving engine and fidelity had their own sections carry
        `engine:` and `workload.num_cycles`; their scenario is read with the keys moved."""
        if isinstance(data, dict) and isinstance(data.get("scenario"), dict) and legacy_keys(data["scenario"]):
            data = {**data, "scenario": migrate_legacy_scenario(data["scenario"])}
        return data

    @model_validator(mode="after")
    def _check(self) -> Self:
        s = self.scenario.spec.num_steps
        top = s + 1 if self.speculative else 1
        if not 1.0 <= self.mean_accept_length <= top:
            raise ValueError(f"mean_accept_length={self.mean_accept_length} outside 1..{top}")
        if self.speculative and len(self.accept_length_counts) != s + 1:
            raise ValueError(f"accept_length_counts has {len(self.accept_length_counts)} entries; "
                             f"num_steps={s} needs {s + 1}")
        if any(c < 0 for c in self.accept_length_counts):
            raise ValueError("accept_length_counts must be >= 0")
        if self.speculative:
            cycles = self.num_cycles * self.scenario.workload.batch_size  # request-cycles per repeat
            total = sum(self.accept_length_counts)
            reps = max(1, len(self.repeat_tok_per_s))
            if total and not total % cycles and total > cycles * reps:
                raise ValueError(f"accept_length_counts sum to {total}, {total // cycles} repeats of num_cycles="
                                 f"{self.num_cycles} x batch_size={self.scenario.workload.batch_size}; repeat_tok_per_s "
                                 f"lists {len(self.repeat_tok_per_s)} (one rate a repeat)")
            if total == 0 or total % cycles or total > cycles * reps:
                raise ValueError(f"accept_length_counts sum to {total}; num_cycles={self.num_cycles} x batch_size="
                                 f"{self.scenario.workload.batch_size} needs {cycles} per repeat")
            mean = sum(k * c for k, c in enumerate(self.accept_length_counts, start=1)) / total
            if abs(mean - self.mean_accept_length) > 1e-6 * mean:
                raise ValueError(f"mean_accept_length={self.mean_accept_length} != {mean:.6f}, the mean of "
                                 "accept_length_counts")
        n = len(self.repeat_tok_per_s)
        if self.repeat_num_tokens or self.repeat_elapsed_us:
            if not len(self.repeat_num_tokens) == len(self.repeat_elapsed_us) == n:
                raise ValueError(f"repeat_tok_per_s, repeat_num_tokens and repeat_elapsed_us must have one "
                                 f"entry per repeat, got {n}, {len(self.repeat_num_tokens)}, "
                                 f"{len(self.repeat_elapsed_us)}")
            for i, (t, k, e) in enumerate(zip(self.repeat_tok_per_s, self.repeat_num_tokens, self.repeat_elapsed_us)):
                if abs(t * e / US_PER_S - k) > 1e-6 * k + 1e-3:
                    raise ValueError(f"repeat {i}: repeat_tok_per_s={t} != repeat_num_tokens / repeat_elapsed_us "
                                     f"= {k / e * US_PER_S}")
            if sum(self.repeat_num_tokens) != self.num_tokens:
                raise ValueError(f"num_tokens={self.num_tokens} != sum(repeat_num_tokens)="
                                 f"{sum(self.repeat_num_tokens)}")
        if abs(self.tok_per_s * self.elapsed_us / US_PER_S - self.num_tokens) > 1e-6 * self.num_tokens + 1e-3:
            raise ValueError(f"tok_per_s={self.tok_per_s} != num_tokens / elapsed = "
                             f"{self.num_tokens / self.elapsed_us * US_PER_S}")
        if n and not min(self.repeat_tok_per_s) * (1 - 1e-6) <= self.tok_per_s <= max(self.repeat_tok_per_s) * (1 + 1e-6):
            raise ValueError(f"tok_per_s={self.tok_per_s} lies outside its repeats' {min(self.repeat_tok_per_s)}.."
                             f"{max(self.repeat_tok_per_s)} (repeat_tok_per_s): the whole run's rate is between them")
        return self

    @property
    def median_tok_per_s(self) -> float:
        """tok/s of the median repeat where every repeat replayed one accept sequence (records with
        `repeat_num_tokens`): robust to one repeat hit by a host or GPU hiccup. Else tok_per_s."""
        if len(self.repeat_num_tokens) > 1 and len(set(self.repeat_num_tokens)) == 1:
            return float(median(self.repeat_tok_per_s))
        return self.tok_per_s

    @property
    def repeat_cycle_us(self) -> list[float]:
        """Mean wall us per cycle of each repeat: timing alone (accept draws do not enter)."""
        if self.repeat_elapsed_us:
            return [e / self.num_cycles for e in self.repeat_elapsed_us]
        return []


MAX_SERVING_REQUESTS = 1_000_000
MAX_SERVING_STEPS = 100_000_000
TimeUs = Annotated[float, Field(ge=0, le=1e12)]
Tokens = Annotated[int, Field(ge=0, le=10**9)]


class LiveServingRun(StrictModel):
    """One live serving run: the live loop driven by the serving scheduler (closed loop, fixed
    batch slots), speculative or the no-speculation baseline, wall-clock times in us from the
    run's start.

    Per request (n, in arrival order): `arrival_us`, `admit_us`, `first_token_us`, `finish_us`,
    `input_tokens`, `output_tokens`; per inter-token gap (m): `itl_request_idx`, `itl_us`; per
    engine step (k): start, end, decode requests, draft steps (0 = plain decode), summed raw
    accept lengths. `result` is `simulator.serving.metrics.serving_metrics` of these columns
    (no warm-up cut, no SLOs), so the live and simulated runs are measured by one function.
    """

    schema_version: Literal[2] = 2  # 2: `result` latencies in ms (ttft_ms, ...)
    kind: Literal["live_serving"] = "live_serving"
    scenario: Scenario
    speculative: bool = Field(description="False = the no-speculation baseline of the same workload.")
    warmup_cycles: int = Field(ge=0, le=10**6, description="Untimed loop cycles run before the clock started.")
    arrival_us: list[TimeUs] = Field(max_length=MAX_SERVING_REQUESTS)
    admit_us: list[TimeUs] = Field(max_length=MAX_SERVING_REQUESTS)
    first_token_us: list[TimeUs] = Field(max_length=MAX_SERVING_REQUESTS)
    finish_us: list[TimeUs] = Field(max_length=MAX_SERVING_REQUESTS)
    input_tokens: list[Annotated[int, Field(ge=1, le=2_097_152)]] = Field(max_length=MAX_SERVING_REQUESTS)
    output_tokens: list[Annotated[int, Field(ge=1, le=2_097_152)]] = Field(max_length=MAX_SERVING_REQUESTS)
    itl_request_idx: list[Tokens] = Field(max_length=MAX_SERVING_STEPS)
    itl_us: list[TimeUs] = Field(max_length=MAX_SERVING_STEPS)
    step_start_us: list[TimeUs] = Field(max_length=MAX_SERVING_STEPS)
    step_end_us: list[TimeUs] = Field(max_length=MAX_SERVING_STEPS)
    step_batch_size: list[Tokens] = Field(max_length=MAX_SERVING_STEPS)
    step_num_steps: list[Annotated[int, Field(ge=0, le=64)]] = Field(max_length=MAX_SERVING_STEPS)
    step_accepted: list[Tokens] = Field(max_length=MAX_SERVING_STEPS)
    result: ServingResult
    hardware: HardwareInfo | None = None
    created_utc: str | None = None
    git_commit: str | None = None
    command_line: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Self:
        sc = self.scenario
        if sc.serving is None or sc.serving.arrivals.kind not in ("closed_loop", "closed_batch", "trace") or (
                sc.serving.arrivals.kind == "trace" and sc.serving.arrivals.arrival_s is None):
            raise ValueError("scenario.serving must be set, with closed_loop or closed_batch arrivals or arrivals "
                             "listed (trace arrival_s: a Poisson run's)")
        n = len(self.arrival_us)
        per_req = ("admit_us", "first_token_us", "finish_us", "input_tokens", "output_tokens")
        if n == 0 or any(len(getattr(self, f)) != n for f in per_req):
            raise ValueError(f"arrival_us, {', '.join(per_req)} must have one entry per request (>= 1), got "
                             f"{[len(getattr(self, f)) for f in ('arrival_us',) + per_req]}")
        k = len(self.step_start_us)
        per_step = ("step_end_us", "step_batch_size", "step_num_steps", "step_accepted")
        if k == 0 or any(len(getattr(self, f)) != k for f in per_step):
            raise ValueError(f"step_start_us, {', '.join(per_step)} must have one entry per step (>= 1)")
        if len(self.itl_us) != len(self.itl_request_idx) or any(i >= n for i in self.itl_request_idx):
            raise ValueError("itl_us and itl_request_idx must be as long as each other, indices < requests")
        for i, (a, d, f0, f1) in enumerate(zip(self.arrival_us, self.admit_us, self.first_token_us, self.finish_us)):
            if not a <= d <= f0 <= f1:
                raise ValueError(f"request {i}: needs arrival_us <= admit_us <= first_token_us <= finish_us, got {a}, "
                                 f"{d}, {f0}, {f1}")
        for i, (f0, f1, out) in enumerate(zip(self.first_token_us, self.finish_us, self.output_tokens)):
            if out > 1 and not f1 > f0:
                raise ValueError(f"request {i}: {out} tokens, all at {f0:.6g} us: a request's tokens after its first "
                                 "come from later steps (finish_us > first_token_us)")
        if any(b < a for a, b in zip(self.step_start_us, self.step_start_us[1:])) or any(
                nxt < end - 1.0 for end, nxt in zip(self.step_end_us, self.step_start_us[1:])):
            raise ValueError("steps run one after another: each step_start_us at or after the step before's end")
        if max(self.step_end_us) > max(self.finish_us) * (1 + 1e-3) + 1e3:
            raise ValueError(f"the last step ends at {max(self.step_end_us):.6g} us, after the last request finished "
                             f"({max(self.finish_us):.6g} us, finish_us): a run ends with its last request")
        if (last := max(self.finish_us)) > max(self.step_end_us) * (1 + 1e-9) + 1.0:
            raise ValueError(f"a request finishes at {last:.6g} us, after the last step's end ({max(self.step_end_us):.6g}"
                             " us, step_end_us): a request's last token comes from a step")
        gaps, spans = np.zeros(n), np.zeros(n)  # each request's gaps and their sum, where a record lists them
        np.add.at(gaps, self.itl_request_idx, 1.0)
        np.add.at(spans, self.itl_request_idx, self.itl_us)
        want = np.array(self.finish_us) - np.array(self.first_token_us)
        if self.itl_us and (bad := np.flatnonzero((gaps > np.array(self.output_tokens) - 1)
                                  | (np.abs(spans - want) > 1e-6 * np.maximum(want, 1.0) + 1.0))).size:
            i = int(bad[0])
            raise ValueError(f"request {i}: {int(gaps[i])} inter-token gaps (itl_us) summing to {spans[i]:.6g} us; its "
                             f"{self.output_tokens[i]} tokens allow at most {self.output_tokens[i] - 1}, summing to "
                             f"finish_us - first_token_us ({want[i]:.6g} us)")
        if any(e < s for s, e in zip(self.step_start_us, self.step_end_us)):
            raise ValueError("a step ends before it starts (step_end_us < step_start_us)")
        if any(b > self.concurrency for b in self.step_batch_size):
            raise ValueError(f"a step's batch exceeds concurrency {self.concurrency}")
        if not self.speculative and any(self.step_num_steps):
            raise ValueError("a baseline run has no speculative steps (step_num_steps must be 0)")
        def allowed(b: int) -> int:  # the draft steps the scenario's policy takes at a decode batch of b
            entry = sc.serving.policy_at(b)
            return 0 if entry is False else sc.spec.num_steps if entry is None else entry.num_steps
        if self.speculative and (bad := next(((i, b, k) for i, (b, k) in enumerate(zip(
                self.step_batch_size, self.step_num_steps)) if k > allowed(b)), None)):
            raise ValueError(f"step {bad[0]} drafts {bad[2]} steps at a decode batch of {bad[1]} (step_num_steps); the "
                             f"scenario that ran allows {allowed(bad[1])} there (spec.num_steps, "
                             "serving.num_steps_by_batch, serving.spec_off_above_batch)")
        for i, (b, k, a) in enumerate(zip(self.step_batch_size, self.step_num_steps, self.step_accepted)):
            if not b <= a <= b * (k + 1):
                raise ValueError(f"step_accepted[{i}] {a}: each of its {b} decoding requests takes 1..num_steps + 1 "
                                 f"tokens, so {b}..{b * (k + 1)}")
        decoded, over = sum(self.output_tokens) - n, n * max(self.step_num_steps)
        if not decoded <= sum(self.step_accepted) <= decoded + over:
            raise ValueError(f"step_accepted sums to {sum(self.step_accepted)}: the {decoded} tokens the requests took "
                             f"after their first (each from a decode step), plus at most {over} drawn past a request's "
                             "last (num_steps a request)")
        want = sc.serving.num_requests
        if want is not None and want != n:
            raise ValueError(f"scenario.serving.num_requests {want}: the record holds {n} requests; the scenario "
                             "that ran them sent as many")
        return self

    @property
    def concurrency(self) -> int:
        """Requests in flight at most: a closed loop's concurrency, a closed batch's size (every request, for
        arrivals listed)."""
        arr = self.scenario.serving.arrivals
        return arr.concurrency if arr.kind == "closed_loop" else len(self.arrival_us)

    def serving_records(self) -> ServingRecords:
        """The record's facts as the serving DES's records (what `serving_metrics` reads)."""
        f = lambda v: np.asarray(v, dtype=float)  # noqa: E731
        i = lambda v: np.asarray(v, dtype=np.int64)  # noqa: E731
        return ServingRecords(
            arrival_us=f(self.arrival_us), admit_us=f(self.admit_us), first_token_us=f(self.first_token_us),
            finish_us=f(self.finish_us), input_tokens=i(self.input_tokens), output_tokens=i(self.output_tokens),
            num_preemptions=np.zeros(len(self.arrival_us), dtype=np.int64),
            itl_request_idx=i(self.itl_request_idx), itl_us=f(self.itl_us),
            step_start_us=f(self.step_start_us), step_end_us=f(self.step_end_us),
            step_batch_size=i(self.step_batch_size), step_num_steps=i(self.step_num_steps),
            step_prefill_tokens=np.zeros(len(self.step_start_us), dtype=np.int64),
            step_accepted=i(self.step_accepted), speculative=self.speculative)


def serving_record_fields(rec: ServingRecords) -> dict:
    """The per-request and per-step columns of `LiveServingRun` from serving records (all finished)."""
    if np.isnan(rec.finish_us).any():
        raise ValueError("every request of a live serving run must finish")
    return dict(
        arrival_us=rec.arrival_us.tolist(), admit_us=rec.admit_us.tolist(), first_token_us=rec.first_token_us.tolist(),
        finish_us=rec.finish_us.tolist(), input_tokens=rec.input_tokens.tolist(),
        output_tokens=rec.output_tokens.tolist(), itl_request_idx=rec.itl_request_idx.tolist(),
        itl_us=rec.itl_us.tolist(), step_start_us=rec.step_start_us.tolist(), step_end_us=rec.step_end_us.tolist(),
        step_batch_size=rec.step_batch_size.tolist(), step_num_steps=rec.step_num_steps.tolist(),
        step_accepted=rec.step_accepted.tolist(), speculative=rec.speculative)
