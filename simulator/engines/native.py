"""Engine-native profiles: a serving engine's own cycle parts, measured inside that engine.

`specdecsim calibrate engine` (calibration/engines/) starts the engine a user deploys (vLLM)
with dummy weights and forced acceptance and times, per engine step, with CUDA events around
the model runner's phases and the host's wait on the GPU:

- `target_forward_us`: the target's forward, a decode (baseline) or a verify over num_steps + 1
  tokens per request (padded to the engine's CUDA-graph capture size);
- `sample_us`: logits and (rejection) sampling;
- `draft_extend_us`: the draft's first forward, over every verified token (vLLM's padded draft
  prefill, which proposes draft token 1); `draft_steps_us`: the other num_steps - 1 draft forwards;
  `propose_us`: the whole draft phase (the two above plus its small eager kernels);
- `other_gpu_us`: the rest of the GPU's step (input preparation, bookkeeping), the step's GPU
  period less the parts above, where the step was GPU-bound;
- `host_busy_us`: the host's work per step, the step's wall period less the time the host waited
  on the GPU's output (vLLM's scheduler runs a step ahead, so a step takes the longer of the two).

An `EngineProfile` holds every measured point and a fitted form per part. `NativeCosts` prices a
part at (batch_size, num_steps, context_len): from the measured points of that batch and
num_steps (linear in the context between them, or along the fitted slope from one), else from the
fitted form. The forms are rooflines of the engine's own points, fitted by scipy least squares
on relative errors: c0 + ((w)^4 + (f T)^4)^(1/4) + kv b C (+ q (T - b) C for a multi-token
verify), with T the padded tokens of the forward, b requests and C their context; the host and the
small GPU work are linear in b and b x num_steps.
"""

from __future__ import annotations

import bisect
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal, Self

import numpy as np
from pydantic import Field, model_validator

from simulator.inputs import read_json
from simulator.schema_base import StrictModel

ENGINE_PROFILE_OUTPUT = "engine_profile/1"
NATIVE_PARTS = ("target_forward_us", "sample_us", "draft_extend_us", "draft_steps_us", "propose_us",
                "other_gpu_us", "host_busy_us")
GPU_BOUND_BLOCKED_FRAC = 0.02  # a window whose host waited on the GPU for more than this share of it was GPU-bound
Us = Annotated[float, Field(ge=0.0, le=1e9)]


class EnginePoint(StrictModel):
    """One measured steady batch of the engine (repeats pooled), us per engine step."""

    num_steps: int = Field(ge=0, le=64, description="Draft tokens per request per step; 0: the baseline.")
    batch_size: int = Field(ge=1, le=1_000_000)
    prompt_len: int = Field(ge=1, le=2**27)
    context_len: float = Field(ge=1, le=2**27, description="Mean KV length over the timed steps.")
    acceptance_rate: float | None = Field(None, ge=0.0, le=1.0)
    step_us: float = Field(gt=0.0, le=1e9, description="Wall time per engine step, uninstrumented windows, us "
                                                       "(> 0: a measured step takes time).")
    instrumented_step_us: Us | None = Field(None, description="Wall time per step with the CUDA events on.")
    mean_accept_length: float = Field(ge=1.0, le=65.0)
    accept_length_counts: list[int] = Field(default_factory=list, max_length=65)
    target_tokens_padded: int | None = Field(None, ge=1, le=2**24)
    draft_extend_tokens_padded: int | None = Field(None, ge=1, le=2**24)
    gpu_bound: bool | None = Field(None, description="The instrumented window's host waited on the GPU.")
    gpu_parts_scale: float | None = Field(
        None, ge=0.5, le=2.0, description="Where GPU-bound: the uninstrumented step over the instrumented one, "
                                          "applied to the GPU parts (the CUDA events lengthen a step by about 1-2%; "
                                          "the event-free period is the reference the parts are scaled to).")
    target_forward_us: Us | None = None
    sample_us: Us | None = None
    propose_us: Us | None = None
    draft_extend_us: Us | None = None
    draft_steps_us: Us | None = None
    gpu_period_us: Us | None = None
    other_gpu_us: Us | None = None
    host_busy_us: Us | None = None
    host_pace_us: Us | None = Field(
        None, description="Where the host's own work was not measured (vLLM's model runner V1 waits for the GPU "
                          "inside a speculative step, where no hook times it): the step, the pace the host kept at "
                          "most. It prices the host at this point's batch and num_steps, averaged with the other "
                          "processes' measurements there, and is left out of the host's fitted form.")
    host_blocked_us: Us | None = None


