"""Every generated table in the docs is what its script prints from the committed data today.

docs/validation.md's generated block is checked in tests/test_validate.py; here the tables of
docs/calibration.md (docs/make_calibration_table.py), docs/hardware.md, docs/engines.md, the
Kimi-K2 case doc (docs/cases/make_kimi_k2_case.py) and the seed hypotheses
(docs/cases/make_seed_hypotheses.py).

Each script runs in this process as `python SCRIPT` runs it (runpy, `__main__`, argv = [SCRIPT]),
its stdout captured: no second interpreter to start per script. docs/make_cases_table.py replays
the shipped cases through the session's one replay (conftest.replay_shipped_cases). The seed
hypotheses' full table (12 brentq fits, about 10 s of CPU) is the slow tier's; the default tier
checks its first hypothesis both ways (with the collective model, with the published allreduce).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SEED_SCRIPT, SEED_DOC = "docs/cases/make_seed_hypotheses.py", "docs/cases/seed-hypotheses.md"


def run_script(script: str, monkeypatch, capsys, args: tuple[str, ...] = ()) -> str:
    """stdout of `python script ARGS` from the repository root, run in this process."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", [str(ROOT / script), *args])
    monkeypatch.setattr(sys, "path", list(sys.path))  # the scripts put the root on sys.path
    capsys.readouterr()
    runpy.run_path(str(ROOT / script), run_name="__main__")
    return capsys.readouterr().out


def assert_table_lines_in_doc(out: str, script: str, doc: str) -> None:
    table_lines = [line for line in out.splitlines() if line.startswith("|")]
    text = (ROOT / doc).read_text()
    assert table_lines, f"{script} printed no table"
    missing = [line for line in table_lines if line not in text]
    assert not missing, f"{doc} lacks {len(missing)} line(s) {script} prints now, e.g. {missing[0]}"


@pytest.mark.parametrize("script, doc", [
    ("docs/make_calibration_table.py", "docs/calibration.md"),
    ("docs/cases/make_kimi_k2_case.py", "docs/cases/kimi-k2-pcie.md"),
    ("docs/make_comm_table.py", "docs/hardware.md"),
    ("docs/make_moe_table.py", "docs/hardware.md"),
    ("docs/make_moe_engine_table.py", "docs/engines.md"),
    pytest.param(SEED_SCRIPT, SEED_DOC, marks=pytest.mark.slow),  # small form: test_seed_hypothesis_a1_rows_...
    ("docs/make_cases_table.py", "docs/engines.md"),
    ("docs/make_engine_validation_table.py", "docs/engines/vllm.md"),
    ("docs/make_tp_table.py", "docs/engines/tp-groups.md"),
    ("docs/make_tp_carry_prediction.py", "docs/engines/tp-groups.md"),
    ("docs/make_host_probe_table.py", "docs/engines/host-speed.md"),
    ("docs/make_host_cores_table.py", "docs/engines/host-speed.md"),
    ("docs/make_sglang_validation_table.py", "docs/engines/sglang.md"),
    ("docs/make_moe_validation_table.py", "docs/engines/moe.md"),
    ("docs/make_sglang_host_table.py", "docs/engines/host-speed.md"),
    ("docs/make_mla_paths_table.py", "docs/engines/mla.md"),
    ("benchmarks/bench_engine_carry.py", "docs/engines/transfer.md"),
    ("docs/make_requests_table.py", "docs/engines/requests.md"),
    ("benchmarks/bench_request_level.py", "docs/engines/requests.md"),
    ("docs/make_first_runs_table.py", "docs/engines/requests.md"),
    ("docs/make_moe_law_check.py", "docs/engines.md"),
    ("docs/make_host_speed_parts_table.py", "docs/engines/host-speed.md"),
    ("docs/make_host_speed_check_table.py", "docs/engines/host-speed.md"),
    ("docs/make_prefill_chunks_table.py", "docs/engines/requests.md"),
    ("docs/make_host_speed_h200_table.py", "docs/engines/host-speed.md"),
    ("docs/make_closed_batch_draws_table.py", "docs/engines/requests.md"),
    ("docs/make_prefill_alone_table.py", "docs/engines/requests.md"),
    ("docs/make_mixed_steps_table.py", "docs/engines/requests.md"),
    ("docs/make_whole_batch_steps_table.py", "docs/engines/requests.md"),
    ("docs/make_closed_loop_ttft_table.py", "docs/engines/requests.md"),
    ("docs/make_poisson_lag_table.py", "docs/engines/requests.md"),
    ("docs/make_prefill_split_table.py", "docs/engines/requests.md"),
    ("benchmarks/bench_moe_form.py", "docs/engines/transfer.md")])
