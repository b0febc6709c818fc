"""Scenario schema: what a user writes in `scenarios/*.yaml`.

Strict pydantic models (unknown keys are errors, instances are frozen). Validators only
validate; reading files (a model `config.json`, the profile) happens in `simulator.scenario`.
The workload room's schemas (`spec`, `acceptance`, `workload` with its expert routing) are
`simulator.workload_config`'s; the Scenario model here holds them.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, Self

from enum import Enum

from pydantic import BeforeValidator, Field, ValidationInfo, field_serializer, field_validator, model_validator

from simulator.engines import ENGINE_MODEL_KINDS, LiveLoopEngine, ServingEngine  # noqa: F401  (re-exported)
from simulator.schema_base import StrictModel  # noqa: F401  (re-exported: every schema model's base)
from simulator.serving.config import ServingConfig
from simulator.workload_config import (AcceptanceConfig, SpecConfig, WorkloadConfig,
                                       policy_spec)


from simulator.model_shape import (COMPONENTS, WEIGHT_FORMATS, ComponentPrecision, ModelShape,  # noqa: F401,E402
                                   WeightFormat, default_compute_dtype)  # re-exported: the models' room


class FidelityConfig(StrictModel):
    """How finely and how long the simulation runs; changes the precision, not the modelled system."""

    granularity: Literal["cycle", "forward", "kernel"] = Field(
        "forward", description="DES events per block of cycles (fastest; exact for deterministic costs), "
                               "per cycle's forwards, or per kernel (traces, per-rank jitter).")
    per_rank: bool = Field(False, description="One SimPy stream per GPU; collectives are barriers.")
    jitter_cv: float = Field(
        0.0, ge=0.0, le=2.0, description="Coefficient of variation of per-kernel lognormal noise on each GPU, 0..2.")
    num_cycles: int = Field(2000, ge=1, le=10_000_000, description="Speculative cycles simulated after warm-up.")
    warmup_cycles: int = Field(0, ge=0, le=1_000_000, description="Cycles simulated and discarded first.")

    @model_validator(mode="after")
    def _check_jitter(self) -> Self:
        if self.per_rank and self.granularity != "kernel":
            raise ValueError("per_rank: true needs granularity: kernel (ranks meet at each collective)")
        if self.jitter_cv > 0 and not self.per_rank:
            raise ValueError("jitter_cv > 0 needs per_rank: true (noise is drawn per kernel per rank)")
        return self


class CostsConfig(StrictModel):
    """Where phase latencies come from, and what-if knobs on them."""

    source: Literal["per_op", "whole_forward"] = Field(
        "per_op", description="Sum calibrated per-op latencies, or read whole-forward tables.")
    collective_latency_scale: float = Field(
        1.0, ge=0.01, le=100, description="Multiply every collective latency (what-if: NCCL tuning); 0.01..100.")
    compute_latency_scale: float = Field(1.0, ge=0.01, le=100,
                                         description="Multiply every GPU compute latency; 0.01..100.")


class HardwareConfig(StrictModel):
    """The GPU box the prediction is for (ids from the hardware catalog, `specdecsim hardware`).

    Left empty, the prediction is for the machine the profile was measured on. A GPU other than
    the profile's carries the profile to it (simulator.costs.transfer): compute is re-priced
    from datasheet figures; host overheads stay the profile's own. Collectives stay the profile's
    own too, unless `box` has another interconnect than the box they were measured on (the
    profile's `hardware.catalog_box`): then simulator.costs.collectives_model prices them from the
    box's links, with `allreduce` choosing the implementation.
    """

    gpu: str | None = Field(None, min_length=1, max_length=200,
                            description="Catalog GPU id, e.g. h100-sxm; default the box's, else the profile's.")
    box: str | None = Field(None, min_length=1, max_length=200,
                            description="Catalog box id, e.g. hgx-h100-8gpu: its GPU and GPU count.")
    allreduce: Literal["nccl", "custom", "auto"] = Field(
        "nccl", description="Allreduce implementation priced when `box` has another interconnect than the box the "
                            "profile's collectives were measured on (simulator.costs.collectives_model): nccl (NCCL's "
                            "fastest ring/tree and protocol), custom (one-shot/two-shot peer-to-peer kernel), auto "
                            "(what vLLM/SGLang pick: custom where they enable it, else NCCL). Unused otherwise.")


# Keys of the schema before the serving engine and the simulation's fidelity had sections of their
# own: (old dotted path, new dotted path).
LEGACY_RENAMES = (
    ("engine.cuda_graph", "serving_engine.cuda_graph"),
    ("engine.host_overhead_overlapped", "serving_engine.host_overhead_overlapped"),
    ("engine.first_draft_from_extend", "serving_engine.first_draft_from_extend"),
    ("engine.granularity", "fidelity.granularity"),
    ("engine.per_rank", "fidelity.per_rank"),
    ("engine.jitter_cv", "fidelity.jitter_cv"),
    ("workload.num_cycles", "fidelity.num_cycles"),
    ("workload.warmup_cycles", "fidelity.warmup_cycles"),
)


def legacy_keys(data: dict) -> list[tuple[str, str]]:
    """(old, new) dotted paths of the pre-split keys present in a scenario dict; [] for a current one."""
    found = []
    for old, new in LEGACY_RENAMES:
        section, key = old.split(".")
        if isinstance(data.get(section), dict) and key in data[section]:
            found.append((old, new))
    if isinstance(data.get("engine"), dict) and not data["engine"]:
        found.append(("engine", "serving_engine"))
    return found


def migrate_legacy_scenario(data: dict) -> dict:
    """A copy of a scenario dict with the pre-split keys moved to their sections (LEGACY_RENAMES).

    Used for records written by earlier versions; a scenario file a user writes is refused with
    the renames instead (simulator.scenario), so what a user wrote is used as written.
    """
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for old, new in legacy_keys(data):
        if "." not in old:
            continue
        (s_old, k_old), (s_new, k_new) = old.split("."), new.split(".")
        value = out[s_old].pop(k_old)
        out.setdefault(s_new, {})[k_new] = value
    if isinstance(out.get("engine"), dict) and not out["engine"]:
        out.pop("engine")
    return out


class PlacementKind(str, Enum):
    """Where the draft model runs relative to the target's TP group."""

    SHARED_TP = "shared_tp"  # sharded over the whole TP group (SGLang's draft worker inherits TP)
    COLOCATED = "colocated"  # on the first draft_tp_size GPUs of the TP group; the others wait
    DEDICATED = "dedicated"  # on a GPU of its own outside the TP group


class Placement(StrictModel):
    """Draft placement: where the draft runs and over how many GPUs it is sharded.

    Written in YAML as a label, `shared_tp`, `tp1_colocated`, `tp1_dedicated` or `tp<k>` (the
    draft sharded over the first k GPUs of the group), or as a mapping `{kind, draft_tp_size}`.
    GPUs are numbered 0..tp_size-1 in the TP group; a dedicated draft GPU is number tp_size.
    """

    kind: Annotated[PlacementKind, BeforeValidator(lambda v: _placement_kind(v))]
    draft_tp_size: int = Field(ge=1, le=64, description="GPUs the draft is sharded over.")

    @property
    def label(self) -> str:
        """The YAML label: shared_tp, tp<k>_colocated for k=1 (tp1_colocated), tp1_dedicated or tp<k>."""
        if self.kind is PlacementKind.SHARED_TP:
            return "shared_tp"
        if self.kind is PlacementKind.DEDICATED:
            return f"tp{self.draft_tp_size}_dedicated"
        return "tp1_colocated" if self.draft_tp_size == 1 else f"tp{self.draft_tp_size}"

    def draft_gpus(self, tp_size: int) -> tuple[int, ...]:
        """GPU numbers the draft runs on (0..tp_size-1 inside the group, tp_size.. outside)."""
        if self.kind is PlacementKind.DEDICATED:
            return tuple(range(tp_size, tp_size + self.draft_tp_size))
        return tuple(range(self.draft_tp_size))

    def num_gpus(self, tp_size: int) -> int:
        """GPUs a scenario with this placement uses (numbered 0..num_gpus-1): the TP group of
        `tp_size`, plus a dedicated draft's own GPUs."""
        return tp_size + (self.draft_tp_size if self.kind is PlacementKind.DEDICATED else 0)

    @property
    def dedicated(self) -> bool:
        return self.kind is PlacementKind.DEDICATED

    @staticmethod
    def parse(value, tp_size: int):
        """A placement label -> {kind, draft_tp_size}; a mapping is returned unchanged.

        Raises:
            ValueError: neither a mapping nor a placement label.
        """
        if isinstance(value, (dict, Placement)):
            return value
        if not isinstance(value, str):
            raise ValueError(f"placement must be a label (shared_tp, tp1_colocated, tp1_dedicated or tp<k>) or a "
                             f"mapping {{kind, draft_tp_size}}, got {value!r}")
        if value == "shared_tp":
            return {"kind": "shared_tp", "draft_tp_size": tp_size}
        m = _PLACEMENT_LABEL.fullmatch(value)
        if m is None:
            raise ValueError("placement must be one of shared_tp, tp1_colocated, tp1_dedicated or tp<k> "
                             "(k dividing tp_size)")
        k = int(m.group(1))
        if m.group(2) == "_dedicated":
            return {"kind": "dedicated", "draft_tp_size": k}
        if m.group(2) is None and k == tp_size:
            return {"kind": "shared_tp", "draft_tp_size": k}
        return {"kind": "colocated", "draft_tp_size": k}


_PLACEMENT_LABEL = re.compile(r"tp([1-9][0-9]{0,2})(_colocated|_dedicated)?")  # used with fullmatch


def _placement_kind(value):
    """A placement kind as written ('shared_tp', 'colocated', 'dedicated'), exactly, or refused."""
    if isinstance(value, str):
        try:
            return PlacementKind(value)
        except ValueError:
            raise ValueError(f"placement kind must be one of {', '.join(k.value for k in PlacementKind)}, "
                             f"got {value!r}") from None
    return value


class Scenario(StrictModel):
    """One speculative-decoding set-up to simulate.

    Four rooms: the models and hardware (`target`, `draft`, `tp_size`, `placement`, `hardware`, `profile`),
    the serving engine (`serving_engine`: what a cycle runs and how the host drives it), the
    workload (`spec`, `acceptance`, `workload`) and the simulation's fidelity (`fidelity`).
    """

    name: str = Field("scenario", max_length=200)
    description: str = Field("", max_length=10_000)
    profile: str = Field("h200", min_length=1, max_length=4096,
                         description="Shipped profile name or path to a profile JSON.")
    target: ModelShape
    draft: ModelShape
    tp_size: int = Field(1, ge=1, le=64, description="Target tensor-parallel degree.")
    expert_parallel_size: int = Field(
        1, ge=1, le=64, description="Expert-parallel degree of the target's MoE layers (SGLang --ep-size), 1..64, "
                                    "dividing tp_size and n_routed_experts: the routed experts are split whole over "
                                    "this many ranks (each expert's width over tp_size / expert_parallel_size) with "
                                    "the layer's allreduce combining them (expert_dispatch); attention stays TP.")
    expert_dispatch: Literal["allreduce", "all_to_all"] = Field(
        "allreduce", description="How expert parallelism reaches the experts: allreduce (tokens replicated by the TP "
                                 "attention, each rank runs its experts, the layer's allreduce combines: SGLang "
                                 "--ep-size without an a2a backend, TensorRT-LLM mixed ETP) or all_to_all (a dispatch "
                                 "and a combine around the experts: DeepEP, SGLang --moe-a2a-backend deepep; needs "
                                 "expert_parallel_size > 1).")
    placement: Placement = Field("shared_tp", validate_default=True, description="shared_tp | tp1_colocated | tp1_dedicated | tp<k>.")
    spec: SpecConfig = SpecConfig()
    acceptance: AcceptanceConfig
    workload: WorkloadConfig = WorkloadConfig()
    serving_engine: ServingEngine = LiveLoopEngine()
    fidelity: FidelityConfig = FidelityConfig()
    costs: CostsConfig = CostsConfig()
    hardware: HardwareConfig = HardwareConfig()
    serving: ServingConfig | None = Field(None, description="Serving mode (simulator.serving): arrivals, "
                                                           "queueing, chunked prefill; left out: the steady batch.")
    seed: int = Field(0, ge=0, le=2**63 - 1)

    @field_validator("name", "description")
    @classmethod
    def _printable(cls, value: str, info: ValidationInfo) -> str:
        allowed = "\n\t" if info.field_name == "description" else ""
        if bad := sorted({c for c in value if (ord(c) < 32 or 127 <= ord(c) < 160) and c not in allowed}):
            raise ValueError(f"holds control characters ({', '.join(repr(c) for c in bad)}): they would reach "
                             "the terminal and the files; printable text only" +
                             (" (line breaks and tabs allowed)" if allowed else ""))
        return value

    @field_validator("placement", mode="before")
    @classmethod
    def _parse_placement(cls, value, info: ValidationInfo):
        return Placement.parse(value, info.data.get("tp_size", 1))

    @field_serializer("placement")
    def _placement_label(self, placement: Placement) -> str:
        return placement.label

    @model_validator(mode="after")
    def _check(self) -> Self:
        k = self.placement.draft_tp_size
        if self.placement.kind is PlacementKind.DEDICATED and k != 1:
            raise ValueError(f"placement {self.placement.label}: a dedicated draft sharded over {k} GPUs is "
                             "not modelled; use tp1_dedicated")
        if self.placement.kind is PlacementKind.SHARED_TP and k != self.tp_size:
            raise ValueError(f"placement shared_tp has draft_tp_size {k}; it must equal tp_size={self.tp_size}")
        if self.placement.kind is PlacementKind.COLOCATED and (k > self.tp_size or self.tp_size % k != 0):
            raise ValueError(f"placement {self.placement.label} needs a draft TP size dividing "
                             f"tp_size={self.tp_size}, got {k}")
        for role, model in (("target", self.target), ("draft", self.draft)):
            size = self.tp_size if role == "target" else k
            if model.num_attention_heads % size != 0:
                raise ValueError(f"{role}.num_attention_heads={model.num_attention_heads} is not "
                                 f"divisible by its TP size {size}")
            if model.linear_attention_layers:
                for name in ("linear_num_key_heads", "linear_num_value_heads"):
                    heads = getattr(model, name)
                    if heads % size != 0:
                        raise ValueError(f"{role}.{name}={heads} is not divisible by its TP size {size}")
        if self.serving_engine.kind == "live_loop" and self.spec.method != "eagle3":
            raise ValueError(f"spec.method {self.spec.method}: the live loop runs EAGLE-3 drafts only; pick an "
                             f"engine kind (serving_engine.kind: {', '.join(ENGINE_MODEL_KINDS[:-1])} or "
                             f"{ENGINE_MODEL_KINDS[-1]}) for other methods")
        self._check_moe_parallel()
        # what these checks read of acceptance (kind, list lengths) is
        # simulator.studies.grid_groups.acceptance_signature: grouped sweeps check a group once per
        # signature, not once per point
        acc = self.acceptance
        s = self.spec.num_steps
        if self.spec.topk > 1 and acc.kind not in ("tree", "empirical"):
            raise ValueError(f"topk={self.spec.topk} needs acceptance kind 'tree' (a rate per candidate) or "
                             f"'empirical' (the tree's measured accept lengths), got {acc.kind!r}")
        if acc.kind == "tree" and self.spec.topk == 1:
            raise ValueError("acceptance kind 'tree' needs spec.topk > 1")
        if acc.kind == "positional" and len(acc.acceptance_rates) != s:
            raise ValueError(f"acceptance.acceptance_rates has {len(acc.acceptance_rates)} entries; "
                             f"spec.num_steps={s} needs {s}")
        if acc.kind == "empirical" and len(acc.accept_length_probs) != s + 1:
            raise ValueError(f"acceptance.accept_length_probs has {len(acc.accept_length_probs)} "
                             f"entries; spec.num_steps={s} needs {s + 1} (accept_length 1..{s + 1})")
        if self.serving is not None:
            for entry in self.serving.num_steps_by_batch:
                self._check_policy_entry(entry)
        return self

    def _check_moe_parallel(self) -> None:
        """expert_parallel_size against tp_size and the target's experts; a histogram's length."""
        ep, t = self.expert_parallel_size, self.target
        if self.expert_dispatch == "all_to_all" and ep == 1:
            raise ValueError("expert_dispatch=all_to_all needs expert_parallel_size 2..64 (got 1: no expert "
                             "parallelism, nothing is dispatched); set expert_parallel_size, or leave "
                             "expert_dispatch out (allreduce)")
        if ep > 1:
            if not t.is_moe:
                raise ValueError(f"expert_parallel_size={ep} needs an MoE target (n_routed_experts)")
            if self.tp_size % ep != 0:
                raise ValueError(f"expert_parallel_size={ep} must divide tp_size={self.tp_size}")
            if t.n_routed_experts % ep != 0:
                raise ValueError(f"expert_parallel_size={ep} must divide target.n_routed_experts="
                                 f"{t.n_routed_experts}")
        routing = self.workload.expert_routing
        if routing.kind != "uniform" and not t.is_moe:
            raise ValueError(f"workload.expert_routing kind {routing.kind} needs an MoE target (n_routed_experts)")
        if routing.kind == "histogram":
            for role, m in (("target", t), ("draft", self.draft)):
                if m.is_moe and len(routing.expert_load) != m.n_routed_experts:
                    raise ValueError(f"workload.expert_routing.expert_load has {len(routing.expert_load)} entries; "
                                     f"{role}.n_routed_experts={m.n_routed_experts} needs one per expert")
                loaded = sum(w > 0 for w in routing.expert_load)
                if m.is_moe and loaded < m.num_experts_per_tok:
                    raise ValueError(f"workload.expert_routing.expert_load has {loaded} experts with load; each token "
                                     f"picks {role}.num_experts_per_tok={m.num_experts_per_tok} distinct experts, so "
                                     "at least that many need load > 0")
            if not t.is_moe:
                raise ValueError("workload.expert_routing.expert_load is given but the target has no routed experts")

    def _check_policy_entry(self, entry) -> None:
        """A `serving.num_steps_by_batch` entry is a valid spec that the acceptance model fits."""
        where = f"serving.num_steps_by_batch (batch_size {entry.batch_size})"
        try:
            spec = policy_spec(self.spec, entry)
        except ValueError as e:
            msg = e.errors()[0]["msg"] if hasattr(e, "errors") else str(e)
            raise ValueError(f"{where}: {msg}") from None
        kind = self.acceptance.kind
        if (spec.topk > 1) != (kind == "tree"):
            raise ValueError(f"{where}: topk={spec.topk} with acceptance kind {kind!r} (tree needs topk > 1)")
        if kind == "empirical" and spec.num_steps != self.spec.num_steps:
            raise ValueError(f"{where}: empirical acceptance is given for num_steps={self.spec.num_steps} only, "
                             f"got num_steps={spec.num_steps}")
        if kind == "positional" and spec.num_steps > len(self.acceptance.acceptance_rates):
            raise ValueError(f"{where}: num_steps={spec.num_steps} exceeds the "
                             f"{len(self.acceptance.acceptance_rates)} positional acceptance rates")

    @property
    def draft_tp_size(self) -> int:
        """GPUs the draft is sharded over: tp_size for shared_tp, 1 for tp1_*, k for tp<k>."""
        return self.placement.draft_tp_size