FIT_PARAMS = {  # the parameters each fitted form holds (module docstring), each 0..1e7 (us or us per token)
    "roofline": {"weights_us", "per_token_us", "kv_us_per_token", "multi_query_us_per_token", "decode_us",
                 "verify_us", "extend_us", "step_us", "base_us", "spec_us"},
    "linear": {"c0_us", "per_request_us", "per_draft_token_us"}}
REQUIRED_FITS = ("target_forward_us", "sample_us", "host_busy_us_baseline")  # every profile prices a baseline
SPECULATIVE_FITS = ("draft_us", "propose_overhead_us", "other_gpu_us", "host_busy_us")
FitParam = Annotated[float, Field(ge=0.0, le=1e7)]
MIN_FORWARD_US = 1.0  # the target forward's fitted form holds at least one parameter this large (a GPU forward)


def missing_fits(points, fits) -> list[str]:
    """The parts a profile of these points prices (a speculative one: the draft's too) and has no form for."""
    need = (*REQUIRED_FITS, *(SPECULATIVE_FITS if any(p.num_steps for p in points) else ()))
    return [f for f in need if f not in fits]


class PartFit(StrictModel):
    """A fitted form of one part (module docstring): its parameters and how well it fits."""

    form: Literal["roofline", "linear"]
    params: dict[str, FitParam] = Field(min_length=1, max_length=16, description="Parameters, 0..1e7 each.")
    num_points: int = Field(ge=0, le=1_000_000)
    median_abs_error_frac: float | None = Field(None, ge=0.0, le=1e6)
    max_abs_error_frac: float | None = Field(None, ge=0.0, le=1e6)

    @model_validator(mode="after")
    def _known_params(self) -> Self:
        if unknown := sorted(set(self.params) - FIT_PARAMS[self.form]):
            raise ValueError(f"a {self.form} fit has no parameters {unknown}; it holds "
                             f"{', '.join(sorted(FIT_PARAMS[self.form]))}")
        return self