def test_every_table_line_the_script_prints_is_in_the_doc(script, doc, monkeypatch, capsys, memo_shipped_cases):
    assert_table_lines_in_doc(run_script(script, monkeypatch, capsys), script, doc)


@pytest.mark.parametrize("args", [
    ("data/engine_runs/h100_sglang_0.5.15/e2e_2026-12-07.jsonl.gz", "--scenario", "scenarios/sglang_llama8b_h200.yaml",
     "--gpu", "h100-sxm"),
    ("--steady-of", "sglang-0.5.15-h100-qwen3-8b-eagle3", "--profile", "sglang-0.5.15-h100-llama-3.1-8b-eagle3",
     "--gpu", "h100-sxm", "--scenario", "scenarios/sglang_qwen3_8b_h100.yaml"),
    ("--steady-of", "vllm-0.26.0-h200-llama-3.1-8b-eagle3", "--profile", "vllm-0.26.0-h100-llama-3.1-8b-eagle3",
     "--gpu", "h200-sxm")], ids=["sglang-h200-to-h100", "llama-to-qwen3", "vllm-h100-to-h200"])
def test_the_sglang_carry_and_the_shape_carry_tables_are_in_the_transfer_doc(args, monkeypatch, capsys):
    """docs/engines/transfer.md's SGLang carry (H200 profile on the H100's runs) and shape carry (Llama-3.1-8B's
    profile on Qwen3-8B's windows): every table line the bench prints with the doc's arguments."""
    out = run_script("benchmarks/bench_engine_carry.py", monkeypatch, capsys, args)
    assert_table_lines_in_doc(out, "benchmarks/bench_engine_carry.py " + " ".join(args), "docs/engines/transfer.md")


SGLANG_RUNS = "data/engine_runs/h100_sglang_0.5.15_requests/"
VLLM_MOE = "data/engine_runs/h100_vllm_0.26.0_moe/"
VLLM_E2E = "data/engine_runs/h100_vllm_0.26.0_e2e/"


def test_the_sglang_hosts_cores_tables_are_in_the_requests_doc(monkeypatch, capsys):
    """docs/engines/requests.md's two SGLang H100 hosts' cores (`make_host_cores_table.py RECORD ...`)."""
    args = (SGLANG_RUNS + "host_cores_sent_2026-12-08.json.gz", SGLANG_RUNS + "host_cores_warm_2026-12-07.json.gz")
    out = run_script("docs/make_host_cores_table.py", monkeypatch, capsys, args)
    assert_table_lines_in_doc(out, "docs/make_host_cores_table.py " + " ".join(args), "docs/engines/requests.md")


