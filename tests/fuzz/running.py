"""Laying out and running a generated case (tests/fuzz/cases.py) in this process, and what came out.

The fixtures real runs write (a sweep folder, a validate report), damaged on request; a snapshot of the
folder before and after; the outcome of a run (`classify`) against what its case allows (`as_expected`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import stat
import traceback
from pathlib import Path
from typing import Any

from tests import cli_cache
from tests.fuzz.cases import (RECORD, WRONG_TYPES, base_profile, base_scenario, Case, dump_json, dump_yaml,
                              Special)


def damage(text: str, rng: random.Random, name: str) -> str:
    """A plausible corruption of one of our outputs: a key dropped, a value of the wrong type, the
    file cut short, a cell changed."""
    if name.endswith(".csv"):
        lines = text.splitlines()
        how = rng.choice(["cut", "cell", "nan", "header", "scenario_json", "extra_cell"])
        if how == "cut":
            return text[:rng.randrange(1, max(2, len(text)))]
        header = lines[0].split(",")
        if how == "header":
            return "\n".join([",".join(h + "x" if i == rng.randrange(len(header)) else h
                                       for i, h in enumerate(header))] + lines[1:]) + "\n"
        row = next(csv_rows(text))
        col = rng.choice([c for c in header if c != "scenario_json"]) if how != "scenario_json" else "scenario_json"
        row[col] = {"cell": rng.choice(["abc", "-5", "", "[1]", "True", "1e999"]), "nan": "nan",
                    "scenario_json": rng.choice(["{", "[]", '{"name": 1}', '{"a":' * 3000, "null"]),
                    "extra_cell": "x"}.get(how, "x")
        return rewrite_first_row(text, row, extra=how == "extra_cell")
    data = json.loads(text)
    how = rng.choice(["drop", "type", "cut", "marker", "nan"])
    if how == "cut":
        return text[:rng.randrange(1, len(text))]
    if how == "nan":
        return text.replace(": 0.", ": NaN, \"x\": 0.", 1) if ": 0." in text else text + "x"
    keys = list(data)
    key = rng.choice(keys)
    if how == "drop":
        data.pop(key)
    elif how == "marker":
        data["specdecsim_output"] = rng.choice(["simulation/1", "sweep/2", 1, None])
    else:
        data[key] = rng.choice(WRONG_TYPES + (None, -1))
    return json.dumps(data)


def csv_rows(text: str):
    import csv
    import io
    return csv.DictReader(io.StringIO(text))


def rewrite_first_row(text: str, row: dict, extra: bool = False) -> str:
    import csv
    import io
    rows = list(csv_rows(text))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerow(row)
    for r in rows[1:]:
        w.writerow(r)
    out = buf.getvalue()
    if extra:
        lines = out.split("\n")
        lines[1] += ",extra"
        out = "\n".join(lines)
    return out



def prepare_fixtures(folder: Path) -> dict[str, Path]:
    """Outputs of real runs that cases of kinds 8, 10 and 11 read: a sweep folder and a validate
    report, made once with the CLI (in this process)."""
    from typer.testing import CliRunner

    from simulator.cli import app
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "s.yaml").write_text(dump_yaml(base_scenario()))
    (folder / "p.json").write_text(dump_json(base_profile()))
    (folder / "rec.json").write_text(RECORD.read_text())
    runner = CliRunner()
    old = os.getcwd()
    os.chdir(folder)
    try:
        r = runner.invoke(app, ["sweep", "s.yaml", "--out", "sw", "--des-sample", "1", "--grid", "spec.num_steps=1..3",
                                "--grid", "acceptance.acceptance_rate=0.5,0.8"])
        assert r.exit_code == 0, r.output
        r = runner.invoke(app, ["validate", "rec.json", "--profile", "p.json", "--json", "v.json"])
        assert r.exit_code == 0, r.output
        r = runner.invoke(app, ["calibrate", "engine", "--engine", "fake", "--few", "--out", "ep.json", "--points",
                                "pts.jsonl"])
        assert r.exit_code == 0, r.output
    finally:
        os.chdir(old)
    return {"sweep": folder / "sw", "report": folder / "v.json", "pts.jsonl": folder / "pts.jsonl",
            "req.jsonl": request_points(folder / "req.jsonl")}


def request_points(path: Path) -> Path:
    """A fake engine's request-level points (a closed batch and a closed loop: RequestPointLine)."""
    from calibration.engines.campaign import run_processes
    from calibration.engines.plans import ProcessPlan
    pts = [dict(batch_size=2, prompt_len=64, acceptance_rate=0.7, workload="closed_batch", max_tokens=12, repeats=1),
           dict(batch_size=2, prompt_len=64, acceptance_rate=0.7, workload="closed_loop", concurrency=2,
                num_requests=4, max_tokens=6, repeats=1)]
    plan = ProcessPlan(engine="fake", session="live", label="e2e_s2", num_steps=2, target_config={}, points=pts)
    assert run_processes([plan], path, in_process=True, log=lambda *_: None) == {"e2e_s2": "done"}
    return path


