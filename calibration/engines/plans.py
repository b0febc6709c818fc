"""Which points a calibration, a few-run calibration or a live grid measures, engine process by
engine process.

One engine process measures one configuration (the baseline, or one `num_steps`): vLLM fixes
`num_speculative_tokens` when it starts, while the acceptance rate and the batch can change from
point to point. A process's points run largest prompt first, so the shorter prompts (the first
tokens of the same prompts) find their prefill in the prefix cache.

- calibration (`calibrate_plans`): every batch size x context, at one acceptance rate; the first
  window of each point records the GPU phases (CUDA events), the second is left untouched and
  gives the step period and the host's work;
- few runs (`few_run_keys`): what a user with a busy box measures: the baseline at two batch sizes
  and one speculative point per num_steps (the two largest num_steps at the largest batch, the rest
  spread down over batch and context), picked from a calibration's points (so the same runs can be
  compared against the rest);
- live grid (`live_plans`): the validation grid, uninstrumented, in processes of its own;
- the order (`spread_order`, `interleave`): the middle num_steps first, then from the ends
  inwards, each configuration's calibration process followed by its live one, so that a campaign
  cut short by the machine's time still holds matched pairs (the engine-native profile of a
  num_steps and its fresh validation runs, each from its own process).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PlainValidator, field_validator, model_validator
from pydantic_core import PydanticCustomError

from calibration.engines.run_loop import PointPlan
from simulator.engines.fields import (ENGINE_DESCRIPTION, NUM_DRAFT_TOKENS_DESCRIPTION, DraftTpSize, NumDraftTokens,
                                     TopK, TpSize)
from simulator.schema_base import StrictModel


class PointFields(StrictModel):
    """One point of a process (calibration.engines.run_loop.PointPlan's fields, bounded)."""

    batch_size: int = Field(ge=1, le=4096)
    prompt_len: int = Field(ge=1, le=2**20)
    acceptance_rate: float | None = Field(ge=0.0, le=1.0, description="None for the baseline.")
    timed_steps: int = Field(48, ge=1, le=100_000)
    warmup_steps: int = Field(8, ge=0, le=100_000)
    repeats: int = Field(2, ge=1, le=100)
    instrument_first: bool = False
    host_probe: bool = False
    pin_fastest_cpu: bool = False
    workload: Literal["steady", "closed_batch", "closed_loop", "poisson"] = Field(
        "steady", description="steady (a full batch's decode window), closed_batch (batch_size requests at once, "
                              "each max_tokens: LLM.generate), closed_loop (concurrency in flight, each finished "
                              "request replaced, num_requests in all: bench serve --max-concurrency) or poisson "
                              "(num_requests arriving at request_rate: bench serve --request-rate).")
    max_tokens: int | None = Field(None, ge=1, le=2**20, description="Request-level: tokens each request generates.")
    concurrency: int | None = Field(None, ge=1, le=4096, description="closed_loop: requests in flight.")
    num_requests: int | None = Field(None, ge=1, le=100_000, description="closed_loop, poisson: requests run in all.")
    request_rate: float | None = Field(None, ge=0.01, le=10_000, description="poisson: mean arrivals per second, "
                                                                              "0.01..10000.")
    warmup_run_tokens: int = Field(0, ge=0, le=4096, description="closed_batch, closed_loop: new tokens of one "
                                   "unrecorded warm-up run of the point's batch before its measured runs, 0..4096 "
                                   "(0: none).")

    @model_validator(mode="after")
    def _workload_fields(self):
        need = {"steady": (), "closed_batch": ("max_tokens",),
                "closed_loop": ("max_tokens", "concurrency", "num_requests"),
                "poisson": ("max_tokens", "num_requests", "request_rate")}[self.workload]
        for name in ("max_tokens", "concurrency", "num_requests", "request_rate"):
            given = getattr(self, name) is not None
            if given != (name in need):
                raise ValueError(f"{name}: {'needed' if name in need else 'not taken'} by workload {self.workload}")
        if self.warmup_run_tokens and self.workload not in ("closed_batch", "closed_loop"):
            raise ValueError(f"warmup_run_tokens: not taken by workload {self.workload}")
        if self.workload == "closed_loop" and self.num_requests < self.concurrency:
            raise ValueError(f"num_requests {self.num_requests} < concurrency {self.concurrency}")
        return self


# vLLM 0.26.0's MLA backends a plan may ask for: those its priority list holds for SM90 as well as others
# (vllm/platforms/cuda.py _get_backend_priorities; CUTLASS_MLA and the sparse ones are SM100-only)
VllmMlaBackend = Literal["TRITON_MLA", "FLASHMLA", "FLASH_ATTN_MLA", "FLASHINFER_MLA"]


def _registered_engine(value: object) -> str:
    """An engine kind of the registry (calibration.engines.backends.ENGINES), refused as a Literal of
    its names would be."""
    from calibration.engines.backends import ENGINES
    if not (isinstance(value, str) and value in ENGINES):
        names = [repr(n) for n in ENGINES]
        raise PydanticCustomError("literal_error", "Input should be {expected}",
                                  {"expected": " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1
                                                           else names)})
    return value


