"""SGLang's speculative prefill: its fixed cost counted at every prefill step, or once after an idle engine.

    python docs/make_prefill_split_table.py

The engine profile's prefill fit (simulator.evidence.prefill_fit) has a fixed cost per run (`per_run_us`: the
serving DES adds it to the first step after an idle engine) and one per step (`per_step_us`: every prefill step).
The calibration's runs of the prefill alone all start from an idle engine, and only those of more than one chunk
tell the two apart. The H100 Llama-3.1-8B + EAGLE-3 profile's speculative fit put its fixed cost in `per_step_us`.
Its baseline fit put it in `per_run_us`. This script fits the speculative runs again with `per_step_us` held at
0 (scipy's nnls, as the fit does). It then prices the speculative runs of the 2026-12-08 Poisson campaign (each
request sent at its arrival) with each fit, at the runs' own host probe (`bench_request_level.py
--host-of-runs`): how far each fit's fixed cost decides the TTFT p50 of a request that joins a busy engine.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNS = ROOT / "data" / "engine_runs" / "h100_sglang_0.5.15_requests"
CALIBRATION = RUNS / "calibrate_2026-12-07.jsonl.gz"
POISSON = RUNS / "sent_e2e_2026-12-08.jsonl.gz"
PROFILE = "sglang-0.5.15-h100-llama-3.1-8b-eagle3"
MODELS = ("llama-3.1-8b-instruct", "eagle3-llama-3.1-8b")


def per_run_fit(runs) -> dict:
    """The speculative runs' fit with per_step_us held at 0: per_run_us, per_token_us, per_token_pair_us by nnls
    on relative errors (as prefill_fit.fit_prefill), and its median |error| on those runs."""
    from scipy.optimize import nnls

    from simulator.evidence.prefill_fit import _steps
    steps = [_steps(r) for r in runs]
    x = np.array([(1.0, *st.sum(axis=0)) for st in steps])
    y = np.array([r.elapsed_us for r in runs])
    scale = np.array([1.0, 1.0, 1e-6])
    coef, _ = nnls(x * scale / y[:, None], np.ones(len(y)))
    coef = coef * scale
    err = np.abs(x @ coef / y - 1)
    return dict(per_run_us=float(coef[0]), per_step_us=0.0, per_token_us=float(coef[1]),
                per_token_pair_us=float(coef[2]), median_abs_error_frac=float(np.median(err)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args()
    from calibration.engines.build import engine_lines
    from calibration.engines.plans import model_shapes
    from calibration.engines.request_records import request_records
    from simulator.engines.profile import load_engine_profile, resolve_engine_profile
    from simulator.evidence.prefill_fit import PrefillRun
    from simulator.evidence.validate_serving import check_record
    from simulator.scenario import load_profile_for

    shipped = json.loads(resolve_engine_profile(PROFILE).read_text())
    spec_fit = next(f for f in shipped["prefill"] if f["speculative"])
    _, alone = engine_lines([CALIBRATION], "calibrate", requests=True)
    runs = [PrefillRun(True, pt["batch_size"], pt["prompt_len"], spec_fit["max_num_batched_tokens"], r["elapsed_us"])
            for ln in alone if (pt := ln["point"])["num_steps"] and pt["max_tokens"] == 1 for r in pt["repeats"]]
    alt = dict(spec_fit, **per_run_fit(runs))
    target, draft = model_shapes(*MODELS)
    _, lines = engine_lines([POISSON], requests=True)
    probe = float(np.median([r["host_probe_us"] for ln in lines for r in ln["point"]["repeats"] if r.get("host_probe_us")]))
    print("| speculative prefill fit | per_run_us | per_step_us | per_token_us | median abs err, its runs | "
          "Poisson TTFT p50 err at 4 and 8 req/s (4 runs) | at 16 req/s (2 runs) | closed batches' TTFT p50 err |")
    print("|---|---:|---:|---:|---:|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, fit in (("shipped (nnls, both fixed terms)", spec_fit), ("per_step_us held at 0", alt)):
            data = dict(shipped, prefill=[f if not f["speculative"] else {k: fit[k] for k in spec_fit} for f in
                                          shipped["prefill"]])
            path = Path(tmp) / f"{PROFILE}.json"
            path.write_text(json.dumps(data))
            load_engine_profile(str(path))  # the profile as the simulator reads it (its schema's checks)
            recs = request_records([POISSON], target, draft, str(path), "h200", host_probe_us=probe)
            errs: dict[str, list[str]] = {"slow": [], "fast": [], "cb": []}
            for run, rec in recs:
                if not rec.speculative:
                    continue
                prof = load_profile_for(rec.scenario, "h200")[0]
                c = check_record(run, rec, prof, acceptance="measured")
                where = "cb" if "_cb_" in run else ("fast" if "_q16_" in run else "slow")
                errs[where].append(f"{100 * c.ttft_p50_error_frac:+.1f}%")
            print(f"| {name} | {fit['per_run_us']:,.0f} | {fit['per_step_us']:,.0f} | {fit['per_token_us']:.2f} | "
                  f"{100 * fit['median_abs_error_frac']:.1f}% | {', '.join(errs['slow'])} | {', '.join(errs['fast'])} | "
                  f"{', '.join(errs['cb'])} |")


if __name__ == "__main__":
    main()
