"""Serving engines: what one speculative cycle runs, and how the host drives it, per engine.

A scenario's `serving_engine:` section picks one `kind`:
- `live_loop`: the project's own PyTorch loop (calibration/live/), unfused kernels, the profile's
  own host costs (measured on that loop). Predictions for it are validated against live runs.
- `sglang`, `vllm`, `trtllm`: the serving engines' cycles (`EngineModel`), each a documented
  structure with named parameters whose defaults carry their source (the class docstrings).

What an engine model decides (simulator.costs.forward.CostModel reads it through the methods
below, so every kind answers the same questions):
- which phases replay as CUDA graphs (`graph_mode(phase, batch_size)`: full, piecewise with
  attention outside the graph, or none), up to `cuda_graph_max_bs`;
- which kernels a forward runs (`kernels`: the live loop's unfused op list, or an engine's fused
  kernels: add+RMSNorm, rotary+KV write, paged decode attention);
- the verify's attention path (`verify_attention`: the decode kernels, or the prefill/extend path,
  which for MLA is the non-absorbed form whose cost grows with the context);
- host time per cycle, per draft step and per baseline decode step, the device-to-host syncs per
  cycle and whether the scheduler overlaps host work with the GPU;
- the engine's kernel efficiency relative to the profile (GPU compute time / efficiency);
- optionally, the engine's own fused-MoE time per layer by token count (`moe_layer_latency_us`),
  which prices the target's routed experts in its token range. Engine MoE benchmarks put it at
  about 20-70 us per layer at one token on H200/B200, several times the time to read the touched
  experts' weights (docs/engines.md, "MoE kernel time at decode token counts").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, ClassVar, Literal, Union

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from simulator.schema_base import StrictModel

GraphMode = Literal["full", "piecewise", "none"]

# Host times fitted on the public figures marked `role: fit` in data/cases/public.yaml, by
# `python -m simulator.evidence.engine_defaults` (scipy least squares, simulator.evidence.engine_fit; it prints this dict;
# tests check it).
# SGLang: the Llama-3.1-8B H100 baseline (SGLang docs / EAGLE-3 paper) and the Llama-3.3-70B TP8
# tree run on one plain request (sglang PR #4716); vLLM: the Llama-3.1-8B EAGLE-3 K-sweep's
# baseline and its 2- and 7-step ends (vllm issue #20780).
ENGINE_HOST_DEFAULTS = {
    'sglang': {'host_decode_step_us': 0.0, 'host_cycle_us': 3307.3},
    'vllm': {'host_decode_step_us': 374.9, 'host_cycle_us': 2034.1, 'host_draft_step_us': 413.6},
}
ENGINE_PHASES = ("decode", "verify", "draft", "draft_extend", "accept")
# live_loop keys an engine kind does not take, and what it takes instead
MOE_TABLE_MAX_ENTRIES = 256  # token counts in serving_engine.moe_layer_latency_us (the tuners time 18-30)
LIVE_LOOP_ONLY = {"cuda_graph": "graph_decode / graph_verify / graph_draft / graph_draft_extend",
                  "host_overhead_overlapped": "overlap_scheduler"}


class _GraphTables:
    """What every engine kind answers the same way from its graph modes."""

    def collective_mode(self, batch_size: int) -> str:
        """'graph' or 'eager': which of the profile's collective and whole-forward tables apply."""
        return "graph" if self.graph_mode("decode", batch_size) != "none" else "eager"


