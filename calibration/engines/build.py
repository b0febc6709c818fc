"""Points files of engine processes -> an engine-native profile, and -> live records.

CPU only (no torch, no engine): the GPU side writes JSON lines (calibration/engines/worker.py);
these functions read them back, so a profile or a set of records can be rebuilt anywhere, and a
few-run profile can be built from a subset of a calibration's points.

A point's figures: the wall time per step and the host's work from its uninstrumented repeats;
the GPU parts from its instrumented repeat, scaled to the uninstrumented step where the GPU bound
it (the CUDA events lengthen a step by 1-2%); where the host bound it, the spans hold the GPU's
waits for the host's launches, so they are kept as measured but priced from nowhere
(simulator.costs.engine_native reads GPU parts from GPU-bound points only); the accept lengths pooled
over every repeat.
"""

from __future__ import annotations

import datetime as dt
import re
from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from calibration.engines.points import is_request_point, read_points_files
from simulator.inputs import UserInputError, format_validation_error
from simulator.engines.profile import GPU_BOUND_BLOCKED_FRAC, EnginePoint, EngineProfile, missing_fits
from simulator.evidence.engine_profile_fit import fit_parts

SGLANG_PERIOD_MATCH_FRAC = 0.02  # an SGLang speculative step's GPU period within this of its wall period
# an SGLang step whose instrumented GPU period holds more than this outside its timed graph replays
# waited for the host: the CUDA events' lengthening of that step is the host's, so the replays' spans
# (GPU time) are kept as measured, not scaled by it, and the idle gap is not GPU work
SGLANG_GPU_IDLE_FRAC = 0.10
# vLLM's model runner V1 (what 0.26 runs MoE targets on) waits for the GPU inside a speculative step,
# not at the output copy the wait hook times (its hook saw about 10 us a step at every batch while the
# host thread's CPU time equalled the wall period: a spin-wait): there the step was GPU-bound where the
# timed parts filled all but this share of the instrumented GPU period, and the host's own work is not
# measured (the period less a wait that was not timed would count the wait as work)
V1_GPU_IDLE_FRAC = 0.10
V1_RUNNER = "vllm.v1.worker.gpu_model_runner."
GPU_PARTS = ("target_forward_us", "sample_us", "propose_us", "draft_extend_us", "draft_steps_us", "gpu_period_us")


def _mean(vals) -> float | None:
    vals = [v for v in vals if v is not None]
    return float(np.mean(vals)) if vals else None


