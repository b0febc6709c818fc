"""vLLM's prefill alone with the MoE target on the H100, run by run, against the profile's fit (issue 45).

    python docs/make_prefill_alone_table.py [POINTS.jsonl.gz ...] [--engine-profile NAME] [--host-probe]

Every closed batch of one new token a request (the prefill alone) in the points files (default: the calibration
and the request-level runs of campaign vllm-h100-moe, data/engine_runs/h100_vllm_0.26.0_moe/), sorted by the
prompt tokens the batch holds: each run's time from submission to its last output, and what the engine
profile's prefill fit (per step + per token + per token pair, simulator.evidence.prefill_fit) prices it at, for
the process's kind (with the draft or without). The largest CUDA-graph capture size the profile recorded is
named: a step of more tokens runs without a graph. `--host-probe`: each run's host probe too (the engine's
stepping thread timed on a fixed piece of Python after the run, `host_probe_us`; "-" where none was recorded).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FOLDER = ROOT / "data" / "engine_runs" / "h100_vllm_0.26.0_moe"
DEFAULT = [FOLDER / "moe_calibrate_2026-12-07.jsonl.gz", FOLDER / "moe_e2e_2026-12-07.jsonl.gz"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("points", nargs="*", type=Path, default=DEFAULT)
    ap.add_argument("--engine-profile", default="vllm-0.26.0-h100-qwen3-30b-a3b-eagle3")
    ap.add_argument("--host-probe", action="store_true", help="each run's host probe, ms")
    a = ap.parse_args()
    from calibration.engines.build import engine_lines
    from simulator.engines.profile import load_engine_profile
    from simulator.evidence.prefill_fit import predict_us
    prof = load_engine_profile(a.engine_profile)
    fits = {f.speculative: f for f in prof.prefill}
    engines, lines = engine_lines(a.points, requests=True)
    steps = {e["label"]: e.get("num_steps", 0) for e in engines}
    rows = []
    for ln in lines:
        pt = ln["point"]
        if pt.get("workload") != "closed_batch" or pt.get("max_tokens") != 1:
            continue
        spec = bool(pt.get("num_steps") or steps.get(ln["label"]))
        runs = [r["elapsed_us"] / 1e3 for r in pt["repeats"]]
        probes = [f"{r['host_probe_us'] / 1e3:.1f}" if r.get("host_probe_us") else "-" for r in pt["repeats"]]
        fit = fits.get(spec)
        pred = predict_us(fit, pt["batch_size"], pt["prompt_len"]) / 1e3 if fit else None
        rows.append((spec, pt["batch_size"] * pt["prompt_len"], pt["batch_size"], pt["prompt_len"], ln["label"], runs, pred,
                     probes))
    sizes = prof.cudagraph_capture_sizes or []
    print(f"engine profile {a.engine_profile}; largest CUDA-graph capture size {max(sizes) if sizes else 'none recorded'}")
    print()
    print("| draft | prompt tokens | batch | prompt | process | runs ms | fit ms |" + (" host probe ms |" if a.host_probe else ""))
    print("|---|---:|---:|---:|---|---:|---:|" + ("---:|" if a.host_probe else ""))
    for spec, tokens, b, p, label, runs, pred, probes in sorted(rows, key=lambda r: (not r[0], r[1], r[2], r[4])):
        fit = f"{pred:.1f}" if pred is not None else "-"
        print(f"| {'with' if spec else 'without'} | {tokens:,} | {b} | {p} | {label} | "
              f"{' / '.join(f'{x:.1f}' for x in runs)} | {fit} |" + (f" {' / '.join(probes)} |" if a.host_probe else ""))


if __name__ == "__main__":
    main()