class LiveLoopEngine(_GraphTables, StrictModel):
    """The project's own live loop (calibration/live/loop.py): the profile's host costs and kernels.

    Every forward replays as one CUDA graph (or runs eagerly); host scheduling per cycle is the
    profile's loop-overhead curve; one device-to-host sync per cycle.
    """

    kind: Literal["live_loop"] = Field("live_loop", description="Which serving engine's cycle structure.")
    cuda_graph: bool = Field(True, description="Forwards replay as CUDA graphs (one launch each).")
    host_overhead_overlapped: bool = Field(
        False, description="Host scheduling of the next cycle overlaps GPU work (SGLang overlap scheduler).")
    first_draft_from_extend: bool = Field(
        False, description="The draft extend proposes draft token 1, then num_steps - 1 draft forwards "
                           "(SGLang's EAGLE worker); False: num_steps draft forwards (the live loop).")
    mixed_chunk: ClassVar[bool] = True  # the live loop measures no prefill; serving mode mixes as vLLM does
    mixed_forward: ClassVar[str] = "apart"

    # ---- the questions every engine answers (simulator.costs.forward); fixed for the live loop,
    # whose kernels and host times are the profile's own, so not scenario fields ----
    kernels: ClassVar[str] = "live_loop"
    verify_attention: ClassVar[str] = "decode"
    host_cycle_us: ClassVar[None] = None
    host_draft_step_us: ClassVar[float] = 0.0
    host_decode_step_us: ClassVar[None] = None
    d2h_syncs_per_cycle: ClassVar[int] = 1
    kernel_efficiency: ClassVar[float] = 1.0
    moe_layer_latency_us: ClassVar[None] = None

    @model_validator(mode="before")
    @classmethod
    def _refuse_engine_fields(cls, data):
        """An engine kind's field (say moe_layer_latency_us) in a live_loop section is one line
        saying whose field it is, not pydantic's 'Extra inputs are not permitted'."""
        if not isinstance(data, dict):
            return data
        for key in data:
            if key not in cls.model_fields and key in EngineModel.model_fields:
                raise ValueError(f"{key} is a field of the engine kinds ({', '.join(ENGINE_MODEL_KINDS)}); the "
                                 "live_loop kind prices the profile's own kernels and host times (to switch kind "
                                 f"from the command line, replace the section: --set 'serving_engine={{kind: "
                                 f"sglang, {key}: ...}}')")
        return data

    def graph_mode(self, phase: str, batch_size: int) -> str:
        """'full' for every phase with cuda_graph, else 'none'."""
        return "full" if self.cuda_graph else "none"

    @property
    def overlapped(self) -> bool:
        return self.host_overhead_overlapped

    @property
    def label(self) -> str:
        return f"live loop, {'CUDA graph' if self.cuda_graph else 'eager'}"


