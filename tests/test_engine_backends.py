"""The engine registry (calibration/engines/backends/): the engine kinds listed once, no engine
named in a comparison outside the backends, and a new engine that is one file and a registration
line (tests/engine_toy.py) running a campaign."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from calibration.engines.backends import ENGINES
from simulator.engines.fields import CALIBRATED_ENGINES

ROOT = Path(__file__).resolve().parents[1]
# modules that still write the names out (none: EngineProfile.engine is fields.CalibratedEngine)
NOT_YET_ON_FIELDS: set[str] = set()


def _modules():
    for folder in ("simulator", "calibration", "docs", "benchmarks"):
        for f in sorted((ROOT / folder).rglob("*.py")):
            yield f.relative_to(ROOT).as_posix(), ast.parse(f.read_text(encoding="utf-8"))


def _names(node) -> set[str]:
    elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}


def test_the_registry_is_the_calibrated_engines_tuple():
    assert tuple(ENGINES) == CALIBRATED_ENGINES
    assert all(spec.name == name for name, spec in ENGINES.items())


def test_the_engine_kinds_are_written_out_in_one_module():
    """The tuple (or Literal) of every engine name appears once: simulator/engines/fields.py."""
    where = sorted({path for path, tree in _modules() for node in ast.walk(tree)
                    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and _names(node) >= set(CALIBRATED_ENGINES)})
    assert [w for w in where if w not in NOT_YET_ON_FIELDS] == ["simulator/engines/fields.py"], where


def test_no_engine_is_named_in_a_comparison_outside_the_backends():
    """What differs between engines is a field of its EngineSpec, not an `if engine == ...` branch."""
    found = []
    for path, tree in _modules():
        if not path.startswith("calibration/") or path.startswith("calibration/engines/backends/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(
                    _names(x) & set(CALIBRATED_ENGINES) for x in [node.left, *node.comparators]):
                found.append(f"{path}:{node.lineno}")
    assert not found, found


def test_every_list_of_kinds_derives_from_the_registry():
    from calibration.engines.plans import ProcessPlan
    from typer.testing import CliRunner

    from simulator.cli import app
    assert ProcessPlan.model_json_schema()["properties"]["engine"]["enum"] == list(ENGINES)
    r = CliRunner().invoke(app, ["calibrate", "engine", "--engine", "nope", "--out", "x.json"])
    assert r.exit_code == 2 and all(name in r.output for name in ENGINES), r.output


@pytest.fixture
def toy():
    """tests/engine_toy.py loaded (it registers itself), taken out of the registry afterwards."""
    spec = importlib.util.spec_from_file_location("engine_toy", ROOT / "tests" / "engine_toy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        yield mod.SPEC
    finally:
        ENGINES.pop("toy", None)


def test_a_toy_engine_in_one_file_runs_the_fake_campaign(toy, tmp_path):
    from calibration.engines.campaign import run_processes
    from calibration.engines.plans import calibrate_plans, live_plans
    from calibration.engines.worker import read_lines
    base = dict(engine="toy", target_config={"vocab_size": 1000}, draft_config={})
    plans = calibrate_plans(base, [2], [1, 4], [256], 0.7, timed_steps=4, repeats=1) + \
        live_plans(base, [2], [1], [256], [0.7], timed_steps=4, repeats=1)
    pts = tmp_path / "points.jsonl"
    status = run_processes(plans, pts, in_process=toy.in_process, log=lambda s: None)
    assert status == {p.label: "done" for p in plans}
    lines = read_lines(pts)
    points = [ln for ln in lines if ln["kind"] == "point"]
    assert len(points) == sum(len(p.points) for p in plans)
    assert {ln["engine"] for ln in points} == {"toy"}
    assert {ln["info"]["engine"] for ln in lines if ln["kind"] == "engine"} == {"toy"}


def test_a_new_engine_touches_at_most_three_files(toy):
    """The toy engine is its own file plus a register() call; a shipped engine adds its name to
    fields.CALIBRATED_ENGINES too: three files, as the registry's docstring says."""
    import calibration.engines.backends as backends
    toy_imports = {n.module for n in ast.walk(ast.parse((ROOT / "tests" / "engine_toy.py").read_text()))
                   if isinstance(n, ast.ImportFrom)}
    assert {m for m in toy_imports if m != "__future__"} <= {
        "calibration.engines.backends", "calibration.engines.backends.base", "calibration.engines.backends.fake"}
    doc = backends.__doc__
    for f in ("backends/<engine>.py", "register(<engine>.SPEC)", "simulator/engines/fields.py"):
        assert f in doc
    registrations = [n for n in ast.walk(ast.parse(Path(backends.__file__).read_text()))
                     if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                     and getattr(n.value.func, "id", None) == "register"]
    assert len(registrations) == len(CALIBRATED_ENGINES)  # one line an engine


def test_every_campaign_file_is_a_queue_and_ships_as_package_data():
    import tomllib

    from calibration.engines.campaigns import CAMPAIGNS_DIR
    from calibration.engines.queue import QUEUES, load_campaign
    assert sorted(QUEUES) == sorted(f.stem for f in CAMPAIGNS_DIR.glob("*.yaml")) and QUEUES
    for name in QUEUES:
        assert load_campaign(name).description
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "engines/campaigns/*.yaml" in data["calibration"]


def test_a_campaign_that_takes_in_itself_is_refused(tmp_path, monkeypatch):
    import calibration.engines.queue as queue
    (tmp_path / "loop.yaml").write_text("description: x\nparts:\n  - {queue: loop}\n")
    monkeypatch.setattr(queue, "CAMPAIGNS_DIR", tmp_path)
    with pytest.raises(ValueError, match="takes in itself"):
        queue.queue_plans("loop")