def _engine_schema(schema: dict) -> None:
    from calibration.engines.backends import ENGINES
    schema.update(enum=list(ENGINES), type="string")


class ProcessPlan(StrictModel):
    """One engine process: the engine, its configuration and the points it measures."""

    engine: Annotated[str, PlainValidator(_registered_engine)] = Field(
        description=ENGINE_DESCRIPTION, json_schema_extra=_engine_schema)
    session: Literal["calibrate", "live"] = Field(description="'calibrate' or 'live': which set of points these are.")
    label: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$",
                       description="File-name label of the process, e.g. 'calibrate_s3' (letters, digits, '.', '_', "
                                   "'-'; no path).")
    num_steps: int = Field(ge=0, le=16, description="Draft tokens per step; 0 for the baseline.")
    target_config: dict = Field(description="The target's HF config.json.")
    draft_config: dict | None = Field(None, description="The EAGLE-3 draft's HF config.json.")
    max_model_len: int = Field(8192, ge=256, le=2**20)
    max_num_seqs: int = Field(64, ge=1, le=4096)
    gpu_memory_utilization: float = Field(0.85, gt=0.05, le=0.95)
    capture_sizes: list[Annotated[int, Field(ge=1, le=2**16)]] = Field(
        default_factory=list, max_length=4096, description="CUDA-graph capture sizes, 1..65536, strictly increasing; "
                                                           "empty: the engine's own.")
    max_total_tokens: int | None = Field(None, ge=256, le=2**26, description=(
        "SGLang's KV pool in tokens (max_total_tokens; default: what memory allows). The draft's pool takes "
        "the target's token count: an MLA shard's small latent would size a GQA draft's pool past the GPU."))
    topk: TopK = 1
    num_draft_tokens: NumDraftTokens | None = Field(None, description=NUM_DRAFT_TOKENS_DESCRIPTION
                                                    + "; default num_steps + 1.")
    overlap: bool = Field(True, description="SGLang's overlap scheduler (off: disable_overlap_schedule).")
    cuda_graphs: bool = Field(True, description="SGLang's CUDA graphs (off: disable_cuda_graph; every kernel "
                                                "launched by the host).")
    engine_env: dict[Annotated[str, Field(pattern=r"^(SGLANG|VLLM)_[A-Z0-9_]{1,64}$")],
                     Annotated[str, Field(max_length=256)]] = Field(
        default_factory=dict, description="Engine settings read from the environment at import (SGLANG_* / VLLM_*), "
                                          "set before the engine starts.")
    uniform_expert_routing: bool = Field(False, description="MoE targets: each token's experts drawn uniformly at "
                                                            "random in the router (dummy weights route every token "
                                                            "alike; real traffic spreads over the experts): SGLang "
                                                            "by noise in its TopK, vLLM by its own routing simulator "
                                                            "(VLLM_MOE_ROUTING_SIMULATION_STRATEGY=uniform_random).")
    points_file: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}\.jsonl$",
                                    description="A points file of its own beside the queue's (a name, no path), for "
                                                "another model's processes, whose labels would mix with the queue's.")
    tensor_parallel_size: TpSize = Field(1, le=8, description=(
        "GPUs of the target's TP group: one process a rank (calibration/engines/tp_launch.py), each on its GPU."))
    draft_tensor_parallel_size: DraftTpSize | None = Field(None, le=8, description=(
        "The draft's TP as asked of the engine (vLLM's speculative_config draft_tensor_parallel_size: 1 or the "
        "target's); None leaves it to the engine (the target's group). What the engine did is recorded apart."))
    group_launch: bool = Field(False, description=(
        "Run as a TP group of tensor_parallel_size processes even at 1 (the group's path on one GPU: vLLM's "
        "external_launcher, SGLang's broadcast request path)."))
    mla_attention_backend: VllmMlaBackend | None = Field(
        None, description="vLLM only: the backend of the target's MLA layers (attention_config.backend_per_kind "
                          "'mla_attention'; the draft's attention is left to vLLM). TRITON_MLA takes queries of one "
                          "token only, so a verify of 1 + k tokens runs MLA's prefill path (non-absorbed, the "
                          "context up-projected) and no full graph; None: vLLM's choice for the GPU.")
    prompt_seed: int = Field(0, ge=0, le=2**32 - 1, description="Seed of the prompts' tokens, 0..2^32-1.")
    points: list[dict] = Field(description="PointPlan fields, one dict per point.")

    @field_validator("capture_sizes")
    @classmethod
    def _increasing(cls, v: list[int]) -> list[int]:
        if any(b <= a for a, b in zip(v, v[1:])):
            raise ValueError("capture sizes must be strictly increasing")
        return v

    @field_validator("points")
    @classmethod
    def _points_are_point_plans(cls, v: list[dict]) -> list[dict]:
        if not v:
            raise ValueError("at least one point")
        out = []
        for i, p in enumerate(v):
            try:
                out.append(PointFields.model_validate(p, strict=True).model_dump())
            except ValueError as e:
                first = e.errors()[0] if hasattr(e, "errors") else {"loc": (), "msg": str(e)}
                where = ".".join(str(x) for x in first.get("loc", ()))
                raise ValueError(f"points[{i}]{'.' + where if where else ''}: {first['msg']}") from None
        return out

    @model_validator(mode="after")
    def _mla_backend_is_vllms(self):
        if self.mla_attention_backend is None:
            return self
        from calibration.engines.backends import engine_spec
        if not engine_spec(self.engine).mla_attention_backend:
            raise ValueError(f"mla_attention_backend {self.mla_attention_backend}: a vLLM setting; this plan's "
                             f"engine is {self.engine}")
        if "kv_lora_rank" not in self.target_config:
            raise ValueError(f"mla_attention_backend {self.mla_attention_backend}: the target has no MLA layers "
                             "(its config has no kv_lora_rank)")
        return self

    @model_validator(mode="after")
    def _tp_fits_the_engine(self):
        tp, dtp = self.tensor_parallel_size, self.draft_tensor_parallel_size
        if dtp is not None and dtp not in (1, tp):
            raise ValueError(f"draft_tensor_parallel_size {dtp}: 1 or the target's tensor_parallel_size ({tp}), as "
                             "vLLM allows")
        from calibration.engines.backends import engine_spec
        if dtp is not None and dtp != tp and not engine_spec(self.engine).own_draft_tp:
            raise ValueError(f"draft_tensor_parallel_size {dtp}: SGLang runs an EAGLE draft in the target's TP group "
                             f"(no draft TP setting); leave it out or give {tp}")
        return self

    @model_validator(mode="after")
    def _points_fit_the_engine(self):
        for i, p in enumerate(self.points):
            if p["batch_size"] > self.max_num_seqs:
                raise ValueError(f"points[{i}].batch_size {p['batch_size']} > max_num_seqs {self.max_num_seqs}")
            if p["prompt_len"] >= self.max_model_len:
                raise ValueError(f"points[{i}].prompt_len {p['prompt_len']} >= max_model_len {self.max_model_len}")
            if p["max_tokens"] is not None and p["prompt_len"] + p["max_tokens"] > self.max_model_len:
                raise ValueError(f"points[{i}]: prompt_len {p['prompt_len']} + max_tokens {p['max_tokens']} > "
                                 f"max_model_len {self.max_model_len}")
            if (p["concurrency"] or 0) > self.max_num_seqs:
                raise ValueError(f"points[{i}].concurrency {p['concurrency']} > max_num_seqs {self.max_num_seqs}")
            if (p["acceptance_rate"] is None) != (self.num_steps == 0):
                raise ValueError(f"points[{i}].acceptance_rate: None exactly when num_steps is 0 (the baseline)")
        return self

    @model_validator(mode="after")
    def _model_configs(self):
        """An engine that builds the models (one with an install: vLLM, SGLang) is given HF config.json
        files a model shape reads from (simulator.model_config), not any mapping; the fake engine reads none."""
        from pydantic import ValidationError

        from calibration.engines.backends import engine_spec
        from simulator.model_config import shape_fields_from_hf_config
        from simulator.model_shape import ModelShape
        if not engine_spec(self.engine).requires:
            return self
        for name, cfg in (("target_config", self.target_config), ("draft_config", self.draft_config)):
            if cfg is None:
                continue
            try:
                ModelShape.model_validate({"name": "model", **shape_fields_from_hf_config(cfg)[0]})
            except (ValidationError, ValueError) as e:
                first = e.errors()[0] if isinstance(e, ValidationError) else {"loc": (), "msg": str(e)}
                where = ".".join(str(x) for x in first["loc"])
                raise ValueError(f"{name}: not a model's config.json ({self.engine} builds the model from it): "
                                 f"{where + ': ' if where else ''}{first['msg']}") from None
        return self

    def point_plans(self) -> list[PointPlan]:
        return [PointPlan(**p) for p in self.points]


