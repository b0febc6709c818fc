"""The lines of an engine points file, as schemas: what `--from-points` accepts.

The GPU side writes them (calibration/engines/worker.py); a user may hand any file to
`specdecsim calibrate engine --from-points` or `specdecsim live --from-points`, so every line is
validated here, strictly, and a bad one is one error naming the file, its line and the field.
A torn last line (a process killed while writing it) is the one thing skipped, and said.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from calibration.engines.points_text import POINTS_SCHEMA, is_cut, read_raw_text  # noqa: F401 (re-exported)
from simulator.acceptance import iid_mean_accept_length
from simulator.engines.fields import CalibratedEngine
from simulator.inputs import UserInputError, format_validation_error, load_json_line
from simulator.schema_base import StrictModel

Us = Annotated[float, Field(ge=0.0, le=1e12, allow_inf_nan=False)]
MIN_STEP_US = 1.0  # no engine steps faster (a kernel launch alone takes a few us): a smaller one is not a time


def check_counts_and_acceptance(repeats, num_steps: int, acceptance_rate: float | None) -> None:
    """A point's accept-length counts have num_steps + 1 entries a repeat, of a mean within 0.5-2x the i.i.d.
    accept length of its acceptance rate (from 20 counted; loose: engines' draws are not i.i.d.), and a rate is
    given exactly when it speculates. Raises ValueError naming the repeat or the field."""
    if (acceptance_rate is None) != (num_steps == 0):
        raise ValueError("acceptance_rate is given for speculative points (num_steps >= 1) only")
    for r in repeats:
        if len(c := r.accept_length_counts) != num_steps + 1:
            raise ValueError(f"repeat {r.repeat_idx}: accept_length_counts has {len(c)} entries; num_steps {num_steps} "
                             f"needs {num_steps + 1}")
        if acceptance_rate is not None and (n := sum(c)) >= 20 and not 0.5 <= sum(
                i * x for i, x in enumerate(c, 1)) / n / iid_mean_accept_length(acceptance_rate, num_steps) <= 2.0:
            raise ValueError(f"repeat {r.repeat_idx}: accept_length_counts' mean is outside 0.5-2x the i.i.d. accept "
                             f"length of acceptance_rate {acceptance_rate} at num_steps {num_steps}")


RUN_END_SLACK_FRAC, RUN_END_SLACK_US = 0.01, 1000.0  # a request run's clock read after its last step (vLLM: <= 0.2 ms)


class RepeatLine(StrictModel):
    """One timed window of a point."""

    repeat_idx: int = Field(ge=0, le=1000)
    instrumented: bool
    num_cycles: int = Field(ge=1, le=10**7, description="Timed engine steps, 1..1e7.")
    num_tokens: int = Field(ge=1, le=10**12)
    elapsed_us: float = Field(gt=0.0, le=1e12, allow_inf_nan=False, description="Wall time, (0, 1e12] us.")
    accept_length_counts: list[Annotated[int, Field(ge=0, le=10**12)]] = Field(min_length=1, max_length=65)
    context_len: float = Field(ge=1.0, le=2**27, allow_inf_nan=False)
    num_incomplete_steps: int = Field(ge=0, le=10**7)
    host_busy_us: Us | None = None
    host_blocked_us: Us | None = None
    machine_cpu_busy_frac: float | None = Field(None, ge=0.0, le=1.0, allow_inf_nan=False, description=(
        "How busy the host's cores were over the window (all of them, /proc/stat), 0..1."))
    means: dict[str, Us | int | None] = Field(default_factory=dict, max_length=64)
    raw: list[dict] = Field(default_factory=list, max_length=10**7)
    host_probe_us: Us | None = Field(None, description=(
        "After the window, a fixed piece of Python work timed in the stepping thread (its core's speed), us."))
    host_probe_before_us: Us | None = Field(None, description="The same, just before the window, us.")
    host_cpu: int | None = Field(None, ge=0, le=1_000_000, description="The CPU that thread last ran on.")


class PointBody(StrictModel):
    """One measured point: a steady batch at a prompt length, its windows."""

    key: str = Field(min_length=1, max_length=200)
    num_steps: int = Field(ge=0, le=64)
    batch_size: int = Field(ge=1, le=1_000_000)
    prompt_len: int = Field(ge=1, le=2**27)
    acceptance_rate: float | None = Field(None, ge=0.0, le=1.0, allow_inf_nan=False)
    repeats: list[RepeatLine] = Field(min_length=1, max_length=1000)
    pinned_cpu: int | None = Field(None, ge=0, le=1_000_000, description=(
        "The CPU the stepping thread was pinned to for this point (the one that ran the host probe fastest)."))
    cpu_probe_us: dict[str, Us] | None = Field(None, max_length=100_000, description=(
        "Each CPU's host probe when the point chose where to pin, us."))

    @model_validator(mode="after")
    def _check(self) -> Self:
        check_counts_and_acceptance(self.repeats, self.num_steps, self.acceptance_rate)
        for r in self.repeats:
            if sum(r.accept_length_counts) > self.batch_size * r.num_cycles:
                raise ValueError(f"repeat {r.repeat_idx}: accept_length_counts sum past batch_size x num_cycles")
            if r.elapsed_us / r.num_cycles < MIN_STEP_US:
                raise ValueError(f"repeat {r.repeat_idx}: elapsed_us / num_cycles is {r.elapsed_us / r.num_cycles:.3g} "
                                 f"us a step; an engine step takes at least {MIN_STEP_US:g} us")
            if self.num_steps and not r.num_incomplete_steps and not sum(r.accept_length_counts):
                raise ValueError(f"repeat {r.repeat_idx}: accept_length_counts are all 0; a whole speculative "
                                 "window (num_incomplete_steps 0) counts the accept length of each verify it timed")
            if r.context_len < self.prompt_len:
                raise ValueError(f"repeat {r.repeat_idx}: context_len {r.context_len:g} below prompt_len "
                                 f"{self.prompt_len}")
        return self


class RequestRecord(StrictModel):
    """One request of a request-level run, times in us from the run's start."""

    start_us: float = Field(ge=0.0, le=1e12, allow_inf_nan=False)
    ttft_us: float | None = Field(None, ge=0.0, le=1e12, allow_inf_nan=False)
    finish_us: float | None = Field(None, ge=0.0, le=1e12, allow_inf_nan=False)
    num_tokens: int = Field(ge=0, le=10**9)
    token_times_us: list[Annotated[float, Field(ge=0.0, le=1e12, allow_inf_nan=False)]] = Field(max_length=10**7)


class RequestStep(StrictModel):
    """One engine step of a request-level run."""

    t_us: float = Field(ge=MIN_STEP_US, le=1e12, allow_inf_nan=False, description=(
        "When the step returned, us from the start (a step takes at least MIN_STEP_US)."))
    emitted: int = Field(ge=0, le=10**7, description="Requests that got tokens in the step.")
    tokens: int = Field(ge=0, le=10**9)
    running: int = Field(ge=0, le=10**7, description="Requests unfinished when the step began.")
    scheduled: list[list[Annotated[int, Field(ge=0, le=10**9)]]] | None = Field(
        None, max_length=100_000, description=(
            "The scheduler's calls since the step before: [tokens, requests, the largest request's tokens] each "
            "(vLLM). The first step of a process's first request-level run after steady windows, measured before "
            "the run drained them (2026-12-06), holds the windows' calls too."))


class RequestRun(StrictModel):
    """One run (repeat) of a request-level point (calibration.engines.requests_loop)."""

    repeat_idx: int = Field(ge=0, le=1000)
    elapsed_us: float = Field(gt=0.0, le=1e12, allow_inf_nan=False)
    num_requests: int = Field(ge=1, le=10**7)
    num_tokens: int = Field(ge=1, le=10**12)
    accept_length_counts: list[Annotated[int, Field(ge=0, le=10**12)]] = Field(min_length=1, max_length=65)
    requests: list[RequestRecord] = Field(min_length=1, max_length=10**7)
    steps: list[RequestStep] = Field(min_length=1, max_length=10**7)
    num_engine_steps: int = Field(ge=0, le=10**8)
    host_period_us: list[Us] = Field(default_factory=list, max_length=10**8)
    host_blocked_us: list[Us | None] = Field(default_factory=list, max_length=10**8)
    host_probe_us: Us | None = Field(None, description=(
        "The host probe timed in the engine's stepping thread just after the run (a point planned with "
        "host_probe), us: the host's speed the run stepped at (EngineProfile.host_probe_us)."))

    @model_validator(mode="after")
    def _check(self) -> Self:
        if len(self.requests) != self.num_requests:
            raise ValueError(f"requests holds {len(self.requests)} entries; num_requests says {self.num_requests}")
        if sum(r.num_tokens for r in self.requests) != self.num_tokens:
            raise ValueError("num_tokens is not the requests' tokens summed")
        for i, r in enumerate(self.requests):
            if len(r.token_times_us) > r.num_tokens or any(b < a for a, b in zip(r.token_times_us, r.token_times_us[1:])):
                raise ValueError(f"requests[{i}]: token_times_us must rise and be no more than num_tokens")
            if r.num_tokens and not r.token_times_us:
                raise ValueError(f"requests[{i}]: {r.num_tokens} tokens but no token_times_us (each emitting step's time)")
            if r.token_times_us and r.token_times_us[0] < r.start_us:
                raise ValueError(f"requests[{i}]: start_us {r.start_us:.6g} after its first token "
                                 f"({r.token_times_us[0]:.6g} us): a request starts before it emits")
            times = r.token_times_us
            for name, got, want in (("ttft_us", r.ttft_us, times[0] - r.start_us if times else None),
                                    ("finish_us", r.finish_us, times[-1] if times else None)):
                if (got is None) != (want is None) or (got is not None and abs(got - want) > 1e-6 * max(1.0, want)):
                    raise ValueError(f"requests[{i}]: {name} {got!r} is not its token times' "
                                     f"({'none' if want is None else f'{want:.6g} us'})")
        if sum(s.tokens for s in self.steps) != self.num_tokens:
            raise ValueError(f"steps: their tokens sum to {sum(s.tokens for s in self.steps)}; num_tokens says "
                             f"{self.num_tokens}")
        if self.num_engine_steps > len(self.steps):
            raise ValueError(f"num_engine_steps {self.num_engine_steps}: past the run's {len(self.steps)} steps (the "
                             "engine's timed steps are some of them)")
        if any(b.t_us < a.t_us for a, b in zip(self.steps, self.steps[1:])):
            raise ValueError("steps: t_us must rise (each step returns after the one before)")
        last = self.steps[-1].t_us
        if not last <= self.elapsed_us <= last * (1 + RUN_END_SLACK_FRAC) + RUN_END_SLACK_US:
            raise ValueError(f"elapsed_us {self.elapsed_us:.6g}: the run lasts until its last step returned "
                             f"({last:.6g} us)")
        decodes = sum(max(0, len(q.token_times_us) - 1) for q in self.requests)
        counts = self.accept_length_counts
        if sum(counts) > decodes or sum(n * c for n, c in enumerate(counts, start=1)) > self.num_tokens:
            raise ValueError(f"accept_length_counts sum to {sum(counts)} accept lengths of "
                             f"{sum(n * c for n, c in enumerate(counts, start=1))} tokens: past the requests' {decodes} "
                             f"emissions after their first, or their {self.num_tokens} tokens")
        for j, st in enumerate(self.steps):
            if not st.emitted <= st.running <= self.num_requests:
                raise ValueError(f"steps[{j}]: {st.emitted} requests emitting, {st.running} running: emitting <= running "
                                 f"<= the run's {self.num_requests} requests")
        return self


class RequestPointBody(StrictModel):
    """One request-level point: closed batches, a closed loop or Poisson arrivals (calibration.engines.requests_loop)."""

    key: str = Field(min_length=1, max_length=200)
    workload: Literal["closed_batch", "closed_loop", "poisson"]
    num_steps: int = Field(ge=0, le=64)
    batch_size: int = Field(ge=1, le=1_000_000)
    prompt_len: int = Field(ge=1, le=2**27)
    acceptance_rate: float | None = Field(None, ge=0.0, le=1.0, allow_inf_nan=False)
    max_tokens: int = Field(ge=1, le=2**20)
    concurrency: int | None = Field(None, ge=1, le=1_000_000)
    num_requests: int | None = Field(None, ge=1, le=10**7)
    plan: dict = Field(default_factory=dict)
    repeats: list[RequestRun] = Field(min_length=1, max_length=1000)
    clock: Literal["submit"] | None = Field(None, description="'submit': each run timed from its submission "
                                            "(requests_loop.wall_times_valid); absent in SGLang runs before it")
    sent: Literal["arrival"] | None = Field(None, description=(
        "'arrival': a Poisson run's requests sent at their arrival times from a thread of the run's "
        "(requests_loop.sends_at_arrival); absent: sent at the first step output after it"))

    @model_validator(mode="after")
    def _check(self) -> Self:
        check_counts_and_acceptance(self.repeats, self.num_steps, self.acceptance_rate)
        if self.sent is not None and self.workload != "poisson":
            raise ValueError(f"sent: {self.sent!r} is a Poisson run's (how its requests were sent); workload is "
                             f"{self.workload}")
        if self.workload != "closed_batch" and self.num_requests is None:
            raise ValueError(f"num_requests: needed by workload {self.workload} (the requests run in all)")
        runs = self.batch_size if self.workload == "closed_batch" else self.num_requests
        for r in self.repeats:
            if any(q.num_tokens != self.max_tokens for q in r.requests):
                raise ValueError(f"repeat {r.repeat_idx}: a request has other than max_tokens {self.max_tokens} tokens "
                                 "(a run ends when each of its requests has them)")
            for j, st in enumerate(r.steps):
                if not st.emitted <= st.tokens <= st.emitted * (self.num_steps + 1):
                    raise ValueError(f"repeat {r.repeat_idx}: steps[{j}]: {st.tokens} tokens to {st.emitted} requests; "
                                     f"each takes 1..num_steps + 1 ({self.num_steps + 1}) in a step")
            if self.num_steps and not sum(r.accept_length_counts) and any(len(q.token_times_us) > 1 for q in r.requests):
                raise ValueError(f"repeat {r.repeat_idx}: accept_length_counts are all 0; a speculative run counts "
                                 "the accept length of each decode step after a request's first token")
            if r.num_requests != runs:
                raise ValueError(f"repeat {r.repeat_idx}: {r.num_requests} requests, the point's "
                                 f"{'batch_size' if self.workload == 'closed_batch' else 'num_requests'} says {runs}")
            if (late := max((q.token_times_us[-1] for q in r.requests if q.token_times_us), default=0.0)) > r.elapsed_us:
                raise ValueError(f"repeat {r.repeat_idx}: a token at {late:.6g} us, after the run's elapsed_us "
                                 f"{r.elapsed_us:.6g} (the run lasts until its last token)")
        return self


class _Line(StrictModel):
    """What every line holds: the schema, and the engine process it came from."""

    schema_: Literal["engine_points/1"] = Field(alias="schema")
    label: str = Field(min_length=1, max_length=200)


class PointLine(_Line):
    kind: Literal["point"]
    session: Literal["calibrate", "live"]
    engine: CalibratedEngine
    engine_version: str = Field(max_length=200)
    point: PointBody
    wall_s: float = Field(ge=1e-6, le=1e7, allow_inf_nan=False, description="The point's wall time, s (a measured "
                                                                            "point takes a step at least).")


class RequestPointLine(PointLine):
    point: RequestPointBody


class EngineModels(BaseModel):
    """The models an engine process ran (HF config fields), where its line recorded them."""

    model_config = ConfigDict(extra="allow")
    target: dict | None = None
    draft: dict | None = None


class EngineInfo(BaseModel):
    """The engine settings an engine line records (`info`), as the profile build reads them; keys beyond these pass."""

    model_config = ConfigDict(extra="allow")
    engine: CalibratedEngine | None = None
    engine_version: str | None = Field(None, max_length=200)
    attention_backend: str | None = Field(None, max_length=200)
    cudagraph_mode: str | None = Field(None, max_length=200)
    model_runner: str | None = Field(None, max_length=400)
    gpu_name: str | None = Field(None, max_length=200)
    torch_version: str | None = Field(None, max_length=200)
    cuda_version: str | None = Field(None, max_length=200)
    async_scheduling: bool | None = None
    enable_prefix_caching: bool | None = None
    cudagraph_capture_sizes: list[Annotated[int, Field(ge=1, le=1 << 24)]] | None = Field(None, max_length=4096)
    hooks: list[str] | None = None
    notes: list[str] | None = None
    tp_size: int | None = Field(None, ge=1, le=1024)
    draft_tp_size: int | None = Field(None, ge=1, le=1024)
    variant: dict | None = None
    model: EngineModels | None = None


class EngineLine(_Line):
    kind: Literal["engine"]
    session: Literal["calibrate", "live"]
    num_steps: int = Field(ge=0, le=64)
    tensor_parallel_size: int = Field(1, ge=1, le=8, description="GPUs of the target's TP group, 1..8 (one host; "
                                                                 "calibration.engines.plans.ProcessPlan's bound).")
    draft_tensor_parallel_size_asked: int | None = Field(None, ge=1, le=8, description="1 or tensor_parallel_size.")
    info: dict
    startup_s: float = Field(ge=0.0, le=1e7, allow_inf_nan=False)
    created_unix: float = Field(ge=0.0, le=1e11, allow_inf_nan=False)


    @field_validator("info")
    @classmethod
    def _engine_settings_are_counts(cls, info: dict) -> dict:
        try:
            EngineInfo.model_validate(info, strict=True)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            raise ValueError(f"{where}: {first['msg']} (got {first.get('input')!r:.60})") from None
        for key, hi in (("max_num_batched_tokens", 1 << 24), ("max_num_seqs", 1 << 20)):
            v = info.get(key)
            if v is not None and (type(v) is not int or not 0 <= v <= hi):
                raise ValueError(f"info.{key} {v!r}: a whole number 0..{hi} (0: not read from the engine)")
        return info

    @model_validator(mode="after")
    def _draft_tp_is_one_or_the_group(self) -> Self:
        dtp, tp = self.draft_tensor_parallel_size_asked, self.tensor_parallel_size
        if dtp is not None and dtp not in (1, tp):
            raise ValueError(f"draft_tensor_parallel_size_asked {dtp}: 1 or tensor_parallel_size ({tp})")
        return self


class ErrorLine(_Line):
    kind: Literal["error"]
    key: str
    error: str
    trace: str = ""


LINE_MODELS = {"point": PointLine, "engine": EngineLine, "error": ErrorLine}


def line_model(rec: dict) -> type[_Line]:
    """The schema of a line: a point line whose point names a workload other than 'steady' is a
    request-level one (calibration.engines.requests_loop)."""
    point = rec.get("point")
    if rec.get("kind") == "point" and isinstance(point, dict) and point.get("workload", "steady") != "steady":
        return RequestPointLine
    return LINE_MODELS[rec["kind"]]


def is_request_point(rec: dict) -> bool:
    """A validated point line of a request-level run (not a steady window)."""
    return rec.get("kind") == "point" and "workload" in rec.get("point", {})


def _context_reach(point: dict) -> float:
    """The longest context a point says it ran: a steady window's mean context, or a request's prompt and tokens."""
    if "workload" in point:
        return float(point["prompt_len"] + point["max_tokens"])
    return max(r["context_len"] for r in point["repeats"])


def _most_emitting(point: dict) -> int:
    """The most requests one step of a request-level point emitted to (0 for a steady window)."""
    return max((st["emitted"] for r in point["repeats"] for st in r.get("steps", [])), default=0)


def read_points_file(path: Path, notes: list[str] | None = None) -> list[dict]:
    """Every line of a points file (plain or .gz), validated; a torn line is skipped (said in `notes`).

    Raises:
        UserInputError: `file:line: ...` for a line that is not one of the schemas above, a point
            whose num_steps is not its process's, or a point twice.
    """
    lines = read_raw_text(Path(path)).split("\n")
    torn = lines[-1] != ""
    out: list[dict] = []
    proc: dict[str, tuple[dict, int | None]] = {}  # label: its engine line, its target max_position_embeddings
    seen: set[tuple[str, str]] = set()
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:  # the project's JSON reader: no key twice, finite numbers, bounded depth (simulator.inputs)
            rec = load_json_line(line, f"{path}:{i}")
        except UserInputError as e:
            if is_cut(line, torn and i == len(lines)):
                if notes is not None:
                    notes.append(f"{path}:{i}: a torn {'last line' if i == len(lines) else 'line'} "
                                 "(a process ended while writing it) skipped")
                continue
            why = str(e)[len(f"{path}:{i}: "):]
            raise UserInputError(f"{path}:{i}: not a JSON line of an engine points file ({why})") from None
        kind = rec.get("kind") if isinstance(rec, dict) else None
        if not isinstance(rec, dict) or rec.get("schema") != POINTS_SCHEMA or kind not in LINE_MODELS:
            raise UserInputError(f"{path}:{i}: not an engine points line (schema {POINTS_SCHEMA!r}, kind "
                                 f"{', '.join(LINE_MODELS)})")
        try:
            # the validated line, its defaults filled in (a repeat without `means`, say), is what is kept
            rec = line_model(rec).model_validate(rec, strict=True).model_dump(by_alias=True)
        except ValidationError as e:
            raise UserInputError(format_validation_error(f"{path}:{i}", e)) from None
        if kind == "engine":
            if not rec["info"].get("engine"):
                raise UserInputError(f"{path}:{i}: info.engine missing: an engine line names the engine the process ran "
                                     "(vllm, sglang, fake)")
            target = (rec["info"].get("model") or {}).get("target") or {}
            if (mp := target.get("max_position_embeddings")) is not None and (type(mp) is not int or not 1 <= mp <= 2**27):
                raise UserInputError(f"{path}:{i}: info.model.target.max_position_embeddings {mp!r}: a whole number "
                                     f"1..{2**27} (the target's longest context)")
            proc[rec["label"]] = (rec, mp)
        elif kind == "point":
            if (ran := proc.get(rec["label"])) is None:
                raise UserInputError(f"{path}:{i}: a point of process {rec['label']} before any engine line of it (a "
                                     "points file opens each process with its engine line: engine, settings, model)")
            eng, mp = ran
            if rec["session"] != eng["session"]:
                raise UserInputError(f"{path}:{i}: session {rec['session']!r} in process {rec['label']}, whose engine "
                                     f"line says session {eng['session']!r}")
            if (seqs := eng["info"].get("max_num_seqs") or 0) and (most := _most_emitting(rec["point"])) > seqs:
                raise UserInputError(f"{path}:{i}: a step of point {rec['point']['key']} emitted to {most} requests, past "
                                     f"its process's info.max_num_seqs {seqs} (the requests one step decodes at most)")
            if mp is not None and (reach := _context_reach(rec["point"])) > mp:
                raise UserInputError(f"{path}:{i}: a context of {reach:.6g} tokens in point {rec['point']['key']}, past "
                                     f"its process's target max_position_embeddings {mp}")
            if eng["info"]["engine"] != rec["engine"]:
                raise UserInputError(f"{path}:{i}: engine {rec['engine']!r} in process {rec['label']}, whose engine "
                                     f"line says info.engine {eng['info']['engine']!r}")
            k, key = rec["point"]["num_steps"], (rec["label"], rec["point"]["key"])
            if eng["num_steps"] != k:
                raise UserInputError(f"{path}:{i}: point.num_steps {k} in process {rec['label']}, which ran "
                                     f"num_steps {eng['num_steps']}")
            if key in seen:
                raise UserInputError(f"{path}:{i}: point {key[1]} of {key[0]} is in the file twice")
            seen.add(key)
        out.append(rec)
    return out


def read_points_files(paths: list[Path], notes: list[str] | None = None) -> list[dict]:
    """The lines of several points files (each file once), of one engine, no point twice.

    Raises:
        UserInputError: as read_points_file; points of more than one engine; a point in two files.
    """
    out: list[dict] = []
    seen: dict[tuple[str, str], Path] = {}
    resolved = list({Path(p).resolve(): Path(p) for p in paths}.values())
    for p in resolved:
        for rec in read_points_file(p, notes):
            if rec["kind"] == "point":
                key = (rec["label"], rec["point"]["key"])
                if key in seen:
                    raise UserInputError(f"{p}: point {key[1]} of {key[0]} is also in {seen[key]}")
                seen[key] = p
            out.append(rec)
    engines = sorted({r["engine"] for r in out if r["kind"] == "point"})
    if len(engines) > 1:
        raise UserInputError(f"{', '.join(map(str, resolved))}: points of more than one engine ({', '.join(engines)}); "
                             "a profile describes one")
    return out