class EngineProfile(StrictModel):
    """An engine's cycle parts measured inside it (module docstring), for one target and draft on one GPU."""

    specdecsim_output: Literal["engine_profile/1"] = ENGINE_PROFILE_OUTPUT
    name: str = Field(min_length=1, max_length=200)
    engine: Literal["vllm", "sglang", "fake"]
    engine_version: str = Field(max_length=200)
    attention_backend: str = ""
    cudagraph_mode: str = ""
    model_runner: str = ""
    async_scheduling: bool = True
    gpu_name: str = ""
    catalog_gpu: str | None = None
    torch_version: str = ""
    cuda_version: str = ""
    method: str = "eagle3"
    target: dict = Field(description="The target's ModelShape fields.")
    draft: dict | None = Field(None, description="The draft's ModelShape fields.")
    tp_size: int = Field(1, ge=1, le=1024, description="The target's TP group the engine ran.")
    draft_tp_size: int | None = Field(None, ge=1, le=1024, description=(
        "The draft's TP as the engine built it (read from its layers; None: the target's group)."))
    topk: int = Field(1, ge=1, le=16, description="Draft branches per step the engine ran (SGLang's "
                                                  "speculative_eagle_topk); 1 is a chain.")
    num_draft_tokens: int | None = Field(None, ge=2, le=256, description="Tokens verified per request (SGLang's "
                                                                         "speculative_num_draft_tokens); None: "
                                                                         "num_steps + 1 (a chain).")
    collectives_measured: bool = Field(True, description="The TP group's collectives are in the measured parts. "
                                                         "False for one rank's shard measured alone on one GPU "
                                                         "(calibration/engines/shard.py): the simulator adds them "
                                                         "from the box's links.")
    max_num_seqs: int = Field(0, ge=0)
    cudagraph_capture_sizes: list[int] = Field(default_factory=list, max_length=4096)
    how_measured: str = ""
    created_utc: str | None = None
    command_line: str | None = None
    git_commit: str | None = None
    notes: list[str] = Field(default_factory=list)
    points: list[EnginePoint] = Field(min_length=1, max_length=100_000)
    fits: dict[str, PartFit] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> Self:
        sizes = self.cudagraph_capture_sizes
        if any(n < 1 for n in sizes) or any(b <= a for a, b in zip(sizes, sizes[1:])):
            raise ValueError("cudagraph_capture_sizes must be positive and strictly increasing")
        seen: dict[str, int] = {}
        for i, pt in enumerate(self.points):  # the same measurement twice would weigh it twice in every fit
            if (j := seen.setdefault(pt.model_dump_json(), i)) != i:
                raise ValueError(f"points[{i}] is points[{j}] again (every field the same): a measured point is "
                                 "in a profile once")
        if missing := missing_fits(self.points, self.fits):
            raise ValueError(f"fits lacks {', '.join(missing)}: every part needs its fitted form to price a batch, "
                             "num_steps or context the points do not hold (`specdecsim calibrate engine "
                             "--from-points` rebuilds them)")
        for name, fit in self.fits.items():
            if name in ("target_forward_us", "draft_us", "sample_us") and fit.form != "roofline" or \
                    name not in ("target_forward_us", "draft_us", "sample_us") and fit.form != "linear":
                raise ValueError(f"fits.{name}: form {fit.form!r} is not this part's")
        fwd = self.fits.get("target_forward_us")
        if fwd is not None and max(fwd.params.values()) < MIN_FORWARD_US:
            raise ValueError(f"fits.target_forward_us: every parameter is below {MIN_FORWARD_US:g} us (largest "
                             f"{max(fwd.params.values()):.3g}): a target forward priced at nothing would make the "
                             "step take no time; at least one parameter must be 1..1e7 us")
        return self

    def full_graph_verify(self, batch_size: int, num_steps: int) -> bool:
        """Whether the engine replays a full CUDA graph for this verify (`full_graph_verify`)."""
        return full_graph_verify(batch_size, num_steps, self.cudagraph_capture_sizes, self.max_num_seqs)

    def padded_tokens(self, tokens: int, batch_size: int | None = None) -> int:
        """Tokens the engine runs a forward of `tokens` (over `batch_size` requests) at: vLLM pads the
        token count to the next CUDA-graph capture size; SGLang captures by batch size (its
        cuda_graph_bs, what its profiles record as capture sizes) and pads the batch."""
        sizes = self.cudagraph_capture_sizes
        if self.engine == "sglang" and batch_size:
            i = bisect.bisect_left(sizes, batch_size)
            return (sizes[i] if i < len(sizes) else int(batch_size)) * (int(tokens) // int(batch_size))
        i = bisect.bisect_left(sizes, tokens)
        return sizes[i] if i < len(sizes) else int(tokens)


def full_graph_verify(batch_size: int, num_steps: int, capture_sizes: list[int], max_num_seqs: int = 0) -> bool:
    """Whether vLLM's model runner V2 replays a full CUDA graph for a verify of `batch_size`
    requests of `num_steps + 1` tokens each (vllm/v1/worker/gpu/cudagraph_utils.py): it captures
    piecewise graphs at every capture size and uniform-decode full graphs at each size rounded up
    to the query length, and a batch of n tokens runs at the smallest captured token count >= n;
    a full graph only where that count is a rounded one (padded requests included, at most
    max_num_seqs); elsewhere piecewise graphs, host-bound. True where there are no capture sizes
    (nothing to say) or the query is one token."""
    q, sizes = num_steps + 1, sorted(capture_sizes)
    if not sizes or q == 1:
        return True
    n = batch_size * q
    rounded = {-(-s // q) * q for s in sizes if -(-s // q) * q <= sizes[-1]}
    above = [c for c in sorted(set(sizes) | rounded) if c >= n]
    return bool(above) and above[0] in rounded and (not max_num_seqs or above[0] // q <= max_num_seqs)


# ---- the fitted forms ------------------------------------------------------------------------
FORWARD_PARTS = {  # part -> (joint family, offset parameter name)
    "target_forward_us": "target", "draft_extend_us": "draft", "draft_step_us": "draft", "sample_us": "sample"}


def _roofline(p: dict, tokens, batch, context, offset: str, multi_token: bool = True):
    t = np.asarray(tokens, float)
    b = np.asarray(batch, float)
    c = np.asarray(context, float)
    mem, comp = p["weights_us"], p["per_token_us"] * t
    out = p[offset] + (mem ** 4 + comp ** 4) ** 0.25 + p.get("kv_us_per_token", 0.0) * b * c
    if multi_token:
        out = out + p.get("multi_query_us_per_token", 0.0) * np.maximum(t - b, 0.0) * c
    return out


# ---- pricing ---------------------------------------------------------------------------------
class NativeCosts:
    """The parts of one engine step at (batch_size, num_steps, context_len), us (module docstring)."""

    def __init__(self, profile: EngineProfile):
        self.profile = profile
        self.sources: set[str] = set()  # 'measured' / 'fitted' per part priced, for the notes

    def _usable(self, p: EnginePoint, value_of, gpu: bool) -> bool:
        return value_of(p) is not None and not (gpu and p.gpu_bound is False)

    def _measured(self, value_of, batch_size: int, num_steps: int, context_len: float,
                  gpu: bool = True) -> float | None:
        pts = [p for p in self.profile.points
               if p.batch_size == batch_size and p.num_steps == num_steps and self._usable(p, value_of, gpu)]
        if not pts:
            return None
        by_prompt: dict[int, list[EnginePoint]] = {}
        for p in pts:
            by_prompt.setdefault(p.prompt_len, []).append(p)
        groups = sorted((float(np.mean([p.context_len for p in g])), float(np.mean([value_of(p) for p in g])))
                        for g in by_prompt.values())
        cs, vs = [c for c, _ in groups], [v for _, v in groups]
        if len(cs) == 1:
            return vs[0]
        i = min(max(bisect.bisect_left(cs, context_len), 1), len(cs) - 1)  # extrapolate along the end segment
        c0, c1, v0, v1 = cs[i - 1], cs[i], vs[i - 1], vs[i]
        return max(0.0, v0 + (v1 - v0) * (context_len - c0) / (c1 - c0))

    def _price(self, label: str, value_of, fitted, batch_size: int, num_steps: int, context_len: float,
               gpu: bool = True) -> float:
        """A part from the measured points of this batch and num_steps (GPU parts: GPU-bound points
        only), else from its fitted form."""
        m = self._measured(value_of, batch_size, num_steps, context_len, gpu)
        if m is not None:
            pts = [p for p in self.profile.points if p.batch_size == batch_size and p.num_steps == num_steps
                   and self._usable(p, value_of, gpu)]
            if len({p.prompt_len for p in pts}) == 1 and fitted is not None:
                c0 = float(np.mean([p.context_len for p in pts]))
                m += fitted(context_len) - fitted(c0)  # the fitted form's context slope
            self.sources.add(f"{label}: measured")
            return max(0.0, m)
        if fitted is None:
            raise KeyError(f"engine profile {self.profile.name!r} has no {label} measurement or fit")
        self.sources.add(f"{label}: fitted")
        return max(0.0, float(fitted(context_len)))

    def _roof(self, fit_name: str, offset: str, tokens: int, batch_size: int, multi: bool = True):
        fit = self.profile.fits.get(fit_name)
        if fit is None or offset not in fit.params:
            return None
        t = self.profile.padded_tokens(tokens, batch_size)
        return lambda c: float(_roofline(fit.params, t, batch_size, c, offset, multi_token=multi))

    def _lin(self, fit_name: str, batch_size: int, num_steps: int):
        fit = self.profile.fits.get(fit_name)
        if fit is None:
            return None
        p = fit.params
        v = p.get("c0_us", 0.0) + p.get("per_request_us", 0.0) * batch_size \
            + p.get("per_draft_token_us", 0.0) * batch_size * num_steps
        return lambda c: v

    def verify_tokens(self, num_steps: int) -> int:
        """Tokens per request the target's forward runs at num_steps (1 for the baseline decode)."""
        if num_steps == 0:
            return 1
        return self.profile.num_draft_tokens if self.profile.topk > 1 and self.profile.num_draft_tokens \
            else num_steps + 1

    def target_forward_us(self, batch_size: int, num_steps: int, context_len: float) -> float:
        off = "decode_us" if num_steps == 0 else "verify_us"
        return self._price("target forward", lambda p: p.target_forward_us,
                           self._roof("target_forward_us", off, batch_size * self.verify_tokens(num_steps),
                                      batch_size),
                           batch_size, num_steps, context_len)

    def sample_us(self, batch_size: int, num_steps: int, context_len: float) -> float:
        off = "base_us" if num_steps == 0 else "spec_us"
        return self._price("sampling", lambda p: p.sample_us,
                           self._roof("sample_us", off, batch_size * (num_steps + 1), batch_size, multi=False),
                           batch_size, num_steps, 0.0)

    def draft_extend_us(self, batch_size: int, num_steps: int, context_len: float) -> float:
        return self._price("draft extend", lambda p: p.draft_extend_us,
                           self._roof("draft_us", "extend_us", batch_size * (num_steps + 1), batch_size, multi=False),
                           batch_size, num_steps, context_len)

    def draft_step_us(self, batch_size: int, num_steps: int, context_len: float) -> float:
        """One draft forward after the first (num_steps >= 2)."""
        return self._price("draft step", lambda p: p.draft_steps_us / (p.num_steps - 1) if p.draft_steps_us
                           and p.num_steps >= 2 else None,
                           self._roof("draft_us", "step_us", batch_size * self.profile.topk, batch_size,
                                      multi=False),
                           batch_size, num_steps, context_len)

    def propose_overhead_us(self, batch_size: int, num_steps: int, context_len: float) -> float:
        """The draft phase's own small kernels (hidden-state fc, input preparation)."""
        def rest(p):
            if p.propose_us is None:
                return None
            return max(0.0, p.propose_us - (p.draft_extend_us or 0.0) - (p.draft_steps_us or 0.0))
        return self._price("draft overhead", rest, self._lin("propose_overhead_us", batch_size, num_steps),
                           batch_size, num_steps, context_len)

    def other_gpu_us(self, batch_size: int, num_steps: int, context_len: float) -> float:
        """The GPU's step less its timed parts; none where no GPU-bound point measured it (a
        host-bound engine's GPU period holds its idle gaps, not work)."""
        name = "other_gpu_us" if num_steps else "other_gpu_us_baseline"
        fitted = self._lin(name, batch_size, num_steps)
        if fitted is None and self._measured(lambda p: p.other_gpu_us if p.gpu_bound else None, batch_size, num_steps,
                                             context_len) is None:
            self.sources.add("other GPU work: none (no GPU-bound point measured it)")
            return 0.0
        return self._price("other GPU work", lambda p: p.other_gpu_us if p.gpu_bound else None,
                           fitted, batch_size, num_steps, context_len)

    def host_us(self, batch_size: int, num_steps: int, context_len: float) -> float:
        name = "host_busy_us" if num_steps else "host_busy_us_baseline"
        return self._price("host work", lambda p: p.host_busy_us if p.host_busy_us is not None else p.host_pace_us,
                           self._lin(name, batch_size, num_steps),
                           batch_size, num_steps, context_len, gpu=False)

    def step_us(self, batch_size: int, num_steps: int, context_len: float) -> tuple[float, float]:
        """(GPU, host) us of one engine step: the cycle (or decode step) takes the longer."""
        gpu = self.target_forward_us(batch_size, num_steps, context_len) \
            + self.sample_us(batch_size, num_steps, context_len) + self.other_gpu_us(batch_size, num_steps, context_len)
        if num_steps:
            gpu += self.draft_extend_us(batch_size, num_steps, context_len) \
                + self.propose_overhead_us(batch_size, num_steps, context_len)
            if num_steps >= 2:
                gpu += (num_steps - 1) * self.draft_step_us(batch_size, num_steps, context_len)
        return gpu, self.host_us(batch_size, num_steps, context_len)


ENGINE_PROFILES_DIR = "engine_profiles"


def resolve_engine_profile(ref: str, base_dir: Path | None = None) -> Path:
    """A shipped engine profile's name (`data/engine_profiles/<name>.json`) or a path.

    Raises:
        FileNotFoundError: naming the reference and the shipped names.
    """
    from simulator.profile import data_dir

    shipped = data_dir() / ENGINE_PROFILES_DIR
    if "/" not in ref and not ref.endswith(".json"):
        p = shipped / f"{ref}.json"
        if p.is_file():
            return p
    else:
        for c in ([Path(ref)] if Path(ref).is_absolute() else ([base_dir / ref] if base_dir else []) + [Path(ref)]):
            if c.is_file():
                return c
            if c.exists():
                from simulator.inputs import UserInputError
                raise UserInputError(f"engine profile {ref!r}: {c} is {'a folder' if c.is_dir() else 'not a regular file'}")
    names = sorted(x.stem for x in shipped.glob("*.json")) if shipped.is_dir() else []
    raise FileNotFoundError(f"engine profile {ref!r} not found; shipped engine profiles: {', '.join(names) or 'none'}")


@lru_cache(maxsize=32)
def _load(path: str, mtime_ns: int) -> EngineProfile:
    from pydantic import ValidationError

    from simulator.inputs import UserInputError, format_validation_error
    try:
        prof = EngineProfile.model_validate(read_json(Path(path), "engine profile JSON"), strict=False)
    except ValidationError as e:
        raise UserInputError(format_validation_error(path, e)) from None
    check_catalog_gpu(prof, path)
    return prof


def load_engine_profile(ref: str | Path, base_dir: Path | None = None) -> EngineProfile:
    """Read and validate an engine profile (cached per file and modification time).

    Raises:
        FileNotFoundError, UserInputError, pydantic.ValidationError.
    """
    p = resolve_engine_profile(str(ref), base_dir)
    if not p.is_file():
        from simulator.inputs import UserInputError
        raise UserInputError(f"{p}: an engine profile is a regular JSON file")
    return _load(str(p.resolve()), p.stat().st_mtime_ns)


def _same_shape(measured: dict | None, shape) -> bool:
    from simulator.model_shape import ModelShape

    if measured is None or shape is None:
        return measured is None and shape is None
    m = ModelShape.model_validate({**measured, "name": shape.name})
    return m.model_dump(exclude={"name"}) == shape.model_dump(exclude={"name"})


def profile_mismatch(profile: EngineProfile, scenario) -> str | None:
    """Why the profile cannot price this scenario as measured (None: it can)."""
    eng = scenario.serving_engine
    if profile.engine not in (eng.kind, "fake"):
        return f"it was measured on {profile.engine}, the scenario's engine is {eng.kind}"
    if not _same_shape(profile.target, scenario.target):
        return f"its target is another shape than {scenario.target.name}"
    if not _same_shape(profile.draft, scenario.draft):
        return f"its draft is another shape than {scenario.draft.name}"
    if scenario.tp_size != profile.tp_size:
        return f"it was measured at tp {profile.tp_size}, the scenario runs tp {scenario.tp_size}"
    if not any(p.num_steps for p in profile.points):
        return "it holds no speculative point (a baseline-only calibration): it prices no speculative cycle"
    ran = profile.draft_tp_size or profile.tp_size
    placement = scenario.placement
    if placement.kind.value == "dedicated":
        return ("the engines run the draft on the target's GPUs; the scenario's placement tp1_dedicated puts it on a "
                "GPU of its own")
    if scenario.spec.method != "ngram" and scenario.draft_tp_size != ran:
        return (f"its draft ran at tp {ran} (placement {placement_label(profile.tp_size, ran)}), the scenario's "
                f"placement {scenario.placement.label} runs it at tp {scenario.draft_tp_size}")
    spec = scenario.spec
    if spec.method != profile.method:
        return f"it was measured with {profile.method} drafts"
    if spec.topk != profile.topk or (profile.topk > 1 and spec.num_draft_tokens != profile.num_draft_tokens):
        shape = (f"trees of topk {profile.topk}, {profile.num_draft_tokens} draft tokens" if profile.topk > 1
                 else "chains (topk 1)")
        return f"it was measured with {shape}"
    if profile.engine != "fake" and bool(profile.async_scheduling) != bool(scenario.serving_engine.overlapped):
        return (f"it was measured with the engine's overlap scheduling {'on' if profile.async_scheduling else 'off'}, "
                f"the scenario's is {'on' if scenario.serving_engine.overlapped else 'off'}")
    gpu = getattr(scenario.hardware, "gpu", None) if getattr(scenario, "hardware", None) else None
    if gpu and profile.catalog_gpu and gpu != profile.catalog_gpu:
        return f"it was measured on {profile.catalog_gpu}, the scenario's GPU is {gpu}"
    return None


def placement_label(tp_size: int, draft_tp_size: int) -> str:
    """The scenario placement (simulator.config.Placement's label) of a draft the engine ran at
    `draft_tp_size` on the GPUs of a TP group of `tp_size`."""
    if draft_tp_size == tp_size:
        return "shared_tp"
    return "tp1_colocated" if draft_tp_size == 1 else f"tp{draft_tp_size}"


def check_catalog_gpu(profile: EngineProfile, source: str) -> None:
    """The profile's `catalog_gpu`, where given, names a GPU of the hardware catalog.

    Raises:
        UserInputError: naming the source and the ids the catalog holds.
    """
    if not profile.catalog_gpu:
        return
    from simulator.hardware import default_catalog
    from simulator.inputs import UserInputError
    gpus = default_catalog().gpus
    if profile.catalog_gpu not in gpus:
        raise UserInputError(f"{source}: catalog_gpu {profile.catalog_gpu!r} is not in the hardware catalog "
                             f"({', '.join(sorted(gpus))})")


def outside_measured(profile: EngineProfile, batch_size: int, num_steps: int, context_len: float) -> list[str]:
    """Where a point lies outside what the profile measured (its fitted forms price it), in words."""
    pts = profile.points
    out = []
    ks = sorted({p.num_steps for p in pts if p.num_steps})
    bs = sorted({p.batch_size for p in pts})
    cs = [p.context_len for p in pts]
    if num_steps not in ks:
        out.append(f"num_steps {num_steps} was not measured ({', '.join(map(str, ks))} were): fitted forms" if ks else
                   f"num_steps {num_steps}: no speculative point of the profile holds (at these CUDA-graph capture "
                   "sizes): fitted forms")
    if batch_size not in bs:
        out.append(f"batch {batch_size} was not measured ({', '.join(map(str, bs))} were): fitted forms"
                   + (" beyond the largest" if batch_size > bs[-1] else ""))
    if profile.max_num_seqs and batch_size > profile.max_num_seqs:
        out.append(f"batch {batch_size} is above the max_num_seqs {profile.max_num_seqs} the engine ran with")
    sizes = profile.cudagraph_capture_sizes
    if sizes and profile.engine == "sglang" and batch_size > sizes[-1]:
        out.append(f"batch {batch_size} is above the largest CUDA-graph batch size {sizes[-1]}: the engine runs it "
                   "without graphs, the fitted forms price it as if with")
    elif sizes and profile.engine != "sglang" and batch_size * (num_steps + 1) > sizes[-1]:
        out.append(f"a verify of {batch_size * (num_steps + 1)} tokens is above the largest CUDA-graph capture size "
                   f"{sizes[-1]}: the engine runs it without graphs, the fitted forms price it as if with")
    lo, hi = min(cs), max(cs)
    if not lo * 0.9 <= context_len <= hi * 1.1:
        out.append(f"context {context_len:,} is outside the measured {lo:,.0f}-{hi:,.0f}: fitted forms extrapolate")
    return out


def rounded_to_query(sizes: list[int], num_steps: int) -> list[int]:
    """Each capture size rounded up to a multiple of the verify's query length num_steps + 1, within the
    largest (vLLM's model runner V1 does this to its list for speculative decoding)."""
    q = num_steps + 1
    return sorted({-(-s // q) * q for s in sizes if -(-s // q) * q <= max(sizes)}) if sizes else []


def _sizes_text(sizes: list[int]) -> str:
    return ", ".join(map(str, sizes[:6])) + (f", ... {sizes[-1]}" if len(sizes) > 6 else "")


def capture_sizes_for(profile: EngineProfile, sizes: list[int] | str, num_steps: int) -> list[int]:
    """The capture sizes a scenario's `cudagraph_capture_sizes` names at num_steps ('rounded_to_query':
    the profile's own list rounded, `rounded_to_query`)."""
    return rounded_to_query(profile.cudagraph_capture_sizes, num_steps) if sizes == "rounded_to_query" else list(sizes)


def with_capture_sizes(profile: EngineProfile, sizes: list[int] | str, num_steps: int) -> EngineProfile:
    """The profile as it prices an engine run with other CUDA-graph capture sizes (`capture_sizes_for`):
    its speculative points whose verify the new list pads to another token count, or replays as another
    kind of graph (`full_graph_verify`), are left out; the fitted forms price those."""
    new_sizes, old_sizes = capture_sizes_for(profile, sizes, num_steps), profile.cudagraph_capture_sizes
    new = profile.model_copy(update={"cudagraph_capture_sizes": new_sizes})

    def same(p: EnginePoint) -> bool:
        if not p.num_steps:  # the baseline: an engine of its own, run with its own list
            return True
        n = p.batch_size * (p.num_steps + 1)
        return profile.padded_tokens(n, p.batch_size) == new.padded_tokens(n, p.batch_size) and \
            full_graph_verify(p.batch_size, p.num_steps, old_sizes, profile.max_num_seqs) == \
            full_graph_verify(p.batch_size, p.num_steps, new_sizes, profile.max_num_seqs)
    return new.model_copy(update={"points": [p for p in profile.points if same(p)]})


def native_costs(scenario, notes: set[str]) -> NativeCosts | None:
    """NativeCosts of the scenario's engine profile (`serving_engine.engine_profile`) where it prices
    this scenario as measured; None (with a note saying why) where it does not or none is given.

    Raises:
        FileNotFoundError: the profile named does not exist.
    """
    ref = getattr(scenario.serving_engine, "engine_profile", None)
    if not ref:
        return None
    profile = load_engine_profile(ref)
    if why := profile_mismatch(profile, scenario):
        notes.add(f"{scenario.serving_engine.kind}: engine profile {profile.name} not used ({why}): priced by the "
                  "engine model from the profile's op tables")
        return None
    b, k, c = scenario.workload.batch_size, scenario.spec.num_steps, scenario.workload.context_len
    sizes = getattr(scenario.serving_engine, "cudagraph_capture_sizes", None)
    if sizes is not None and profile.engine == "vllm":
        profile = with_capture_sizes(profile, sizes, k)
        notes.add(f"vllm: CUDA-graph capture sizes {_sizes_text(profile.cudagraph_capture_sizes)} (the scenario's"
                  f"{', rounded_to_query' if sizes == 'rounded_to_query' else ''}; the profile was measured with its "
                  "own list): the profile's points whose verify these pad to another token count are not used, "
                  "its fitted forms price those")
    for why in outside_measured(profile, b, k, c):
        notes.add(f"{scenario.serving_engine.kind}: engine profile {profile.name}: {why}")
    sizes_now = profile.cudagraph_capture_sizes
    if profile.engine == "vllm" and not profile.full_graph_verify(b, k) and (not sizes_now or b * (k + 1) <= sizes_now[-1]):
        notes.add(f"vllm: at batch {b} with num_steps {k} the verify ({b * (k + 1)} tokens) gets no full CUDA "
                  "graph (the smallest size vLLM captures at or above it is a piecewise one): it runs piecewise "
                  "and host-bound, and its step time varied about 2x from process to process where measured "
                  "(docs/engines/vllm.md)")
    graphs = profile.cudagraph_mode if "graph" in profile.cudagraph_mode else f"{profile.cudagraph_mode or '?'} graphs"
    notes.add(f"{scenario.serving_engine.kind}: priced from the engine-native profile {profile.name} "
              f"({profile.engine} {profile.engine_version}, {profile.attention_backend or '?'} attention, "
              f"{graphs}, {profile.gpu_name or '?'}; {len(profile.points)} measured points, fitted forms between them)")
    return NativeCosts(profile)