def _points(batch_sizes, prompt_lens, acceptances, **kw) -> list[dict]:
    """Every point, with the host probe after each window (run_loop.PointPlan.host_probe: the stepping
    thread's core speed, which host-bound steps follow on a machine whose cores change speed)."""
    out = []
    for p in sorted(prompt_lens, reverse=True):
        for b in sorted(batch_sizes, reverse=True):
            for a in acceptances:
                out.append(dict(batch_size=b, prompt_len=p, acceptance_rate=a, host_probe=True, **kw))
    return out


def prefill_points(prefill: tuple[list[int], list[int]] | None, acceptance_rate: float | None,
                   repeats: int = 2) -> list[dict]:
    """The prefill alone, measured where the steady points are (issue 45): a closed batch of B fresh
    prompts of P tokens each and one new token, at every (B, P) of `prefill` = (batch sizes, prompt
    lengths), largest first; the engine chunks it as it chunks any prefill (vLLM's
    max_num_batched_tokens). simulator.evidence.prefill_fit fits the profile's prefill from these."""
    if not prefill:
        return []
    bs, ps = prefill
    return [dict(workload="closed_batch", batch_size=b, prompt_len=p, max_tokens=1, acceptance_rate=acceptance_rate,
                 repeats=repeats, host_probe=True) for p in sorted(ps, reverse=True) for b in sorted(bs, reverse=True)]


