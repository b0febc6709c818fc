"""The lent machine's cores, and what pinning the stepping thread did (issues 24 and 26;
docs/engines/host-speed.md, "Whether holding the core still fixes it").

    python docs/make_host_cores_table.py [HOST_CORES.json.gz ...]   (given records: their cores tables alone)

Reads, from queue vllm-h200-hostspeed (vLLM 0.26.0, one machine, 2026-12-04):
- data/engine_runs/h200_vllm_0.26.0_diag/host_cores_2026-12-04.json.gz (`specdecsim diagnose host-cores
  --seconds 45`: each of the 16 CPUs' host probe, round after round, before the engines ran): how many
  CPUs were slow each round, how long a CPU's state lasted, whether some CPU was fast in every round;
- data/engine_runs/h200_vllm_0.26.0/hostspeed_2026-12-04.jsonl.gz (Llama-3.1-8B, num_steps 2, 3 and 4,
  calibration and live, each point's stepping thread pinned to the CPU fastest at the probe just before
  its warm-up; the probe before and after every window): how often the pinned CPU was already slow when
  a window began; the no-full-graph cell's (num_steps 2, batch 4) step, window by window, with both
  probes, then in every process that measured it (CELL_FILES: four sessions); the parts priced against
  the wall step (the queue drained by the probe before a window);
- data/engine_runs/h200_vllm_0.26.0_qwen3-30b-a3b/hostspeed_2026-12-04.jsonl.gz: Qwen3-30B-A3B's
  host-paced batch 1-2 steps on model runner V1, calibration against live, pinned.
A probe slower than SLOW_FACTOR times the fastest one seen is a slow state.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibration.diagnostics.host_cores import SLOW_FACTOR, summarize  # noqa: E402
from calibration.engines.build import engine_lines  # noqa: E402

RUNS = ROOT / "data" / "engine_runs"
CORES = RUNS / "h200_vllm_0.26.0_diag" / "host_cores_2026-12-04.json.gz"
LLAMA = RUNS / "h200_vllm_0.26.0" / "hostspeed_2026-12-04.jsonl.gz"
QWEN = RUNS / "h200_vllm_0.26.0_qwen3-30b-a3b" / "hostspeed_2026-12-04.jsonl.gz"
OLD_PROFILE = ROOT / "data" / "engine_profiles" / "vllm-0.26.0-h200-llama-3.1-8b-eagle3.json"


def _points(path: Path) -> list[dict]:
    """The point lines of a points file (read and checked as every command reads them)."""
    return engine_lines([path])[1]


def _med_max(xs: list) -> str:
    return f"{statistics.median(xs):g} / {max(xs)}" if xs else "none"


def cores_table(path: Path = CORES) -> None:
    raw = path.read_bytes()
    data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)  # .json.gz, or as diagnose wrote it
    s = summarize(data)
    floor = s["floor_us"]
    stretches = {True: [], False: []}  # how many rounds in a row a CPU stayed slow (True) or fast
    for c in data["cpus"]:
        states = [r["probe_us"][str(c)] > SLOW_FACTOR * floor for r in data["rounds"]]
        n = 1
        for a, b in zip(states, states[1:]):
            if a == b:
                n += 1
            else:
                stretches[a].append(n)
                n = 1
        stretches[states[-1]].append(n)
    slow = s["slow_cpus_by_round"]
    gaps = [b["t_s"] - a["t_s"] for a, b in zip(data["rounds"], data["rounds"][1:])]
    steal = max(v for r in data["rounds"] for v in r["steal_frac"].values())
    mhz = sorted({v for r in data["rounds"] for v in r["cpu_mhz"].values()})
    print(f"{len(data['cpus'])} CPUs, {s['rounds']} rounds {statistics.median(gaps or [0.0]):.1f} s apart; fastest probe "
          f"{floor / 1000:.2f} ms; slow: over {SLOW_FACTOR:g} x that")
    print()
    print("| CPUs slow in a round (min / median / max) | rounds with a fast CPU | a slow stretch, rounds (median / "
          "max) | a fast stretch, rounds (median / max) | CPU-rounds slow | steal time, most of a CPU-round | "
          "clock the kernel reports, MHz |")
    print("|---|---:|---|---|---:|---:|---|")
    total = sum(v[3] for v in s["per_cpu"].values())
    print(f"| {min(slow)} / {statistics.median(slow):g} / {max(slow)} | {s['rounds_with_a_fast_cpu']} of {s['rounds']} "
          f"| {_med_max(stretches[True])} | {_med_max(stretches[False])} "
          f"| {total} of {s['rounds'] * len(data['cpus'])} | {steal:.1%} | {mhz[0]:g}-{mhz[-1]:g} |")


def pinned_table(lines: list[dict]) -> None:
    n = slow_before = slow_any = 0
    for ln in lines:
        p = ln["point"]
        best = min(p["cpu_probe_us"].values())
        for r in p["repeats"]:
            n += 1
            slow_before += r["host_probe_before_us"] > SLOW_FACTOR * best
            slow_any += max(r["host_probe_before_us"], r["host_probe_us"]) > SLOW_FACTOR * best
    print()
    print(f"pinned windows (Llama-3.1-8B, {len(lines)} points): the pinned CPU slow when the window began in "
          f"{slow_before} of {n}, slow at either end in {slow_any} of {n}")


def cell_table(lines: list[dict]) -> None:
    print()
    print("| process | prompt | rate | window | probe before, ms | ms a step | probe after, ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    steps = []
    for ln in lines:
        p = ln["point"]
        if p["num_steps"] != 2 or p["batch_size"] != 4:
            continue
        for r in p["repeats"]:
            step = r["elapsed_us"] / r["num_cycles"]
            if not r["instrumented"]:
                steps.append(step)
            print(f"| {ln['label']} | {p['prompt_len']} | {p['acceptance_rate']:g} | {r['repeat_idx']}"
                  f"{' (CUDA events)' if r['instrumented'] else ''} | {r['host_probe_before_us'] / 1000:.1f} | "
                  f"{step / 1000:.2f} | {r['host_probe_us'] / 1000:.1f} |")
    print(f"\nthe cell's uninstrumented windows: {min(steps) / 1000:.2f}-{max(steps) / 1000:.2f} ms a step "
          f"(median {statistics.median(steps) / 1000:.2f})")


CELL_FILES = [RUNS / "h200_vllm_0.26.0" / "points.jsonl.gz",
              RUNS / "h200_vllm_0.26.0_diag" / "points_2026-12-03.jsonl.gz",
              RUNS / "h200_vllm_0.26.0_diag" / "points_2026-12-04.jsonl.gz",
              RUNS / "h200_vllm_0.26.0_diag" / "hostprobe_2026-12-04.jsonl.gz", LLAMA]


def cell_processes_table() -> None:
    """Every process that measured the cell (num_steps 2, batch 4, default capture sizes) on Llama-3.1-8B:
    its uninstrumented windows at each prompt and their mean."""
    print()
    print("| points file | process | prompt | uninstrumented windows, ms a step | mean |")
    print("|---|---|---:|---|---:|")
    means = {}
    for path in CELL_FILES:
        by: dict[tuple[str, int], list[float]] = {}
        for ln in _points(path):
            p = ln["point"]
            if p["num_steps"] != 2 or p["batch_size"] != 4 or ln["label"].endswith("_cap3"):
                continue
            by.setdefault((ln["label"], p["prompt_len"]), []).extend(
                r["elapsed_us"] / r["num_cycles"] for r in p["repeats"] if not r["instrumented"])
        for (label, prompt), w in sorted(by.items(), key=lambda kv: (-kv[0][1], kv[0][0])):
            means[(path.name, label, prompt)] = statistics.mean(w)
            print(f"| {path.parent.name}/{path.name} | {label} | {prompt} | {', '.join(f'{v / 1000:.1f}' for v in w)} "
                  f"| {statistics.mean(w) / 1000:.2f} |")
    for prompt in (1024, 4096):
        v = [m for (_, _, pr), m in means.items() if pr == prompt]
        print(f"\nprompt {prompt}: process means {min(v) / 1000:.2f}-{max(v) / 1000:.2f} ms a step over "
              f"{len(v)} processes")


def drain_table() -> None:
    """The GPU-bound points' parts priced against their own wall step: the committed profile (no probe
    before a window) and a profile of this queue's num_steps 2-4 processes (a probe before each)."""
    from simulator.costs.engine_native import NativeCosts
    from simulator.engines.profile import load_engine_profile
    print()
    print("| profile | GPU-bound points, num_steps 2-4 | parts priced / wall step - 1, median | min | max |")
    print("|---|---:|---:|---:|---:|")
    for name, prof in (("committed (no probe before a window)", load_engine_profile(OLD_PROFILE)),
                       ("vllm-h200-hostspeed (a probe before each window)", _hostspeed_profile())):
        nc = NativeCosts(prof)
        r = [max(nc.step_us(p.batch_size, p.num_steps, p.context_len)) / p.step_us - 1
             for p in prof.points if p.num_steps in (2, 3, 4) and p.gpu_bound]
        print(f"| {name} | {len(r)} | {statistics.median(r):+.2%} | {min(r):+.2%} | {max(r):+.2%} |")


