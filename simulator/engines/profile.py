"""Engine-native profiles: a serving engine's own cycle parts, measured inside that engine (the
schema, its fitted forms, reading a profile, and the engine's CUDA-graph capture sizes).

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

An `EngineProfile` holds every measured point and a fitted form per part. The forms are rooflines
of the engine's own points, fitted by scipy least squares on relative errors
(simulator.evidence.engine_profile_fit): c0 + ((w)^4 + (f T)^4)^(1/4) + kv b C (+ q (T - b) C for a
multi-token verify), with T the padded tokens of the forward, b requests and C their context
(`roofline`, simulator.engines.forms; an MoE target's weights term grows with the experts its tokens
touch); the host and the small GPU work are linear in b and b x num_steps. The prices of a
scenario from a profile are simulator.costs.engine_native's.
"""

from __future__ import annotations

import bisect
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal, Self

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from simulator.engines.fields import CalibratedEngine, TopK
from simulator.engines.forms import ROOFLINE_OFFSETS, SPEC_OFFSETS, check_fits, roofline  # noqa: F401
from simulator.engines.prefill import PrefillFit, check_prefill, chunk_token_pairs, prefill_chunk_tokens  # noqa: F401
from simulator.inputs import read_json
from simulator.schema_base import StrictModel

ENGINE_PROFILE_OUTPUT = "engine_profile/1"
NATIVE_PARTS = ("target_forward_us", "sample_us", "draft_extend_us", "draft_steps_us", "propose_us",
                "other_gpu_us", "host_busy_us")
GPU_BOUND_BLOCKED_FRAC = 0.02  # a window whose host waited on the GPU for more than this share of it was GPU-bound
Us = Annotated[float, Field(ge=0.0, le=1e9)]
PART_OVER_STEP = 1.1  # a point's part is at most this times its step's wall time (every shipped point's: at most 1.0x)
MIN_PART_US = 1.0  # a step, a forward, the sampler or the host's work per step takes at least this (a launch alone does)
PartUs = Annotated[float, Field(ge=MIN_PART_US, le=1e9, description="1..1e9 us: a GPU forward or a host step "
                                                                    "takes at least a kernel launch.")]


class EnginePoint(StrictModel):
    """One measured steady batch of the engine (repeats pooled), us per engine step."""

    num_steps: int = Field(ge=0, le=64, description="Draft tokens per request per step; 0: the baseline.")
    batch_size: int = Field(ge=1, le=1_000_000)
    prompt_len: int = Field(ge=1, le=2**27)
    context_len: float = Field(ge=1, le=2**27, description="Mean KV length over the timed steps.")
    acceptance_rate: float | None = Field(None, ge=0.0, le=1.0)
    step_us: float = Field(ge=MIN_PART_US, le=1e9, description="Wall time per engine step, uninstrumented windows, "
                                                               "us (1..1e9: a measured step takes time).")
    instrumented_step_us: PartUs | None = Field(None, description="Wall time per step with the CUDA events on.")
    mean_accept_length: float = Field(ge=1.0, le=65.0)
    accept_length_counts: list[Annotated[int, Field(ge=0)]] = Field(
        default_factory=list, max_length=65, description="Verify steps that accepted 1, 2, ... num_steps + 1 tokens "
                                                         "(each >= 0; empty: not counted).")
    target_tokens_padded: int | None = Field(None, ge=1, le=2**24)
    draft_extend_tokens_padded: int | None = Field(None, ge=1, le=2**24)
    gpu_bound: bool | None = Field(None, description="The instrumented window's host waited on the GPU.")
    gpu_parts_scale: float | None = Field(
        None, ge=0.5, le=2.0, description="Where GPU-bound: the uninstrumented step over the instrumented one, "
                                          "applied to the GPU parts (the CUDA events lengthen a step by about 1-2%; "
                                          "the event-free period is the reference the parts are scaled to).")
    target_forward_us: PartUs | None = None
    sample_us: PartUs | None = None
    propose_us: PartUs | None = None
    draft_extend_us: PartUs | None = None
    draft_steps_us: Us | None = Field(None, description="0 where num_steps is 1 (no draft step after the extend), "
                                                        "else 1..1e9 us.")
    gpu_period_us: PartUs | None = None
    other_gpu_us: Us | None = None
    host_busy_us: PartUs | None = None
    host_pace_us: PartUs | None = Field(
        None, description="Where the host's own work was not measured (vLLM's model runner V1 waits for the GPU "
                          "inside a speculative step, where no hook times it): the step, the pace the host kept at "
                          "most. It prices the host at this point's batch and num_steps, averaged with the other "
                          "processes' measurements there, and is left out of the host's fitted form.")
    host_blocked_us: Us | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        k, counts = self.num_steps, self.accept_length_counts
        if counts and len(counts) != k + 1:
            raise ValueError(f"accept_length_counts: {len(counts)} counts, num_steps {k} accepts 1..{k + 1} tokens "
                             f"({k + 1} counts)")
        if self.mean_accept_length > k + 1 + 1e-9:
            raise ValueError(f"mean_accept_length {self.mean_accept_length:g}: at most num_steps + 1 = {k + 1}")
        if self.context_len < self.prompt_len:
            raise ValueError(f"context_len {self.context_len:g}: below prompt_len {self.prompt_len} (the KV holds the "
                             "prompt and what was decoded)")
        step = max(self.step_us, self.instrumented_step_us or 0.0)
        for name in (*NATIVE_PARTS, "gpu_period_us", "host_pace_us", "host_blocked_us"):
            if (v := getattr(self, name)) is not None and v > PART_OVER_STEP * step:
                raise ValueError(f"{name} {v:.6g}: above the step's {step:.6g} us (a part of a step is at most "
                                 f"{PART_OVER_STEP:g}x its wall time)")
        d = self.draft_steps_us
        if d is not None and (d < MIN_PART_US if self.num_steps >= 2 else d != 0.0 and d < MIN_PART_US):
            raise ValueError(f"draft_steps_us {d:.3g}: {'0 (num_steps 1 has no step after the extend) or ' if self.num_steps < 2 else ''}"
                             f"at least {MIN_PART_US:g} us (num_steps {self.num_steps})")
        return self


