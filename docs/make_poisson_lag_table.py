"""SGLang's Poisson runs: how many engine steps each request waited between the runner sending it and its prefill.

    python docs/make_poisson_lag_table.py [POINTS.jsonl.gz ...]

The request-level runner (calibration.engines.requests_loop) sends a Poisson run's requests from its own loop:
after each step's output it sends every request whose arrival time has passed. SGLang's scheduler runs in a
thread of its own, one batch ahead (the overlap scheduler): when the output of step N leaves it, step N + 1 is
already on the GPU, and its next loop iteration reads its inbox at once. A request sent at step N's output is
read by that iteration when the runner's thread puts it there first (its prefill is step N + 2, as for a client
that sent it when it arrived), else by the iteration after (step N + 3: one decode step more). For each Poisson run
(default: the SGLang H100 warm-up campaign's, dense and MoE), the requests by that lag, the mean length of the
extra step, the measured TTFT p50, the same with each late request's extra step taken out, and the serving DES's
(the run's own host probe, as `benchmarks/bench_request_level.py --host-of-runs` prices it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNS = ROOT / "data" / "engine_runs" / "h100_sglang_0.5.15_requests"
DEFAULT = [(RUNS / "warm_e2e_2026-12-07.jsonl.gz", "sglang-0.5.15-h100-llama-3.1-8b-eagle3",
            ("llama-3.1-8b-instruct", "eagle3-llama-3.1-8b")),
           (RUNS / "moe_warm_e2e_2026-12-07.jsonl.gz", "sglang-0.5.15-h100-qwen3-30b-a3b-eagle3",
            ("qwen3-30b-a3b", "eagle3-qwen3-30b-a3b"))]


def lags(rep: dict) -> tuple[list[int], list[float], np.ndarray]:
    """Per request with a first token: the steps from the step whose output the runner sent it after to its
    prefill step; the extra step's length (ms) of those at 3 or more; its TTFT (ms) less that extra step."""
    t = np.array([s["t_us"] for s in rep["steps"]])
    out, extra, ttft = [], [], []
    for q in rep["requests"]:
        if not q["token_times_us"]:
            continue
        sent = int(np.searchsorted(t, q["start_us"]))  # the first output at or after its arrival
        first = int(np.searchsorted(t, q["token_times_us"][0]))
        lag = first - sent
        out.append(lag)
        cut = 0.0
        if lag >= 3:  # the step it missed: N + 2, formed before the scheduler read it
            cut = t[sent + 2] - t[sent + 1]
            extra.append(cut / 1e3)
        ttft.append((q["token_times_us"][0] - q["start_us"] - cut) / 1e3)
    return out, extra, np.array(ttft)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args()
    from calibration.engines.build import engine_lines
    from calibration.engines.plans import model_shapes
    from calibration.engines.request_records import request_records
    from simulator.evidence.validate_serving import check_record
    from simulator.scenario import load_profile_for
    print("| process | point | run | requests | sent -> prefill: 2 steps | 3 steps | other | extra step ms | "
          "TTFT p50 ms | less the extra step | serving DES |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path, profile, models in DEFAULT:
        target, draft = model_shapes(*models)
        _, lines = engine_lines([path], requests=True)
        probe = float(np.median([r["host_probe_us"] for ln in lines for r in ln["point"]["repeats"]
                                 if r.get("host_probe_us")]))
        recs = dict(request_records([path], target, draft, profile, "h200", host_probe_us=probe))
        prof = None
        for ln in lines:
            pt = ln["point"]
            if pt["workload"] != "poisson":
                continue
            for rep in pt["repeats"]:
                name = f"{ln['label']}_{pt['key']}_r{rep['repeat_idx']}.json"
                rec = recs[name]
                prof = prof or load_profile_for(rec.scenario, "h200")[0]
                des = check_record(name, rec, prof).predicted_ttft_p50_ms
                lag, extra, less = lags(rep)
                n2, n3 = lag.count(2), sum(x >= 3 for x in lag)
                tt = [(q["token_times_us"][0] - q["start_us"]) / 1e3 for q in rep["requests"] if q["token_times_us"]]
                print(f"| {ln['label']} | {pt['key']} | {rep['repeat_idx']} | {len(lag)} | {n2} | {n3} | "
                      f"{len(lag) - n2 - n3} | {np.mean(extra) if extra else 0.0:.1f} | {np.median(tt):.1f} | "
                      f"{np.median(less):.1f} | {des:.1f} |")


if __name__ == "__main__":
    main()
