"""What moves the host-bound no-full-graph cell (issue 24): the stepping thread's core speed, window by
window (docs/engines/host-speed.md).

    python docs/make_host_probe_table.py

Reads data/engine_runs/h200_vllm_0.26.0_diag/hostprobe_2026-12-04.jsonl.gz (queue vllm-h200-hostprobe:
vLLM 0.26.0, Llama-3.1-8B with its EAGLE-3 draft, num_steps 2, acceptance 0.7, six 48-step windows a
point, two processes), where after every window a fixed piece of Python work was timed in the engine's
stepping thread (`host_probe_us`: that core's speed as interpreter work sees it). Prints, per point, the
windows' step periods split by the probe's state (a fast core: probe under PROBE_SLOW_US; a slow one:
over it), and Pearson's r between step period and probe over the point's windows; then, for the
host-bound cell at each prompt, a least-squares line of step period against probe over both processes'
windows; then the same probe on SGLang 0.5.15's chain (data/engine_runs/h200_sglang_0.5.15_diag/
hostprobe_2026-12-04.jsonl.gz, queue sglang-h200-hostprobe: num_steps 3, batch 1-32, 1k prompt, the probe
run in SGLang's scheduler thread).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibration.engines.build import engine_lines  # noqa: E402

POINTS = ROOT / "data" / "engine_runs" / "h200_vllm_0.26.0_diag" / "hostprobe_2026-12-04.jsonl.gz"
SGLANG_POINTS = ROOT / "data" / "engine_runs" / "h200_sglang_0.5.15_diag" / "hostprobe_2026-12-04.jsonl.gz"
PROBE_SLOW_US = 3500.0  # between the probe's two states on the lent machine (about 2.3-2.5 ms and 4.8-5.3 ms)


def _fmt(vals: list[float]) -> str:
    return ", ".join(f"{v / 1000:.1f}" for v in vals) or "-"


def _rows(path: Path) -> list[dict]:
    """The point lines of a points file (read and checked as every command reads them)."""
    return engine_lines([path])[1]


def sglang_table() -> None:
    """The same probe on SGLang's host-bound chain steps (queue sglang-h200-hostprobe): per point, the
    median step on a fast and on a slow core, and r(step, probe) over its windows."""
    print()
    print("| SGLang process | batch | windows fast / slow core | probe ms, fast / slow core | median ms a step, fast "
          "core | median ms a step, slow core | r(step, probe) |")
    print("|---|---:|---|---|---:|---:|---:|")
    for r in _rows(SGLANG_POINTS):
        reps = r["point"]["repeats"]
        period = [x["elapsed_us"] / x["num_cycles"] for x in reps]
        probe = [x["host_probe_us"] for x in reps]
        fast = [t for t, q in zip(period, probe) if q < PROBE_SLOW_US]
        slow = [t for t, q in zip(period, probe) if q >= PROBE_SLOW_US]
        r_ = float(np.corrcoef(period, probe)[0, 1]) if len(set(probe)) > 1 else float("nan")
        med = lambda v: f"{statistics.median(v) / 1000:.2f}" if v else "-"  # noqa: E731
        span = lambda v: f"{min(v) / 1000:.2f}-{max(v) / 1000:.2f}" if v else "-"  # noqa: E731
        probes = f"{span([q for q in probe if q < PROBE_SLOW_US])} / {span([q for q in probe if q >= PROBE_SLOW_US])}"
        print(f"| {r['label']} | {r['point']['batch_size']} | {len(fast)} / {len(slow)} | {probes} | {med(fast)} | "
              f"{med(slow)} | {r_:+.2f} |")


def main() -> None:
    rows = _rows(POINTS)
    print("| process | batch | prompt | full graph | ms a step, fast core | ms a step, slow core | probe ms (fast / slow) "
          "| r(step, probe) |")
    print("|---|---:|---:|---|---|---|---|---:|")
    for r in rows:
        p = r["point"]
        reps = p["repeats"]
        period = [x["elapsed_us"] / x["num_cycles"] for x in reps]
        probe = [x["host_probe_us"] for x in reps]
        fast = [t for t, q in zip(period, probe) if q < PROBE_SLOW_US]
        slow = [t for t, q in zip(period, probe) if q >= PROBE_SLOW_US]
        pf = [q for q in probe if q < PROBE_SLOW_US]
        ps = [q for q in probe if q >= PROBE_SLOW_US]
        r_ = float(np.corrcoef(period, probe)[0, 1]) if len(set(probe)) > 1 and len(set(period)) > 1 else float("nan")
        full = "no (host-bound)" if p["batch_size"] == 4 else "yes"
        probes = (f"{statistics.median(pf) / 1000:.2f}" if pf else "-") + " / " + (
            f"{statistics.median(ps) / 1000:.2f}" if ps else "-")
        print(f"| {r['label']} | {p['batch_size']} | {p['prompt_len']} | {full} | {_fmt(fast)} | {_fmt(slow)} | "
              f"{probes} | {r_:+.2f} |")
    for prompt in sorted({r["point"]["prompt_len"] for r in rows}):
        reps = [x for r in rows if r["point"]["batch_size"] == 4 and r["point"]["prompt_len"] == prompt
                for x in r["point"]["repeats"]]
        period = np.array([x["elapsed_us"] / x["num_cycles"] for x in reps])
        probe = np.array([x["host_probe_us"] for x in reps])
        fit = np.polynomial.Polynomial.fit(probe, period, 1).convert()  # step = a + b x probe
        a, b = fit.coef
        print(f"host-bound cell, prompt {prompt}: step = {a / 1000:.2f} ms + {b:.2f} x probe over {len(reps)} windows "
              f"of both processes (probe {probe.min() / 1000:.2f}-{probe.max() / 1000:.2f} ms)")
    sglang_table()


if __name__ == "__main__":
    main()
