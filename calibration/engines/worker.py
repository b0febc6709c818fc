"""One engine process: start the engine once, measure a plan's points, append each as a JSON line.

    specdecsim calibrate engine-process PLAN.json POINTS.jsonl     (what calibration.engines.campaign starts)

Resumable: a point whose key (the process label and the point's key) is already in POINTS.jsonl
is not measured again, and a process whose points are all there does not start its engine. Each
line is written whole and flushed to disk before the next point starts, so a process killed
half-way loses at most the point it was measuring (a torn last line is skipped on reading).
"""

from __future__ import annotations

import json
import os
import time
import traceback
from dataclasses import asdict
from pathlib import Path

from calibration.engines.plans import ProcessPlan
from calibration.engines.points import POINTS_SCHEMA, read_raw_text
from calibration.engines.requests_loop import measure_requests, summarize_run
from calibration.engines.run_loop import measure_point, prompt_pool


def read_lines(path: Path) -> list[dict]:
    """The complete JSON lines of this project's points file (a resuming process's view: a torn or
    foreign line is skipped; `calibration.engines.points` validates a file a user gives). A missing
    file holds none."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in read_raw_text(path).splitlines():
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):  # torn, foreign, 5,000 digits or nested too deep: not ours
            continue
        if isinstance(rec, dict) and rec.get("schema") == POINTS_SCHEMA:
            out.append(rec)
    return out


def done_keys(path: Path) -> set[tuple[str, str]]:
    return {(r.get("label"), r.get("point", {}).get("key")) for r in read_lines(path) if r.get("kind") == "point"}


def append_line(path: Path | None, rec: dict) -> None:
    """Append one JSON line and flush it to disk (after a newline, where a process ended while
    writing the file's last line, so the torn line stays alone). None: a TP group's rank other
    than 0, which writes nothing."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    torn = False
    if path.is_file() and path.stat().st_size:
        with open(path, "rb") as f:
            f.seek(-1, 2)
            torn = f.read(1) != b"\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(("\n" if torn else "") + json.dumps({"schema": POINTS_SCHEMA, **rec}, separators=(",", ":")) + "\n")
        f.flush()
        os.fsync(f.fileno())


def start_backend(plan: ProcessPlan, workdir: Path, rank: int = 0):
    """The plan's engine, started by its registered backend (calibration.engines.backends; vLLM and
    SGLang: folders of config.json written under workdir); in a TP group (calibration.engines.tp_launch)
    this rank's."""
    from calibration.engines.backends import engine_spec
    os.environ.update(plan.engine_env)  # read by the engine when it is imported
    if rank:
        workdir = workdir / f"rank{rank}"  # each rank writes its own copy of the model folders
    return engine_spec(plan.engine).start(plan, workdir, rank)


def run_plan(plan: ProcessPlan, out: Path, workdir: Path, log=print) -> int:
    """Measure the plan's points not yet in `out`; the number measured. In a TP group
    (calibration.engines.tp_launch) every rank runs this; rank 0 alone writes `out`, and a rank
    whose engine is not SPMD (SGLang's followers) serves rank 0 until it stops."""
    from calibration.engines.tp_launch import group_rank
    rank, world = group_rank()
    if world != plan.tensor_parallel_size:
        raise RuntimeError(f"{plan.label}: tensor_parallel_size {plan.tensor_parallel_size} runs as a group of that "
                           f"many processes (specdecsim calibrate engine-process starts it); this one is in a group "
                           f"of {world}")
    done = done_keys(out)  # read before any rank's engine starts: no point is written until every rank is up
    todo = [p for p in plan.point_plans() if (plan.label, p.key) not in done]
    if not todo:
        log(f"{plan.label}: all {len(plan.points)} points already measured")
        return 0
    t0 = time.perf_counter()
    backend = start_backend(plan, workdir, rank=rank)
    info = backend.info()
    if rank:
        if not getattr(backend, "spmd", True):
            log(f"{plan.label} rank {rank}: serving rank 0")
            backend.serve()
            return 0
        out = None  # the same points, measured in step with rank 0, written by rank 0 only
    log(f"{plan.label}: engine up in {time.perf_counter() - t0:.1f} s ({info.engine} {info.engine_version}, "
        f"{info.attention_backend}, {info.cudagraph_mode}, runner {info.model_runner}, hooks {','.join(info.hooks)})")
    append_line(out, dict(kind="engine", label=plan.label, session=plan.session, num_steps=plan.num_steps,
                          tensor_parallel_size=plan.tensor_parallel_size,
                          draft_tensor_parallel_size_asked=plan.draft_tensor_parallel_size,
                          info={**asdict(info), "variant": dict(
                              topk=plan.topk, num_draft_tokens=plan.num_draft_tokens, overlap=plan.overlap,
                              uniform_expert_routing=plan.uniform_expert_routing, engine_env=plan.engine_env,
                              cuda_graphs=plan.cuda_graphs, mla_attention_backend=plan.mla_attention_backend,
                              num_hidden_layers=plan.target_config.get("num_hidden_layers")),
                              # which model ran: a profile or records built from these points name theirs
                              "model": {"target": plan.target_config, "draft": plan.draft_config}},
                          startup_s=time.perf_counter() - t0, created_unix=time.time()))
    steady = [p for p in todo if p.workload == "steady"]  # request-level points draw fresh prompts of their own
    pool = prompt_pool(max(p.batch_size for p in steady), max(p.prompt_len for p in steady), seed=plan.prompt_seed,
                       vocab_size=plan.target_config.get("vocab_size")) if steady else []
    n = 0
    try:
        for p in todo:
            t1 = time.perf_counter()
            try:
                if p.workload == "steady":
                    res = measure_point(backend, p, pool, plan.max_model_len)
                else:
                    res = measure_requests(backend, p, vocab_size=plan.target_config.get("vocab_size"))
            except Exception as e:  # noqa: BLE001 - one point's failure is recorded, the rest go on
                append_line(out, dict(kind="error", label=plan.label, key=p.key, error=repr(e),
                                      trace=traceback.format_exc()[-2000:]))
                log(f"{plan.label} {p.key}: FAILED {e!r}")
                if world > 1:  # the ranks are out of step (or one is gone): the group's next point would fail too
                    log(f"{plan.label}: the TP group stops after a failed point (its ranks no longer run in step)")
                    break
                continue
            append_line(out, dict(kind="point", label=plan.label, session=plan.session, engine=info.engine,
                                  engine_version=info.engine_version, point=res, wall_s=time.perf_counter() - t1))
            rep = res["repeats"][-1]
            if p.workload == "steady":
                log(f"{plan.label} {p.key}: {rep['num_tokens'] / rep['elapsed_us'] * 1e6:.1f} tok/s, "
                    f"{rep['elapsed_us'] / rep['num_cycles']:.0f} us/step ({time.perf_counter() - t1:.1f} s)")
            else:
                s = summarize_run(rep)
                log(f"{plan.label} {p.key}: {s['tok_per_s']:.1f} tok/s over {rep['elapsed_us'] / 1e6:.3f} s, "
                    f"TTFT p50 {s['median_ttft_ms']:.1f} ms, {rep['num_engine_steps']} steps "
                    f"({time.perf_counter() - t1:.1f} s)")
            n += 1
    finally:
        backend.shutdown()
    return n
