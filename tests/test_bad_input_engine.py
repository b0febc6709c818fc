"""Bad input to the engine side and the studies, as a new user found it: each is one clear line
naming the file and field (or a marked result), never a traceback, a silent NaN or a partial folder."""

from __future__ import annotations

import copy
import csv
import gzip
import json
import re
from pathlib import Path

import pytest

from calibration.engines.build import build_profile
from calibration.engines.points import read_points_file
from calibration.engines.records import write_records
from calibration.shapes import LLAMA_8B, eagle3_draft
from simulator.engines.profile import EngineProfile
from simulator.evidence.validate import load_records
from simulator.inputs import UserInputError
from simulator.scenario import scenario_from_dict

ROOT = Path(__file__).resolve().parent.parent
VLLM_POINTS = ROOT / "data/engine_runs/h200_vllm_0.26.0/points.jsonl.gz"
TARGET, DRAFT = LLAMA_8B.model_dump(), eagle3_draft(LLAMA_8B).model_dump()


@pytest.fixture(scope="module")
def lines():
    return [json.loads(s) for s in gzip.open(VLLM_POINTS, "rt")]


def _write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _each_repeat(lines, fn):
    out = copy.deepcopy(lines)
    for x in out:
        if x["kind"] == "point":
            for r in x["point"]["repeats"]:
                fn(x["point"], r)
    return out


def test_repeats_without_means_say_no_point_holds_the_gpu_parts(tmp_path, lines):
    p = _write(tmp_path / "p.jsonl", _each_repeat(lines, lambda pt, r: r.pop("means", None)))
    assert all(r["means"] == {} for x in read_points_file(p) if x["kind"] == "point" for r in x["point"]["repeats"])
    with pytest.raises(ValueError, match=r"no point holds the GPU parts"):
        build_profile([p], "x", TARGET, DRAFT)


def test_a_step_under_a_microsecond_is_refused_with_file_and_line(tmp_path, lines):
    def tiny(pt, r):
        r["elapsed_us"] *= 1e-300
    p = _write(tmp_path / "p.jsonl", _each_repeat(lines, tiny))
    with pytest.raises(UserInputError, match=r"p\.jsonl:\d+: .*an engine step takes at least 1 us"):
        read_points_file(p)


def test_parts_that_give_no_finite_fit_name_the_part(tmp_path, lines):
    def tiny_parts(pt, r):
        r["means"] = {k: (v * 1e-300 if isinstance(v, float) else v) for k, v in r["means"].items()}
    p = _write(tmp_path / "p.jsonl", _each_repeat(lines, tiny_parts))
    with pytest.raises(ValueError, match=r"p\.jsonl: point .*target_forward_us: Input should be greater than or equal to 1"):
        build_profile([p], "x", TARGET, DRAFT)


def test_all_zero_accept_counts_of_a_speculative_point_are_refused(tmp_path, lines):
    def zero(pt, r):
        if pt["num_steps"]:
            r["accept_length_counts"] = [0] * len(r["accept_length_counts"])
    p = _write(tmp_path / "p.jsonl", _each_repeat(lines, zero))
    with pytest.raises(UserInputError, match=r"p\.jsonl:\d+: point: repeat 0: accept_length_counts are all 0; a whole"):
        read_points_file(p)


def test_a_profile_holding_a_point_twice_is_refused():
    d = json.loads((ROOT / "data/engine_profiles/vllm-0.26.0-h200-llama-3.1-8b-eagle3.json").read_text())
    EngineProfile.model_validate(d)
    d["points"].append(d["points"][5])
    with pytest.raises(ValueError, match=r"points\[84\] is points\[5\] again"):
        EngineProfile.model_validate(d)


def test_records_are_written_as_one_set_and_a_failed_write_leaves_no_folder(tmp_path):
    recs = load_records([ROOT / "data/live/h200_vllm_0.26.0"])[:3]
    named = [(Path(src).name, r) for src, r in recs]
    out = tmp_path / "live"
    write_records(named, out)
    assert sorted(p.name for p in out.iterdir()) == sorted(n for n, _ in named)
    assert [p.name for p in tmp_path.iterdir()] == ["live"]  # no staging folder left

    class Boom(Exception):
        pass

    class Bad:
        def model_dump(self, **kw):
            raise Boom  # as a Ctrl-C in the middle of the set

    with pytest.raises(Boom):
        write_records([*named[:2], ("x.json", Bad())], tmp_path / "new")
    assert not (tmp_path / "new").exists() and [p.name for p in tmp_path.iterdir()] == ["live"]


