"""Request-level runs of a real engine against the serving DES priced from the engine's own profile (issue 45).

    python benchmarks/bench_request_level.py [E2E.jsonl.gz ...] [--engine-profile NAME] [--profile P]
                                             [--campaign-log LOG.gz ...] [--acceptance measured|replay|scenario]
                                             [--models TARGET DRAFT] [--each-num-steps]

Defaults: vLLM 0.26.0 on the lent H100 SXM (data/engine_runs/h100_vllm_0.26.0_e2e/: Llama-3.1-8B +
EAGLE-3 at num_steps 3, 5 and the baseline; closed batches of 1-64 requests, 1k and 4k prompts, 128-512
new tokens, acceptance 0.6-0.9; closed loops at concurrency 4, 16, 64), each run its own serving
record (calibration.engines.request_records), priced from the H100 engine profile
(data/engine_profiles/vllm-0.26.0-h100-llama-3.1-8b-eagle3.json, built from the calibration processes
of data/engine_runs/h100_vllm_0.26.0_calibrate/: other engine processes, whose prefill grid (batch 1-24,
prompts 512-6144) is apart from these runs' 1k / 4k). Nothing of these runs is fitted.

Per workload and speculation: output tok/s over the whole run (the prefill included), TTFT p50 and
TPOT p50, predicted / measured - 1 per run (simulator.evidence.validate_serving.check_record); a run
passes where |tok/s error| <= 8% or within the spread its point's repeated runs measured (the two
runs' tok/s apart, max / min - 1). Each speculative run is priced at the i.i.d. rate of the accept length
it realized (`--acceptance measured`, validate_serving.realized_acceptance_rate: vLLM's seeded draws over
a few requests are off the formula; `scenario`: the rate forced). Per closed batch (its runs' mean): the users' decode tok/s,
(B x N - B) / (generate s - the prefill alone's s), measured against the DES's of both. Last, the
GPU minutes the engine processes took (their campaign logs: engine start and points).
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibration.engines.request_records import request_records, users_decode_tok_per_s  # noqa: E402
from calibration.engines.build import engine_lines  # noqa: E402
from simulator.evidence.validate_serving import (check_record, realized_acceptance_rate,  # noqa: E402
                                                 realized_request_rates)
from simulator.inputs import UserInputError  # noqa: E402
from simulator.scenario import load_profile_for  # noqa: E402
from simulator.serving.run import mean_wall_s, run_serving_draws  # noqa: E402

RUNS = ROOT / "data" / "engine_runs"
E2E = sorted((RUNS / "h100_vllm_0.26.0_e2e").glob("e2e*.jsonl.gz"))
LOGS = sorted((RUNS / "h100_vllm_0.26.0_e2e").glob("campaign_*.log.gz")) + sorted(
    (RUNS / "h100_vllm_0.26.0_calibrate").glob("campaign_*.log.gz"))
BAR = 0.08


def _forced_rate(name: str) -> float | None:
    """The acceptance rate a run's point forced, from its name (`_a0.6_`; a baseline or an empirical
    acceptance has none)."""
    forced = re.search(r"_a(\d+(?:\.\d+)?)_", name)
    return float(forced.group(1)) if forced else None


def _point_key(name: str) -> str:
    return re.sub(r"_r\d+\.json$", "", name)


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def gpu_minutes(logs: list[Path]) -> dict[str, float]:
    """Seconds each engine process ran (its log's 'done after', 'timeout after' or 'points failed (error lines)
    after'), by process label, summed over the label's processes (a queue resumes a failed one in a new process)."""
    out: dict[str, float] = {}
    for log in logs:
        with gzip.open(log, "rt", encoding="utf-8", errors="replace") as f:
            for line in f:
                if m := re.match(r"^(\S+): (?:done|timeout|points failed \(error lines\)) after (\d+) s", line):
                    key = f"{log.parent.name}/{m.group(1)}"
                    out[key] = out.get(key, 0.0) + float(m.group(2))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("points", nargs="*", type=Path, default=E2E)
    ap.add_argument("--engine-profile", default="vllm-0.26.0-h100-llama-3.1-8b-eagle3")
    ap.add_argument("--profile", default="h200", help="The op-table profile for what no engine profile prices.")
    ap.add_argument("--campaign-log", nargs="*", type=Path, default=None,
                    help="Campaign logs for the GPU minutes (default: the campaign_*.log.gz beside the points files; "
                         "for the default points, the H100 vLLM e2e and calibrate folders').")
    ap.add_argument("--acceptance", choices=["measured", "replay", "scenario"], default="measured")
    ap.add_argument("--models", nargs=2, metavar=("TARGET", "DRAFT"), default=["llama-3.1-8b-instruct",
                                                                             "eagle3-llama-3.1-8b"],
                    help="The configs the engine ran (data/models/engine/<name>.config.json).")
    ap.add_argument("--host-probe-us", type=float, default=None,
                    help="The host probe of the host the runs stepped on (serving_engine.host_probe_us: the median "
                         "of its calibration's window probes, EngineProfile.host_probe_us), us; left out: the host "
                         "as the engine profile measured it.")
    ap.add_argument("--host-of", default=None, metavar="ENGINE_PROFILE",
                    help="Take --host-probe-us from this engine profile's host_probe_us (a calibration on the host "
                         "the runs stepped on).")
    ap.add_argument("--mixed-forward", choices=["apart", "one"], default=None,
                    help="How a prefill riding a decode step is priced (serving_engine.mixed_forward; left out: "
                         "the scenario's default, one).")
    ap.add_argument("--each-speedup", action="store_true",
                    help="the speedup table with every speculative point (left out: those outside 0.05 only)")
    ap.add_argument("--each-run", action="store_true",
                    help="after the runs past 8%%, every run's measured and predicted tok/s, TTFT p50 and TPOT p50")
    ap.add_argument("--each-num-steps", action="store_true",
                    help="after the best-num_steps table, each cell's measured and predicted tok/s per num_steps")
    ap.add_argument("--host-of-runs", action="store_true",
                    help="Take --host-probe-us from the runs themselves: the median of the host probes they recorded "
                         "after each run (RequestRun.host_probe_us).")
    a = ap.parse_args()
    if a.host_of_runs:
        if a.host_of is not None or a.host_probe_us is not None:
            sys.exit("--host-of-runs, --host-of and --host-probe-us: give one")
        try:
            probes = [r["host_probe_us"] for ln in engine_lines(a.points, requests=True)[1]
                      for r in ln["point"]["repeats"] if r.get("host_probe_us")]
        except (FileNotFoundError, UserInputError) as e:
            sys.exit(f"error: {e}")
        if not probes:
            sys.exit(f"--host-of-runs: no run of {', '.join(p.name for p in a.points)} recorded a host probe "
                     "(host_probe_us: the committed runs of 2026-12-07 and before recorded none)")
        a.host_probe_us = float(np.median(probes))
        if not 1.0 <= a.host_probe_us <= 1e7:
            sys.exit(f"{', '.join(map(str, a.points))}: the runs' host_probe_us (their median {a.host_probe_us:g} us, "
                     "--host-of-runs) is outside 1..1e7 us")
    if a.host_of is not None:
        from simulator.engines.profile import load_engine_profile as _load
        if a.host_probe_us is not None:
            sys.exit("--host-of and --host-probe-us: give one")
        try:
            a.host_probe_us = _load(a.host_of).host_probe_us
        except (FileNotFoundError, UserInputError) as e:
            sys.exit(f"--host-of: {e}")
        if a.host_probe_us is None:
            sys.exit(f"--host-of {a.host_of}: the profile recorded no host probe (host_probe_us)")
    if a.host_probe_us is not None and not 1.0 <= a.host_probe_us <= 1e7:
        sys.exit(f"--host-probe-us {a.host_probe_us}: outside 1..1e7 us")
    from calibration.engines.plans import model_configs, model_shapes
    t_cfg, d_cfg = model_configs(*a.models)
    target, draft = model_shapes(*a.models)
    from simulator.costs.engine_native import carried_to, profile_mismatch
    from simulator.engines.profile import load_engine_profile
    try:
        eprof = load_engine_profile(a.engine_profile)
    except (FileNotFoundError, UserInputError) as e:
        sys.exit(f"--engine-profile: {e}")
    if a.campaign_log is None:
        a.campaign_log = LOGS if a.points == E2E else sorted({q for p in a.points for q in p.parent.glob("campaign_*.log.gz")})
    from calibration.engines.build import model_mismatch
    try:
        notes: list[str] = []
        engines, lines = engine_lines(a.points, requests=True, notes=notes)
        for n in notes:  # a torn last line, skipped: said, not hidden
            print(f"note: {n}")
        if not lines:
            sys.exit(f"{', '.join(map(str, a.points))}: no request-level runs (closed batches, closed loops) in these "
                     "points files")
        if why := model_mismatch(engines, t_cfg, d_cfg, any_label=True, options=("--models", "--models")):
            sys.exit(f"--models {' '.join(a.models)}: not the models these runs ran ({why})")
        recs = request_records(a.points, target, draft, a.engine_profile, a.profile, host_probe_us=a.host_probe_us,
                               mixed_forward=a.mixed_forward)
    except (FileNotFoundError, UserInputError) as e:
        sys.exit(f"error: {e}")
    if not recs:
        sys.exit(f"{', '.join(map(str, a.points))}: no request-level runs of the live session (closed batches, closed "
                 "loops; a calibration's runs of the prefill alone are not compared here)")
    if why := profile_mismatch(eprof, recs[0][1].scenario, carry_shapes=True):
        sys.exit(f"--engine-profile {a.engine_profile} does not price these runs ({why}): give the --models the "
                 "engine ran and a profile of them or of their family of layers")
    sc = recs[0][1].scenario
    to = [g for g in [carried_to(eprof, sc)] if g]
    if profile_mismatch(eprof, sc):  # another shape of the same family of layers: the profile is carried to it
        to.append(f"{sc.target.name}'s shape")
    carried = f" (measured on {eprof.catalog_gpu}, carried to {' and '.join(to)})" if to else ""
    if a.host_probe_us is not None:
        carried += (f", host probe {a.host_probe_us:,.0f} us against the profile's "
                    + (f"{eprof.host_probe_us:,.0f} us" if eprof.host_probe_us else "none (not scaled)"))

    prof, _ = load_profile_for(recs[0][1].scenario, a.profile)
    rows = [(name, rec, check_record(name, rec, prof, acceptance=a.acceptance)) for name, rec in recs]
    from calibration.engines.requests_loop import wall_times_valid
    if stale := sum(not wall_times_valid(ln) for ln in engine_lines(a.points, requests=True)[1]):
        return _tpot_only(a, rows, stale, carried)

    by_point = defaultdict(list)
    for name, _, c in rows:
        by_point[_point_key(name)].append(c.measured_tok_per_s)
    spread = {k: max(v) / min(v) - 1 for k, v in by_point.items()}
    groups = defaultdict(list)
    for name, rec, c in rows:
        groups[(_workload(rec), "speculative" if c.speculative else "baseline")].append((name, c))
    print(f"{len(rows)} runs of {len(by_point)} points ({', '.join(p.name for p in a.points)}), engine profile "
          f"{a.engine_profile}{carried}, acceptance "
          f"{a.acceptance}\n")
    print("| workload | runs | tok/s median abs err | max | within 8% | within 8% or repeat spread | "
          "TTFT p50 median abs err | max | TPOT p50 median abs err | max |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (wl, sp), rs in sorted(groups.items()):
        e = np.abs([c.tok_per_s_error_frac for _, c in rs])
        ok = sum(abs(c.tok_per_s_error_frac) <= max(BAR, spread[_point_key(n)]) for n, c in rs)
        t = np.abs([c.ttft_p50_error_frac for _, c in rs])
        p = np.abs([c.tpot_p50_error_frac for _, c in rs if np.isfinite(c.tpot_p50_error_frac)])
        print(f"| {wl}, {sp} | {len(rs)} | {100 * np.median(e):.1f}% | {100 * e.max():.1f}% | {int((e <= BAR).sum())} | "
              f"{ok} | {100 * np.median(t):.1f}% | {100 * t.max():.1f}% | {100 * np.median(p):.1f}% | "
              f"{100 * p.max():.1f}% |")
    print("\nRuns past 8% (their point's repeat spread beside them):\n")
    print("| run | tok/s err | repeat spread | TTFT p50 err | TPOT p50 err |")
    print("|---|---:|---:|---:|---:|")
    if not any(abs(c.tok_per_s_error_frac) > BAR for _, _, c in rows):
        print("| none | | | | |")
    for name, _, c in sorted(rows, key=lambda r: -abs(r[2].tok_per_s_error_frac)):
        if abs(c.tok_per_s_error_frac) > BAR:
            print(f"| {name[:-5]} | {_pct(c.tok_per_s_error_frac)} | {100 * spread[_point_key(name)]:.1f}% | "
                  f"{_pct(c.ttft_p50_error_frac)} | {_pct(c.tpot_p50_error_frac)} |")
    if a.each_run:
        _each_run(rows)
    _decode(a, rows, prof)
    _best_steps(rows, spread, a.each_num_steps)
    _speedup(rows, a.each_speedup)
    secs = gpu_minutes(a.campaign_log)
    each = ", ".join(f"{k.split('/')[-1]} {v / 60:.1f}" for k, v in secs.items())
    print(f"\nGPU minutes: {sum(secs.values()) / 60:.1f} over {len(secs)} engine processes ({each})")
    return 0


def _workload(rec) -> str:
    """The workload a record ran: closed_batch, closed_loop, or poisson (a trace of the run's own arrivals)."""
    arr = rec.scenario.serving.arrivals
    return "poisson" if arr.kind == "trace" else arr.kind


def _tpot_only(a, rows, stale: int, carried: str) -> int:
    """Points whose wall times do not hold (SGLang's runs timed from the last output before them:
    requests_loop.wall_times_valid): TPOT p50 alone, the times between a run's own outputs."""
    print(f"{len(rows)} runs ({', '.join(p.name for p in a.points)}), engine profile {a.engine_profile}{carried}, "
          f"acceptance {a.acceptance}: {stale} points timed from the last output before them (no `clock: submit`): their wall "
          "times, tok/s and TTFT do not hold, TPOT alone is compared\n")
    groups = defaultdict(list)
    for name, rec, c in rows:
        groups[(_workload(rec), "speculative" if c.speculative else "baseline")].append(c)
    print("| workload | runs | TPOT p50 median abs err | max | within 8% |")
    print("|---|---:|---:|---:|---:|")
    for (wl, sp), cs in sorted(groups.items()):
        p = np.abs([c.tpot_p50_error_frac for c in cs if np.isfinite(c.tpot_p50_error_frac)])
        print(f"| {wl}, {sp} | {len(p)} | {100 * np.median(p):.1f}% | {100 * p.max():.1f}% | {int((p <= BAR).sum())} |")
    print("\nRuns past 8% in TPOT p50:\n")
    print("| run | TPOT p50 err |")
    print("|---|---:|")
    past = sorted(((n, c) for n, _, c in rows if np.isfinite(c.tpot_p50_error_frac) and abs(c.tpot_p50_error_frac) > BAR),
                  key=lambda nc: -abs(nc[1].tpot_p50_error_frac))
    print("\n".join(f"| {n[:-5]} | {_pct(c.tpot_p50_error_frac)} |" for n, c in past) or "| none | |")
    secs = gpu_minutes(a.campaign_log)
    print(f"\nGPU minutes: {sum(secs.values()) / 60:.1f} over {len(secs)} engine processes")
    return 0


def _best_steps(rows, spread, each: bool = False) -> None:
    """The best num_steps of every closed batch (batch, prompt, acceptance) measured at several num_steps
    (the baseline counts as num_steps 0): the one of the most output tok/s (its runs' mean), measured and
    predicted. A cell whose measured best and runner-up are apart by less than their points' repeat spread
    is a tie: either counts as right."""
    cells = defaultdict(lambda: defaultdict(list))
    for name, rec, c in rows:
        sc = rec.scenario
        if sc.serving.arrivals.kind != "closed_batch":
            continue
        k = sc.spec.num_steps if c.speculative else 0
        key = (sc.serving.num_requests, sc.serving.input_len.tokens, sc.serving.output_len.tokens)
        rate = getattr(sc.acceptance, "acceptance_rate", None) or _forced_rate(name)
        cells[key][(k, rate if c.speculative else None)].append((name, c))
    right, total, lines, detail = 0, 0, [], []
    for (b, p, n), by in sorted(cells.items()):
        base = [v for (k, _), v in by.items() if k == 0]
        for acc in sorted({r for (k, r) in by if k}):
            cand = {0: base[0]} if base else {}
            cand.update({k: v for (k, r), v in by.items() if k and r == acc})
            if len(cand) < 3:
                continue
            meas = {k: np.mean([c.measured_tok_per_s for _, c in v]) for k, v in cand.items()}
            pred = {k: np.mean([c.predicted_tok_per_s for _, c in v]) for k, v in cand.items()}
            order = sorted(meas, key=lambda k: -meas[k])
            best_m, second = order[0], order[1]
            tie = meas[best_m] / meas[second] - 1 <= max(spread[_point_key(cand[best_m][0][0])],
                                                           spread[_point_key(cand[second][0][0])])
            best_p = max(pred, key=lambda k: pred[k])
            ok = best_p == best_m or (tie and best_p == second)
            right += ok
            total += 1
            lines.append(f"| {b} | {p} | {n} | {acc} | {best_m}{' (tie with %d)' % second if tie else ''} | "
                         f"{best_p} | {'yes' if ok else 'no'} |")
            detail += [f"| {b} | {p} | {n} | {acc} | {k} | {meas[k]:,.0f} | {pred[k]:,.0f} ({pred[k] / meas[k] - 1:+.1%}) |"
                       for k in sorted(cand)]
    if not total:
        return
    print(f"\nThe best num_steps (of {', '.join(str(k) for k in sorted({k for v in cells.values() for k, _ in v}))}) "
          f"of {total} closed batches: right at {right} ({100 * right / total:.0f}%)\n")
    print("| batch | prompt | new tokens | acceptance | measured best | predicted best | right |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    print("\n".join(lines))
    if each:  # --each-num-steps
        print("\n| batch | prompt | new tokens | acceptance | num_steps | measured tok/s | predicted tok/s (err) |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        print("\n".join(detail))


SPEEDUP_BAR = 0.05  # issue 45: the predicted speedup within 0.05 of the measured


def _speedup(rows, each: bool = False) -> None:
    """Each speculative point's speedup over its paired baseline (the same workload, batch or concurrency,
    prompt and new tokens, the baseline's process): its runs' mean output tok/s over the baseline's, measured
    and predicted; right where they are within SPEEDUP_BAR. Poisson runs are left out (their tok/s is the
    arrivals')."""
    cells = defaultdict(lambda: defaultdict(list))
    for name, rec, c in rows:
        sc, wl = rec.scenario, _workload(rec)
        if wl == "poisson":
            continue
        size = sc.serving.num_requests if wl == "closed_batch" else sc.serving.arrivals.concurrency
        k = sc.spec.num_steps if c.speculative else 0
        cells[(wl, size, sc.serving.input_len.tokens, sc.serving.output_len.tokens)][
            (k, _forced_rate(name) if c.speculative else None)].append(c)
    out = []
    for (wl, size, p, n), by in sorted(cells.items()):
        base = by.get((0, None))
        if not base:
            continue
        mb, pb = (np.mean([getattr(c, f) for c in base]) for f in ("measured_tok_per_s", "predicted_tok_per_s"))
        for (k, acc), v in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0.0)):
            if k:
                ms, ps = np.mean([c.measured_tok_per_s for c in v]) / mb, np.mean([c.predicted_tok_per_s for c in v]) / pb
                out.append((wl, size, p, n, k, acc, ms, ps))
    if not out:
        if each:
            print("\nSpeedup: no speculative point of these runs has a paired baseline (the same workload, batch or "
                  "concurrency, prompt and new tokens; Poisson runs are left out)")
        return
    ok = [abs(ps - ms) <= SPEEDUP_BAR for *_, ms, ps in out]
    print(f"\nSpeedup over the paired baseline, {len(out)} speculative points: within {SPEEDUP_BAR} at {sum(ok)} "
          f"({100 * sum(ok) / len(out):.0f}%){'' if each else '; the points outside it (--each-speedup: every point)'}\n")
    print("| workload | batch or concurrency | prompt | new tokens | num_steps | acceptance | measured speedup | "
          "predicted | within 0.05 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    shown = [(r, good) for r, good in zip(out, ok) if each or not good]
    if not shown:
        print("| none | | | | | | | | |")
    for (wl, size, p, n, k, acc, ms, ps), good in shown:
        print(f"| {wl} | {size} | {p} | {n} | {k} | {acc} | {ms:.3f} | {ps:.3f} | {'yes' if good else 'no'} |")


def _priced(a, rec, prof, max_tokens: int | None = None) -> float:
    """The DES's wall time of a closed-batch record, s, the mean of its draws (`num_draws`; max_tokens: the
    same prompts with that many new tokens, the prefill alone at 1), its acceptance as `--acceptance` says."""
    sc = rec.scenario
    rates = realized_request_rates(rec) if a.acceptance == "replay" else None
    if rates is None and a.acceptance in ("measured", "replay") and (rate := realized_acceptance_rate(rec)) is not None:
        sc = sc.model_copy(update={"acceptance": sc.acceptance.model_copy(update={"acceptance_rate": rate})})
    if max_tokens is not None:
        sc = sc.model_copy(update={"serving": sc.serving.model_copy(update={
            "output_len": sc.serving.output_len.model_copy(update={"tokens": max_tokens})})})
    return mean_wall_s(run_serving_draws(sc, prof, rec.speculative, request_rates=rates))


def _each_run(rows) -> None:
    """Every run: measured and predicted tok/s, TTFT p50 and TPOT p50 (`--each-run`)."""
    print("\nEvery run, measured / predicted:\n")
    print("| run | tok/s | err | TTFT p50 ms | err | TPOT p50 ms | err |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, _, c in rows:
        print(f"| {name[:-5]} | {c.measured_tok_per_s:,.1f} / {c.predicted_tok_per_s:,.1f} | {_pct(c.tok_per_s_error_frac)} | "
              f"{c.measured_ttft_p50_ms:.1f} / {c.predicted_ttft_p50_ms:.1f} | {_pct(c.ttft_p50_error_frac)} | "
              f"{c.measured_tpot_p50_ms:.2f} / {c.predicted_tpot_p50_ms:.2f} | {_pct(c.tpot_p50_error_frac)} |")


def _decode(a, rows, prof) -> None:
    """The users' decode tok/s of every closed batch (its runs' means), measured and predicted."""
    _, lines = engine_lines(a.points, "live", requests=True)
    alone = {}
    for ln in lines:
        pt = ln["point"]
        if pt["workload"] == "closed_batch" and pt["max_tokens"] == 1:
            alone[(ln["label"], pt["batch_size"], pt["prompt_len"])] = np.mean([r["elapsed_us"] for r in pt["repeats"]])
    points = defaultdict(list)
    for name, rec, _ in rows:
        if rec.scenario.serving.arrivals.kind == "closed_batch":
            points[_point_key(name)].append((name, rec))
    errs = []
    for key, runs in points.items():
        sc = runs[0][1].scenario
        label = runs[0][0].split("_cb_")[0]
        b, p, n = sc.serving.num_requests, sc.serving.input_len.tokens, sc.serving.output_len.tokens
        meas_alone = alone.get((label, b, p))
        if meas_alone is None:
            continue
        meas_gen = np.mean([rec.result.duration_s for _, rec in runs])
        pred_gen = np.mean([_priced(a, rec, prof) for _, rec in runs])
        pred_alone = _priced(a, runs[0][1], prof, max_tokens=1)
        pred = users_decode_tok_per_s(b, n, pred_gen, pred_alone)
        meas = users_decode_tok_per_s(b, n, meas_gen, meas_alone / 1e6)
        if pred and meas:
            errs.append((pred / meas - 1, pred_alone / (meas_alone / 1e6) - 1, key))
    if not errs:
        return
    e = np.array([x[0] for x in errs])
    pa = np.array([x[1] for x in errs])
    print(f"\nUsers' decode tok/s of {len(errs)} closed batches: median abs err {100 * np.median(np.abs(e)):.1f}%, "
          f"max {100 * np.abs(e).max():.1f}%, {int((np.abs(e) <= BAR).sum())} within 8%; their prefill alone: "
          f"median abs err {100 * np.median(np.abs(pa)):.1f}%, max {100 * np.abs(pa).max():.1f}%")
    worst = sorted(errs, key=lambda x: -abs(x[0]))[:5]
    print("Largest: " + "; ".join(f"{k} {_pct(x)} (prefill alone {_pct(y)})" for x, y, k in worst))


if __name__ == "__main__":
    main()