def lay_out(case: Case, folder: Path, fixtures: dict[str, Path], rng: random.Random) -> None:
    """Write a case's files (and the fixtures it needs) into an empty folder."""
    import shutil
    for need in case.needs:
        if need == "sweep":
            shutil.copytree(fixtures["sweep"], folder / "sw")
        elif need == "report":
            shutil.copy(fixtures["report"], folder / "v.json")
        elif need.startswith("damage:"):
            p = folder / need.split(":", 1)[1]
            p.write_text(damage(p.read_text(), rng, p.name))
        elif need.startswith("points:"):  # a fixture points file, one line damaged (tests/fuzz/gen_engine.py)
            from tests.fuzz.gen_engine import damage_points
            _, name, edit = need.split(":", 2)
            data = damage_points(fixtures[name].read_text(), json.loads(edit), rng)
            (folder / name).write_bytes(data) if isinstance(data, bytes) else (folder / name).write_text(data)
        elif need.startswith("damage_cell:"):
            p = folder / need.split(":", 1)[1]
            row = next(csv_rows(p.read_text()))
            row["scenario_json"] = '{"name": 1, "target": []}'
            p.write_text(rewrite_first_row(p.read_text(), row))
    for rel, content in case.files.items():
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_symlink() or p.exists():  # a fixture's file replaced by the case's own
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        if isinstance(content, Special):
            if content.what == "fifo":
                os.mkfifo(p)
            elif content.what == "chardev":
                try:
                    os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a /dev/null twin
                except (PermissionError, OSError):
                    os.mkfifo(p)
            elif content.what == "dir":
                p.mkdir(exist_ok=True)
                (p / "inside.txt").write_text("mine\n")
            elif content.what == "dangling":
                os.symlink("gone/nowhere", p)
            elif content.what == "symlink":
                (folder / content.target).parent.mkdir(parents=True, exist_ok=True)
                if not (folder / content.target).exists():
                    (folder / content.target).write_text("keep\n")
                os.symlink(content.target, p)
        elif isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)


def snapshot(folder: Path) -> dict[str, tuple]:
    """(kind, content hash) of every entry below `folder`, without following links or opening FIFOs."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if stat.S_ISREG(st.st_mode):
                out[str(p.relative_to(folder))] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
            elif stat.S_ISLNK(st.st_mode):
                out[str(p.relative_to(folder))] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[str(p.relative_to(folder))] = ("dir",)
            else:
                out[str(p.relative_to(folder))] = ("special", stat.S_IFMT(st.st_mode))
    return out


def changed_outside(before: dict, after: dict, outputs: tuple[str, ...]) -> list[str]:
    """Entries created, changed or removed that are not the case's outputs (or inside them)."""
    def allowed(rel: str) -> bool:
        return any(rel == o or rel.startswith(o.rstrip("/") + "/") for o in outputs) or \
            any(o.startswith(rel + "/") for o in outputs)  # a folder made for an output
    keys = set(before) | set(after)
    return sorted(k for k in keys if before.get(k) != after.get(k) and not allowed(k)
                  and not Path(k).name.startswith("."))


_NAN = re.compile(r"(?<![\w.])-?(nan|inf|infinity)(?![\w])", re.I)


