"""Request-level points of an engine (calibration.engines.requests_loop) -> live serving records.

Each repeat of a closed batch or a closed loop becomes one `LiveServingRun` whose scenario is what
ran: the target and draft, `serving_engine` of the engine's kind (naming the engine profile to check
against), `num_steps`, the acceptance forced, and a `serving:` section of the same workload (a closed
batch of B requests at t = 0, or a closed loop at concurrency C sending R requests), fixed prompt and
output lengths, the engine's own `max_num_seqs` and prefill chunk (`max_num_batched_tokens`). Its
columns are the engine's: each request's arrival, first token and finish, each gap between its
emissions, each engine step's decode requests and tokens. `specdecsim validate-serving` then runs
the serving DES on the scenario and compares what users compare: output tok/s, TTFT, TPOT, ITL.

A point whose requests generate one token each (the prefill alone) is no serving record: it is what
users subtract (`decode_tok_per_s`).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from calibration.engines.build import engine_lines
from calibration.engines.records import point_scenario
from simulator.evidence.live_records import LiveServingRun
from simulator.hardware import default_catalog
from simulator.inputs import UserInputError, format_validation_error
from simulator.profile import HardwareInfo
from simulator.serving.metrics import serving_metrics, users_decode_tok_per_s  # noqa: F401 (re-exported)
from simulator.serving.scheduler import ServingRecords
from simulator.units import US_PER_S

DEFAULT_CHUNK_TOKENS = 8192  # vLLM's max_num_batched_tokens where an engine line does not say


def _serving(pt: dict, info: dict, rep: dict | None = None) -> dict:
    """The serving section of a point's scenario; a Poisson point's is its run `rep`'s own arrivals."""
    n = pt["batch_size"] if pt["workload"] == "closed_batch" else pt["num_requests"]
    if pt["workload"] == "poisson":
        arrivals = {"kind": "trace", "arrival_s": sorted(q["start_us"] / US_PER_S for q in rep["requests"])}
    elif pt["workload"] == "closed_batch":
        arrivals = {"kind": "closed_batch"}
    else:
        arrivals = {"kind": "closed_loop", "concurrency": pt["concurrency"]}
    return {"arrivals": arrivals, "num_requests": n,
            "input_len": {"kind": "fixed", "tokens": pt["prompt_len"]},
            "output_len": {"kind": "fixed", "tokens": pt["max_tokens"]},
            "max_running_requests": int(info.get("max_num_seqs") or 256),
            "chunked_prefill_tokens": int(info.get("max_num_batched_tokens") or DEFAULT_CHUNK_TOKENS)}


def _columns(rep: dict, prompt_len: int, num_steps: int) -> dict:
    """The LiveServingRun columns of one run (times in us from its start)."""
    reqs = rep["requests"]
    first = {}
    for q in reqs:
        if q["token_times_us"]:
            first[q["token_times_us"][0]] = first.get(q["token_times_us"][0], 0) + 1
    itl_idx, itl = [], []
    for i, q in enumerate(reqs):
        t = q["token_times_us"]
        itl_idx += [i] * (len(t) - 1)
        itl += np.diff(t).tolist()
    starts, ends, batch, ks, acc = [], [], [], [], []
    prev = 0.0
    for s in rep["steps"]:
        firsts = first.get(s["t_us"], 0)
        decode = max(0, s["emitted"] - firsts)
        starts.append(prev)
        ends.append(s["t_us"])
        batch.append(decode)
        ks.append(num_steps if decode else 0)
        acc.append(max(0, s["tokens"] - firsts) if decode else 0)
        prev = s["t_us"]
    return dict(arrival_us=[q["start_us"] for q in reqs], admit_us=[q["start_us"] for q in reqs],
                first_token_us=[q["token_times_us"][0] for q in reqs], finish_us=[q["token_times_us"][-1] for q in reqs],
                input_tokens=[prompt_len] * len(reqs), output_tokens=[q["num_tokens"] for q in reqs],
                itl_request_idx=itl_idx, itl_us=itl, step_start_us=starts, step_end_us=ends, step_batch_size=batch,
                step_num_steps=ks, step_accepted=acc)


def _result(cols: dict, speculative: bool):
    f = lambda v: np.asarray(v, dtype=float)  # noqa: E731
    i = lambda v: np.asarray(v, dtype=np.int64)  # noqa: E731
    rec = ServingRecords(
        arrival_us=f(cols["arrival_us"]), admit_us=f(cols["admit_us"]), first_token_us=f(cols["first_token_us"]),
        finish_us=f(cols["finish_us"]), input_tokens=i(cols["input_tokens"]), output_tokens=i(cols["output_tokens"]),
        num_preemptions=np.zeros(len(cols["arrival_us"]), dtype=np.int64), itl_request_idx=i(cols["itl_request_idx"]),
        itl_us=f(cols["itl_us"]), step_start_us=f(cols["step_start_us"]), step_end_us=f(cols["step_end_us"]),
        step_batch_size=i(cols["step_batch_size"]), step_num_steps=i(cols["step_num_steps"]),
        step_prefill_tokens=np.zeros(len(cols["step_start_us"]), dtype=np.int64),
        step_accepted=i(cols["step_accepted"]), speculative=speculative)
    return serving_metrics(rec, 0.0, None, None)


