"""The shape of the tree: rooms, import direction, no import loops, file sizes.

Every module under simulator/ and calibration/ is parsed with ast (nothing is imported), and each
import statement, at module level or inside a function (TYPE_CHECKING blocks too), gives an edge
to the project module it names: `import a.b`, `from a import b` (to the module a.b where there is
one, else to a), relative imports resolved. A package's __init__, which Python runs before the
submodule it holds, is not an edge of an import of that submodule.

Rules:
- no import loop between project modules: the import graph's strongly connected components are
  single modules;
- the model (every module of simulator/ outside simulator/studies/ and simulator/cli/) imports no
  study (simulator.studies), nothing of calibration/ and not torch;
- the engine model (simulator/engines/) imports no fit or importer (simulator.evidence), no study,
  no command, and nothing built on it: the cost model, the scenario loader, the simulation;
- the pricing model (simulator/costs/, simulator/des/, simulator/serving/) imports no evidence;
- at most MAX_ROOT_MODULES modules in the simulator/ root, and no Python file of simulator/,
  calibration/, benchmarks/ or tests/ over MAX_LINES lines (LONG_FILES: the ones not split yet).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("simulator", "calibration")
MAX_ROOT_MODULES = 20
MAX_LINES = 500
LINE_DIRS = (*PACKAGES, "benchmarks", "tests")
LONG_FILES: set[str] = set()  # files allowed over MAX_LINES (none)
MODEL_EXCEPT = ("simulator.studies", "simulator.cli")  # the rooms outside the model


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _project_module(name: str) -> str | None:
    """The project module `name` is, or lies in (its nearest enclosing module); None outside."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imported_names(module: str) -> set[str]:
    """Every dotted name `module` imports, anywhere in its file (relative imports resolved)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            submodules = {f"{base}.{a.name}" for a in node.names}
            names.update(submodules)
            if not submodules <= MODULES.keys():  # a name of `base` itself, not only its submodules
                names.add(base)
    return names


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (itself left out)."""
    graph = {}
    for module in MODULES:
        targets = {_project_module(n) for n in imported_names(module)}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def import_loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    loops.append(sorted(component))
    return loops


def test_no_import_loop_between_project_modules():
    loops = import_loops(import_graph())
    assert not loops, "import loops (each a set of modules that import each other):\n" + "\n".join(
        ", ".join(loop) for loop in loops)


def test_the_loop_finder_finds_a_loop_through_three_modules():
    assert import_loops({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_loops({"a": {"b"}, "b": set()}) == []


MODEL = [m for m in MODULES if _within(m, "simulator") and not any(_within(m, r) for r in MODEL_EXCEPT)]


@pytest.mark.parametrize("forbidden", ["simulator.studies", "calibration", "torch"])
def test_the_model_imports_no_study_no_calibration_and_no_torch(forbidden):
    offenders = {m: sorted(n for n in imported_names(m) if _within(n, forbidden)) for m in MODEL}
    offenders = {m: names for m, names in offenders.items() if names}
    assert not offenders, f"model modules importing {forbidden}: {offenders}"


def test_the_model_rule_sees_a_study_import():
    """The rule's own check: simulator.simulate is a model module, simulator.cli.sweep imports a study."""
    assert "simulator.simulate" in MODEL and "simulator.cli.sweep" not in MODEL
    assert any(_within(n, "simulator.studies") for n in imported_names("simulator.cli.sweep"))


def test_the_simulator_root_holds_at_most_20_modules():
    root = sorted(p.name for p in (ROOT / "simulator").glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} modules in simulator/: {', '.join(root)}"


def test_no_file_over_500_lines():
    files = [p for d in LINE_DIRS for p in (ROOT / d).rglob("*.py")]
    long = {name: n for p in files if (name := str(p.relative_to(ROOT))) not in LONG_FILES
            and (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert files and not long, f"files over {MAX_LINES} lines: {long}"


ENGINE_MODEL = "simulator.engines"  # the engine model: the `serving_engine:` schemas, the engine-native profile
ABOVE_THE_ENGINE_MODEL = ("simulator.evidence", "simulator.studies", "simulator.cli", "simulator.costs",
                          "simulator.scenario", "simulator.simulate")
PRICING_ROOMS = ("simulator.costs", "simulator.des", "simulator.serving")  # the model that prices and runs


def _offenders(modules, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    """module -> the names it imports that lie in a forbidden room (none: left out)."""
    found = {m: sorted(n for n in imported_names(m) if any(_within(n, f) for f in forbidden)) for m in modules}
    return {m: names for m, names in found.items() if names}


def test_the_engine_model_imports_no_fit_no_importer_and_nothing_above_it():
    engine_model = [m for m in MODULES if _within(m, ENGINE_MODEL)]
    offenders = _offenders(engine_model, ABOVE_THE_ENGINE_MODEL)
    assert engine_model and not offenders, f"simulator/engines/ modules importing the rooms above it: {offenders}"


def test_the_pricing_model_imports_no_evidence():
    pricing = [m for m in MODULES if any(_within(m, r) for r in PRICING_ROOMS)]
    offenders = _offenders(pricing, ("simulator.evidence",))
    assert pricing and not offenders, f"cost model, DES or serving modules importing simulator.evidence: {offenders}"


def test_the_room_rules_see_an_upward_import():
    """The rules' own check: cases.py imports the engine fit (evidence) inside evidence/, validate.py
    imports the cost model, and a function-level import is seen (cli.common's of the engine notes)."""
    assert _offenders(["simulator.evidence.cases"], ("simulator.evidence",))
    assert _offenders(["simulator.evidence.validate"], ABOVE_THE_ENGINE_MODEL)
    assert _offenders(["simulator.cli.common"], ("simulator.costs",))
    assert "simulator.engines.profile" in MODULES and "simulator.costs.engine_native" in MODULES


MAX_CALIBRATION_LINES = 500


def test_no_file_under_calibration_over_500_lines():
    files = [p for p in (ROOT / "calibration").rglob("*") if p.is_file() and p.suffix in (".py", ".sh", ".yaml")]
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_CALIBRATION_LINES}
    assert files and not long, f"files under calibration/ over {MAX_CALIBRATION_LINES} lines: {long}"