def calibrate_plans(base: dict, num_steps: list[int], batch_sizes: list[int], prompt_lens: list[int],
                    acceptance_rate: float, timed_steps: int = 48, repeats: int = 2,
                    prefill: tuple[list[int], list[int]] | None = None) -> list[ProcessPlan]:
    """The baseline's process and one per num_steps (`base`: the ProcessPlan fields they share);
    with `prefill` (batch sizes, prompt lengths), each process measures the prefill alone there too
    (prefill_points), after its steady points."""
    plans = []
    for k in [0, *num_steps]:
        rate = None if k == 0 else acceptance_rate
        pts = _points(batch_sizes, prompt_lens, [rate], timed_steps=timed_steps,
                      repeats=repeats, instrument_first=True) + prefill_points(prefill, rate, repeats)
        plans.append(ProcessPlan(**base, session="calibrate", label=f"calibrate_s{k}", num_steps=k, points=pts))
    return plans


def live_plans(base: dict, num_steps: list[int], batch_sizes: list[int], prompt_lens: list[int],
               acceptances: list[float], spread: bool = True, timed_steps: int = 40,
               repeats: int = 2) -> list[ProcessPlan]:
    """The live grid: every num_steps at every batch size and context, at every acceptance rate at
    the shortest context and (with `spread`) at the middle rate at the others; the baseline at
    every batch size and context."""
    plans = [ProcessPlan(**base, session="live", label="live_s0", num_steps=0,
                         points=_points(batch_sizes, prompt_lens, [None], timed_steps=timed_steps, repeats=repeats))]
    short = min(prompt_lens)
    mid = sorted(acceptances)[len(acceptances) // 2]
    for k in num_steps:
        pts = []
        for p in sorted(prompt_lens, reverse=True):
            rates = acceptances if (p == short or not spread) else [mid]
            pts += _points(batch_sizes, [p], rates, timed_steps=timed_steps, repeats=repeats)
        plans.append(ProcessPlan(**base, session="live", label=f"live_s{k}", num_steps=k, points=pts))
    return plans


def request_points(speculative: bool, batch_sizes: list[int], prompt_lens: list[int], acceptances: list[float],
                   max_tokens: int = 256, more_max_tokens: tuple[int, ...] = (128, 512),
                   concurrencies: tuple[int, ...] = (64, 16, 4), repeats: int = 2,
                   request_rates: tuple[float, ...] = ()) -> list[dict]:
    """Request-level points of one engine process (issue 45; calibration.engines.requests_loop), largest
    first: closed batches of `max_tokens` new tokens at every batch size, prompt length and acceptance;
    `more_max_tokens` at the middle acceptance and the shortest prompt; the prefill alone (1 new token)
    at every batch size and prompt length (what a user subtracts: decode tok/s = (tokens - B) / (the
    run's time - the prefill run's)); each closed batch and loop after an unrecorded warm-up run of its batch
    (WARMUP_RUN_TOKENS new tokens, prompts of its own); closed loops at each concurrency (three times as many requests in
    all) at the shortest prompt and the middle acceptance; Poisson arrivals at each of `request_rates` (req/s,
    POISSON_REQUESTS requests) at the shortest prompt and the middle acceptance. Each run probes the host
    after it (`host_probe`: RequestRun.host_probe_us, the host speed it stepped at)."""
    rates = sorted(acceptances) if speculative else [None]
    mid = rates[len(rates) // 2]
    short = min(prompt_lens)
    pts = []
    for p in sorted(prompt_lens, reverse=True):
        for b in sorted(batch_sizes, reverse=True):
            cb = dict(workload="closed_batch", batch_size=b, prompt_len=p, repeats=repeats, host_probe=True,
                      warmup_run_tokens=WARMUP_RUN_TOKENS)
            pts += [dict(cb, acceptance_rate=a, max_tokens=max_tokens) for a in rates]
            pts.append(dict(cb, acceptance_rate=mid, max_tokens=1))
            if p == short:
                pts += [dict(cb, acceptance_rate=mid, max_tokens=n) for n in more_max_tokens]
    for c in concurrencies:
        pts.append(dict(workload="closed_loop", batch_size=c, concurrency=c, num_requests=3 * c, prompt_len=short,
                        acceptance_rate=mid, max_tokens=max_tokens, repeats=repeats, host_probe=True,
                        warmup_run_tokens=WARMUP_RUN_TOKENS))
    for q in request_rates:
        pts.append(dict(workload="poisson", batch_size=POISSON_REQUESTS, num_requests=POISSON_REQUESTS,
                        request_rate=q, prompt_len=short, acceptance_rate=mid, max_tokens=max_tokens, repeats=repeats,
                        host_probe=True))
    return pts


POISSON_REQUESTS = 48  # requests of a live Poisson run (bench serve --num-prompts)
WARMUP_RUN_TOKENS = 16  # a closed batch's or loop's warm-up run (PointPlan.warmup_run_tokens): the H100 runs of
# 2026-12-07 paid vLLM's Triton JIT in the first run of each batch size (docs/engines/transfer.md), 21-220% apart


def request_plans(base: dict, num_steps: list[int], batch_sizes: list[int], prompt_lens: list[int],
                  acceptances: list[float], **kw) -> list[ProcessPlan]:
    """One live process of request-level runs per num_steps (0: the baseline), labelled e2e_s<k>."""
    return [ProcessPlan(**base, session="live", label=f"e2e_s{k}", num_steps=k,
                        points=request_points(bool(k), batch_sizes, prompt_lens, acceptances, **kw))
            for k in num_steps]


def few_run_keys(num_steps: list[int], batch_sizes: list[int], prompt_lens: list[int],
                 full_graph=None) -> list[tuple[int, int, int]]:
    """(num_steps, batch_size, prompt_len) of the few runs: the baseline at the smallest and the
    largest batch (shortest and longest context), and one point per num_steps: the two largest
    num_steps both at the largest batch, the others spread over the smaller batch sizes from there
    down to the smallest, the contexts alternating (the largest num_steps at the shortest).

    Two runs at the largest batch put two points on the compute-bound side of the target's
    roofline, the largest verifies any record has, so its slope there is measured, not read off
    one point: with one (vLLM 0.26's 448-token verify, where its forward jumps), the few-run
    profile priced the 256-320-token verifies 10-15% too slow.

    Args:
        full_graph: a predicate on (batch_size, num_steps), True where the engine replays a full
            CUDA graph for the verify (simulator.engines.profile.full_graph_verify); a run is
            moved to the nearest batch size where it does, since a piecewise (host-bound) verify
            says nothing of the GPU parts the rest are priced from.
    """
    bs, ps = sorted(batch_sizes), sorted(prompt_lens)
    keys = [(0, bs[0], ps[0]), (0, bs[-1], ps[-1])]
    ks = sorted(num_steps, reverse=True)
    top, rest = len(bs) - 1, len(ks) - 2
    for i, k in enumerate(ks):
        if i < 2:
            j = top
        else:  # from one below the top's neighbour (the top holds two runs) down to the smallest
            lo_top = max(0, top - 2)
            j = round(lo_top * (1 - (i - 2) / (rest - 1))) if rest > 1 else lo_top
        if full_graph is not None:
            ok = [m for m in range(len(bs)) if full_graph(bs[m], k)]
            j = min(ok, key=lambda m: (abs(m - j), m)) if ok else j
        keys.append((k, bs[j], ps[i % len(ps)]))
    return keys


def full_graph_rule(capture_sizes: list[int] | None = None, max_num_seqs: int = 64):
    """The predicate (batch_size, num_steps) -> full CUDA graph for the verify, for an engine
    started with these capture sizes (default: what the campaign starts vLLM with)."""
    from calibration.engines.backends.vllm import default_capture_sizes
    from simulator.engines.profile import full_graph_verify
    sizes = list(capture_sizes) if capture_sizes else default_capture_sizes()
    return lambda b, k: full_graph_verify(b, k, sizes, max_num_seqs)


DEFAULT_NUM_STEPS = [1, 2, 3, 4, 6]
DEFAULT_BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64]
DEFAULT_PROMPT_LENS = [1024, 4096]
DEFAULT_CALIBRATE_ACCEPTANCE = 0.7
DEFAULT_LIVE_ACCEPTANCES = [0.5, 0.7, 0.9]


def model_configs(target: str = "llama-3.1-8b-instruct", draft: str = "eagle3-llama-3.1-8b") -> tuple[dict, dict]:
    """The shipped HF configs an engine starts from (data/models/engine/<name>.config.json).

    Raises:
        ValueError: a name that is not a file name (letters, digits, '.', '_', '-').
        FileNotFoundError: no such config.
    """
    import json
    import re
    for n in (target, draft):
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,120}", n):
            raise ValueError(f"{n!r}: a config name is letters, digits, '.', '_' and '-' (a file under data/models/engine/)")
    from simulator.profile import data_dir
    d = data_dir() / "models" / "engine"
    return (json.loads((d / f"{target}.config.json").read_text(encoding="utf-8")),
            json.loads((d / f"{draft}.config.json").read_text(encoding="utf-8")))