def engine_point(point: dict, engine: str | None = None, overlap: bool = True,
                 model_runner: str = "") -> EnginePoint | None:
    """One measured point (a worker line's `point`) as an EnginePoint; None if no repeat is whole.

    `overlap` False: the engine ran its scheduler synchronously (SGLang with the overlap scheduler
    off), so the host waits for the GPU inside the step, where no hook times the wait: the step is
    the host's work and the GPU's in turn, and the host's work is the step less the timed GPU parts
    (each a graph replay), with no other GPU work beside them. `model_runner`: the engine's model
    runner class (the engine line's); vLLM's V1 runner's speculative steps are judged by their GPU's
    idle share (V1_GPU_IDLE_FRAC)."""
    from calibration.engines.backends import ENGINES
    spec = ENGINES.get(engine) if engine is not None else None
    graph_spans = spec is not None and spec.host_paced_by_gpu_idle  # SGLang's: the wait is not where the hook is
    reps = [r for r in point["repeats"] if r["num_incomplete_steps"] == 0 and r["num_cycles"] > 0]
    if not reps:
        return None
    clean = [r for r in reps if not r["instrumented"]] or reps
    inst = [r for r in reps if r["instrumented"]]
    counts = np.sum([r["accept_length_counts"] for r in reps], axis=0)
    lengths = np.arange(1, len(counts) + 1)
    fields: dict = dict(
        num_steps=point["num_steps"], batch_size=point["batch_size"], prompt_len=point["prompt_len"],
        acceptance_rate=point["acceptance_rate"],
        context_len=float(np.mean([r["context_len"] for r in reps])),
        step_us=float(np.mean([r["elapsed_us"] / r["num_cycles"] for r in clean])),
        instrumented_step_us=_mean(r["elapsed_us"] / r["num_cycles"] for r in inst),
        mean_accept_length=float(counts @ lengths / counts.sum()) if counts.sum() else 1.0,
        accept_length_counts=[int(c) for c in counts],
        host_busy_us=_mean(r["host_busy_us"] for r in clean),
        host_blocked_us=_mean(r["host_blocked_us"] for r in clean))
    v1_spec = model_runner.startswith(V1_RUNNER) and bool(point["num_steps"])
    if v1_spec:
        fields["host_busy_us"] = None  # V1's wait was not where the hook times it: set below where host-bound
    v1_host_paced = False
    if inst:
        means = inst[0]["means"]
        for name in GPU_PARTS:
            fields[name] = means.get(name)
        fields["target_tokens_padded"] = means.get("target_tokens_padded")
        fields["draft_extend_tokens_padded"] = means.get("draft_extend_tokens_padded")
        blocked, period = inst[0]["host_blocked_us"], inst[0]["elapsed_us"] / inst[0]["num_cycles"]
        fields["gpu_bound"] = blocked is not None and blocked > GPU_BOUND_BLOCKED_FRAC * period
        if not fields["gpu_bound"] and graph_spans and point["num_steps"]:
            # SGLang's EAGLE worker (spec v2) waits for the GPU inside run_batch, not where the hook
            # times the output copy, so the wait says nothing here. Its verify, draft and draft
            # extend are each one CUDA-graph replay: the span of an event pair around a replay is
            # the GPU's time in it whatever paced the launch, so the parts are kept as GPU time
            # where the instrumented GPU period is the step's (the events did not shift it); the
            # other GPU work (period less the parts) then holds any idle gap, and the host's
            # work (which holds its waits) prices the step where it is the longer
            gp = fields.get("gpu_period_us")
            fields["gpu_bound"] = bool(gp) and abs(period - gp) <= SGLANG_PERIOD_MATCH_FRAC * gp
        parts = [fields.get(n) for n in ("target_forward_us", "sample_us")]
        if fields.get("gpu_period_us") and all(p is not None for p in parts):
            rest = fields["gpu_period_us"] - sum(parts) - (fields.get("propose_us") or 0.0)
            fields["other_gpu_us"] = max(0.0, rest)
            if v1_spec and not fields["gpu_bound"]:
                # the parts are CUDA-graph replays (V1 captures full graphs at the verify's token counts):
                # a replay's span is the GPU's time in it whatever paced its launch, so they are GPU time
                # either way; where the GPU idled more than V1_GPU_IDLE_FRAC the host paced the step (its
                # work is the step: kept) and the GPU's other work is not measured (its period held gaps)
                fields["gpu_bound"] = True
                if rest > V1_GPU_IDLE_FRAC * fields["gpu_period_us"]:
                    v1_host_paced = True
                    fields["host_busy_us"] = _mean(r["host_busy_us"] for r in clean)
                    fields["other_gpu_us"] = None  # not measured: the GPU's period held the host's gaps
        if not overlap and graph_spans:
            timed = [fields.get(n) for n in ("target_forward_us", "sample_us")]
            if all(t is not None for t in timed):
                fields["gpu_bound"] = True  # the parts are graph spans; the step is theirs plus the host's
                fields["other_gpu_us"] = 0.0
                fields["host_busy_us"] = max(0.0, fields["step_us"] - sum(timed) - (fields.get("propose_us") or 0.0))
        idle = (fields.get("other_gpu_us") or 0.0) / fields["gpu_period_us"] if fields.get("gpu_period_us") else 0.0
        host_paced = graph_spans and overlap and idle > SGLANG_GPU_IDLE_FRAC
        if host_paced and fields["gpu_bound"]:
            fields["other_gpu_us"] = 0.0
        if fields["gpu_bound"] and fields["instrumented_step_us"] and overlap and not host_paced and not v1_host_paced:
            scale = fields["step_us"] / fields["instrumented_step_us"]
            fields["gpu_parts_scale"] = scale
            for name in (*GPU_PARTS, "other_gpu_us"):
                if fields.get(name) is not None:
                    fields[name] *= scale
    if v1_spec and fields.get("host_busy_us") is None:
        fields["host_pace_us"] = fields["step_us"]
    return EnginePoint(**fields)