class EngineModel(_GraphTables, StrictModel):
    """A serving engine's speculative cycle (SGLang, vLLM, TensorRT-LLM): shared fields.

    Subclasses set the defaults of their engine, each with its source (each subclass's docstring).
    Host times are per event on the host's critical path; with `overlap_scheduler` the host work
    of cycle i+1 runs while the GPU runs cycle i (simulator.analytic).
    """

    kind: str
    version: str = Field("", max_length=200, description="Which release's behaviour the defaults describe.")
    graph_decode: GraphMode = Field("full", description="Baseline decode forward: full | piecewise | none.")
    graph_verify: GraphMode = Field("full", description="Target verify forward: full | piecewise (attention "
                                                        "outside the graph) | none.")
    graph_draft: Literal["full", "none"] = Field("full", description="Draft decode steps: full | none.")
    graph_draft_extend: Literal["full", "none"] = Field("full", description="Draft extend: full | none.")
    cuda_graph_max_bs: int = Field(160, ge=0, le=4096, description="Largest batch replayed as graphs; above "
                                                                    "it every phase runs eagerly; 0..4096.")
    kernels: Literal["fused", "live_loop"] = Field(
        "fused", description="fused: the engine's kernels (add+RMSNorm, rotary+KV write, paged attention, "
                             "roofline-priced); live_loop: the profile's unfused op list.")
    verify_attention: Literal["decode", "prefill"] = Field(
        "decode", description="The verify's attention kernels: decode (for MLA: absorbed) or the "
                              "prefill/extend path (for MLA: non-absorbed, cost grows with the context).")
    first_draft_from_extend: bool = Field(True, description="The draft extend proposes draft token 1.")
    overlap_scheduler: bool = Field(False, description="Host work of the next cycle overlaps the GPU.")
    mixed_chunk: bool = Field(True, description="Serving mode: a prefill chunk shares its step with the decode "
                                                "batch (vLLM's chunked prefill, TensorRT-LLM's in-flight "
                                                "batching, SGLang's --enable-mixed-chunk); false: a prefill "
                                                "batch runs alone and the decode batch waits (SGLang's default).")
    mixed_forward: Literal["apart", "one"] = Field(
        "one", description="Serving mode, a prefill chunk sharing a decode step where its engine profile "
                           "measured the prefill: one (one forward over both, as vLLM runs them: the forward "
                           "over both less the decode's own) or apart (its own forward after the decode's: the "
                           "weights read twice); docs/engines/requests.md, 'The mixed step'.")
    host_cycle_us: float | None = Field(
        None, ge=0, le=1e6, description="Host time per speculative cycle (scheduling, verify inputs, accept "
                                        "bookkeeping), us; left out: the profile's measured loop overhead.")
    host_draft_step_us: float = Field(0.0, ge=0, le=1e6, description="Host time per draft forward, us.")
    host_decode_step_us: float | None = Field(
        None, ge=0, le=1e6, description="Host time per baseline decode step, us; left out: the profile's.")
    d2h_syncs_per_cycle: int = Field(1, ge=0, le=64, description="Device-to-host syncs per cycle, 0..64.")
    kernel_efficiency: float = Field(1.0, ge=0.05, le=20.0, description="The engine's GPU compute speed "
                                                                         "relative to the profile's (time / "
                                                                         "efficiency), 0.05..20.")
    engine_profile: str | None = Field(
        None, min_length=1, max_length=4096,
        description="An engine-native profile (a shipped name under data/engine_profiles/, or a path): the "
                    "engine's own cycle parts measured inside it by `specdecsim calibrate engine`; where it "
                    "was measured for this target, draft, TP size and GPU, every phase and the host's work "
                    "are priced from it (a note says so), else it is not used (a note says why).")
    host_probe_us: float | None = Field(
        None, ge=1.0, le=1e7,
        description="The speed of the host's cores on the box priced, us, 1..1e7: the median host probe in the "
                    "engine's stepping thread of a calibration on that host (an engine profile's "
                    "host_probe_us), or the median of `specdecsim diagnose host-cores` (taken before any engine "
                    "runs: a loaded core may run slower). Where the engine profile recorded its own, the "
                    "host's share of a step is scaled by the ratio (a note says so); left out: the host as "
                    "measured.")
    moe_layer_latency_us: dict[Annotated[int, Field(ge=1, le=1_000_000)],
                               Annotated[float, Field(gt=0.0, le=1e6)]] | None = Field(
        None, min_length=1, max_length=MOE_TABLE_MAX_ENTRIES,
        description="The engine's fused-MoE time per MoE layer and rank, us, by tokens in the forward "
                    "(keys 1..1e6, values in (0, 1e6] us): 'Kernel time' of SGLang's "
                    "tuning_fused_moe_triton.py or vLLM's benchmark_moe.py run at the scenario's target, TP "
                    "and dtype, or `calibrate engine-moe`'s records (`specdecsim calibrate moe-kernel-times` "
                    "reads either). The target's routed experts cost this inside the table's token range "
                    "(interpolated in log tokens) and at least its end values outside it; left out: the "
                    "profile's table or the roofline.")

    @field_validator("moe_layer_latency_us", mode="before")
    @classmethod
    def _token_count_keys(cls, table):
        """Token counts written as text ('8': 90; a JSON object's keys, a `--set ...moe_layer_latency_us.8=`
        path, a sweep's scenario_json) are read as the integers they spell; a key that is not an
        integer (1.5, true, '1.0') is refused naming the range, as is the same count written both
        as text and as a number."""
        if not isinstance(table, dict):
            return table
        out: dict = {}
        for key, value in table.items():
            if isinstance(key, str) and re.fullmatch(r"[0-9]{1,7}", key):
                if int(key) in table or int(key) in out:
                    raise ValueError(f"token count {int(key)} is written twice (as {key!r} and as {int(key)})")
                key = int(key)
            elif isinstance(key, bool) or not isinstance(key, int):
                raise ValueError(f"key {key!r} is not a token count: keys are integers 1..1,000,000 (tokens in "
                                 "the forward), values the kernel time in us")
            out[key] = value
        return out

    @model_validator(mode="before")
    @classmethod
    def _apply_version(cls, data):
        """Fill the fields a scenario leaves out from its release's preset (VERSION_PRESETS)."""
        if not isinstance(data, dict):
            return data
        for key, instead in LIVE_LOOP_ONLY.items():
            if key in data:
                raise ValueError(f"{key} is a live_loop field; engine kinds set {instead} (to switch kind from the "
                                 "command line, replace the section: --set 'serving_engine={kind: vllm}')")
        v = data.get("version")
        if isinstance(v, (int, float)) and not isinstance(v, bool):  # YAML reads a bare 2026 as a number
            raise ValueError(f"version: {v!r} is a number; a release name is a string: write version: '{v}' "
                             "(quoted)")
        kind = data.get("kind") or cls.model_fields["kind"].default
        version = data.get("version") or cls.model_fields["version"].default
        preset = VERSION_PRESETS.get((kind, version), {})
        return {**preset, **data}

    def graph_mode(self, phase: str, batch_size: int) -> str:
        """The phase's graph mode at this batch size ('none' above cuda_graph_max_bs; accept
        follows verify).

        Raises:
            ValueError: an unknown phase.
        """
        if phase not in ENGINE_PHASES:
            raise ValueError(f"unknown phase {phase!r}; one of {', '.join(ENGINE_PHASES)}")
        if batch_size > self.cuda_graph_max_bs:
            return "none"
        return getattr(self, f"graph_{'verify' if phase == 'accept' else phase}")

    @property
    def cuda_graph(self) -> bool:
        """Whether the baseline decode replays a graph (the profile's collective tables' mode)."""
        return self.graph_decode != "none"

    @property
    def overlapped(self) -> bool:
        return self.overlap_scheduler

    @property
    def label(self) -> str:
        if self.engine_profile:
            return f"{self.kind}, engine profile {Path(self.engine_profile).name.removesuffix('.json')}"
        return f"{self.kind}{' ' + self.version if self.version else ''}, verify graph {self.graph_verify}"


