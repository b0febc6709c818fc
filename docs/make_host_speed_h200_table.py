"""The H100 SGLang profile carried to the H200's windows whose host was probed (issue 46).

    python docs/make_host_speed_h200_table.py

The two processes of queue `sglang-h200-hostprobe` (data/engine_runs/h200_sglang_0.5.15_diag/hostprobe_2026-12-04.jsonl.gz:
SGLang 0.5.15 on the lent H200, Llama-3.1-8B + EAGLE-3, num_steps 3, batch 1, 2, 8 and 32, 1k prompt, six windows a
point, the host probe in the scheduler's thread before and after each window) are priced from the H100 profile
(sglang-0.5.15-h100-llama-3.1-8b-eagle3, host probe 2,428 us) carried to the H200 (scenarios/sglang_llama8b_h200.yaml at
each window's batch, context and realized accept length, as an i.i.d. rate), three ways: the host as the profile
measured it, the window's own probes (the mean of before and after) and the process's median probe. Per process:
the error of the predicted step against the window's.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

POINTS = ROOT / "data" / "engine_runs" / "h200_sglang_0.5.15_diag" / "hostprobe_2026-12-04.jsonl.gz"
PROFILE = "sglang-0.5.15-h100-llama-3.1-8b-eagle3"


def windows() -> list[dict]:
    out = []
    for ln in gzip.open(POINTS, "rt"):
        d = json.loads(ln)
        pt = d.get("point")
        if not pt or "repeats" not in pt:
            continue
        for r in pt["repeats"]:
            if r.get("instrumented") or not r.get("num_cycles"):
                continue
            counts = r["accept_length_counts"]
            probes = [v for v in (r.get("host_probe_before_us"), r.get("host_probe_us")) if v]
            out.append(dict(process=d["label"], batch=pt["batch_size"], context=r.get("context_len", pt["prompt_len"]),
                            step_us=r["elapsed_us"] / r["num_cycles"], probe_us=float(np.mean(probes)),
                            accept_length=sum((i + 1) * c for i, c in enumerate(counts)) / sum(counts)))
    return out


def predicted_us(w: dict, host_probe_us: float | None) -> float:
    from scipy.optimize import brentq

    from simulator.acceptance import build_acceptance
    from simulator.analytic import analyze
    from simulator.costs.forward import CostModel
    from simulator.scenario import load_profile_for, load_scenario
    rate = brentq(lambda a: (1 - a ** 4) / (1 - a) - w["accept_length"], 1e-6, 1 - 1e-6)
    sets = [f"workload.batch_size={w['batch']}", f"workload.context_len={int(round(w['context']))}", "spec.num_steps=3",
            f"acceptance.acceptance_rate={rate}", f"serving_engine.engine_profile={PROFILE}", "hardware.gpu=h200-sxm"]
    if host_probe_us is not None:
        sets.append(f"serving_engine.host_probe_us={host_probe_us}")
    sc = load_scenario(ROOT / "scenarios" / "sglang_llama8b_h200.yaml", sets)
    cost = CostModel(sc, load_profile_for(sc)[0])
    return analyze(sc, cost, build_acceptance(sc.acceptance, sc.spec), truncate=False).cycle_time_us


def main() -> None:
    ws = windows()
    by = defaultdict(list)
    for w in ws:
        by[w["process"]].append(w)
    print("| process | windows | median probe, us | host priced | step error, median | median abs | max abs |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for proc, group in sorted(by.items()):
        med = float(np.median([w["probe_us"] for w in group]))
        for how, probe in (("as the profile measured it", lambda w: None), ("each window's probe", lambda w: w["probe_us"]),
                           ("the process's median probe", lambda w: med)):
            e = np.array([predicted_us(w, probe(w)) / w["step_us"] - 1 for w in group])
            print(f"| {proc} | {len(group)} | {med:,.0f} | {how} | {100 * np.median(e):+.1f}% | "
                  f"{100 * np.median(np.abs(e)):.1f}% | {100 * np.abs(e).max():.1f}% |")


if __name__ == "__main__":
    main()
