"""Live points of an engine (a points file's 'live' session) -> the project's live records.

Each point becomes one `LiveRun` (simulator/live_records.py) whose scenario is what ran: the
target and draft shapes, `serving_engine` of the engine's kind (naming the engine profile the
records are to be checked against, if given), `num_steps`, the acceptance rate forced, the batch
and the mean context over the timed steps. Repeats are kept as repeats; accept lengths are the
engine's own (the tokens each request emitted per step). The baseline of the same batch and
prompt length, from the same live session's baseline process, is each speculative record's
`paired_baseline_tok_per_s`.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from calibration.engines.build import CHAIN, engine_lines, of_group, of_variant
from simulator.config import Scenario
from simulator.engines.profile import placement_label
from simulator.files import write_json_atomic
from simulator.evidence.live_records import LiveRun
from simulator.profile import HardwareInfo
from simulator.units import US_PER_S


def _acceptance(engine: str, num_steps: int, acceptance_rate: float | None) -> dict:
    """The acceptance the engine was forced to: vLLM's synthetic sampler accepts each draft i.i.d.
    per request; SGLang's SGLANG_SIMULATE_ACC_LEN (match-expected) draws one length per verify step,
    the floor or the ceiling of the i.i.d. mean, weighted so the mean is exact (sglang
    srt/speculative/spec_utils.py), which is this pmf."""
    from calibration.engines.backends import ENGINES
    spec = ENGINES.get(engine)  # a points file's engine may be one no backend here runs: its draws are taken as iid
    if not num_steps or spec is None or not spec.acceptance_per_batch_step:
        return {"kind": "iid", "acceptance_rate": acceptance_rate if num_steps else 0.0}
    from simulator.acceptance import iid_mean_accept_length
    mean = min(float(num_steps + 1), max(1.0, iid_mean_accept_length(acceptance_rate, num_steps)))
    lo = int(mean)
    probs = [0.0] * (num_steps + 1)
    if lo >= num_steps + 1:
        probs[num_steps] = 1.0
    else:
        probs[lo - 1], probs[lo] = 1.0 - (mean - lo), mean - lo
    return {"kind": "empirical", "accept_length_probs": probs, "draw": "per_batch_step"}


def point_scenario(point: dict, rep_ctx: float, target: dict, draft: dict, engine: str, engine_profile: str | None,
                   profile: str, variant: tuple[int, int | None, bool] = CHAIN,
                   group: tuple[int, int | None] = (1, None), serving_section: dict | None = None,
                   gpu: str | None = None, engine_fields: dict | None = None) -> Scenario:
    """The scenario an engine point ran: its shapes, engine, num_steps, forced acceptance, batch and context
    (and, for a request-level run, its `serving:` section; `gpu`: the catalog GPU it ran on, where known;
    `engine_fields`: serving_engine fields the engine said it ran with)."""
    k, b = point["num_steps"], point["batch_size"]
    steps = max(1, k)
    topk, ndt, overlap = variant
    from calibration.engines.backends import ENGINES
    serving = {"kind": ENGINES[engine].serving_kind if engine in ENGINES else engine, "version": "2026"}
    if not overlap:
        serving["overlap_scheduler"] = False
    if engine_profile:
        serving["engine_profile"] = engine_profile
    serving.update(engine_fields or {})
    return Scenario.model_validate({
        "name": f"{engine}_{'s%d' % k if k else 'baseline'}_b{b}_p{point['prompt_len']}",
        "profile": profile, "target": target, "draft": draft, "tp_size": group[0],
        "placement": placement_label(group[0], group[1] or group[0]),
        "serving_engine": serving,
        "spec": {"method": "eagle3", "num_steps": steps, "topk": topk if k else 1,
                 "num_draft_tokens": (ndt or steps + 1) if k else steps + 1},
        "acceptance": _acceptance(engine, k, point["acceptance_rate"]),
        "workload": {"batch_size": b, "context_len": max(1, round(rep_ctx))},
        **({"serving": serving_section} if serving_section else {}),
        **({"hardware": {"gpu": gpu}} if gpu else {})})


def repeat_suffix(label: str) -> str:
    """A repeated process's suffix (`_r2`: a second process of the same configuration), or ''."""
    m = re.search(r"_r\d+$", label)
    return m.group(0) if m else ""


