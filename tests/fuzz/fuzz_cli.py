"""Fuzz the `specdecsim` CLI with generated bad inputs and count what comes out.

    python tests/fuzz/fuzz_cli.py [--seed 0] [--cases-per-kind 50] [--jobs 2] [--subprocess-every 12]
                                  [--timeout 30] [--show 3]

Each case (tests/fuzz/cases.py; one generator per kind of bad input, tests/fuzz/kinds.py) lays out
its files in an empty folder and runs one command there. Most cases run in a forked child with typer's
CliRunner (the parent has imported everything once, so a case costs its own work only); every
`--subprocess-every`-th case runs as a real `python -m simulator.cli` process, so a traceback
the in-process runner would hide is still seen. A case that does not finish within `--timeout`
seconds is killed and counted as a hang.

Outcomes: clean error (exit 2, an 'error:' line naming the file or field, a few lines at most),
success (exit 0, no NaN and no negative time or rate in the output), traceback, hang, NaN or
negative output, wrote outside outputs (anything created, changed or removed but the requested
outputs), unclear error (exit 2 without naming the file or field, or too long), other exit.
The target: 0 tracebacks, 0 hangs, 0 NaN or negative outputs, 0 writes outside, 0 unclear.
Seeded: the same --seed gives the same cases. Not collected by pytest (no test_ prefix).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from multiprocessing.connection import wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.fuzz.cases import KINDS  # noqa: E402
from tests.fuzz.kinds import generate  # noqa: E402
from tests.fuzz.running import (OUTCOMES, as_expected, classify, lay_out, prepare_fixtures,  # noqa: E402
                                run_in_process, snapshot)

BAD = ("traceback", "hang", "nan or negative", "wrote outside outputs", "unclear error", "other exit")


def _child(conn, argv: list[str], folder: str) -> None:
    """Forked child: run one command in process and send (exit code, output, traceback)."""
    os.environ["COLUMNS"] = "100"
    try:
        conn.send(run_in_process(argv, Path(folder)))
    except BaseException as e:  # noqa: BLE001 - the fuzz must report, not die
        import traceback
        conn.send((1, "", "".join(traceback.format_exception(e))))
    finally:
        conn.close()


def _start(case, folder: Path, subprocess_run: bool, timeout_s: float):
    """Start one case; returns a handle polled by _poll."""
    if subprocess_run:
        env = dict(os.environ, COLUMNS="100", PYTHONPATH=str(ROOT))
        script = Path(sys.executable).parent / "specdecsim"  # the installed console script, as users run it
        cmd = [str(script)] if script.is_file() else [sys.executable, "-c", "from simulator.cli import main; main()"]
        proc = subprocess.Popen([*cmd, *case.argv], cwd=folder, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return {"proc": proc, "deadline": time.monotonic() + timeout_s}
    parent, child = mp.Pipe(duplex=False)
    p = mp.get_context("fork").Process(target=_child, args=(child, case.argv, str(folder)), daemon=True)
    p.start()
    child.close()
    return {"mp": p, "conn": parent, "deadline": time.monotonic() + timeout_s}


def _poll(h) -> tuple[bool, tuple | None]:
    """(finished, (exit code or None for a hang, output, traceback))."""
    if "proc" in h:
        proc = h["proc"]
        if proc.poll() is not None:
            out = proc.stdout.read().decode("utf-8", "replace")
            return True, (proc.returncode, out, None)
        if time.monotonic() > h["deadline"]:
            proc.kill()
            proc.wait()
            return True, (None, "", None)
        return False, None
    conn, p = h["conn"], h["mp"]
    alive = p.is_alive()  # before the pipe: a child that sends its result and exits between the two is read
    if conn.poll():
        try:
            res = conn.recv()
        except EOFError:
            res = (None, "", "child died without a result")
        p.join()
        return True, res
    if not alive:
        p.join()
        return True, (p.exitcode if p.exitcode else 1, "", f"child exited with {p.exitcode} and no result")
    if time.monotonic() > h["deadline"]:
        p.kill()
        p.join()
        return True, (None, "", None)
    return False, None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases-per-kind", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--subprocess-every", type=int, default=12, help="every Nth case runs as a real process")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds before a case counts as a hang")
    ap.add_argument("--show", type=int, default=3, help="bad cases to print per outcome")
    ap.add_argument("--kinds", type=int, nargs="*", default=list(KINDS))
    ap.add_argument("--verbose", action="store_true", help="print every case's outcome and last output line")
    args = ap.parse_args(argv)

    import simulator.cli  # noqa: F401 - import once in the parent; forked children inherit it
    import simulator.studies.plots  # noqa: F401
    import simulator.simulate  # noqa: F401
    import simulator.evidence.validate  # noqa: F401
    from tests import cli_cache
    cli_cache.install()
    cli_cache._cached_get_command(simulator.cli.app)  # the command tree built once here; the children inherit it

    t0 = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="specdecsim-fuzz-"))
    fixtures = prepare_fixtures(work / "fixtures")
    rng = random.Random(args.seed)
    cases = []
    for kind in args.kinds:
        for i in range(args.cases_per_kind):
            case_rng = random.Random(rng.getrandbits(64))
            cases.append((len(cases), generate(kind, case_rng), case_rng))
    counts: Counter = Counter()
    by_kind: dict[int, Counter] = defaultdict(Counter)
    examples: dict[str, list[str]] = defaultdict(list)
    modes: Counter = Counter()
    unexpected: Counter = Counter()  # a clean error where the case should run, or the reverse
    queue = list(cases)
    running: dict[int, tuple] = {}
    while queue or running:
        while queue and len(running) < args.jobs:
            idx, case, case_rng = queue.pop(0)
            folder = work / f"case{idx:04d}"
            folder.mkdir()
            lay_out(case, folder, fixtures, case_rng)
            before = snapshot(folder)
            sub = args.subprocess_every > 0 and idx % args.subprocess_every == 0
            modes["subprocess" if sub else "in-process"] += 1
            running[idx] = (case, folder, before, _start(case, folder, sub, args.timeout))
        handles = [h["conn"] for _, _, _, h in running.values() if "conn" in h]
        if handles:
            wait(handles, timeout=0.05)
        else:
            time.sleep(0.05)
        for idx in list(running):
            case, folder, before, h = running[idx]
            done, res = _poll(h)
            if not done:
                continue
            del running[idx]
            exit_code, output, tb = res
            outcome, detail = classify(case, exit_code, output, tb, folder, before, snapshot(folder))
            counts[outcome] += 1
            if outcome in ("clean error", "success") and not as_expected(case, outcome):
                unexpected[outcome] += 1
                if len(examples["unexpected " + outcome]) < args.show:
                    examples["unexpected " + outcome].append(
                        f"kind {case.kind} {case.name!r}: specdecsim {' '.join(case.argv)[:160]}\n      "
                        f"{(output or '').strip()[-600:]}")
            if args.verbose:
                last = (output.strip().splitlines() or [""])[-1][:200] if output else ""
                print(f"[{outcome}] kind {case.kind} {case.name!r}: {' '.join(case.argv)[:100]} -> {last}")
            by_kind[case.kind][outcome] += 1
            if outcome in BAD and len(examples[outcome]) < args.show:
                examples[outcome].append(f"kind {case.kind} {case.name!r}: specdecsim {' '.join(case.argv)[:160]}"
                                         f"\n      {detail.strip()[-800:]}")
            shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - t0

    print(f"specdecsim CLI fuzz: seed {args.seed}, {len(cases)} cases ({modes['in-process']} in-process, "
          f"{modes['subprocess']} subprocess), {elapsed:.0f} s")
    for outcome in OUTCOMES:
        print(f"  {outcome:<22} {counts[outcome]:5d}")
    print("by kind (" + ", ".join(o for o in OUTCOMES) + "):")
    for kind in sorted(by_kind):
        print(f"  kind {kind:2d}: " + " ".join(f"{by_kind[kind][o]:4d}" for o in OUTCOMES))
    print(f"not as the case expects: {unexpected['clean error']} clean errors where a run was expected, "
          f"{unexpected['success']} runs where an error was expected")
    for outcome, lines in examples.items():
        print(f"examples of {outcome}:")
        for line in lines:
            print("    " + line)
    return 1 if any(counts[o] for o in BAD) or sum(unexpected.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
