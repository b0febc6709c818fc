"""A profile carried to a host of another speed, checked on SGLang's request-level runs of the H100 (issue 46).

    python docs/make_host_speed_check_table.py

Three pairs of a profile and runs of another host (docs/engines/host-speed.md, "A profile's host speed, and a
scenario's"), each priced by the serving DES twice: with the host as the profile measured it, and with the runs'
host (serving_engine.host_probe_us, from the calibration profile of the runs' machine). The first H100 host's
Llama profile is built in a temporary folder from its calibration points (its runs' wall times do not hold, so
its e2e runs compare TPOT p50 alone). Each speculative run at the i.i.d. rate of the accept length it realized,
as `benchmarks/bench_request_level.py` does by default; nothing of the runs is fitted.
"""

from __future__ import annotations

import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNS = ROOT / "data" / "engine_runs"
FIRST, SECOND = RUNS / "h100_sglang_0.5.15", RUNS / "h100_sglang_0.5.15_requests"
LLAMA = "sglang-0.5.15-h100-llama-3.1-8b-eagle3"
QWEN = "sglang-0.5.15-h100-qwen3-8b-eagle3"


def _rows(points, models, engine_profile, host_probe_us, tpot_only):
    from calibration.engines.plans import model_shapes
    from calibration.engines.request_records import request_records
    from simulator.evidence.validate_serving import check_record
    from simulator.scenario import load_profile_for
    target, draft = model_shapes(*models)
    recs = request_records(points, target, draft, engine_profile, "h200", host_probe_us=host_probe_us)
    prof, _ = load_profile_for(recs[0][1].scenario, "h200")
    groups = defaultdict(list)
    for name, rec in recs:
        c = check_record(name, rec, prof, acceptance="measured")
        groups[(rec.scenario.serving.arrivals.kind, "speculative" if c.speculative else "baseline")].append(c)
    out = []
    for (wl, sp), cs in sorted(groups.items()):
        tpot = np.abs([c.tpot_p50_error_frac for c in cs if np.isfinite(c.tpot_p50_error_frac)])
        tok = None if tpot_only else np.abs([c.tok_per_s_error_frac for c in cs])
        out.append((f"{wl}, {sp}", len(cs), tok, tpot))
    return out


def main() -> None:
    from calibration.engines.build import build_profile
    from simulator.engines.profile import load_engine_profile
    llama = load_engine_profile(LLAMA)
    with tempfile.TemporaryDirectory() as tmp:
        first = build_profile([FIRST / "calibrate_2026-12-07.jsonl.gz"], "sglang-h100-first-host", llama.target,
                              llama.draft)
        first_path = Path(tmp) / "sglang-h100-first-host.json"
        first_path.write_text(first.model_dump_json())
        second_runs = [SECOND / f"{n}_2026-12-07.jsonl.gz" for n in ("e2e", "e2e_more", "e2e_r2")]
        cases = [
            ("the second host's Llama profile on the first host's runs (TPOT alone)", [FIRST / "e2e_2026-12-07.jsonl.gz"],
             ("llama-3.1-8b-instruct", "eagle3-llama-3.1-8b"), LLAMA, first.host_probe_us, True),
            ("the first host's Llama profile on the second host's runs", second_runs,
             ("llama-3.1-8b-instruct", "eagle3-llama-3.1-8b"), str(first_path), llama.host_probe_us, False),
            ("Qwen3-8B's profile (first host) on Qwen3-8B's runs of the second host",
             [SECOND / "qwen3_8b_e2e_2026-12-07.jsonl.gz"], ("qwen3-8b", "eagle3-qwen3-8b"), QWEN,
             llama.host_probe_us, False)]
        print("| profile and runs | host priced | workload | runs | tok/s median abs err | max | "
              "TPOT p50 median abs err | max |")
        print("|---|---|---|---:|---:|---:|---:|---:|")
        for title, points, models, ref, runs_probe, tpot_only in cases:
            own = load_engine_profile(ref).host_probe_us
            for host, probe in ((f"as measured ({own:,.0f} us)", None), (f"the runs' ({runs_probe:,.0f} us)", runs_probe)):
                for wl, n, tok, tpot in _rows(points, models, ref, probe, tpot_only):
                    toks = ("-", "-") if tok is None else (f"{100 * np.median(tok):.1f}%", f"{100 * tok.max():.1f}%")
                    print(f"| {title} | {host} | {wl} | {n} | {toks[0]} | {toks[1]} | {100 * np.median(tpot):.1f}% | "
                          f"{100 * tpot.max():.1f}% |")


if __name__ == "__main__":
    main()