def test_validate_says_which_command_reads_a_serving_record_or_an_output():
    with pytest.raises(UserInputError, match="a live serving record: `specdecsim validate-serving` reads it"):
        load_records([ROOT / "data/live/h200_serving"])
    with pytest.raises(UserInputError, match=r"a specdecsim output \(serving_validation/2\), not a live record"):
        load_records([ROOT / "data/live/h200_serving_validation.json"])
    with pytest.raises(UserInputError, match="not a live record .*this file holds created_utc"):
        load_records([ROOT / "data/live/h200_diagnostics"])


@pytest.mark.parametrize("field", ["name", "description"])
def test_control_characters_in_a_scenario_name_are_refused(field):
    import yaml
    d = yaml.safe_load((ROOT / "scenarios/llama8b_h200.yaml").read_text())
    d[field] = "bad\x1b[31mred"
    with pytest.raises(UserInputError, match=rf"{field}: holds control characters \('\\x1b'\)"):
        scenario_from_dict(d, "s.yaml", ROOT / "scenarios")
    d[field] = "fine, with a line\nbreak" if field == "description" else "fine"
    scenario_from_dict(d, "s.yaml", ROOT / "scenarios")


@pytest.mark.parametrize("point_by_point", [False, True])
def test_a_sweep_marks_the_points_that_do_not_fit_in_memory(tmp_path, point_by_point):
    from simulator.studies.sweep import run_sweep
    res = run_sweep(ROOT / "scenarios/vllm_llama8b_h200.yaml",
                    ["workload.batch_size=1,64", "workload.context_len=1024,131072"], out_dir=tmp_path,
                    des_sample=0, progress=False, point_by_point=point_by_point)
    rows = list(csv.DictReader((tmp_path / "sweep.csv").open()))
    fits = {(int(r["batch_size"]), int(r["context_len"])): r["fits_memory"] == "True" for r in rows}
    # 64 requests x 131072 tokens of Llama-3.1-8B KV cache (128 KiB a token) is about 1.1 TB
    assert fits == {(1, 1024): True, (1, 131072): True, (64, 1024): True, (64, 131072): False}
    assert res.num_infeasible == 1
    assert float(rows[3]["memory_gb_per_gpu"]) > 1000
    assert list(rows[0])[-1] == "scenario_json"


def test_an_integer_range_with_a_non_integer_end_is_called_malformed():
    from simulator.studies.grid import parse_grid
    for raw in ("1..inf", "1.5..8", "..8"):
        with pytest.raises(UserInputError, match="malformed integer range"):
            parse_grid(f"workload.batch_size={raw}")
    assert parse_grid("workload.batch_size=1..3").values == (1, 2, 3)


def test_live_from_points_with_engine_checks_whose_points_they_are(tmp_path):
    import subprocess
    import sys
    pts = ROOT / "data/engine_runs/h200_sglang_0.5.15/points.jsonl.gz"
    r = subprocess.run([sys.executable, "-m", "simulator.cli", "live", "--engine", "vllm", "--from-points", str(pts),
                        "--out", str(tmp_path / "o")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "are sglang's; give --engine sglang or leave --engine out" in " ".join((r.stdout + r.stderr).split())
    assert not (tmp_path / "o").exists()


def test_a_non_finite_number_in_json_names_its_line_and_key(tmp_path):
    """NaN or Infinity in a JSON file (an engine profile edited by hand, say) is refused naming the file,
    line, column and the key it stands under, not only 'not valid JSON here'."""
    from simulator.inputs import UserInputError, load_json
    for text, where in (('{"a": 1,\n "host_pace_us": NaN}', "f.json:2:18 (key 'host_pace_us')"),
                        ('{"x": "NaN", "y": [1, -Infinity]}', "f.json:1:23 (key 'y')")):
        with pytest.raises(UserInputError, match=re.escape(where) + ".*not a finite number"):
            load_json(text, "f.json")


def test_the_cycle_table_prints_an_empty_bucket_as_zero():
    """A bucket that sums to a floating-point residue (the host at rounded capture sizes: 7e-11 us) prints 0.0."""
    from typer.testing import CliRunner

    from simulator.cli import app
    r = CliRunner().invoke(app, ["simulate", str(ROOT / "scenarios" / "vllm_llama8b_h200.yaml"), "--set",
                                 "workload.batch_size=4", "--set", "spec.num_steps=2", "--set",
                                 "spec.num_draft_tokens=3", "--set",
                                 "serving_engine.cudagraph_capture_sizes=rounded_to_query"])
    assert r.exit_code == 0 and "e-1" not in r.output and "e-0" not in r.output, r.output
