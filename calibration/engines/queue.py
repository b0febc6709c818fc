"""A device session's engine processes, from a campaign file, written as ProcessPlan JSON files in
the order they run (`specdecsim calibrate engine-queue-run DIR POINTS --deadline-s S` runs them;
`bash calibration/engines/device.sh start` with QUEUE=DIR).

    specdecsim calibrate engine-queue sglang-h200 OUT_DIR

A campaign is data: calibration/engines/campaigns/<name>.yaml (its name is the queue's), validated
as `Campaign`. Its `parts` run in order, each a list of processes from one source:
- `requests`: request_plans (plans.py): request-level runs (closed batches, closed loops) per num_steps;
- `grid`: calibrate_plans and/or live_plans (plans.py) over num_steps x batch sizes x prompt lengths,
  the num_steps in `spread_order` where `spread`, both sessions `interleave`d by num_steps;
- `shard`: a TP rank's shard of a target (shard.shard_plans), its acceptance the i.i.d. rate of a
  published mean accept length;
- `plan`: one process written out (its points listed);
- `queue`: another campaign's processes.
then selected (`labels` in that order, `exclude_labels`, `num_steps_in`, `speculative`,
`label_endswith`, `points_where`) and changed (`label`, `label_suffix`, `set` fields, `points_set`
fields of every point, `capture_sizes_for_num_steps`), as the session asked. The source's ProcessPlan
fields are `engine`, `models` (target and draft config names, data/models/engine/) and `fields`.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from calibration.engines.campaigns import CAMPAIGNS_DIR, campaign_names
from calibration.engines.plans import (DEFAULT_BATCH_SIZES, DEFAULT_CALIBRATE_ACCEPTANCE, DEFAULT_LIVE_ACCEPTANCES,
                                       DEFAULT_PROMPT_LENS, ProcessPlan, calibrate_plans, interleave, live_plans,
                                       model_configs, request_plans, spread_order)
from calibration.engines.shard import shard_plans
from simulator.schema_base import StrictModel

DEFAULT_MODELS = ("llama-3.1-8b-instruct", "eagle3-llama-3.1-8b")


class PrefillGrid(StrictModel):
    """plans.prefill_points: closed batches of one new token (the prefill alone) at batch sizes x prompt lengths."""

    batch_sizes: list[int] = Field(min_length=1)
    prompt_lens: list[int] = Field(min_length=1)


class Grid(StrictModel):
    """calibrate_plans / live_plans over these num_steps (each with the baseline's process)."""

    sessions: list[Literal["calibrate", "live"]] = Field(default_factory=lambda: ["calibrate", "live"], min_length=1)
    num_steps: list[int] = Field(min_length=1)
    spread: bool = Field(False, description="The num_steps in spread_order (the middle first, then the ends).")
    interleave: bool = Field(True, description="Both sessions paired by num_steps (else one after the other).")
    batch_sizes: list[int] = Field(default_factory=lambda: list(DEFAULT_BATCH_SIZES))
    prompt_lens: list[int] = Field(default_factory=lambda: list(DEFAULT_PROMPT_LENS))
    acceptance_rate: float = DEFAULT_CALIBRATE_ACCEPTANCE
    acceptances: list[float] = Field(default_factory=lambda: list(DEFAULT_LIVE_ACCEPTANCES))
    prefill: PrefillGrid | None = Field(None, description="calibrate: the prefill alone at these batches x prompts.")


class Requests(StrictModel):
    """plans.request_plans: request-level runs (closed batches, closed loops) per num_steps (0: the baseline)."""

    num_steps: list[int] = Field(min_length=1)
    batch_sizes: list[int] = Field(default_factory=lambda: [64, 32, 16, 8, 4, 1])
    prompt_lens: list[int] = Field(default_factory=lambda: list(DEFAULT_PROMPT_LENS))
    acceptances: list[float] = Field(default_factory=lambda: [0.6, 0.75, 0.9])
    max_tokens: int = 256
    more_max_tokens: list[int] = Field(default_factory=lambda: [128, 512])
    concurrencies: list[int] = Field(default_factory=lambda: [64, 16, 4])
    request_rates: list[Annotated[float, Field(ge=0.01, le=10_000)]] = Field(
        default_factory=list, description="Poisson arrivals at each rate, req/s (0.01..10000; none by default).")
    repeats: int = 2


class AcceptLength(StrictModel):
    """A published mean accept length (the sampled token included) at a number of draft steps."""

    mean: float = Field(gt=1.0)
    num_steps: int = Field(ge=1)


class Shard(StrictModel):
    """shard.shard_plans: one TP rank's shard of the target at these layer counts."""

    tp_size: int = Field(ge=1)
    layer_counts: list[int] = Field(min_length=1)
    num_steps: list[int]
    batch_sizes: list[int] = Field(min_length=1)
    context_len: int = Field(ge=1)
    accept_length: AcceptLength
    cuda_graphs: bool = True


class Part(StrictModel):
    """One source of processes, what is kept of them, and what is changed."""

    queue: str | None = None
    grid: Grid | None = None
    requests: Requests | None = None
    shard: Shard | None = None
    plan: dict | None = Field(None, description="One ProcessPlan's own fields (session, label, num_steps, points).")
    engine: str | None = None
    models: tuple[str, str] = DEFAULT_MODELS
    fields: dict = Field(default_factory=dict, description="ProcessPlan fields the source's processes share.")
    labels: list[str] | None = None
    exclude_labels: list[str] = Field(default_factory=list)
    num_steps_in: list[int] | None = None
    speculative: bool = False
    label_endswith: str | None = None
    points_where: dict | None = None
    label: str | None = None
    label_suffix: str = ""
    set: dict = Field(default_factory=dict)
    points_set: dict = Field(default_factory=dict)
    capture_sizes_for_num_steps: int | None = None

    @model_validator(mode="after")
    def _one_source(self):
        given = [k for k in ("queue", "grid", "requests", "shard", "plan") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a part takes its processes from one of queue, grid, requests, shard or plan; this one names "
                             f"{', '.join(given) or 'none'}")
        return self


class Campaign(StrictModel):
    """A device session's queue: what it is for, and its parts in run order."""

    description: str
    parts: list[Part] = Field(min_length=1)


def load_campaign(name: str) -> Campaign:
    from simulator.inputs import read_yaml
    return Campaign.model_validate(read_yaml(CAMPAIGNS_DIR / f"{name}.yaml", "campaign file"))


def iid_acceptance_for(accept_length: AcceptLength) -> float:
    """The i.i.d. per-draft rate whose mean accept length at that many steps is the one given."""
    from scipy.optimize import brentq

    from simulator.acceptance import iid_mean_accept_length
    return brentq(lambda a: iid_mean_accept_length(a, accept_length.num_steps) - accept_length.mean, 1e-9, 1 - 1e-9)


def vllm_capture_sizes_for_spec(num_steps: int, max_size: int = 512) -> list[int]:
    """vLLM's default capture sizes each rounded up to a multiple of num_steps + 1 (model runner
    V1's `adjust_cudagraph_sizes_for_spec_decode` does this; V2 keeps the list as given)."""
    from calibration.engines.backends.vllm import default_capture_sizes
    from simulator.engines.profile import rounded_to_query
    return rounded_to_query(default_capture_sizes(max_size), num_steps)


def _source(part: Part, seen: tuple[str, ...]) -> list[ProcessPlan]:
    if part.queue is not None:
        return queue_plans(part.queue, seen)
    if part.shard is not None:
        s = part.shard
        t_cfg, d_cfg = model_configs(*part.models)
        return shard_plans(t_cfg, d_cfg, s.tp_size, s.layer_counts, s.num_steps, s.batch_sizes, s.context_len,
                           iid_acceptance_for(s.accept_length), cuda_graphs=s.cuda_graphs)
    t_cfg, d_cfg = model_configs(*part.models)
    base = dict(engine=part.engine, target_config=t_cfg, draft_config=d_cfg, **part.fields)
    if part.plan is not None:
        return [ProcessPlan(**base, **part.plan)]
    if part.requests is not None:
        r = part.requests
        return request_plans(base, r.num_steps, r.batch_sizes, r.prompt_lens, r.acceptances, max_tokens=r.max_tokens,
                             more_max_tokens=tuple(r.more_max_tokens), concurrencies=tuple(r.concurrencies),
                             repeats=r.repeats, request_rates=tuple(r.request_rates))
    g = part.grid
    ks = spread_order(g.num_steps) if g.spread else list(g.num_steps)
    made = {"calibrate": lambda: calibrate_plans(base, ks, g.batch_sizes, g.prompt_lens, g.acceptance_rate,
                                                     prefill=g.prefill and (g.prefill.batch_sizes, g.prefill.prompt_lens)),
            "live": lambda: live_plans(base, ks, g.batch_sizes, g.prompt_lens, g.acceptances)}
    plans = [made[s]() for s in g.sessions]
    if g.interleave and len(plans) == 2:
        return interleave(plans[0], plans[1], ks[0])
    return [p for ps in plans for p in ps]


def _kept(part: Part, plans: list[ProcessPlan]) -> list[ProcessPlan]:
    if part.labels is not None:
        by = {p.label: p for p in plans}
        plans = [by[x] for x in part.labels]
    return [p for p in plans if p.label not in part.exclude_labels
            and (part.num_steps_in is None or p.num_steps in part.num_steps_in)
            and (not part.speculative or p.num_steps)
            and (part.label_endswith is None or p.label.endswith(part.label_endswith))]


def _changed(part: Part, plan: ProcessPlan) -> ProcessPlan:
    update = {**part.set, "label": part.label if part.label is not None else plan.label + part.label_suffix}
    points = plan.points
    if part.points_where is not None:  # a written-out plan's points as written (their defaults left out)
        points = [q for q in (part.plan["points"] if part.plan is not None else points)
                  if all(q[k] == v for k, v in part.points_where.items())]
    if part.points_set:
        points = [{**q, **part.points_set} for q in points]
    if points is not plan.points:
        update["points"] = points
    if part.capture_sizes_for_num_steps is not None:
        update["capture_sizes"] = vllm_capture_sizes_for_spec(part.capture_sizes_for_num_steps)
    return plan.model_copy(update=update)


def queue_plans(name: str, seen: tuple[str, ...] = ()) -> list[ProcessPlan]:
    """The processes of campaign `name`, in run order.

    Raises:
        ValueError: a campaign that takes in itself (directly or round a loop).
    """
    if name in seen:
        raise ValueError(f"campaign {name}: takes in itself ({' -> '.join((*seen, name))})")
    out = []
    for part in load_campaign(name).parts:
        out += [_changed(part, p) for p in _kept(part, _source(part, (*seen, name)))]
    return out


QUEUES = {name: partial(queue_plans, name) for name in campaign_names()}


def check_queue(plans: list[ProcessPlan]) -> None:
    """Each plan as engine-queue-run reads it.

    Raises:
        UserInputError: a plan a campaign's `set` or `points_set` made invalid, naming it and its first error.
    """
    from pydantic import ValidationError

    from simulator.inputs import UserInputError, format_validation_error
    for p in plans:
        try:
            type(p).model_validate(p.model_dump(mode="json"))
        except ValidationError as e:
            raise UserInputError(format_validation_error(f"campaign process {p.label}", e, max_lines=2)) from None


def write_queue(plans: list[ProcessPlan], out: Path) -> list[Path]:
    """Each plan as a file of `out` (NNN_label.json, in run order), checked first (`check_queue`)."""
    check_queue(plans)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for i, p in enumerate(plans):
        f = out / f"{i:03d}_{p.label}.json"
        f.write_text(json.dumps(p.model_dump(mode="json"), indent=1), encoding="utf-8")
        files.append(f)
    return files