def _hostspeed_profile():
    import tempfile

    from typer.testing import CliRunner

    from simulator.cli import app
    from simulator.engines.profile import load_engine_profile
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "p.json"
        res = CliRunner().invoke(app, ["calibrate", "engine", "--engine", "vllm", "--from-points",
                                       str(RUNS / "h200_vllm_0.26.0" / "points.jsonl.gz"), "--from-points", str(LLAMA),
                                       "--exclude-process", "calibrate_s2", "--exclude-process", "calibrate_s3",
                                       "--exclude-process", "calibrate_s4", "--out", str(out)])
        if res.exit_code:
            raise SystemExit(res.output)
        return load_engine_profile(out)


def qwen_table(lines: list[dict]) -> None:
    print()
    print("| Qwen3-30B-A3B process | batch | prompt | rate | ms a step by window | probe before / after, ms |")
    print("|---|---:|---:|---:|---|---|")
    for ln in lines:
        p = ln["point"]
        if p["batch_size"] > 2:
            continue
        w = ", ".join(f"{r['elapsed_us'] / r['num_cycles'] / 1000:.2f}" for r in p["repeats"])
        pr = ", ".join(f"{r['host_probe_before_us'] / 1000:.1f}/{r['host_probe_us'] / 1000:.1f}" for r in p["repeats"])
        rate = "base" if p["acceptance_rate"] is None else f"{p['acceptance_rate']:g}"
        print(f"| {ln['label']} | {p['batch_size']} | {p['prompt_len']} | {rate} | {w} | {pr} |")


def main() -> None:
    if len(sys.argv) > 1:  # another `specdecsim diagnose host-cores` record: its cores table alone
        for path in sys.argv[1:]:
            try:
                cores_table(Path(path))
            except (OSError, ValueError, KeyError, TypeError, AttributeError, statistics.StatisticsError) as e:
                sys.exit(f"{path}: not a readable `specdecsim diagnose host-cores` record ({type(e).__name__}: {e})")
        return
    cores_table()
    llama = _points(LLAMA)
    pinned_table(llama)
    cell_table(llama)
    cell_processes_table()
    drain_table()
    qwen_table(_points(QWEN))


if __name__ == "__main__":
    main()