CHAIN = (1, None, True)  # (topk, num_draft_tokens, overlap): a chain with the engine's overlap / async scheduling
_LABEL = re.compile(r"^(?:calibrate|live)_s(\d+)(?:_t(\d+))?(?:_n(\d+))?(_nooverlap)?(?:_tp\d+)?(?:_d\d+)?"
                    r"(?:_mla_[a-z]+)?(?:_w\d+)?(?:_r\d+)?$")


@lru_cache(maxsize=1)
def _model_suffixes() -> tuple[str, ...]:
    """The label suffixes naming a model (a campaign part's `label_suffix` for a second model, e.g. `_qwen3_8b`):
    each shipped engine config's name (data/models/engine/<name>.config.json) with '-' and '.' as '_'."""
    from simulator.profile import data_dir
    names = (p.name.removesuffix(".config.json") for p in (data_dir() / "models" / "engine").glob("*.config.json"))
    suffixes = ["_" + re.sub(r"[-.]", "_", n) for n in names] + list(_FAMILY_SUFFIXES)
    return tuple(sorted(suffixes, key=len, reverse=True))


# label suffixes that name the MoE target by its family: the 2026-12-07 SGLang campaigns' Qwen3-30B-A3B processes
# (calibration/engines/campaigns/sglang-requests*.yaml, sglang-h100-moe.yaml: label_suffix _moe)
_FAMILY_SUFFIXES = ("_moe",)


def label_variant(label: str) -> tuple[int, int | None, bool] | None:
    """(topk, num_draft_tokens, overlap) of a campaign process from its label (the suffixes
    `_t{topk}`, `_n{num_draft_tokens}`, `_nooverlap` that `specdecsim calibrate engine` adds; `_mla_{name}`
    a process whose MLA layers ran a backend asked for (queue vllm-h200-mla-paths, each in a points file of
    its own); `_w{steps}` a process of the same configuration timed in windows of that many steps; `_r{i}`
    marks a repeated process of the same configuration; a shipped engine config's name (`_model_suffixes`,
    e.g. `_qwen3_8b`), a process of another model than the queue's first, in a points file of its own; `_uniform`
    last, a MoE target's process with each token's experts drawn uniformly, `uniform_expert_routing`, as its
    engine line's variant says); None for a label of another kind."""
    label = label.removesuffix("_uniform")
    model = next((x for x in _model_suffixes() if label.endswith(x)), "")
    m = _LABEL.match(label.removesuffix(model) if model else label)
    if not m:
        return None
    return (int(m.group(2) or 1), int(m.group(3)) if m.group(3) else None, m.group(4) is None)


def of_variant(line: dict, variant: tuple[int, int | None, bool]) -> bool:
    """A point line of this variant; a baseline (num_steps 0) of the same overlap setting serves
    every topk."""
    v = label_variant(line["label"])
    if v is None:
        return False
    if line["point"]["num_steps"] == 0:
        return v[2] == variant[2]
    return v == variant


def engine_group(engine: dict) -> tuple[int, int | None]:
    """(target TP, draft TP) of an engine process as it ran (its engine line; the draft's TP as the
    engine built it where recorded, else as asked, else the target's; None for the baseline). Lines
    written before TP groups ran hold neither: (1, 1)."""
    info = engine.get("info") or {}
    tp = int(info.get("tp_size") or engine.get("tensor_parallel_size") or 1)
    if not engine.get("num_steps"):
        return tp, None
    return tp, int(info.get("draft_tp_size") or engine.get("draft_tensor_parallel_size_asked") or tp)


def group_name(group: tuple[int, int | None]) -> str:
    tp, d = group
    return f"tp {tp}" + ("" if d is None else f", draft tp {d}")