class SglangEngine(EngineModel):
    """SGLang's EAGLE / EAGLE-3 / NEXTN worker (python/sglang/srt/speculative/eagle_worker.py).

    Defaults (sources; `version` picks the release's behaviour, VERSION_PRESETS):
    - draft steps: one CUDA graph over all steps (EAGLEDraftCudaGraphRunner captures
      eagle_worker.draft_forward); target verify: the target's CudaGraphRunner captured in
      ForwardMode.TARGET_VERIFY (model_executor/cuda_graph_runner.py); draft extend after verify:
      EAGLEDraftExtendCudaGraphRunner since PR #6606 (2025-05-26), so 'none' for "2025-early".
    - the draft extend proposes draft token 1, then num_steps - 1 draft forwards ("we get 1 token
      from draft prefill and (#spec steps - 1) tokens here", eagle_worker.draft_forward).
    - device-to-host syncs per cycle: 4 (seq_lens_sum .item() in _draft_preprocess_decode;
      accept_index / predict .tolist() and accept_length .tolist() in eagle_info.py verify).
    - overlap scheduler: forced off for EAGLE before spec v2 (server_args: "Overlap scheduler is
      disabled because of using eagle speculative decoding"); spec v2 (PR #11398, 2025-10; the v1
      worker deleted by PR #25464, 2026-05) overlaps for topk 1: on for "2026".
    - MLA verify: the absorbed path (models/deepseek_common/attention_backend_handler.py picks MHA
      only for extend without speculation): verify_attention 'decode'.
    - cuda_graph_max_bs: 256 for 80-160 GB GPUs at TP < 4 (server_args._handle_gpu_memory_settings).
    - mixed_chunk off (`--enable-mixed-chunk` is off by default): the scheduler runs a prefill batch
      whenever new requests fit one, and the running decode batch waits for it (scheduler.py
      get_next_batch_to_run); the request-level runs of calibration.engines.requests_loop record it.
    Host times (host_*_us): ENGINE_HOST_DEFAULTS, fitted (simulator.evidence.engine_fit, printed by
    `python -m simulator.evidence.engine_defaults`) on the runs marked `role: fit` in data/cases/public.yaml;
    kernel_efficiency 1 (the profile's kernels) unless a user fits it (`calibrate from-runs`).
    """

    kind: Literal["sglang"] = "sglang"
    version: Literal["2025-early", "2025-late", "2026"] = Field(
        "2025-late", description="Release behaviour: 2025-early (no draft-extend graph), 2025-late (all "
                                 "phases graphed, no overlap), 2026 (spec v2: overlap scheduler).")
    graph_draft_extend: Literal["full", "none"] = "full"
    cuda_graph_max_bs: int = Field(256, ge=0, le=4096)
    d2h_syncs_per_cycle: int = Field(4, ge=0, le=64)
    mixed_chunk: bool = False
    host_decode_step_us: float | None = Field(ENGINE_HOST_DEFAULTS["sglang"]["host_decode_step_us"], ge=0, le=1e6)
    host_cycle_us: float | None = Field(ENGINE_HOST_DEFAULTS["sglang"]["host_cycle_us"], ge=0, le=1e6)