@pytest.mark.parametrize("args, tpot_only", [
    ((SGLANG_RUNS + "e2e_2026-12-07.jsonl.gz", SGLANG_RUNS + "e2e_more_2026-12-07.jsonl.gz",
      SGLANG_RUNS + "e2e_r2_2026-12-07.jsonl.gz", "--engine-profile", "sglang-0.5.15-h100-llama-3.1-8b-eagle3"), False),
    ((SGLANG_RUNS + "moe_e2e_2026-12-07.jsonl.gz", "--engine-profile", "sglang-0.5.15-h100-qwen3-30b-a3b-eagle3",
      "--models", "qwen3-30b-a3b", "eagle3-qwen3-30b-a3b"), False),
    (("data/engine_runs/h100_sglang_0.5.15/e2e_2026-12-07.jsonl.gz", "--engine-profile",
      "sglang-0.5.15-h100-llama-3.1-8b-eagle3", "--campaign-log",
      "data/engine_runs/h100_sglang_0.5.15/campaign_2026-12-07.log.gz"), True),
    ((VLLM_MOE + "moe_e2e_2026-12-07.jsonl.gz", "--engine-profile", "vllm-0.26.0-h100-qwen3-30b-a3b-eagle3",
      "--models", "qwen3-30b-a3b", "eagle3-qwen3-30b-a3b"), False),
    ((VLLM_MOE + "moe_e2e_2026-12-07.jsonl.gz", "--engine-profile", "vllm-0.26.0-h200-qwen3-30b-a3b-eagle3",
      "--models", "qwen3-30b-a3b", "eagle3-qwen3-30b-a3b"), False),
    ((VLLM_E2E + "e2e_2026-12-06.jsonl.gz", VLLM_E2E + "e2e_s5_2026-12-06.jsonl.gz",
      "data/engine_runs/h100_vllm_0.26.0_more_steps/e2e_2026-12-07.jsonl.gz", "--each-num-steps"), False),
    (("data/engine_runs/h100_vllm_0.26.0_poisson/poisson_2026-12-07.jsonl.gz",), False),
    ((SGLANG_RUNS + "warm_e2e_2026-12-07.jsonl.gz", "--engine-profile", "sglang-0.5.15-h100-llama-3.1-8b-eagle3",
      "--host-of-runs", "--each-speedup"), False),
    ((SGLANG_RUNS + "moe_warm_e2e_2026-12-07.jsonl.gz", "--engine-profile", "sglang-0.5.15-h100-qwen3-30b-a3b-eagle3",
      "--models", "qwen3-30b-a3b", "eagle3-qwen3-30b-a3b", "--host-of-runs", "--each-speedup"), False),
    ((SGLANG_RUNS + "sent_e2e_2026-12-08.jsonl.gz", "--engine-profile", "sglang-0.5.15-h100-llama-3.1-8b-eagle3",
      "--host-of-runs", "--each-speedup", "--each-run"), False),
    ((SGLANG_RUNS + "moe_sent_e2e_2026-12-08.jsonl.gz", "--engine-profile", "sglang-0.5.15-h100-qwen3-30b-a3b-eagle3",
      "--models", "qwen3-30b-a3b", "eagle3-qwen3-30b-a3b", "--host-of-runs", "--each-speedup", "--each-run"), False)],
    ids=["sglang-dense", "sglang-moe", "sglang-first-campaign-tpot", "vllm-moe", "vllm-moe-h200-carried",
         "vllm-every-num-steps", "vllm-poisson", "sglang-warm-dense", "sglang-warm-moe", "sglang-sent-dense",
         "sglang-sent-moe"])
def test_the_sglang_request_level_tables_are_in_the_requests_doc(args, tpot_only, monkeypatch, capsys):
    """docs/engines/requests.md's SGLang H100 runs: end to end (dense, MoE), and the first campaign's runs whose
    wall times do not hold (TPOT p50 alone); vLLM's MoE runs on the H100, from its own profile and the H200's."""
    out = run_script("benchmarks/bench_request_level.py", monkeypatch, capsys, args)
    assert ("TPOT alone is compared" in out) == tpot_only
    assert_table_lines_in_doc(out, "benchmarks/bench_request_level.py " + " ".join(args), "docs/engines/requests.md")