def of_group(engines: list[dict], lines: list[dict], group: tuple[int, int | None] | None,
             what: str) -> tuple[list[dict], tuple[int, int | None]]:
    """The point lines of one TP group (`engine_group`: a baseline serves every draft TP of its
    target TP) and the group; None takes the only one the lines hold.

    Raises:
        ValueError: `group` None and the lines hold several, or none of `group`.
    """
    by_label = {e["label"]: engine_group(e) for e in engines}
    of = {ln["label"]: by_label.get(ln["label"], (1, 1 if ln["point"]["num_steps"] else None)) for ln in lines}
    held = sorted({of[ln["label"]] for ln in lines}, key=lambda g: (g[0], g[1] or 0))
    spec = [g for g in held if g[1] is not None]
    listed = "; ".join(map(group_name, spec or held))  # a baseline's group is every draft placement's
    tps = sorted({g[0] for g in held})
    if group is not None and group[0] is None:  # a draft TP asked, the target's TP the only one there
        if len(tps) > 1:
            raise ValueError(f"{what}: points of target TP {', '.join(map(str, tps))}: choose one with --tp")
        group = (tps[0] if tps else 1, group[1])
    if group is None:
        if len(tps) > 1 or len(spec) > 1:
            raise ValueError(f"{what}: points of several TP groups ({listed}): choose one with --tp and --draft-tp")
        group = spec[0] if spec else (tps[0] if tps else 1, None)
    if group[1] is not None and group[1] not in (1, group[0]):
        raise ValueError(f"{what}: draft TP {group[1]} over target TP {group[0]}: a draft runs at TP 1 or the "
                         f"target's (there: {listed})")
    out = [ln for ln in lines if of[ln["label"]][0] == group[0] and
           (ln["point"]["num_steps"] == 0 or of[ln["label"]][1] == group[1])]
    spec_asked = group[1] is not None and any(ln["point"]["num_steps"] for ln in lines)
    if lines and not out or spec_asked and not any(ln["point"]["num_steps"] for ln in out):
        raise ValueError(f"{what}: no points of {group_name(group)} as the engine ran them (there: {listed}; a "
                         "draft TP the engine did not apply is recorded as what it built)")
    return out, group


def engine_lines(paths: list[Path], session: str | None = None, notes: list[str] | None = None,
                 requests: bool = False) -> tuple[list[dict], list[dict]]:
    """(engine lines, point lines) of the points files (validated: calibration.engines.points), of
    one session ('calibrate' / 'live') or all; the steady windows' points, or with `requests` the
    request-level runs' (calibration.engines.requests_loop)."""
    engines, points = [], []
    for rec in read_points_files(list(paths), notes):
        if session is not None and rec.get("session") != session:
            continue
        if rec["kind"] == "engine":
            engines.append(rec)
        elif rec["kind"] == "point" and is_request_point(rec) == requests:
            points.append(rec)
    return engines, points


SHAPE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
              "vocab_size", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "kv_lora_rank",
              "q_lora_rank")


def model_mismatch(engines: list[dict], target: dict, draft: dict | None, any_label: bool = False,
                   options: tuple[str, str] = ("--target", "--target/--draft")) -> str | None:
    """Why the points of these engine lines (`engine_lines`) are not of this target and draft (HF
    configs), from the model each engine process recorded (engine lines since 2026-12-04; older SGLang
    lines only the target's depth, older vLLM lines nothing, and are checked as far as that goes), or None.
    `any_label`: every process checked (request-level ones too), not only calibrate_ / live_ ones. `options`: the
    caller's options that name the target, and the target and draft, in the reason's hint."""
    def differ(ran: dict | None, given: dict | None) -> list[str]:
        if not ran or not given:
            return []
        return [f"{k} {ran.get(k)} (given {given.get(k)})" for k in SHAPE_KEYS if ran.get(k) != given.get(k)]
    for e in engines:
        if not any_label and label_variant(e["label"]) is None:  # not a calibrate_ / live_ process (a shard)
            continue
        model = e["info"].get("model")
        if not isinstance(model, dict):  # older lines: the target's depth where the variant recorded it
            layers = (e["info"].get("variant") or {}).get("num_hidden_layers")
            if layers is not None and layers != target.get("num_hidden_layers"):
                return (f"process {e['label']} ran a target of {layers} layers (given "
                        f"{target.get('num_hidden_layers')}); give the {options[0]} these points were measured with")
            continue
        for role, given in (("target", target), ("draft", draft if e.get("num_steps") else None)):
            if bad := differ(model.get(role), given):
                return (f"process {e['label']} ran another {role}: {', '.join(bad[:4])}; give the {options[1]} "
                        "these points were measured with")
    return None


HOST_PROBE_SPREAD = 1.5  # windows whose host probes differ by more than this ran on cores of two speeds


