"""calibration/bench/engine_moe.py's parts that run without a GPU: the routing alignment it hands the
engine's kernel, the activation quantisation, the version it records, and `specdecsim calibrate
engine-moe`'s refusals (a folder without the engine, a bad shape or token list)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from calibration.bench import engine_moe as EM  # noqa: E402


def test_align_groups_slots_by_expert_and_pads_each_run_to_the_block():
    ids = torch.tensor([[2, 3], [1, 2]], dtype=torch.int32)  # flat slots 0..3 -> experts 2, 3, 1, 2
    sorted_ids, expert_ids, npad = EM.align(ids, num_experts=4, block_m=4)
    assert int(npad) == 12  # three experts used, each padded to 4 slots
    runs = sorted_ids[:12].view(3, 4).tolist()
    assert expert_ids[:3].tolist() == [1, 2, 3] and (expert_ids[3:] == -1).all()
    assert runs == [[2, 4, 4, 4], [0, 3, 4, 4], [1, 4, 4, 4]]  # 4 = the sentinel (numel)
    assert sorted_ids.numel() == 4 + 4 * 3  # numel + E (block_m - 1), as the engines size it


@pytest.mark.parametrize("quant", [EM.quant_block, EM.quant_tensor])
def test_quantised_activations_dequantise_within_fp8_precision(quant):
    x = torch.randn(3, 256)
    q, s = quant(x)
    assert q.dtype == torch.float8_e4m3fn
    back = q.float().view(3, -1, 128) * s.view(3, -1, 1) if s.numel() > 1 else q.float() * s
    assert torch.allclose(back.view(3, 256), x, rtol=0.07, atol=0.02)


def test_a_folder_without_the_engine_files_or_a_bad_shape_is_one_error_line(tmp_path):
    from typer.testing import CliRunner

    from simulator.cli import app
    for extra, what in [([], "no sglang/kernels/ops/moe/fused_moe_triton_kernels.py"),
                        (["--shape", "x:8:100:32:2:fp8_block128"], "K a multiple of 128"),
                        (["--shape", "x:8:128:32:2:int4"], "QUANT is fp8_block128 or fp8_tensor"),
                        (["--tokens", "1,0"], "token counts in 1..65536")]:
        src = tmp_path / "src"
        if extra:  # the engine files there, so the later checks are reached
            for rel in (EM.KERNELS, EM.CONFIGS):
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                (src / rel).write_text("")
        r = CliRunner().invoke(app, ["calibrate", "engine-moe", "--engine-src", str(src), "--out",
                                     str(tmp_path / "o.jsonl"), *extra])
        assert r.exit_code != 0 and what in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "o.jsonl").exists()


def test_the_engine_version_is_read_from_its_version_file(tmp_path):
    (tmp_path / "sglang").mkdir()
    assert EM.engine_version(tmp_path) == "unknown"
    (tmp_path / "sglang" / "_version.py").write_text("__version__ = version = '0.5.23'\n")
    assert EM.engine_version(tmp_path) == "0.5.23"
