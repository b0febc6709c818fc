"""The fit of the collective model's constants (`simulator.costs.collectives_model`), and the
public collective curves it replays.

    python -m simulator.costs.collectives_fit [--out PATH]    # fits, writes data/fits/collectives.json

`fit_constants()` fits the few constants the model cannot take from a source: the NCCL
bus-bandwidth fraction over NVLink and the eager launch cost on the project's own 2x H200
measurements (data/profiles/h200.json), the host time per back-to-back eager call on the
same-session points data/points/h200_collectives_stream.jsonl, and the PCIe NCCL fraction and
custom one-shot constants on ONE public curve (the `fit: true` case of
data/cases/comm_public.yaml, then replayed as "fit, not scored"). scipy least_squares, soft-L1
loss on log(predicted / measured). The command writes them where the model reads them
(`collectives_model.fitted_constants`); tests/test_collectives_model.py checks the committed file
is what a fresh fit gives. `replay_comm_cases` predicts every published point of a comm cases
file from its catalog box alone.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from simulator.costs.collectives_model import (BANDWIDTH_FIT_MIN_BYTES, COLLECTIVES, LAUNCHES, LINK_CLASSES, PASS_FRAC,
                                               CommConstants, collective_us, constants_path, custom_allreduce_us,
                                               fitted_constants, link_class, nccl_us, nominal_bus_bandwidth_gb_per_s)
from simulator.schema_base import StrictModel


# ---- fitting -------------------------------------------------------------------------------------------
def default_profile_path() -> Path:
    """The project's own NVLink collective measurements: data/profiles/h200.json (2x H200 NV18)."""
    from simulator.profile import data_dir
    return data_dir() / "profiles" / "h200.json"


def default_stream_points_path() -> Path:
    """The project's own back-to-back eager allreduce points with same-session graph points:
    data/points/h200_collectives_stream.jsonl (`bash calibration/h200_run.sh comm-stream`, 2x H200)."""
    from simulator.profile import data_dir
    return data_dir() / "points" / "h200_collectives_stream.jsonl"


def fit_eager_stream(points_path: Path) -> float:
    """Host us per back-to-back eager call, from a points file holding allreduce
    points in modes graph and eager_stream at the same world size and sizes (one session).

    Model: stream_us = max(graph_us, host), the device time and the host's enqueue time per call,
    whichever is slower; fitted by scipy least_squares on log(model / measured), soft-L1 loss, with
    graph_us the measured graph point of the same size (the device time of that box). A device gap
    between back-to-back kernels was tried as a second parameter: these points do not determine it
    (it fitted to its bound, 0), so it is left out.

    Raises:
        ValueError: the file lacks graph and eager_stream allreduce points of common sizes.
    """
    import json
    graph, stream = {}, {}
    for line in Path(points_path).read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)["record"]
        if rec.get("op") == "allreduce":
            {"graph": graph, "eager_stream": stream}.get(rec.get("mode"), {})[int(rec["size_bytes"])] = rec["latency_us"]
    sizes = sorted(set(graph) & set(stream))
    if not sizes:
        raise ValueError(f"{points_path}: needs allreduce points in modes graph and eager_stream of the same sizes")
    g = np.asarray([graph[s] for s in sizes])
    m = np.asarray([stream[s] for s in sizes])
    host = _robust_fit(lambda x: np.log(np.maximum(g, x[0]) / m), [float(np.median(m))], ([0.0], [1000.0]))[0]
    return float(host)


def default_cases_path() -> Path:
    """The public curves: data/cases/comm_public.yaml."""
    from simulator.profile import data_dir
    return data_dir() / "cases" / "comm_public.yaml"


def _robust_fit(residuals, x0, bounds):
    """least_squares with a soft-L1 loss on log-ratio residuals (an outlier point weighs less)."""
    from scipy.optimize import least_squares  # here: scipy.optimize is slow to import
    return least_squares(residuals, x0=np.asarray(x0, dtype=float), bounds=bounds, loss="soft_l1", f_scale=0.1).x