FIT_PARAMS = {  # the parameters each fitted form holds (module docstring), each 0..1e7 (us or us per token)
    "roofline": {"weights_us", "experts_us", "per_token_us", "kv_us_per_token", "multi_query_us_per_token", "decode_us",
                 "verify_us", "extend_us", "step_us", "base_us", "spec_us"},
    "linear": {"c0_us", "per_request_us", "per_draft_token_us"}}
REQUIRED_FITS = ("target_forward_us", "sample_us", "host_busy_us_baseline")  # every profile prices a baseline
SPECULATIVE_FITS = ("draft_us", "propose_overhead_us", "other_gpu_us", "host_busy_us")
FitParam = Annotated[float, Field(ge=0.0, le=1e7)]
MIN_FORWARD_US = 1.0  # a forward's, the sampler's and the host's fitted forms hold a parameter this large at least
PRICED_FITS = ("target_forward_us", "draft_us", "sample_us", "host_busy_us", "host_busy_us_baseline")


def missing_fits(points, fits) -> list[str]:
    """The parts a profile of these points prices (a speculative one: the draft's too) and has no form for. The
    speculative host's work is not asked of points that never measured it (every speculative step GPU-bound,
    its host's wait inside the step: `spec_host_measured`); the baseline's prices it then."""
    spec = SPECULATIVE_FITS if spec_host_measured(points) else tuple(f for f in SPECULATIVE_FITS if f != "host_busy_us")
    need = (*REQUIRED_FITS, *(spec if any(p.num_steps for p in points) else ()))
    return [f for f in need if f not in fits]


