"""Diagnostic: how fast each of the host's cores runs the host probe, round after round.

    specdecsim diagnose host-cores --out cores.json [--seconds 60] [--interval-s 1]

The lent machine's engine steps that the host paces move with the speed of the core the stepping
thread runs on, and that speed has two states there (docs/engines/host-speed.md, "What moves it"
and "Whether holding the core still fixes it"). This pins the calling thread to each CPU it may run
on in turn and times the same fixed piece of interpreter work
(calibration.engines.backends.base.host_speed_probe_us) there, every round, with each CPU's steal time
(the hypervisor's, /proc/stat) and its clock (/proc/cpuinfo) over the round. It answers whether a
slow state is a core's (another core is fast at the same time) or the machine's (every core slow
together), and how long a core keeps one (on the lent H200: a core's, for 2 s at the median, so
pinning the stepping thread to the core fastest at a point's start did not hold it). CPU only; no
GPU needed.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from calibration.engines.backends.base import probe_cpus
from simulator.files import HOST_CORES_OUTPUT, OUTPUT_KEY, write_json_atomic

SLOW_FACTOR = 1.5  # a probe this many times the CPU's fastest is a slow state


def _cpu_jiffies() -> dict[int, tuple[int, int]]:
    """cpu -> (steal, total) jiffies from /proc/stat ({} where there is none)."""
    out = {}
    try:
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                name, *vals = line.split()
                if name.startswith("cpu") and name != "cpu":
                    v = [int(x) for x in vals]
                    out[int(name[3:])] = (v[7] if len(v) > 7 else 0, sum(v))
    except (OSError, ValueError):
        return {}
    return out


def _cpu_mhz() -> dict[int, float]:
    """cpu -> its clock as /proc/cpuinfo says now ({} where it does not)."""
    out, cpu = {}, None
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, val = line.partition(":")
                key = key.strip()
                if key == "processor":
                    cpu = int(val)
                elif key == "cpu MHz" and cpu is not None:
                    out[cpu] = float(val)
    except (OSError, ValueError):
        return {}
    return out


WRITE_EVERY_S = 1.0  # the file is rewritten at most this often (and at the end): its cost grows with the rounds


def measure_host_cores(out: Path, seconds: float, interval_s: float, rounds: list | None = None) -> dict:
    """Round after round for `seconds`: each allowed CPU's probe (us), steal share and clock; written
    to `out` (atomically) at most every WRITE_EVERY_S and when it ends, interrupted or not, so an
    interrupted run keeps what it measured. `rounds`: the list the rounds are appended to (the caller
    can count them after an interrupt)."""
    allowed = sorted(os.sched_getaffinity(0))
    result = {OUTPUT_KEY: HOST_CORES_OUTPUT, "diagnostic": "host_cores",
              "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": platform.node(), "processor": platform.processor(), "cpus": allowed,
              "os_cpu_count": os.cpu_count(), "slow_factor": SLOW_FACTOR,
              "rounds": [] if rounds is None else rounds}
    siblings = {}
    for c in allowed:
        p = Path(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list")
        if p.is_file():
            siblings[c] = p.read_text(encoding="ascii").strip()
    result["thread_siblings"] = siblings
    t_end = time.monotonic() + seconds
    written = -WRITE_EVERY_S
    try:
        while True:
            t0, j0 = time.monotonic(), _cpu_jiffies()
            probes = probe_cpus(allowed)
            j1, mhz = _cpu_jiffies(), _cpu_mhz()
            steal = {c: (j1[c][0] - j0[c][0]) / max(1, j1[c][1] - j0[c][1]) for c in allowed if c in j0 and c in j1}
            result["rounds"].append({"t_s": round(t0 - (t_end - seconds), 3), "probe_us": probes,
                                     "steal_frac": steal, "cpu_mhz": {c: mhz[c] for c in allowed if c in mhz}})
            if time.monotonic() - written >= WRITE_EVERY_S:
                write_json_atomic(out, result)
                written = time.monotonic()
            if time.monotonic() + interval_s > t_end:
                break
            time.sleep(max(0.0, interval_s - (time.monotonic() - t0)))
    finally:
        os.sched_setaffinity(0, set(allowed))
        if result["rounds"]:
            write_json_atomic(out, result)
    return result


def summarize(result: dict) -> dict:
    """Per CPU: probe min / median / max and rounds slow; per round: how many CPUs were slow; whether a
    fast CPU was there in every round."""
    rounds = result["rounds"]
    cpus = result["cpus"]
    per_cpu = {}
    for c in cpus:
        v = [r["probe_us"][c] if c in r["probe_us"] else r["probe_us"][str(c)] for r in rounds]
        per_cpu[c] = v
    floor = min(min(v) for v in per_cpu.values())
    slow = lambda x: x > SLOW_FACTOR * floor  # noqa: E731 - one comparison, three uses
    slow_by_round = [sum(slow(per_cpu[c][i]) for c in cpus) for i in range(len(rounds))]
    return {"floor_us": floor, "per_cpu": {c: (min(v), statistics.median(v), max(v), sum(map(slow, v)))
                                           for c, v in per_cpu.items()},
            "slow_cpus_by_round": slow_by_round,
            "rounds_with_a_fast_cpu": sum(n < len(cpus) for n in slow_by_round), "rounds": len(rounds)}


def print_host_cores(result: dict) -> None:
    s = summarize(result)
    t = Table(title=f"host probe by CPU, {s['rounds']} rounds (slow: > {SLOW_FACTOR:g} x the fastest, "
                    f"{s['floor_us']:.0f} us)")
    for col in ("cpu", "min us", "median us", "max us", "rounds slow"):
        t.add_column(col, justify="right")
    for c, (lo, med, hi, n) in s["per_cpu"].items():
        t.add_row(str(c), f"{lo:.0f}", f"{med:.0f}", f"{hi:.0f}", f"{n} of {s['rounds']}")
    Console().print(t)
    slow = s["slow_cpus_by_round"]
    if len(slow) <= 60:
        print(f"slow CPUs by round: {slow}")
    else:
        print(f"slow CPUs in a round: min {min(slow)}, median {statistics.median(slow):g}, max {max(slow)} over "
              f"{len(slow)} rounds")
    print(f"rounds with at least one fast CPU: {s['rounds_with_a_fast_cpu']} of {s['rounds']}")
    steal = [v for r in result["rounds"] for v in r.get("steal_frac", {}).values()]
    mhz = sorted({v for r in result["rounds"] for v in r.get("cpu_mhz", {}).values()})
    if steal or mhz:
        print(f"steal time: at most {max(steal, default=0.0):.1%} of a CPU-round; the clock the kernel reports: "
              + (f"{mhz[0]:g}-{mhz[-1]:g} MHz" if mhz else "none"))
