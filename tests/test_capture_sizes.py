"""vLLM's CUDA-graph capture sizes as a scenario setting (`serving_engine.cudagraph_capture_sizes`):
the engine-native profile prices a verify the new list pads differently from its fitted forms, not
from the points its own list measured, and says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from calibration.engines.queue import vllm_capture_sizes_for_spec
from simulator.cli import app
from simulator.costs.forward import CostModel
from simulator.engines.profile import load_engine_profile, rounded_to_query, with_capture_sizes
from simulator.profile import load_profile, resolve_profile_path
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "vllm_llama8b_h200.yaml"
CELL = ["workload.batch_size=4", "spec.num_steps=2", "spec.num_draft_tokens=3", "workload.context_len=1100"]


def test_rounded_to_query_is_what_v1_does_to_the_default_list():
    prof = load_engine_profile("vllm-0.26.0-h200-llama-3.1-8b-eagle3")
    assert rounded_to_query(prof.cudagraph_capture_sizes, 2) == vllm_capture_sizes_for_spec(2)
    assert rounded_to_query([1, 2, 4, 8, 16], 3) == [4, 8, 16]
    assert all(s % 3 == 0 for s in rounded_to_query(prof.cudagraph_capture_sizes, 2))


def test_the_no_full_graph_cell_gets_a_full_graph_and_leaves_the_cells_points():
    prof = load_engine_profile("vllm-0.26.0-h200-llama-3.1-8b-eagle3")
    assert not prof.full_graph_verify(4, 2)
    new = with_capture_sizes(prof, "rounded_to_query", 2)
    assert new.full_graph_verify(4, 2) and new.padded_tokens(12) == 18
    assert not [p for p in new.points if p.num_steps == 2 and p.batch_size == 4]
    kept = [p for p in new.points if p.num_steps == 2]
    assert kept and all(new.padded_tokens(p.batch_size * 3) == prof.padded_tokens(p.batch_size * 3) for p in kept)
    assert len([p for p in new.points if p.num_steps == 0]) == len([p for p in prof.points if p.num_steps == 0])
    same = with_capture_sizes(prof, prof.cudagraph_capture_sizes, 2)
    assert same.points == prof.points


def test_a_scenario_with_rounded_sizes_prices_the_cell_full_graph_and_notes_it():
    prof = load_profile(resolve_profile_path("h200"))
    default = CostModel(load_scenario(SCENARIO, CELL), prof)
    rounded = CostModel(load_scenario(SCENARIO, CELL + ["serving_engine.cudagraph_capture_sizes=rounded_to_query"]),
                        prof)
    g0, h0 = default.native.step_us(4, 2, 1100.0)
    g1, h1 = rounded.native.step_us(4, 2, 1100.0)
    assert max(g1, h1) < 0.8 * max(g0, h0)  # measured on the lent H200: 6.1 ms against 8.5 (docs table)
    assert any("CUDA-graph capture sizes 3, 6, 9, 18" in n for n in rounded.lookup.notes)
    assert not any("gets no full CUDA graph" in n for n in rounded.lookup.notes)
    assert any("gets no full CUDA graph" in n for n in default.lookup.notes)


def test_bad_capture_sizes_are_refused_in_one_line(tmp_path):
    data = yaml.safe_load(SCENARIO.read_text())
    for bad in ([16, 8], [0, 8], "rounded", [], [10 ** 6], [3.5, 6], [True], ["3"], list(range(1, 5000))):
        data["serving_engine"]["cudagraph_capture_sizes"] = bad
        f = tmp_path / "s.yaml"
        f.write_text(yaml.safe_dump(data))
        r = CliRunner().invoke(app, ["simulate", str(f)])
        assert r.exit_code != 0 and "Traceback" not in r.output and "cudagraph_capture_sizes" in r.output, r.output
        assert "'rounded_to_query' or a list of 1 to 4,096 strictly increasing token counts" in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1, r.output
    data["serving_engine"] = {"kind": "sglang", "cudagraph_capture_sizes": [1, 2]}
    f.write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(app, ["simulate", str(f)])
    assert r.exit_code != 0 and "cudagraph_capture_sizes" in r.output and "Traceback" not in r.output
    assert "belongs to another kind" in r.output and "did you mean" not in r.output


def test_notes_at_capture_sizes_that_hold_no_point_or_stop_below_the_verify():
    """A list under which no speculative point of the profile holds says so (not 'was not measured ( were)');
    a verify above the largest size gets the no-graphs note only, not the piecewise one as well."""
    prof = load_profile(resolve_profile_path("h200"))
    cost = CostModel(load_scenario(SCENARIO, CELL + ["serving_engine.cudagraph_capture_sizes=[512]"]), prof)
    assert not any("( were)" in n for n in cost.lookup.notes)
    assert any("no speculative point of the profile holds" in n for n in cost.lookup.notes)
    big = CostModel(load_scenario(SCENARIO, [c for c in CELL if "batch_size" not in c] + [
        "workload.batch_size=16", "serving_engine.cudagraph_capture_sizes=[3,6,9,18,24]"]), prof)
    assert any("above the largest CUDA-graph capture size 24" in n for n in big.lookup.notes)
    assert not any("gets no full CUDA graph" in n for n in big.lookup.notes)


def test_the_docs_table_reads_the_measured_cell(tmp_path):
    import sys
    sys.path.insert(0, str(ROOT / "docs"))
    from make_capture_sizes_table import measured
    rows = measured()
    cap = [r for r in rows if r["label"] == "diag_s2_cap3"]
    assert len(cap) == 2 and all(6000 < min(r["steps"]) and max(r["steps"]) < 7000 for r in cap)
    assert json.dumps(rows)


def test_a_sweep_names_the_cells_without_a_full_verify_graph(tmp_path):
    """A sweep over the vLLM scenario names the (batch, num_steps) cells whose verify gets no full CUDA
    graph at the profile's capture sizes, and none with the sizes rounded to the query."""
    grid = ["--grid", "workload.batch_size=1,2,4,8", "--grid", "spec.num_steps=1..4"]
    r = CliRunner().invoke(app, ["sweep", str(SCENARIO), *grid, "--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "1 swept cell(s) get no full CUDA graph for the verify (batch 4 num_steps 2)" in flat
    r = CliRunner().invoke(app, ["sweep", str(SCENARIO), *grid, "--set",
                                 "serving_engine.cudagraph_capture_sizes=rounded_to_query", "--out", str(tmp_path / "b")])
    assert r.exit_code == 0 and "no full CUDA graph" not in " ".join(r.output.split()), r.output