@pytest.mark.parametrize("args", [
    (SGLANG_RUNS + "e2e_2026-12-07.jsonl.gz", SGLANG_RUNS + "e2e_more_2026-12-07.jsonl.gz",
     SGLANG_RUNS + "e2e_r2_2026-12-07.jsonl.gz", "--engine-profile", "sglang-0.5.15-h200-llama-3.1-8b-eagle3"),
    (SGLANG_RUNS + "moe_e2e_2026-12-07.jsonl.gz", "--engine-profile", "sglang-0.5.15-h200-qwen3-30b-a3b-eagle3",
     "--models", "qwen3-30b-a3b", "eagle3-qwen3-30b-a3b"),
    (SGLANG_RUNS + "qwen3_8b_e2e_2026-12-07.jsonl.gz", "--engine-profile", "sglang-0.5.15-h100-llama-3.1-8b-eagle3",
     "--models", "qwen3-8b", "eagle3-qwen3-8b"),
    ("data/engine_runs/h100_vllm_0.26.0_qwen3-8b/qwen3_8b_e2e_2026-12-07.jsonl.gz", "--engine-profile",
     "vllm-0.26.0-h100-llama-3.1-8b-eagle3", "--models", "qwen3-8b", "eagle3-qwen3-8b"),
    ("data/engine_runs/h100_vllm_0.26.0_qwen3-235b-rank/rank_e2e_2026-12-07.jsonl.gz", "--engine-profile",
     "vllm-0.26.0-h100-qwen3-30b-a3b-eagle3", "--models", "qwen3-235b-a22b-tp8-rank", "eagle3-qwen3-235b-a22b-tp8-rank"),
    ("data/engine_runs/h100_vllm_0.26.0_moe_uniform/rank_uniform_e2e_2026-12-07.jsonl.gz", "--engine-profile",
     "vllm-0.26.0-h100-qwen3-30b-a3b-eagle3-uniform-routing", "--models", "qwen3-235b-a22b-tp8-rank",
     "eagle3-qwen3-235b-a22b-tp8-rank"),
    ("--engine-profile", "vllm-0.26.0-h200-llama-3.1-8b-eagle3"),
    (SGLANG_RUNS + "warm_e2e_2026-12-07.jsonl.gz", "--engine-profile", "sglang-0.5.15-h200-llama-3.1-8b-eagle3"),
    (SGLANG_RUNS + "moe_warm_e2e_2026-12-07.jsonl.gz", "--engine-profile", "sglang-0.5.15-h200-qwen3-30b-a3b-eagle3",
     "--models", "qwen3-30b-a3b", "eagle3-qwen3-30b-a3b")],
    ids=["sglang-h200-to-h100", "moe-h200-to-h100", "llama-to-qwen3", "vllm-llama-to-qwen3", "vllm-moe-to-235b-rank",
         "vllm-moe-uniform-to-235b-rank", "vllm-h200-to-h100", "sglang-h200-to-h100-warm", "moe-h200-to-h100-warm"])
def test_the_request_level_carry_tables_are_in_the_transfer_doc(args, monkeypatch, capsys):
    """docs/engines/transfer.md's carries checked on SGLang's request-level runs of the H100: the H200 profiles
    (dense, MoE) carried to the H100, and the Llama-3.1-8B profile carried to Qwen3-8B's shape."""
    out = run_script("benchmarks/bench_request_level.py", monkeypatch, capsys, args)
    assert "carried to" in out.splitlines()[0]
    assert_table_lines_in_doc(out, "benchmarks/bench_request_level.py " + " ".join(args), "docs/engines/transfer.md")