def spec_host_measured(points) -> bool:
    """Whether a speculative point measured the host's work of its step (`host_busy_us`; vLLM's V1 runner
    measures it only where the host paced the step)."""
    return any(p.num_steps and p.host_busy_us is not None for p in points)


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
    engine: CalibratedEngine
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
    topk: TopK = 1
    num_draft_tokens: int | None = Field(None, ge=2, le=256, description="Tokens verified per request (SGLang's "
                                                                         "speculative_num_draft_tokens); None: "
                                                                         "num_steps + 1 (a chain).")
    collectives_measured: bool = Field(True, description="The TP group's collectives are in the measured parts. "
                                                         "False for one rank's shard measured alone on one GPU "
                                                         "(calibration/engines/shard.py): the simulator adds them "
                                                         "from the box's links.")
    max_num_seqs: int = Field(0, ge=0, le=4096, description="The engine's max_num_seqs, 1..4096 "
                                                            "(calibration.engines.plans.ProcessPlan's bound); "
                                                            "0: the engine did not say.")
    cudagraph_capture_sizes: list[int] = Field(default_factory=list, max_length=4096)
    host_probe_us: float | None = Field(None, ge=1.0, le=1e7, description=(
        "The host's speed the calibration stepped at: the median, over its windows, of the host probe timed in "
        "the engine's stepping thread before and after each window (a fixed piece of Python work; "
        "calibration/engines/backends/base.py host_speed_probe_us), us, 1..1e7; None: not probed. A scenario on "
        "another host (serving_engine.host_probe_us) scales the host's share of a step by the ratio."))
    how_measured: str = ""
    created_utc: str | None = None
    command_line: str | None = None
    git_commit: str | None = None
    notes: list[str] = Field(default_factory=list)
    points: list[EnginePoint] = Field(min_length=1, max_length=100_000)
    fits: dict[str, PartFit] = Field(default_factory=dict)
    prefill: list[PrefillFit] = Field(default_factory=list, max_length=2, description=(
        "The prefill alone, fitted without and with the draft (at most one of each); empty: not measured "
        "(the serving DES prices the prefill from the op tables)."))

    @field_validator("target", "draft")
    @classmethod
    def _model_shape(cls, v: dict | None, info: ValidationInfo) -> dict | None:
        """The target's and the draft's fields are a ModelShape's (simulator.model_shape)."""
        from pydantic import ValidationError

        from simulator.model_shape import ModelShape
        if v is None:
            return v
        try:
            ModelShape.model_validate({"name": "model", **v}, strict=True)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
            raise ValueError(f"not a ModelShape's fields: {where + ': ' if where else ''}{first['msg']}{more}") from None
        return v

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
            if fit.form == "roofline" and (lack := [q for q in ("weights_us", "per_token_us", *ROOFLINE_OFFSETS.get(
                    name, ())) if q not in fit.params and (q not in SPEC_OFFSETS or any(p.num_steps for p in self.points))]):
                raise ValueError(f"fits.{name}: lacks {', '.join(lack)} (a roofline form holds them)")
            if "experts_us" in fit.params and (name != "target_forward_us" or not self.target.get("n_routed_experts")):
                raise ValueError(f"fits.{name}: experts_us is an MoE target forward's parameter (the target here "
                                 f"{'has no routed experts' if name == 'target_forward_us' else 'is priced apart'})")
            if name in ("target_forward_us", "draft_us", "sample_us") and fit.form != "roofline" or \
                    name not in ("target_forward_us", "draft_us", "sample_us") and fit.form != "linear":
                raise ValueError(f"fits.{name}: form {fit.form!r} is not this part's")
        for name in PRICED_FITS:
            fit = self.fits.get(name)
            if fit is not None and max(fit.params.values()) < MIN_FORWARD_US:
                raise ValueError(f"fits.{name}: every parameter is below {MIN_FORWARD_US:g} us (largest {max(fit.params.values()):.3g}): "
                                 "a part priced at nothing would take no time; at least one parameter must be 1..1e7 us")
        check_fits(self)
        check_prefill(self)
        if len({f.speculative for f in self.prefill}) != len(self.prefill):
            raise ValueError("prefill: one fit without the draft and one with it at most")
        for i, f in enumerate(self.prefill):
            if self.max_num_seqs and f.max_num_batched_tokens < self.max_num_seqs:
                raise ValueError(f"prefill[{i}].max_num_batched_tokens {f.max_num_batched_tokens}: below max_num_seqs "
                                 f"{self.max_num_seqs} (vLLM refuses a step budget under its batch); "
                                 f"{self.max_num_seqs}..{1 << 24}")
        if self.max_num_seqs and (big := max(p.batch_size for p in self.points)) > self.max_num_seqs:
            raise ValueError(f"max_num_seqs {self.max_num_seqs}: below the batch of {big} a point measured (the "
                             "engine runs at most max_num_seqs requests a step)")
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


# ---- reading a profile -----------------------------------------------------------------------
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
        prof = EngineProfile.model_validate(read_json(Path(path), "engine profile JSON"), strict=True)
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


def scenario_engine_profile(scenario) -> EngineProfile | None:
    """The engine profile a scenario's `serving_engine.engine_profile` names, read (`load_engine_profile`);
    None where it names none."""
    ref = getattr(scenario.serving_engine, "engine_profile", None)
    return load_engine_profile(ref) if ref else None


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