def fit_nvlink(profile_path: Path) -> tuple[float, float]:
    """(NCCL bus-bandwidth fraction over NVLink, eager launch us) from a profile's allreduce tables.

    The fraction: NCCL model vs the graph allreduce table at its world size, on the sizes >=
    BANDWIDTH_FIT_MIN_BYTES (where the bandwidth term dominates; below, the sourced latencies
    do); the eager cost: the whole eager table vs the graph model plus a constant. Both by scipy least_squares on
    log(predicted / measured), soft-L1 loss.

    Raises:
        ValueError: the profile has no graph and eager allreduce tables or no catalog_box.
    """
    from simulator.hardware import box_links, default_catalog
    from simulator.profile import load_profile
    profile = load_profile(profile_path)
    tables = {t.mode: t for t in profile.collectives if t.op == "allreduce"}
    if "graph" not in tables or "eager" not in tables or profile.hardware.catalog_box is None:
        raise ValueError(f"{profile_path}: needs graph and eager allreduce tables and hardware.catalog_box")
    catalog = default_catalog()
    box = box_links(catalog.box(profile.hardware.catalog_box), catalog.box_gpu(profile.hardware.catalog_box),
                    measured_on_box=profile.hardware.catalog_box)
    graph, eager = tables["graph"], tables["eager"]
    zero = CommConstants({c: 1.0 for c in LINK_CLASSES}, {}, {}, 0.0)
    nominal = nominal_bus_bandwidth_gb_per_s(box, link_class(box, graph.world_size))

    def graph_model(frac: float, sizes) -> np.ndarray:
        return np.array([nccl_us("allreduce", s, graph.world_size, box, zero,
                                 bus_bandwidth_gb_per_s=nominal * frac).latency_us for s in sizes])

    big = [(s, t) for s, t in zip(graph.size_bytes, graph.latency_us) if s >= BANDWIDTH_FIT_MIN_BYTES]
    if not big:
        raise ValueError(f"{profile_path}: the graph allreduce table has no size >= {BANDWIDTH_FIT_MIN_BYTES} B")
    big_sizes, big_meas = [s for s, _ in big], np.asarray([t for _, t in big])
    frac = _robust_fit(lambda x: np.log(graph_model(x[0], big_sizes) / big_meas), [0.6], ([0.05], [1.5]))[0]
    e_model = graph_model(frac, eager.size_bytes)
    e_meas = np.asarray(eager.latency_us)
    launch = _robust_fit(lambda x: np.log((e_model + x[0]) / e_meas), [10.0], ([0.0], [1000.0]))[0]
    return float(frac), float(launch)


def fit_pcie(cases_path: Path) -> tuple[float, float, float, str]:
    """(NCCL bus-bandwidth fraction over PCIe, custom base us, custom bw GB/s, case id) fitted on the
    one case marked `fit: true` in `cases_path`, by least_squares on log(predicted / published).

    Raises:
        ValueError: not exactly one case has `fit: true`, or it is not on a one-NUMA-node PCIe box.
    """
    from simulator.hardware import box_links, default_catalog
    cases = load_comm_cases(cases_path)
    fit_cases = [c for c in cases if c.get("fit")]
    if len(fit_cases) != 1:
        raise ValueError(f"{cases_path}: exactly one case must have fit: true, got {len(fit_cases)}")
    case = fit_cases[0]
    catalog = default_catalog()
    box = box_links(catalog.box(case["box"]), catalog.box_gpu(case["box"]))
    n = case["world_size"]
    if link_class(box, n) != "pcie":
        raise ValueError(f"{cases_path}: fit case {case['id']} is not on one NUMA node of a PCIe box")
    nominal = nominal_bus_bandwidth_gb_per_s(box, "pcie")
    pts = case["points"]
    nccl_pts = [(p["size_bytes"], p["published_us"]) for p in pts if p["algorithm"] == "nccl"]
    cust_pts = [(p["size_bytes"], p["published_us"]) for p in pts if p["algorithm"] == "custom"]
    zero = CommConstants({c: 1.0 for c in LINK_CLASSES}, {}, {}, 0.0)

    def nccl_res(x):
        return np.log([nccl_us("allreduce", s, n, box, zero, bus_bandwidth_gb_per_s=nominal * x[0]).latency_us / t
                       for s, t in nccl_pts])
    frac = _robust_fit(nccl_res, [0.7], ([0.05], [1.5]))[0]

    def cust_res(x):
        c = CommConstants({}, {"pcie": x[0]}, {"pcie": x[1]}, 0.0)
        return np.log([custom_allreduce_us(s, n, box, c, variant=case.get("custom_variant")).latency_us / t
                       for s, t in cust_pts])
    base, bw = _robust_fit(cust_res, [5.0, 30.0], ([0.1, 1.0], [100.0, 1000.0]))
    return float(frac), float(base), float(bw), case["id"]