MAX_CAPTURE_SIZE = 65_536  # tokens in one captured CUDA graph (vLLM's defaults stop at 512; prefill graphs reach 8k-16k)


class VllmEngine(EngineModel):
    """vLLM V1's speculative decoding (vllm/v1/spec_decode/eagle.py, v1/worker/gpu_model_runner.py).

    Defaults (sources; `version` picks the release's behaviour, VERSION_PRESETS):
    - verify: cudagraph_mode FULL_AND_PIECEWISE by default since PR #25444 (2025-09-23): a uniform
      verify batch (query length 1 + k) replays a full graph on backends that support it (FA3,
      FA2, FlashMLA, FlashInfer-MLA, Triton-MLA: UNIFORM_BATCH); before it PIECEWISE (attention
      outside the graph): graph_verify 'piecewise' for "2025-mid" (docs/design/cuda_graphs.md).
    - draft: k forwards per cycle, the first over the step's target tokens (first_draft_from_extend),
      then k - 1 single-token forwards (EagleProposer.propose); piecewise graphs for the draft head
      since PR #25109 (2025-09), eager before: graph_draft 'none' for "2025-mid".
    - MLA verify: MLACommonMetadataBuilder's default query_len_support SINGLE_ONLY classes a
      (1 + k)-token verify as prefill (non-absorbed) unless the backend supports uniform spec
      decode (FlashMLA, FlashInfer-MLA); Triton-MLA keeps SINGLE_ONLY (mla/common.py): set
      verify_attention 'prefill' for TRITON_MLA.
    - async scheduling (overlap): made compatible with spec decode by PR #24799 (2025-10), on by
      default for EAGLE/MTP since v0.14.0 (PR #31998, 2026-01): overlap_scheduler for "2026".
    - device-to-host syncs per cycle: 2 (the sampled/accepted token ids to the host in the
      rejection sampler's parse_output; seq_lens_cpu -= num_rejected_tokens_gpu.to("cpu") in the
      drafter).
    Host times: ENGINE_HOST_DEFAULTS (fitted on the `role: fit` runs of data/cases/public.yaml, as
    for SGLang); kernel_efficiency 1 unless fitted by the user.
    """

    kind: Literal["vllm"] = "vllm"
    version: Literal["2025-mid", "2026"] = Field(
        "2026", description="Release behaviour: 2025-mid (piecewise verify, eager draft), 2026 (full verify "
                            "graph, piecewise draft, async scheduling).")
    cuda_graph_max_bs: int = Field(512, ge=0, le=4096)
    d2h_syncs_per_cycle: int = Field(2, ge=0, le=64)
    host_decode_step_us: float | None = Field(ENGINE_HOST_DEFAULTS["vllm"]["host_decode_step_us"], ge=0, le=1e6)
    host_cycle_us: float | None = Field(ENGINE_HOST_DEFAULTS["vllm"]["host_cycle_us"], ge=0, le=1e6)
    host_draft_step_us: float = Field(ENGINE_HOST_DEFAULTS["vllm"]["host_draft_step_us"], ge=0, le=1e6)
    cudagraph_capture_sizes: list[int] | str | None = \
        Field(None,
              description="vLLM's compilation_config.cudagraph_capture_sizes the scenario runs with (token counts, "
                          "strictly increasing), or 'rounded_to_query': the engine profile's list with each size "
                          "rounded up to a multiple of num_steps + 1 (what model runner V1 does itself, and what gives "
                          "model runner V2 a full graph for every verify); left out: the engine profile's list. "
                          "Only with an engine_profile: the verify is padded to these sizes, and the profile's points "
                          "whose verify the other list pads differently are not used there.")

    @field_validator("cudagraph_capture_sizes", mode="before")
    @classmethod
    def _capture_sizes(cls, sizes):
        """One line for any bad value: 1 to 4096 strictly increasing token counts in 1..65,536, or
        'rounded_to_query'."""
        if sizes is None or sizes == "rounded_to_query":
            return sizes
        allowed = (f"is {sizes!r}"[:90] + "; it must be 'rounded_to_query' or a list of 1 to 4,096 strictly "
                   f"increasing token counts, each an integer in 1..{MAX_CAPTURE_SIZE:,}")
        if not isinstance(sizes, list) or not 1 <= len(sizes) <= 4096 or any(
                isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CAPTURE_SIZE for n in sizes) \
                or any(b <= a for a, b in zip(sizes, sizes[1:])):
            raise ValueError(allowed)
        return sizes


