"""The grouped closed-form sweep (simulator.studies.sweep_grouped) writes what the point-by-point path
writes: sweep.csv and best_num_steps.csv byte for byte, sweep.json but its elapsed time, the same
rows and the same errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.studies.grid import MAX_GRID_POINTS, parse_grids
from simulator.inputs import UserInputError
from simulator.studies.sweep import run_sweep
from simulator.studies.sweep_grouped import MAX_GROUPED_GRID_POINTS, GroupedRows, _join_rows

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "tp1_draft.yaml"
FAST_DES = ["fidelity.num_cycles=200"]

CASES = {
    # acceptance first (not the last axis), rates 0 and 1 (extend lengths that never happen), batch, placement
    "mixed": (FAST_DES, ["acceptance.acceptance_rate=0,0.35,0.8,1.0", "placement=shared_tp,tp1_colocated,tp2",
                         "workload.batch_size=1,7,64", "spec.num_steps=1..3"], 2),
    # requests drawing their own rate (rate classes) beside alike ones; groups sharing a cost model
    "rate_classes": (FAST_DES + ["acceptance.rate_concentration=20"],
                     ["workload.batch_size=1,4", "acceptance.acceptance_rate=0,0.5,1", "spec.num_steps=1..2",
                      "workload.max_new_tokens=16,64"], 0),
    # tree drafts, num_draft_tokens swept (no chain rule), no num_steps axis (no best_num_steps.csv)
    "tree": (FAST_DES + ["acceptance={kind: tree, acceptance_rate: 0.7}", "spec.topk=2", "spec.num_steps=3",
                         "spec.num_draft_tokens=5"],
             ["acceptance.acceptance_rate=0.2,0.95", "spec.num_draft_tokens=3..6"], 1),
    # no acceptance axis; a grid value with a line break (its CSV cell is quoted over two lines)
    "text": (FAST_DES, ['description="two\\nlines",plain', "spec.num_steps=2..3"], 0),
}


def _files(out: Path) -> dict[str, bytes]:
    files = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    meta = json.loads(files.pop("sweep.json"))
    meta.pop("elapsed_s")
    return {**files, "sweep.json": json.dumps(meta).encode()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_grouped_sweep_writes_what_point_by_point_writes(tmp_path, case):
    overrides, grids, des_sample = CASES[case]
    kw = dict(overrides=overrides, des_sample=des_sample, progress=False)
    grouped = run_sweep(SCENARIO, grids, out_dir=tmp_path / "grouped", **kw)
    single = run_sweep(SCENARIO, grids, out_dir=tmp_path / "single", point_by_point=True, **kw)
    assert isinstance(grouped.rows, GroupedRows) and isinstance(single.rows, list)
    assert _files(tmp_path / "grouped") == _files(tmp_path / "single")
    assert grouped.columns == single.columns
    assert list(grouped.rows) == single.rows
    assert grouped.rows[-1] == single.rows[-1] and grouped.rows[1:3] == single.rows[1:3]
    assert grouped.best_rows == single.best_rows
    assert grouped.des_check == single.des_check


@pytest.mark.parametrize("overrides, grids, words", [
    # a positional list that fits num_steps 2 only: the points with num_steps 3 fail (group side)
    (["acceptance={kind: positional, acceptance_rates: [0.8, 0.7]}", "spec.num_steps=2",
      "spec.num_draft_tokens=3"], ["workload.batch_size=1,2", "spec.num_steps=2..3"], "acceptance_rates has 2"),
    # a Beta whose parameter is too small: the acceptance fails whatever the group (acceptance side)
    (["acceptance.rate_concentration=0.01"], ["workload.batch_size=1,2", "acceptance.acceptance_rate=0.5,1e-9"],
     "rate_concentration"),
    # a placement the TP size does not fit, after points that pass
    ([], ["acceptance.acceptance_rate=0.5,0.6", "placement=tp1_colocated,tp3"], "tp_size"),
])
def test_grouped_sweep_names_the_point_point_by_point_names(overrides, grids, words):
    errors = []
    for point_by_point in (False, True):
        with pytest.raises(UserInputError) as e:
            run_sweep(SCENARIO, grids, overrides=overrides, des_sample=0, progress=False,
                      point_by_point=point_by_point)
        errors.append(str(e.value))
    assert errors[0] == errors[1]
    assert words in errors[0] and "grid point (" in errors[0]


def test_grid_limits_depend_on_the_path():
    big = ["spec.num_steps=1..8", "acceptance.acceptance_rate=0.30:0.95:0.0005", "workload.batch_size=1..96"]
    assert len(parse_grids(big, MAX_GROUPED_GRID_POINTS)) == 3  # 999,168 points: a grouped sweep takes them
    with pytest.raises(UserInputError, match=f"points; a sweep takes at most {MAX_GRID_POINTS:,}"):
        run_sweep(SCENARIO, big, solver="des", progress=False)
    with pytest.raises(UserInputError, match=f"2,081,600 points; a sweep takes at most {MAX_GROUPED_GRID_POINTS:,}"):
        run_sweep(SCENARIO, [*big[:2], "workload.batch_size=1..200"], progress=False)
    with pytest.raises(UserInputError, match="262,144 points before the acceptance fields, each its own scenario "
                                             f"and cost model; a sweep takes at most {MAX_GRID_POINTS:,}"):
        run_sweep(SCENARIO, ["spec.num_steps=1..64", "workload.batch_size=1..4096"], progress=False)
    serving = ROOT / "scenarios" / "serving_poisson.yaml"
    grid = ["acceptance.acceptance_rate=0.30:0.95:0.0005", "workload.batch_size=1..80"]  # 104,080 points
    with pytest.raises(UserInputError, match=r"point by point \(a serving: section\) takes at most 100,000"):
        run_sweep(serving, grid, progress=False)


def test_join_rows_refuses_rows_that_are_not_one_line_each():
    assert _join_rows("1,a\n2,b\n", ['"x"', '"y"']) == '1,a,"x"\n2,b,"y"\n'
    with pytest.raises(ValueError):
        _join_rows('1,"a\nb"\n', ['"x"'])