def fit_constants(profile_path: Path | None = None, cases_path: Path | None = None,
                  stream_path: Path | None = None) -> CommConstants:
    """The model's fitted constants (module docstring), fitted now.

    Args:
        profile_path: NVLink measurements, default `default_profile_path()`.
        cases_path: public curves with one `fit: true` case, default `default_cases_path()`.
        stream_path: back-to-back eager points, default `default_stream_points_path()`.
    """
    profile_path = profile_path or default_profile_path()
    cases_path = cases_path or default_cases_path()
    stream_path = stream_path or default_stream_points_path()
    nv_frac, launch = fit_nvlink(profile_path)
    pcie_frac, base, bw, case_id = fit_pcie(cases_path)
    stream_host = fit_eager_stream(stream_path)
    return CommConstants(
        nccl_busbw_frac={"nvlink": nv_frac, "pcie": pcie_frac, "pcie_cross_numa": pcie_frac},
        custom_base_us={"nvlink": base, "pcie": base, "pcie_cross_numa": base},
        custom_bw_gb_per_s={"pcie": bw, "pcie_cross_numa": bw},
        eager_launch_us=launch,
        eager_stream_host_us=stream_host,
        sources={"eager_stream_host_us": f"fit on {stream_path.name} (eager_stream vs graph, 2x H200; a host figure)",
                 "nccl_busbw_frac.nvlink": f"fit on {profile_path.name} graph allreduce",
                 "eager_launch_us": f"fit on {profile_path.name} eager vs graph allreduce",
                 "nccl_busbw_frac.pcie": f"fit on {case_id} (NCCL points)",
                 "custom_base_us.pcie": f"fit on {case_id} (custom points)",
                 "custom_bw_gb_per_s.pcie": f"fit on {case_id} (custom points)",
                 "pcie_cross_numa": "the pcie constants (no cross-NUMA curve)",
                 "custom nvlink": "base: the pcie fit; bandwidth: the NVLink NCCL bus bandwidth (assumed)"})


def constants_json(consts: CommConstants) -> dict:
    """The constants file's JSON (what `collectives_model.fitted_constants` reads)."""
    from simulator.files import COLLECTIVE_CONSTANTS_OUTPUT, OUTPUT_KEY
    return {OUTPUT_KEY: COLLECTIVE_CONSTANTS_OUTPUT, "command": "python -m simulator.costs.collectives_fit",
            "nccl_busbw_frac": consts.nccl_busbw_frac, "custom_base_us": consts.custom_base_us,
            "custom_bw_gb_per_s": consts.custom_bw_gb_per_s, "eager_launch_us": consts.eager_launch_us,
            "eager_stream_host_us": consts.eager_stream_host_us, "sources": consts.sources}


def main(argv: list[str] | None = None) -> None:
    """`python -m simulator.costs.collectives_fit [--out PATH]`: fit, write, print the constants."""
    from simulator.files import write_json_atomic
    parser = argparse.ArgumentParser(description="Fit the collective model's constants and write them.")
    parser.add_argument("--out", type=Path, default=constants_path(),
                        help="Where to write (default: data/fits/collectives.json, which the model reads).")
    args = parser.parse_args(argv)
    data = constants_json(fit_constants())
    write_json_atomic(args.out, data, allow_nan=False)
    for key in ("nccl_busbw_frac", "custom_base_us", "custom_bw_gb_per_s", "eager_launch_us", "eager_stream_host_us"):
        print(f"{key}: {data[key]}")
    print(f"written: {args.out}")


# ---- public curves -------------------------------------------------------------------------------------
class CommPoint(StrictModel):
    """One published latency of a comm case."""

    size_bytes: int = Field(ge=1, le=2**40, description="Per-rank message bytes, 1..2**40.")
    algorithm: Literal["nccl", "custom"] = Field(description="What the source ran: nccl or custom (a peer-to-peer "
                                                             "allreduce kernel).")
    published_us: float = Field(gt=0, le=1e7, description="The source's latency, us, > 0 and <= 1e7.")