class TrtllmEngine(EngineModel):
    """TensorRT-LLM's PyTorch backend (tensorrt_llm/_torch/speculative/, pyexecutor).

    Defaults (sources):
    - one-model speculation (MTP, EAGLE-3 one-model): target, verify/accept and every draft
      forward in one CUDA graph (docs/source/features/speculative-decoding.md; tech blog 2).
    - MTP Eagle (speculative/mtp.py MTPEagleWorker.forward): one MTP layer reused k times, the
      first draft forward over the k + 1 verified tokens, then k - 1 single-token forwards
      (first_draft_from_extend); draft sampling argmax.
    - overlap scheduler on by default (docs: torch/features/overlap_scheduler).
    - MLA verify: the generation (absorbed) kernel with k + 1 query tokens: verify_attention 'decode'.
    - decode CUDA graphs up to batch 128 (DecodeCudaGraphConfig max_batch_size).
    - one device-to-host sync per cycle (the new tokens, read by the overlapped scheduler a step later).
    Host times: the profile's (no fitted defaults: simulator.evidence.engine_fit, FIT_PARAMS); kernel_efficiency 1
    unless fitted by the user.
    """

    kind: Literal["trtllm"] = "trtllm"
    version: Literal["2025"] = Field("2025", description="Release behaviour (one preset so far).")
    overlap_scheduler: bool = Field(True, description="Host work of the next cycle overlaps the GPU.")
    cuda_graph_max_bs: int = Field(128, ge=0, le=4096)


# Per release, the fields whose default differs from the class default: (kind, version) -> values.
# Applied before validation to the fields a scenario leaves out (`_apply_version`).
VERSION_PRESETS: dict[tuple[str, str], dict] = {
    ("sglang", "2025-early"): {"graph_draft_extend": "none"},
    ("sglang", "2025-late"): {},
    ("sglang", "2026"): {"overlap_scheduler": True},
    ("vllm", "2025-mid"): {"graph_verify": "piecewise", "graph_decode": "piecewise", "graph_draft": "none",
                           "graph_draft_extend": "none"},
    ("vllm", "2026"): {"overlap_scheduler": True},
    ("trtllm", "2025"): {},
}


# The engine kinds, one schema each. Every list of kinds in the code derives from this tuple: the
# scenario's union (ServingEngine), ENGINE_KINDS, the kinds that are EngineModels, the importers'
# ObservedRun.engine, the union tags of error locations and the kinds error messages name.
ENGINE_CLASSES = (LiveLoopEngine, SglangEngine, VllmEngine, TrtllmEngine)
ENGINE_KINDS: tuple[str, ...] = tuple(cls.model_fields["kind"].default for cls in ENGINE_CLASSES)
ENGINE_MODEL_KINDS: tuple[str, ...] = tuple(kind for cls, kind in zip(ENGINE_CLASSES, ENGINE_KINDS)
                                            if issubclass(cls, EngineModel))  # all but the live loop
EngineKind = Literal[ENGINE_KINDS]  # type: ignore[valid-type]


def _engine_kind(value) -> str | None:
    """The section's `kind`; a section without one is the live loop (the default engine)."""
    kind = value.get("kind", "live_loop") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if kind in ENGINE_KINDS else None


ServingEngine = Annotated[
    Union[tuple(Annotated[cls, Tag(kind)] for cls, kind in zip(ENGINE_CLASSES, ENGINE_KINDS))],  # noqa: UP007
    Discriminator(_engine_kind, custom_error_type="engine_kind",
                  custom_error_message=f"serving_engine.kind must be one of {', '.join(ENGINE_KINDS)}")]
