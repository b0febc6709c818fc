"""Hardware catalog: every file validates, figures are dense and consistent, bad input fails in one line."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.hardware import BoxSpec, GpuSpec, hardware_dir, load_catalog, load_entry
from simulator.scenario import UserInputError

GPU_FILES = sorted((hardware_dir() / "gpus").glob("*.yaml"))
BOX_FILES = sorted((hardware_dir() / "boxes").glob("*.yaml"))
runner = CliRunner()

REQUIRED_GPUS = {"h100-sxm", "h100-pcie", "h200-sxm", "h200-nvl", "h20", "h800-sxm", "a100-sxm-80gb",
                 "a100-pcie-80gb", "a800-sxm", "l40s", "rtx-pro-6000-blackwell", "rtx-4090", "rtx-3090",
                 "rtx-5090", "b200"}
REQUIRED_BOXES = {"hgx-h100-8gpu", "hgx-h200-8gpu", "hgx-b200-8gpu", "hgx-h800-8gpu", "dgx-a100-8gpu",
                  "h200-nvl-pcie-8gpu", "pcie-rtx-pro-6000-8gpu", "pcie-rtx-pro-6000-4gpu", "pcie-rtx-4090-8gpu",
                  "pcie-l40s-8gpu", "single-h200", "2x-h200-nvlink"}

# 2:4-sparse figures as the datasheets print them (with an asterisk), TFLOP/s; the catalog holds half.
# Source: each GPU's catalog file (sources / notes).
SPARSE_DATASHEET = {
    ("h100-sxm", "bf16"): 1979, ("h100-sxm", "fp8"): 3958,
    ("h100-pcie", "bf16"): 1513, ("h100-pcie", "fp8"): 3026,
    ("h200-sxm", "bf16"): 1979, ("h200-sxm", "fp8"): 3958,
    ("h200-nvl", "bf16"): 1671, ("h200-nvl", "fp8"): 3341,
    ("a100-sxm-80gb", "bf16"): 624, ("a100-pcie-80gb", "bf16"): 624,
    ("l40s", "fp8"): 1466,  # its bf16 is printed dense (362.05), not exactly half of 733*
    ("b200", "bf16"): 4500, ("b200", "fp8"): 9000, ("b200", "fp4"): 18000,
    ("rtx-5090", "fp4"): 3352,
}
# Hopper and Blackwell data-center parts whose datasheets give fp8 = 2 x bf16 (and fp4 = 2 x fp8).
FP8_TWICE_BF16 = ["h100-sxm", "h100-pcie", "h200-sxm", "h200-nvl", "h800-sxm", "h20", "b200"]
# One-way x16 rate by PCIe generation, GB/s (NVIDIA's bidirectional figure / 2: Gen4 64, Gen5 128).
PCIE_X16_ONE_WAY_GB_PER_S = {4: 32, 5: 64}


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.mark.parametrize("path", GPU_FILES, ids=[p.stem for p in GPU_FILES])
def test_every_gpu_file_validates_with_a_source(path):
    gpu = load_entry(path, GpuSpec)
    assert gpu.id == path.stem and gpu.sources


@pytest.mark.parametrize("path", BOX_FILES, ids=[p.stem for p in BOX_FILES])
def test_every_box_file_validates_with_a_source(path):
    box = load_entry(path, BoxSpec)
    assert box.id == path.stem and box.sources


def test_catalog_holds_the_required_gpus_and_boxes(catalog):
    assert REQUIRED_GPUS <= set(catalog.gpus)
    assert REQUIRED_BOXES <= set(catalog.boxes)


def test_every_box_gpu_exists_and_links_match_it(catalog):
    for box in catalog.boxes.values():
        gpu = catalog.gpu(box.gpu)
        if box.interconnect == "pcie":
            assert box.link_bandwidth_gb_per_s == PCIE_X16_ONE_WAY_GB_PER_S[box.pcie_generation], box.id
        else:
            assert box.nvlink_generation == gpu.nvlink_generation, box.id
            assert box.link_bandwidth_gb_per_s == pytest.approx(gpu.nvlink_bandwidth_gb_per_s / 2), box.id


@pytest.mark.parametrize(("gpu_id", "dtype"), sorted(SPARSE_DATASHEET), ids=lambda x: str(x))
def test_stored_rates_are_dense_half_the_sparse_datasheet(catalog, gpu_id, dtype):
    dense = catalog.gpu(gpu_id).dense_tflops(dtype)
    assert dense == pytest.approx(SPARSE_DATASHEET[(gpu_id, dtype)] / 2, rel=0.002)
    assert dense < SPARSE_DATASHEET[(gpu_id, dtype)]


@pytest.mark.parametrize("gpu_id", FP8_TWICE_BF16)
def test_fp8_is_twice_bf16_on_hopper_and_blackwell_datacenter_parts(catalog, gpu_id):
    gpu = catalog.gpu(gpu_id)
    assert gpu.dense_tflops("fp8") == pytest.approx(2 * gpu.dense_tflops("bf16"), rel=0.002)
    if gpu.supports_dtype("fp4"):
        assert gpu.dense_tflops("fp4") == pytest.approx(2 * gpu.dense_tflops("fp8"), rel=0.002)


def test_geforce_rates_are_the_fp32_accumulate_ones(catalog):
    # GeForce runs fp32 accumulate at half the fp16-accumulate rate; the catalog stores the fp32 one.
    # Source: Ada whitepaper figures via hmc-tech (4090: 330.3 fp16-acc, 165.2 fp32-acc); Tom's Hardware (3090: 142).
    assert catalog.gpu("rtx-4090").dense_tflops("bf16") == pytest.approx(330.3 / 2, rel=0.002)
    assert catalog.gpu("rtx-3090").dense_tflops("bf16") == pytest.approx(142 / 2, rel=0.002)


def test_fp16_reads_the_bf16_rate(catalog):
    gpu = catalog.gpu("h100-sxm")
    assert gpu.dense_tflops("fp16") == gpu.dense_tflops("bf16")


def test_fp4_before_blackwell_raises_one_line(catalog):
    for gpu in catalog.gpus.values():
        assert gpu.supports_dtype("fp4") == (gpu.architecture == "blackwell" and gpu.fp4_dense_tflops is not None)
    with pytest.raises(UserInputError) as e:
        catalog.gpu("a100-sxm-80gb").dense_tflops("fp4")
    msg = str(e.value)
    assert "\n" not in msg and "a100-sxm-80gb" in msg and "fp4" in msg
    with pytest.raises(UserInputError, match="fp8"):
        catalog.box_gpu("dgx-a100-8gpu").dense_tflops("fp8")


def test_unknown_dtype_lists_the_known_ones(catalog):
    with pytest.raises(UserInputError, match="bf16, fp16, fp8, fp4, int8"):
        catalog.gpu("h100-sxm").dense_tflops("fp6")


def test_unknown_ids_name_the_id_and_list_the_known_ones(catalog):
    with pytest.raises(UserInputError) as e:
        catalog.gpu("h300")
    assert "'h300'" in str(e.value) and "h100-sxm" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(UserInputError) as e:
        catalog.box("hgx-h300-8gpu")
    assert "'hgx-h300-8gpu'" in str(e.value) and "hgx-h100-8gpu" in str(e.value) and "\n" not in str(e.value)


def test_cli_lists_every_id(catalog):
    r = runner.invoke(app, ["hardware"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    for entry_id in [*catalog.gpus, *catalog.boxes]:
        assert entry_id in r.output


def test_cli_shows_one_entry_with_its_sources(catalog):
    r = runner.invoke(app, ["hardware", "h100-sxm"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "sources" in r.output and "hpctech" in r.output and "989.5" in r.output


def test_cli_unknown_id_exits_2_with_one_line():
    r = runner.invoke(app, ["hardware", "h300"], env={"COLUMNS": "400"})
    assert r.exit_code == 2
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "'h300'" in lines[0] and "h200-sxm" in lines[0]
    assert "Traceback" not in r.output


def test_cli_json_writes_the_catalog(tmp_path, catalog):
    out = tmp_path / "catalog.json"
    r = runner.invoke(app, ["hardware", "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert set(data["gpus"]) == set(catalog.gpus) and set(data["boxes"]) == set(catalog.boxes)
    assert data["gpus"]["b200"]["fp4_dense_tflops"] == 9000


def test_cli_json_dash_is_standard_output_and_the_tables_go_to_standard_error(tmp_path, monkeypatch, catalog):
    # '-' once made a file named '-' in the working folder (one was committed by mistake)
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["hardware", "--json", "-"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert set(data["gpus"]) == set(catalog.gpus)
    assert "b200" in r.stderr and "wrote standard output" in r.stderr
    assert not (tmp_path / "-").exists()
    plain = runner.invoke(app, ["hardware"])  # the next command in the process prints on standard output again
    assert "b200" in plain.stdout


def copy_catalog(tmp_path: Path) -> Path:
    root = tmp_path / "hardware"
    shutil.copytree(hardware_dir() / "gpus", root / "gpus")
    shutil.copytree(hardware_dir() / "boxes", root / "boxes")
    return root


def test_bad_field_names_the_file_and_field_in_one_line(tmp_path):
    root = copy_catalog(tmp_path)
    bad = root / "gpus" / "h100-sxm.yaml"
    bad.write_text(bad.read_text().replace("memory_bandwidth_gb_per_s: 3350", "memory_bandwidth_gb_per_s: 5"))
    with pytest.raises(UserInputError) as e:
        load_catalog(root)
    msg = str(e.value)
    assert "\n" not in msg and str(bad) in msg and "memory_bandwidth_gb_per_s" in msg and "(got 5)" in msg
    r = runner.invoke(app, ["hardware", "--catalog-dir", str(root)], env={"COLUMNS": "400"})
    assert r.exit_code == 2 and "memory_bandwidth_gb_per_s" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize(("text", "fragment"), [
    ("nvlink_speed: 900\n", "nvlink_speed: Extra inputs are not permitted"),  # misspelled key
    ("fp4_dense_tflops: 100\n", "fp4_dense_tflops must be null before blackwell"),
    ("id: h999\n", "differs from the file name"),
], ids=["unknown-key", "fp4-on-hopper", "id-mismatch"])
def test_bad_gpu_file_fails_in_one_line(tmp_path, text, fragment):
    root = copy_catalog(tmp_path)
    path = root / "gpus" / "h100-sxm.yaml"
    lines = [line for line in path.read_text().splitlines(keepends=True) if not line.startswith("fp4_dense_tflops")]
    path.write_text("".join(lines) + text)
    with pytest.raises(UserInputError) as e:
        load_catalog(root)
    assert fragment in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)


def test_box_with_unknown_gpu_names_the_box_file(tmp_path):
    root = copy_catalog(tmp_path)
    path = root / "boxes" / "hgx-h100-8gpu.yaml"
    path.write_text(path.read_text().replace("gpu: h100-sxm", "gpu: h300-sxm"))
    with pytest.raises(UserInputError) as e:
        load_catalog(root)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and "'h300-sxm'" in msg and "h100-sxm" in msg


def test_invalid_yaml_names_the_file(tmp_path):
    root = copy_catalog(tmp_path)
    path = root / "boxes" / "single-h200.yaml"
    path.write_text("gpu: [h200-sxm\n")
    with pytest.raises(UserInputError, match="single-h200.yaml.*invalid YAML"):
        load_catalog(root)