def _engine_fields(info: dict, host_probe_us: float | None, mixed_forward: str | None = None) -> dict | None:
    """The serving_engine fields a run's scenario takes from its engine line and its host: whether the engine
    mixed prefill into decode steps, the host probe and how a mixed step is priced, where given."""
    fields = {"mixed_chunk": bool(info["mixed_prefill"])} if info.get("mixed_prefill") is not None else {}
    if host_probe_us is not None:
        fields["host_probe_us"] = host_probe_us
    if mixed_forward is not None:
        fields["mixed_forward"] = mixed_forward
    return fields or None


def request_records(paths: list[Path], target: dict, draft: dict, engine_profile: str | None = None,
                    profile: str = "h200", notes: list[str] | None = None,
                    host_probe_us: float | None = None,
                    mixed_forward: str | None = None) -> list[tuple[str, LiveServingRun]]:
    """(file name, LiveServingRun) per repeat of every request-level point of the points files that
    generates more than one token a request (module docstring); `host_probe_us`: the host the runs stepped
    on (serving_engine.host_probe_us), where known.

    Raises:
        UserInputError: a points file that is not one (calibration.engines.points).
    """
    engines, lines = engine_lines(paths, "live", notes, requests=True)
    info = {e["label"]: e["info"] for e in engines}
    out = []
    for ln in lines:
        pt = ln["point"]
        if pt["max_tokens"] < 2:
            continue
        k, eng = pt["num_steps"], ln.get("engine", "vllm")
        inf = info.get(ln["label"], {})
        scenario = lambda rep: point_scenario(  # noqa: E731
            pt, pt["prompt_len"], target, draft, eng, engine_profile, profile, serving_section=_serving(pt, inf, rep),
            gpu=default_catalog().gpu_for_device(inf.get("gpu_name") or ""),
            engine_fields=_engine_fields(inf, host_probe_us, mixed_forward))
        sc = None if pt["workload"] == "poisson" else scenario(None)
        hardware = HardwareInfo(gpu_name=inf.get("gpu_name") or "unknown", gpu_count=1, interconnect="single GPU",
                                torch_version=inf.get("torch_version") or None,
                                cuda_version=inf.get("cuda_version") or None)
        for rep in pt["repeats"]:
            cols = _columns(rep, pt["prompt_len"], k)
            try:
                rec = LiveServingRun(
                    scenario=sc or scenario(rep), speculative=bool(k), warmup_cycles=0, result=_result(cols, bool(k)),
                    hardware=hardware, created_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    command_line=f"specdecsim live --engine {eng} (engine process {ln['label']}, point {pt['key']})",
                    **cols)
            except ValidationError as e:  # a run the points file's own checks passed, at odds as a serving record
                raise UserInputError(format_validation_error(
                    f"{', '.join(map(str, paths))}: process {ln['label']}, point {pt['key']}, run {rep['repeat_idx']}",
                    e)) from None
            out.append((f"{ln['label']}_{pt['key']}_r{rep['repeat_idx']}.json", rec))
    return out


def mean_run_s(point: dict) -> float:
    """A request-level point's mean wall time over its runs, s."""
    return float(np.mean([r["elapsed_us"] for r in point["repeats"]])) / US_PER_S


def prefill_alone_s(lines: list[dict]) -> dict[tuple[str, int, int], float]:
    """(process label, batch size, prompt length) -> the mean wall time of that closed batch given one
    new token a request (the prefill alone, what users subtract), s."""
    return {(ln["label"], ln["point"]["batch_size"], ln["point"]["prompt_len"]): mean_run_s(ln["point"])
            for ln in lines if ln["point"]["workload"] == "closed_batch" and ln["point"]["max_tokens"] == 1}


def decode_tok_per_s(paths: list[Path], notes: list[str] | None = None) -> list[dict]:
    """What a user computes of each closed batch: (tokens - B) / (the run's wall time - the same batch's
    prefill-alone run's), each repeat's mean; with the whole run's tok/s and the prefill run's seconds."""
    _, lines = engine_lines(paths, "live", notes, requests=True)
    prefill = prefill_alone_s(lines)
    rows = []
    for ln in lines:
        pt = ln["point"]
        if pt["workload"] != "closed_batch" or pt["max_tokens"] < 2:
            continue
        b, n = pt["batch_size"], pt["max_tokens"]
        t1 = prefill.get((ln["label"], b, pt["prompt_len"]))
        tn = mean_run_s(pt)
        spread = [r["elapsed_us"] / US_PER_S for r in pt["repeats"]]
        rows.append(dict(label=ln["label"], num_steps=pt["num_steps"], batch_size=b, prompt_len=pt["prompt_len"],
                         acceptance_rate=pt["acceptance_rate"], max_tokens=n, generate_s=tn, prefill_s=t1,
                         repeat_generate_s=spread, tok_per_s=b * n / tn,
                         decode_tok_per_s=users_decode_tok_per_s(b, n, tn, t1)))
    return rows