def bad_numbers(value: Any, key: str = "") -> list[str]:
    """Non-finite numbers anywhere, and negative ones under time and rate keys, in a JSON output."""
    found = []
    if isinstance(value, dict):
        for k, v in value.items():
            if k in ("scenario",):
                continue
            found += bad_numbers(v, f"{key}.{k}" if key else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += bad_numbers(v, f"{key}[{i}]")
    elif isinstance(value, float):
        if not math.isfinite(value):
            found.append(f"{key}={value}")
        elif value < 0 and re.search(r"(_us|tok_per_s|speedup|accept_length)(\b|\.|\[|$)", key) \
                and "error" not in key and "rel_diff" not in key:
            found.append(f"{key}={value}")
    return found


OUTCOMES = ("clean error", "success", "traceback", "hang", "nan or negative", "wrote outside outputs",
            "unclear error", "other exit")


def as_expected(case: Case, outcome: str) -> bool:
    """Whether an outcome is one the case allows: a clean error where an error is expected, a
    success where a run is, either where an extreme but valid value may run."""
    allowed = {"error": ("clean error",), "success": ("success",), "either": ("clean error", "success")}
    return outcome in allowed[case.expect]


def classify(case: Case, exit_code: int | None, output: str, tb: str | None, folder: Path,
             before: dict, after: dict) -> tuple[str, str]:
    """(outcome, detail) of a finished case; outcome is one of OUTCOMES."""
    if exit_code is None:
        return "hang", ""
    if tb or "Traceback (most recent call last)" in output:
        return "traceback", (tb or output)[-1500:]
    outside = changed_outside(before, after, case.outputs)
    if outside:
        return "wrote outside outputs", ", ".join(outside[:5])
    if exit_code == 0:
        if _NAN.search(output):
            return "nan or negative", _NAN.search(output).group(0)
        for rel in case.outputs:
            p = folder / rel
            if p.is_file() and p.suffix == ".json" and not p.is_symlink():
                try:
                    bad = bad_numbers(json.loads(p.read_text()))
                except (ValueError, UnicodeDecodeError):
                    bad = ["unreadable output"]
                if bad:
                    return "nan or negative", ", ".join(bad[:3])
        return "success", ""
    if exit_code == 2:
        lines = [ln for ln in output.strip().splitlines() if ln.strip()]
        # our 'error: ...' line, or typer's usage error (Usage, Try --help, a boxed 'Error' of a line or two)
        err = [i for i, ln in enumerate(lines) if "error:" in ln or ln.startswith("Usage: ") or "─ Error ─" in ln]
        if not err:
            return "unclear error", "no 'error:' line: " + output[-300:]
        tail = lines[err[0]:]
        if len(tail) > 8 or sum(len(ln) for ln in tail) > 1500:
            return "unclear error", f"{len(tail)} lines, {sum(len(ln) for ln in tail)} characters"
        text = " ".join(" ".join(tail).split())
        if case.mention and not any(m in text or m in output for m in case.mention):
            return "unclear error", f"names none of {case.mention}: {text[:300]}"
        return "clean error", ""
    return "other exit", f"exit {exit_code}: {output[-300:]}"


def run_in_process(argv: list[str], folder: Path) -> tuple[int, str, str | None]:
    """(exit code, output, traceback text or None) of `specdecsim argv` run with CliRunner in `folder`."""
    from typer.testing import CliRunner

    from simulator.cli import app
    cli_cache.install()  # the command tree built once (in the fuzz's parent, before it forks)
    old = os.getcwd()
    os.chdir(folder)
    try:
        r = CliRunner().invoke(app, argv)
    finally:
        os.chdir(old)
    tb = None
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        tb = "".join(traceback.format_exception(*r.exc_info))
    return r.exit_code, r.output, tb


# ---- the plain tests' form: one command, no traceback, its output on one line -------------------------
def run(folder: Path, *argv: str) -> tuple[int, str]:
    code, output, tb = run_in_process(list(argv), folder)
    assert tb is None, tb
    assert "Traceback" not in output
    return code, " ".join(output.split())


def write_scenario(folder: Path, data: dict | None = None, text: str | None = None) -> None:
    (folder / "s.yaml").write_text(text if text is not None else dump_yaml(data or base_scenario()))
    (folder / "p.json").write_text(dump_json(base_profile()))


def error_lines(output: str) -> list[str]:
    return [ln for ln in output.strip().splitlines() if ln.strip()]