class CommCase(StrictModel):
    """One published collective curve (data/cases/comm_public.yaml)."""

    id: str = Field(min_length=1, max_length=200)
    source: str = Field("", max_length=1000)
    hardware: str = Field("", max_length=1000, description="The source's own words for the machine.")
    box: str = Field(min_length=1, max_length=200, description="A box of the hardware catalog.")
    world_size: int = Field(ge=2, le=64, description="Ranks, 2..64 (at most the box's GPUs).")
    op: Literal[COLLECTIVES] = "allreduce"
    launch: Literal[LAUNCHES] = Field("graph", description="graph, eager or eager_stream (`collective_us`).")
    custom_variant: Literal["one-shot", "two-shot"] | None = None
    fit: bool = Field(False, description="The curve the PCIe constants are fitted on: replayed, not scored.")
    quoted: str = Field("", max_length=10_000)
    notes: list[Annotated[str, Field(max_length=10_000)]] = Field(default_factory=list, max_length=100)
    points: list[CommPoint] = Field(min_length=1, max_length=10_000)


class CommCaseFile(StrictModel):
    """A comm cases file: its `cases`."""

    cases: list[CommCase] = Field(min_length=1, max_length=10_000)


def load_comm_cases(path: Path) -> list[dict]:
    """The `cases` of a comm cases file (data/cases/comm_public.yaml), each as a dict of every
    `CommCase` field (defaults filled in), validated strictly as a scenario file is.

    Raises:
        UserInputError: unreadable, not YAML, an explicit null, or a field out of range, naming the
            file and field (a ValueError).
    """
    from pydantic import ValidationError

    from simulator.inputs import UserInputError, format_validation_error, read_yaml, refuse_nulls
    data = read_yaml(path, "comm cases file")
    refuse_nulls(data, str(path))
    try:
        return [c.model_dump() for c in CommCaseFile.model_validate(data, strict=True).cases]
    except ValidationError as e:
        raise UserInputError(format_validation_error(str(path), e)) from None


def replay_comm_cases(path: Path | str | None = None, consts: CommConstants | None = None) -> list[dict]:
    """Predict every published point of a comm cases file from its box alone.

    Args:
        path: cases file, default data/cases/comm_public.yaml. consts: default the committed constants
            (`collectives_model.fitted_constants()`).

    Returns:
        One dict per point: case_id, size_bytes, algorithm (nccl/custom), predicted_us,
        published_us, error_frac ((predicted - published) / published), picked (what the model
        ran), and the case's `passed` (every point within PASS_FRAC) and `scored` (False for the
        case the constants were fitted on).

    Raises:
        UserInputError: a bad file (`load_comm_cases`), an unknown box or a world size it cannot
            hold, naming the file and case.
    """
    from simulator.hardware import box_links, default_catalog
    from simulator.inputs import UserInputError
    path = Path(path) if path is not None else default_cases_path()
    consts = consts or fitted_constants()
    catalog = default_catalog()
    rows = []
    for case in load_comm_cases(path):
        case_rows = []
        try:
            box = box_links(catalog.box(case["box"]), catalog.box_gpu(case["box"]))
            prices = [collective_us(case["op"], p["size_bytes"], case["world_size"], box, algorithm=p["algorithm"],
                                    launch=case["launch"], consts=consts, custom_variant=case["custom_variant"])
                      for p in case["points"]]
        except ValueError as e:  # an unknown box, a world size the box cannot hold (UserInputError is one too)
            raise UserInputError(f"{path}: case {case['id']}: {e}") from None
        for p, price in zip(case["points"], prices):
            err = (price.latency_us - p["published_us"]) / p["published_us"]
            case_rows.append({"case_id": case["id"], "size_bytes": p["size_bytes"], "algorithm": p["algorithm"],
                              "predicted_us": price.latency_us, "published_us": p["published_us"],
                              "error_frac": err, "picked": price.detail})
        passed = all(abs(r["error_frac"]) <= PASS_FRAC for r in case_rows)
        for r in case_rows:
            r.update(passed=passed, scored=not case.get("fit", False))
        rows += case_rows
    return rows


if __name__ == "__main__":
    main()