def live_records(paths: list[Path], target: dict, draft: dict, engine_profile: str | None = None,
                 profile: str = "h200", notes: list[str] | None = None,
                 variant: tuple[int, int | None, bool] = CHAIN,
                 group: tuple[int, int | None] | None = None) -> list[tuple[str, LiveRun]]:
    """(file name, LiveRun) per live point of the points files (points whose repeats are whole) of
    one variant (topk, num_draft_tokens, overlap: calibration.engines.build.label_variant): its
    speculative points, and the baselines of the same overlap setting as their pairs.

    Raises:
        UserInputError: a points file that is not one (calibration.engines.points).
    """
    engines, lines = engine_lines(paths, "live", notes)
    lines = [ln for ln in lines if of_variant(ln, variant)]
    try:
        lines, group = of_group(engines, lines, group, ", ".join(map(str, paths)))
    except ValueError as e:
        from simulator.inputs import UserInputError
        raise UserInputError(str(e)) from None
    labels = {ln["label"] for ln in lines}
    engines = [e for e in engines if e["label"] in labels] or engines
    info = engines[-1]["info"] if engines else {}
    tp = group[0]
    hardware = HardwareInfo(gpu_name=info.get("gpu_name") or "unknown", gpu_count=tp,
                            interconnect="single GPU" if tp == 1 else f"the engine's TP group of {tp} GPUs",
                            torch_version=info.get("torch_version") or None,
                            cuda_version=info.get("cuda_version") or None)
    baselines = {}
    for ln in lines:
        pt = ln["point"]
        reps = [r for r in pt["repeats"] if r["num_incomplete_steps"] == 0]
        if pt["num_steps"] == 0 and reps:
            baselines[(pt["batch_size"], pt["prompt_len"], repeat_suffix(ln["label"]))] = sum(
                r["num_tokens"] for r in reps) / sum(r["elapsed_us"] for r in reps) * US_PER_S
    out = []
    for ln in lines:
        pt = ln["point"]
        reps = [r for r in pt["repeats"] if r["num_incomplete_steps"] == 0]
        if not reps:
            continue
        k = pt["num_steps"]
        if k == 0 and variant[0] > 1:  # a tree's records are its speculative points (the baselines pair them)
            continue
        ctx = sum(r["context_len"] for r in reps) / len(reps)
        sc = point_scenario(pt, ctx, target, draft, ln.get("engine", "vllm"), engine_profile, profile, variant, group)
        counts = [sum(r["accept_length_counts"][i] for r in reps) for i in range(k + 1)] if k else []
        total = sum(counts)
        ntok, el = [r["num_tokens"] for r in reps], [r["elapsed_us"] for r in reps]
        rec = LiveRun(
            scenario=sc, speculative=bool(k), num_cycles=reps[0]["num_cycles"], num_tokens=sum(ntok),
            elapsed_us=sum(el), tok_per_s=sum(ntok) / sum(el) * US_PER_S,
            repeat_tok_per_s=[n / e * US_PER_S for n, e in zip(ntok, el)], repeat_num_tokens=ntok,
            repeat_elapsed_us=el,
            paired_baseline_tok_per_s=baselines.get((pt["batch_size"], pt["prompt_len"], repeat_suffix(ln["label"])),
                                                    baselines.get((pt["batch_size"], pt["prompt_len"], "")))
            if k else None,
            prompt_len=pt["prompt_len"],
            mean_accept_length=(sum(i * c for i, c in enumerate(counts, start=1)) / total) if k and total else 1.0,
            accept_length_counts=counts, forced_acceptance_rate=pt["acceptance_rate"] if k else None,
            phase_us={"host": sum(r["host_busy_us"] or 0.0 for r in reps) / len(reps)},
            hardware=hardware, created_utc=dt.datetime.fromtimestamp(ln.get("created_unix", 0) or 0,
                                                                    dt.timezone.utc).isoformat(timespec="seconds")
            if ln.get("created_unix") else None,
            command_line=f"specdecsim live --engine {ln.get('engine', 'vllm')} (engine process {ln['label']})")
        suffix = ("" if variant[0] == 1 or not k else f"_t{variant[0]}_n{variant[1]}") \
            + ("" if variant[2] else "_nooverlap")
        if group[0] > 1:
            suffix += f"_tp{group[0]}" + (f"_d{group[1]}" if k and group[1] != group[0] else "")
        suffix += repeat_suffix(ln["label"])
        out.append((f"{ln.get('engine', 'vllm')}_{pt['key']}_s{k}{suffix}.json", rec))
    return out


def write_records(records: list[tuple[str, LiveRun]], out_dir: Path) -> list[Path]:
    """Write the records into out_dir as one set; the paths written.

    They are written into a staging folder beside out_dir first, then moved in (a new out_dir is the
    staging folder renamed; into an existing one each file is os.replace'd), so a run stopped while
    writing (Ctrl-C, a full disk) leaves out_dir as it was, not a part of the set."""
    import os
    import shutil
    import tempfile

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".part", dir=out_dir.parent))
    umask = os.umask(0)
    os.umask(umask)
    stage.chmod(0o777 & ~umask)  # a folder as mkdir makes it, not mkdtemp's 0700
    try:
        for name, rec in records:
            write_json_atomic(stage / name, rec.model_dump(mode="json", exclude_none=True))
        if not out_dir.exists():
            os.replace(stage, out_dir)
        else:
            for name, _ in records:
                os.replace(stage / name, out_dir / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return [out_dir / name for name, _ in records]