def test_seed_hypothesis_a1_rows_are_in_the_doc(monkeypatch):
    """Small form of the seed-hypotheses doc check (its full table: the slow-tier parameter of
    test_every_table_line_the_script_prints_is_in_the_doc): hypothesis A1 fitted and predicted by
    the script's own functions, with the collective model and with the published allreduce; each
    row printed as the script prints it must be a line of the doc."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    seed = runpy.run_path(str(ROOT / SEED_SCRIPT), run_name="seed_hypotheses")
    a1 = seed["HYPOTHESES"][0]
    assert a1[0] == "A1"
    out = "\n".join(seed["table"]([seed["predict"](a1, pub=pub)]) for pub in (False, True))
    rows = [line for line in out.splitlines() if line.startswith("| A1")]
    assert len(rows) == 2 and "(published allreduce)" in rows[1]
    assert_table_lines_in_doc(out, SEED_SCRIPT, SEED_DOC)


def test_the_mla_paths_table_reads_the_queues_points_and_only_vllms_of_that_backend(tmp_path, monkeypatch, capsys):
    """docs/make_mla_paths_table.py fills its measured columns from the points files queue
    vllm-h200-mla-paths writes (committed gzipped under the queue's names), and refuses in one line a
    file whose processes are not vLLM's with the path's MLA backend."""
    import gzip
    import json

    from calibration.engines.campaign import run_queue
    from calibration.engines.queue import QUEUES, write_queue
    plans = QUEUES["vllm-h200-mla-paths"]()
    fake = [p.model_copy(update={"engine": "fake", "mla_attention_backend": None,
                                 "points": [q for q in p.points if q["prompt_len"] == 2048 and q["batch_size"] == 1]})
            for p in plans]
    write_queue(fake, tmp_path / "q")
    run_queue(tmp_path / "q", tmp_path / "points.jsonl", log=lambda s: None)
    monkeypatch.setattr(sys, "path", list(sys.path))
    mod = runpy.run_path(str(ROOT / "docs" / "make_mla_paths_table.py"), run_name="mla_paths")
    runs = tmp_path / "runs"
    runs.mkdir()
    for plan, backend in zip(plans, ("TRITON_MLA", None)):
        lines = [json.loads(s) for s in (tmp_path / plan.points_file).read_text().splitlines()]
        with gzip.open(runs / (plan.points_file + ".gz"), "wt") as f:
            f.write("".join(json.dumps(x) + "\n" for x in lines))
        mod["measured"].__globals__["RUNS"] = runs  # the module reads RUNS at call time
        path = "prefill" if backend else "decode"
        with pytest.raises(SystemExit, match="points of another engine or MLA backend"):
            mod["measured"](path)  # the fake engine's processes
        for x in lines:
            if x["kind"] == "point":
                x["engine"] = "vllm"
            if x["kind"] == "engine":
                x["info"]["engine"] = "vllm"
                x["info"]["variant"]["mla_attention_backend"] = backend
        with gzip.open(runs / (plan.points_file + ".gz"), "wt") as f:
            f.write("".join(json.dumps(x) + "\n" for x in lines))
        got = mod["measured"](path)
        assert list(got) == [(1, 2048)] and got[(1, 2048)][0] > 0


def test_the_h200_parts_against_the_h100_profile_are_in_the_host_speed_doc(monkeypatch, capsys):
    """docs/engines/host-speed.md's "Across GPUs": the H200 profile's parts against the H100 profile's."""
    args = ("sglang-0.5.15-h200-llama-3.1-8b-eagle3",)
    out = run_script("docs/make_host_speed_parts_table.py", monkeypatch, capsys, args)
    assert_table_lines_in_doc(out, "docs/make_host_speed_parts_table.py " + " ".join(args), "docs/engines/host-speed.md")


def test_the_vllm_moe_first_runs_table_is_in_the_requests_doc(monkeypatch, capsys):
    """docs/engines/requests.md's first runs of vLLM's MoE request-level runs on the H100."""
    args = (VLLM_MOE + "moe_e2e_2026-12-07.jsonl.gz",)
    out = run_script("docs/make_first_runs_table.py", monkeypatch, capsys, args)
    assert_table_lines_in_doc(out, "docs/make_first_runs_table.py " + " ".join(args), "docs/engines/requests.md")