def window_probes(lines: list[dict]) -> list[float]:
    """The host probes timed in the stepping thread before and after each calibration window, us."""
    return [v for ln in lines for r in ln["point"]["repeats"]
            for v in (r.get("host_probe_us"), r.get("host_probe_before_us")) if v]


def host_probe_us(lines: list[dict]) -> float | None:
    """The host's speed the calibration stepped at (EngineProfile.host_probe_us): the median of its windows'
    probes, us; None where no window was probed."""
    probes = window_probes(lines)
    return float(np.median(probes)) if probes else None


def host_speed_note(lines: list[dict], pts: list[EnginePoint]) -> str | None:
    """A note where the calibration's windows ran on cores of two speeds (their `host_probe_us`, timed
    in the stepping thread, differ by more than HOST_PROBE_SPREAD x): the points the host paced (not
    GPU-bound) took the speed of the core they ran on; None where no window was probed or the probes agree."""
    probes = window_probes(lines)
    if not probes or max(probes) <= HOST_PROBE_SPREAD * min(probes):
        return None
    paced = sorted({(p.num_steps, p.batch_size) for p in pts if p.gpu_bound is False})
    which = (", ".join(f"num_steps {k} batch {b}" for k, b in paced[:6]) + (f" and {len(paced) - 6} more"
                                                                            if len(paced) > 6 else "")) or "none"
    return (f"the host's cores ran at two speeds during calibration (the host probe in the stepping thread took "
            f"{min(probes) / 1000:.1f}-{max(probes) / 1000:.1f} ms over {len(probes)} probes; `specdecsim diagnose "
            f"host-cores` times each core): the steps the host paced ({which}) moved with it, GPU-bound ones did not")


def _prefill(paths: list[Path], labels: set[str], engines: list[dict]) -> tuple[str | None, list]:
    """(a note, the PrefillFits) of the prefill-alone runs (closed batches of one new token) that the
    profile's calibration processes (`labels`) measured (simulator.evidence.prefill_fit)."""
    from simulator.evidence.prefill_fit import PrefillRun, fit_prefill
    budget = {e["label"]: int(e["info"].get("max_num_batched_tokens") or 0) for e in engines}
    from calibration.engines.backends import ENGINES
    # piecewise CUDA graphs (vLLM's) run a step of up to the largest capture size; a larger one runs eagerly
    graph_max = {e["label"]: max(e["info"].get("cudagraph_capture_sizes") or [0]) for e in engines
                 if (spec := ENGINES.get(e["info"].get("engine", ""))) is not None and spec.prefill_graph_edge
                 and "PIECEWISE" in str(e["info"].get("cudagraph_mode", ""))}
    from calibration.engines.requests_loop import wall_times_valid
    every = [ln for ln in engine_lines(paths, "calibrate", requests=True)[1] if ln["label"] in labels
             and ln["point"]["workload"] == "closed_batch" and ln["point"]["max_tokens"] == 1]
    alone = [(ln["label"], ln["point"]) for ln in every if wall_times_valid(ln)]
    unread = sorted({label for label, _ in alone if not budget.get(label)})
    runs = [PrefillRun(bool(pt["num_steps"]), pt["batch_size"], pt["prompt_len"], budget[label], rep["elapsed_us"],
                       graph_max.get(label, 0))
            for label, pt in alone if budget.get(label) for rep in pt["repeats"]]
    where = ", ".join(map(str, paths))
    lines = [f"prefill: the runs of the prefill alone of {', '.join(unread)} not fitted: their engine line holds no "
             "info.max_num_batched_tokens (the chunk they ran at)"] if unread else []
    if stale := sorted({ln["label"] for ln in every if not wall_times_valid(ln)}):
        lines.append(f"prefill: the runs of the prefill alone of {', '.join(stale)} not fitted: SGLang runs timed from "
                     "the last output before them (before start_clock_us), their wall times hold the idle time too")
    if not runs:
        return "; ".join(lines) or None, []
    try:
        fits = fit_prefill(runs, lines)
    except ValueError as e:  # runs of one kind at two chunks
        raise ValueError(f"{where}: {e}") from None
    lines.insert(0, f"prefill: fitted on {len(runs)} runs of the prefill alone "
                 + "; ".join(f"{'with' if f.speculative else 'without'} the draft, median |err| "
                             f"{100 * f.median_abs_error_frac:.1f}%, max {100 * f.max_abs_error_frac:.1f}%" for f in fits)
                 if fits else f"prefill: {len(runs)} runs of the prefill alone, none fitted")
    return "; ".join(lines), fits