def model_shapes(target: str, draft: str) -> tuple[dict, dict]:
    """The scenario `target` and `draft` sections of two shipped engine configs (model_configs): each config's
    shape fields, named as a scenario names the model (the target without "-instruct")."""
    from simulator.model_config import shape_fields_from_hf_config
    t_cfg, d_cfg = model_configs(target, draft)
    return ({"name": target.removesuffix("-instruct"), **shape_fields_from_hf_config(t_cfg)[0]},
            {"name": draft, **shape_fields_from_hf_config(d_cfg)[0]})


def spread_order(num_steps: list[int]) -> list[int]:
    """The num_steps in the order a campaign measures them: the middle one first, then from the
    ends inwards (1, 6, 2, 4 after 3), so a campaign cut short still spans the range."""
    ks = sorted(set(num_steps))
    if not ks:
        return []
    first = ks[(len(ks) - 1) // 2]
    rest = [k for k in ks if k != first]
    out = []
    while rest:
        out.append(rest.pop(0))
        if rest:
            out.append(rest.pop())
    return [first, *out]


def interleave(calibrate: list[ProcessPlan], live: list[ProcessPlan], first_num_steps: int | None = None) -> list[ProcessPlan]:
    """Calibration and live processes paired by num_steps (the first given num_steps first, then
    the baseline, then the rest in the order given)."""
    by_k: dict[int, list[ProcessPlan]] = {}
    for p in calibrate + live:
        by_k.setdefault(p.num_steps, []).append(p)
    ks = [p.num_steps for p in calibrate] + [p.num_steps for p in live]
    order = ([first_num_steps] if first_num_steps in by_k else []) + [0] + ks
    out, seen = [], set()
    for k in order:
        if k in by_k and k not in seen:
            seen.add(k)
            out += sorted(by_k[k], key=lambda p: p.session != "calibrate")
    return out