def _one_routing_per_num_steps(engines: list[dict]) -> None:
    """Refuse speculative processes of one num_steps whose experts were routed otherwise (vLLM's routing simulator,
    `uniform_expert_routing`, against the model's router): their verify's experts touched differ.

    Raises:
        ValueError: naming two such processes.
    """
    seen: dict[int, tuple[str, bool]] = {}
    for e in engines:
        k, uniform = e.get("num_steps") or 0, bool(((e.get("info") or {}).get("variant") or {}).get(
            "uniform_expert_routing"))
        if k and (other := seen.setdefault(k, (e["label"], uniform)))[1] != uniform:
            a, b = (e["label"], other[0]) if uniform else (other[0], e["label"])
            raise ValueError(f"engine processes {a} (experts drawn uniformly) and {b} (routed by the model's router) "
                             f"both measured num_steps {k}: their verify touches other experts; leave one out "
                             "(--exclude-process)")


def build_profile(paths: list[Path], name: str, target: dict, draft: dict | None,
                  keep=None, command_line: str | None = None, git_commit: str | None = None,
                  catalog_gpu: str | None = None, notes: list[str] | None = None,
                  variant: tuple[int, int | None, bool] = CHAIN,
                  exclude_labels: tuple[str, ...] = (),
                  group: tuple[int, int | None] | None = None) -> EngineProfile:
    """The engine-native profile of the calibration points in `paths`.

    Args:
        target, draft: the ModelShape fields the engine ran (recorded in the profile).
        keep: a predicate on (num_steps, batch_size, prompt_len) choosing the points (few runs).
        variant: (topk, num_draft_tokens, overlap) of the processes to build from (`label_variant`):
            their speculative points and the baselines of the same overlap setting.
        exclude_labels: engine processes left out by name (`--exclude-process`: a process known
            to be off, such as the first one on a cold machine; the profile's notes name them).
        group: (target TP, draft TP) of the processes to build from, as the engine ran them
            (`engine_group`); None: the only one the points hold.

    Raises:
        ValueError: no calibration point in the files.
    """
    engines, lines = engine_lines(paths, "calibrate", notes)
    if notes is not None and (odd := sorted({ln["label"] for ln in lines if ln["label"].startswith("calibrate_")
                                             and label_variant(ln["label"]) is None})):
        notes.append(f"engine process{'es' if len(odd) > 1 else ''} {', '.join(odd)} left out: no calibration label "
                     "(calibrate_s<num_steps>[_t<topk>][_n<tokens>][_nooverlap][_r<i>][_<model>][_uniform])")
    lines = [ln for ln in lines if of_variant(ln, variant) and ln["label"] not in exclude_labels and (
        keep is None or keep((ln["point"]["num_steps"], ln["point"]["batch_size"], ln["point"]["prompt_len"])))]
    lines, group = of_group(engines, lines, group, ", ".join(map(str, paths)))
    labels = {ln["label"] for ln in lines}
    engines = [e for e in engines if e["label"] in labels]
    _one_routing_per_num_steps(engines)
    runner = {e["label"]: e["info"].get("model_runner", "") for e in engines}
    pts = []
    for ln in lines:
        try:
            ep = engine_point(ln["point"], ln.get("engine"), overlap=variant[2], model_runner=runner.get(ln["label"], ""))
        except ValidationError as e:  # measured times outside what an engine step can take (1e-300 us, say)
            raise UserInputError(format_validation_error(
                f"{', '.join(map(str, paths))}: point {ln['point']['key']} of {ln['label']}", e, max_lines=2)) from None
        if ep is not None:
            pts.append(ep)
    if not pts:
        raise ValueError(f"no calibration points in {', '.join(map(str, paths))}")
    if variant != CHAIN and not any(p.num_steps for p in pts):
        there = sorted({str(v) for ln in engine_lines(paths, "calibrate")[1]
                        if ln["point"]["num_steps"] and (v := label_variant(ln["label"])) is not None})
        raise ValueError(f"no speculative calibration points of topk {variant[0]}, num_draft_tokens {variant[1]}, "
                         f"overlap {'on' if variant[2] else 'off'} in {', '.join(map(str, paths))} (there: "
                         f"{', '.join(there) or 'none'} as (topk, num_draft_tokens, overlap))")
    info = (engines[-1]["info"] if engines else {})
    spec = [e["info"] for e in engines if e.get("num_steps")]
    sizes = sorted({s for e in engines for s in e["info"].get("cudagraph_capture_sizes", [])})
    engine_notes = sorted({n for e in engines for n in e["info"].get("notes", [])})
    src = dict(spec[-1] if spec else info)
    modes = {e.get("cudagraph_mode", "") for e in spec}
    if len(modes) > 1:  # SGLang's mode names the verify's tokens, which differ by num_steps
        src["cudagraph_mode"] = re.sub(r"\d+ tokens each", "num_draft_tokens each", src.get("cudagraph_mode", ""))
    fields = dict(
        name=name, engine=info.get("engine", "vllm"), engine_version=info.get("engine_version", ""),
        attention_backend=src.get("attention_backend", ""), cudagraph_mode=src.get("cudagraph_mode", ""),
        model_runner=src.get("model_runner", ""),
        async_scheduling=variant[2] and bool(src.get("async_scheduling", True)),
        gpu_name=info.get("gpu_name", ""), catalog_gpu=catalog_gpu, torch_version=info.get("torch_version", ""),
        cuda_version=info.get("cuda_version", ""), target=target, draft=draft,
        max_num_seqs=int(info.get("max_num_seqs", 0)), cudagraph_capture_sizes=sizes,
        host_probe_us=host_probe_us(lines), topk=variant[0], num_draft_tokens=variant[1], tp_size=group[0],
        draft_tp_size=group[1] if any(p.num_steps for p in pts) else None,
        how_measured=("inside the engine: CUDA events at the model runner's step start, around the target's graph "
                      "replay, the sampler, the draft's propose, prefill graph and decode graphs; host work = step "
                      "period - host wait on the GPU's output; dummy weights, synthetic acceptance; "
                      f"hooks {', '.join(src.get('hooks', []))}"),
        created_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), command_line=command_line,
        git_commit=git_commit, notes=engine_notes + ([f"engine processes left out: {', '.join(exclude_labels)}"]
                                                     if exclude_labels else [])
        + [n for n in [host_speed_note(lines, pts)] if n],
        points=sorted(pts, key=lambda p: (p.num_steps, p.batch_size, p.prompt_len)))
    prefill_note, fields["prefill"] = _prefill(paths, labels, engines)
    if fields["catalog_gpu"] is None and fields["gpu_name"]:
        from simulator.hardware import default_catalog
        fields["catalog_gpu"] = default_catalog().gpu_for_device(fields["gpu_name"])
    if prefill_note:
        fields["notes"].append(prefill_note)
    unfitted = EngineProfile.model_construct(**fields)  # the points, to fit the parts' forms on
    try:
        fits = fit_parts(unfitted)
    except ValueError as e:
        raise ValueError(f"{', '.join(map(str, paths))}: {e}") from None
    if lacking := missing_fits(pts, fits):
        held = (f"{len(pts)} point{'s' if len(pts) != 1 else ''}: num_steps "
                f"{', '.join(map(str, sorted({p.num_steps for p in pts})))}, batch sizes "
                f"{', '.join(map(str, sorted({p.batch_size for p in pts})))}")
        why = ("; no point holds the GPU parts (no instrumented repeat has `means`: were the CUDA-event "
               "timers on?)" if all(p.target_forward_us is None for p in pts) else "")
        raise ValueError(f"{', '.join(map(str, paths))}: the calibration points ({held}) are too few to fit "
                         f"{', '.join(lacking)} (a profile needs the baseline at two or more batch sizes and, where "
                         f"it speculates, each part measured at two or more points){why}")
    try:
        return EngineProfile(**fields, fits=fits)
    except ValidationError as e:
        raise ValueError(f"{', '.join(map(str, paths))}: the points do not make a profile: "
                         f"{format_validation_error(name, e)}") from None
