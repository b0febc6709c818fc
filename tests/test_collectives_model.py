"""The collective model (simulator.costs.collectives_model): its mathematics, its fits, the replay
of the public curves, bad input, and how the lookup uses it for a box with another interconnect."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.costs import collectives_fit as cf
from simulator.costs import collectives_model as cm
from simulator.hardware import box_links, default_catalog
from simulator.units import BYTES_PER_US_PER_GB_PER_S


def _box(box_id: str, **update):
    cat = default_catalog()
    return box_links(cat.box(box_id), cat.box_gpu(box_id)).model_copy(update=update)


ZERO_LAT = {"tree": (0.0, 0.0, 0.0), "ring": (0.0, 0.0, 0.0)}


def test_ring_bandwidth_term_is_2_n_minus_1_over_n_size_over_busbw_with_zero_latency(monkeypatch):
    monkeypatch.setattr(cm, "NCCL_BASE_LAT_US", ZERO_LAT)
    monkeypatch.setattr(cm, "NCCL_HW_LAT_US", {"nvlink": ZERO_LAT, "pci": ZERO_LAT})
    box = _box("pcie-rtx-pro-6000-4gpu")
    consts = cm.CommConstants({c: 1.0 for c in cm.LINK_CLASSES}, {}, {}, 0.0)
    busbw, n, size = 40.0, 4, 256 << 20
    cands = cm.nccl_candidates_us("allreduce", size, n, box, consts, bus_bandwidth_gb_per_s=busbw)
    expected = 2 * (n - 1) / n * size / (busbw * BYTES_PER_US_PER_GB_PER_S)
    assert cands[("ring", "Simple")] == pytest.approx(expected, rel=1e-12)
    # LL runs at half the bus bandwidth (tuning.cc), so ring/Simple is NCCL's pick at this size
    assert cands[("ring", "LL")] == pytest.approx(2 * expected, rel=1e-12)
    assert cm.nccl_us("allreduce", size, n, box, consts, bus_bandwidth_gb_per_s=busbw).latency_us \
        == pytest.approx(expected, rel=1e-12)


def test_ring_latency_is_base_plus_hops_times_hw_latency():
    box = _box("pcie-rtx-pro-6000-4gpu")
    consts = cm.CommConstants({c: 1.0 for c in cm.LINK_CLASSES}, {}, {}, 0.0)
    cands = cm.nccl_candidates_us("allreduce", 0, 4, box, consts)
    assert cands[("ring", "LL")] == pytest.approx(6.6 + 2 * 3 * 1.0)  # tuning.cc baseLat + nsteps x hwLat(PCI)
    assert ("ring", "LL128") not in cands  # LL128 only over NVLink


@pytest.mark.parametrize("box_id, world", [("pcie-rtx-pro-6000-4gpu", 4), ("pcie-rtx-pro-6000-8gpu", 8),
                                           ("hgx-h100-8gpu", 8), ("2x-h200-nvlink", 2)])
@pytest.mark.parametrize("kind, algorithm, variant", [(k, "nccl", None) for k in cm.COLLECTIVES] + [
    ("allreduce", "custom", "one-shot"), ("allreduce", "custom", "two-shot")])
def test_latency_is_monotone_in_size(box_id, world, kind, algorithm, variant):
    """Monotone for one implementation; a switch between implementations at a fixed size (vLLM's
    one-shot/two-shot thresholds, auto's 8 MiB limit) may step down and is not tested here."""
    box = _box(box_id)
    sizes = np.unique(np.geomspace(16, 64 << 20, 60).astype(int) // 16 * 16)
    us = [cm.collective_us(kind, int(s), world, box, algorithm=algorithm, custom_variant=variant).latency_us
          for s in sizes]
    assert all(b >= a - 1e-9 for a, b in zip(us, us[1:])), us


@pytest.mark.parametrize("kind", cm.COLLECTIVES)
def test_world_one_costs_nothing(kind):
    assert cm.collective_us(kind, 1 << 20, 1, _box("hgx-h100-8gpu"), launch="eager").latency_us == 0.0


def test_link_class_from_box_fields():
    assert cm.link_class(_box("hgx-h100-8gpu"), 8) == "nvlink"
    assert cm.link_class(_box("pcie-rtx-pro-6000-4gpu"), 4) == "pcie"
    assert cm.link_class(_box("pcie-rtx-pro-6000-8gpu"), 4) == "pcie"
    assert cm.link_class(_box("pcie-rtx-pro-6000-8gpu"), 8) == "pcie_cross_numa"


def test_custom_is_enabled_where_vllm_enables_it():
    assert cm.custom_enabled(_box("hgx-h100-8gpu"), 8, 16384)
    assert cm.custom_enabled(_box("pcie-rtx-pro-6000-4gpu"), 2, 16384)
    assert not cm.custom_enabled(_box("pcie-rtx-pro-6000-4gpu"), 4, 16384)  # > 2 PCIe-only GPUs
    assert not cm.custom_enabled(_box("hgx-h100-8gpu"), 8, 8192 * 1024)      # not below max_size
    assert not cm.custom_enabled(_box("hgx-h100-8gpu"), 8, 16390)            # not a multiple of 16
    auto = cm.collective_us("allreduce", 16384, 4, _box("pcie-rtx-pro-6000-4gpu"), algorithm="auto")
    assert auto.algorithm == "nccl"
    assert cm.one_shot(8, 128 * 1024) and not cm.one_shot(8, 256 * 1024) and cm.one_shot(2, 4 << 20)


def test_eager_adds_the_launch_cost():
    box, c = _box("hgx-h100-8gpu"), cm.fitted_constants()
    graph = cm.collective_us("allreduce", 4096, 8, box, consts=c).latency_us
    assert cm.collective_us("allreduce", 4096, 8, box, launch="eager", consts=c).latency_us \
        == pytest.approx(graph + c.eager_launch_us)


def test_eager_stream_is_the_slower_of_device_and_host():
    """Back-to-back eager calls: host-bound below the size where the device latency passes the
    host's enqueue time, device-bound above it (no host cost added on top)."""
    box, c = _box("hgx-h100-8gpu"), cm.fitted_constants()
    for size in (128, 4096, 1 << 20, 64 << 20):
        graph = cm.collective_us("allreduce", size, 8, box, consts=c).latency_us
        stream = cm.collective_us("allreduce", size, 8, box, launch="eager_stream", consts=c)
        assert stream.latency_us == pytest.approx(max(graph, c.eager_stream_host_us))
        assert ("host-bound" in stream.detail) == (c.eager_stream_host_us > graph)
    assert "device-bound" in cm.collective_us("allreduce", 64 << 20, 8, box, launch="eager_stream", consts=c).detail


def test_eager_stream_host_fit_recovers_a_known_host_time(tmp_path: Path):
    """Synthetic points: stream = max(graph, 30 us) -> the fit gives 30 us; the shipped points give a
    host figure between their smallest and largest stream point."""
    import json
    sizes = [2 ** k for k in range(7, 23)]
    graph = [8.0 + s / 50_000 for s in sizes]
    lines = [json.dumps({"key": f"coll:allreduce:2:{m}:{s}", "record": {"op": "allreduce", "mode": m, "size_bytes": s,
                         "latency_us": g if m == "graph" else max(g, 30.0)}})
             for s, g in zip(sizes, graph) for m in ("graph", "eager_stream")]
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert cf.fit_eager_stream(path) == pytest.approx(30.0, rel=0.01)
    shipped = [json.loads(x)["record"] for x in cf.default_stream_points_path().read_text().splitlines()]
    stream = [r["latency_us"] for r in shipped if r["mode"] == "eager_stream"]
    assert min(stream) <= cm.fitted_constants().eager_stream_host_us <= max(stream)
    (tmp_path / "g.jsonl").write_text(lines[0] + "\n")
    with pytest.raises(ValueError, match="eager_stream"):
        cf.fit_eager_stream(tmp_path / "g.jsonl")


def test_fitted_pcie_constants_reproduce_their_curve():
    """The fit curve (4x RTX PRO 6000, fit, not scored): its custom one-shot points within 10%, and
    its NCCL points within 16% except 64 KB, the curve's outlier (71.2 us between 15.6 and 24.7)."""
    rows = [r for r in cf.replay_comm_cases() if not r["scored"]]
    assert rows and {r["case_id"] for r in rows} == {"comm-rtxpro6000-pcie-4gpu-allreduce-curve"}
    for r in rows:
        if r["algorithm"] == "nccl" and r["size_bytes"] == 65536:
            continue
        tol = 0.10 if r["algorithm"] == "custom" else 0.16
        assert abs(r["error_frac"]) <= tol, r


def test_fitted_nvlink_bandwidth_reproduces_the_h200_large_allreduces():
    from simulator.profile import load_profile
    c = cm.fitted_constants()
    table = next(t for t in load_profile(cf.default_profile_path()).collectives
                 if t.op == "allreduce" and t.mode == "graph")
    box = _box("2x-h200-nvlink")
    for s, t in zip(table.size_bytes, table.latency_us):
        if s >= 4 << 20:  # the bandwidth-bound sizes: within 15% of the measured median
            assert cm.collective_us("allreduce", s, 2, box, consts=c).latency_us == pytest.approx(t, rel=0.15)


CASES = """
cases:
  - id: a
    box: pcie-rtx-pro-6000-4gpu
    world_size: 4
    fit: true
    points:
      - {size_bytes: 1024, algorithm: custom, published_us: %s}
      - {size_bytes: 1024, algorithm: nccl, published_us: %s}
"""


def test_committed_constants_are_what_a_fresh_fit_writes(tmp_path: Path, capsys):
    """data/fits/collectives.json is what `python -m simulator.costs.collectives_fit` writes from the
    committed points, profile and fit case today (run it after changing any of them). Numbers within
    1e-9 relative (another BLAS may round the last digit otherwise), every other field exactly."""
    import json
    out = tmp_path / "collectives.json"
    cf.main(["--out", str(out)])
    assert "written:" in capsys.readouterr().out
    fresh, committed = json.loads(out.read_text()), json.loads(cm.constants_path().read_text())

    def flat(d, prefix=""):
        return {k2: v2 for k, v in d.items()
                for k2, v2 in (flat(v, f"{prefix}{k}.").items() if isinstance(v, dict) else [(prefix + k, v)])}
    fresh, committed = flat(fresh), flat(committed)
    assert fresh.keys() == committed.keys()
    for k, v in committed.items():
        assert fresh[k] == (pytest.approx(v, rel=1e-9) if isinstance(v, float) else v), k
    assert type(cm.fitted_constants(out)) is type(cm.fitted_constants())  # the fresh file loads; values: above


def test_a_file_that_is_not_a_constants_file_is_refused(tmp_path: Path):
    from simulator.inputs import UserInputError
    f = tmp_path / "c.json"
    f.write_text('{"nccl_busbw_frac": {}}\n')
    with pytest.raises(UserInputError, match="not a collective constants file"):
        cm.fitted_constants(f)


def test_replay_passes_a_case_only_when_every_point_is_within_15_percent(tmp_path: Path):
    consts = cm.CommConstants({c: 0.5 for c in cm.LINK_CLASSES}, {c: 6.0 for c in cm.LINK_CLASSES},
                              {c: 30.0 for c in cm.LINK_CLASSES}, 0.0)
    box = _box("pcie-rtx-pro-6000-4gpu")
    custom = cm.collective_us("allreduce", 1024, 4, box, algorithm="custom", consts=consts).latency_us
    nccl = cm.collective_us("allreduce", 1024, 4, box, consts=consts).latency_us
    good = tmp_path / "good.yaml"
    good.write_text(CASES % (custom * 1.1, nccl * 0.9))
    rows = cf.replay_comm_cases(good, consts=consts)
    assert [r["algorithm"] for r in rows] == ["custom", "nccl"]
    assert all(r["passed"] and not r["scored"] for r in rows)
    assert rows[0]["error_frac"] == pytest.approx(1 / 1.1 - 1)
    bad = tmp_path / "bad.yaml"
    bad.write_text(CASES % (custom, nccl * 0.8))  # one point 25% off fails the whole case
    assert not any(r["passed"] for r in cf.replay_comm_cases(bad, consts=consts))


def test_replay_of_the_public_curves_has_every_point_and_one_unscored_case():
    rows = cf.replay_comm_cases()
    assert len(rows) == 6 + 20 + 9
    assert {r["case_id"] for r in rows if not r["scored"]} == {"comm-rtxpro6000-pcie-4gpu-allreduce-curve"}
    assert all(r["predicted_us"] > 0 for r in rows)


@pytest.mark.parametrize("call, match", [
    (lambda b: cm.collective_us("reduce_scatter", 1024, 4, b), "unknown collective kind 'reduce_scatter'"),
    (lambda b: cm.collective_us("allreduce", 1024, 5, b), "world_size 5 is larger than box pcie-rtx-pro-6000-4gpu"),
    (lambda b: cm.collective_us("allreduce", 1024, 0, b), "world_size must be a positive integer"),
    (lambda b: cm.collective_us("allreduce", -1, 4, b), "size_bytes must be >= 0"),
    (lambda b: cm.collective_us("allreduce", 1024, 4, b, algorithm="mpi"), "unknown allreduce algorithm 'mpi'"),
    (lambda b: cm.collective_us("allreduce", 1024, 4, b, launch="lazy"), "unknown launch 'lazy'"),
    (lambda b: cm.custom_allreduce_us(1024, 4, b, cm.fitted_constants(), variant="three-shot"), "unknown custom"),
])
def test_bad_input_raises_a_clear_error(call, match):
    with pytest.raises(ValueError, match=match):
        call(_box("pcie-rtx-pro-6000-4gpu"))


def test_bad_cases_file_raises(tmp_path: Path):
    f = tmp_path / "c.yaml"
    f.write_text("cases:\n  - {id: x, box: pcie-rtx-pro-6000-4gpu, world_size: 4, points: [{size_bytes: 1, "
                 "algorithm: gloo, published_us: 1}]}\n")
    with pytest.raises(ValueError, match="c.yaml: cases.0.points.0.algorithm: Input should be 'nccl' or 'custom'"):
        cf.replay_comm_cases(f)


@pytest.mark.parametrize("case, words", [
    ("launch: eager_strem", "cases.0.launch: Input should be 'graph', 'eager' or 'eager_stream'"),
    ("op: alltoall", "cases.0.op: Input should be"),
    ("world_size: 0", "cases.0.world_size: Input should be greater than or equal to 2"),
    ("world_size: '4'", "cases.0.world_size: Input should be a valid integer"),
    ("world_size: 8", "case x: world_size 8 is larger than box pcie-rtx-pro-6000-4gpu"),
    ("box: no-such-box", "case x: unknown box 'no-such-box'"),
    ("custom_variant: three-shot", "cases.0.custom_variant: Input should be 'one-shot' or 'two-shot'"),
    ("points: [{size_bytes: 1024, algorithm: nccl, published_us: 0}]", "points.0.published_us: Input should be "
                                                                       "greater than 0"),
    ("points: [{size_bytes: -4, algorithm: nccl, published_us: 5}]", "points.0.size_bytes"),
    ("points: [{size_bytes: 1024, algorithm: nccl, published_us: ~}]", "points.0.published_us: is null"),
    ("points: []", "cases.0.points: List should have at least 1 item"),
])
def test_a_bad_comm_case_is_a_user_error_naming_the_file_and_field(tmp_path: Path, case, words):
    """The comm cases file is read by a schema (CommCase): a typo, a string, zero or a box that
    cannot hold the world size is a UserInputError naming the file and field, never a traceback
    (a published_us of 0 was a ZeroDivisionError, an unknown launch a ValueError deep in the replay)."""
    from simulator.inputs import UserInputError
    fields = {"box": "pcie-rtx-pro-6000-4gpu", "world_size": "4", "launch": "eager_stream",
              "points": "[{size_bytes: 1024, algorithm: nccl, published_us: 20.0}]"}
    key, value = case.split(": ", 1)
    fields[key] = value
    f = tmp_path / "c.yaml"
    f.write_text("cases:\n  - {id: x, " + ", ".join(f"{k}: {v}" for k, v in fields.items()) + "}\n")
    with pytest.raises(UserInputError) as e:
        cf.replay_comm_cases(f)
    assert str(f) in str(e.value) and words in str(e.value), str(e.value)


# ---- the lookup ----------------------------------------------------------------------------------
def _scenario_profile(sets: list[str]):
    from simulator.scenario import load_profile_for, load_scenario
    sc = load_scenario("scenarios/llama8b_h200.yaml", ["fidelity.num_cycles=50", *sets])
    return sc, load_profile_for(sc)[0]


def test_a_box_with_the_measured_interconnect_keeps_the_profiles_tables():
    from simulator.costs.lookup import LatencyLookup
    _, base = _scenario_profile([])
    _, h100 = _scenario_profile(["hardware.box=hgx-h100-8gpu"])
    assert h100.collectives_on is None
    a, b = LatencyLookup(base, "graph"), LatencyLookup(h100, "graph")
    assert a.collective_us("allreduce", 16384, 2) == b.collective_us("allreduce", 16384, 2)


def test_a_pcie_box_prices_collectives_from_the_model_with_a_note():
    from simulator.costs.lookup import LatencyLookup
    _, prof = _scenario_profile(["hardware.box=pcie-rtx-pro-6000-4gpu", "hardware.allreduce=auto"])
    assert prof.collectives_on is not None and prof.collectives_on.box == "pcie-rtx-pro-6000-4gpu"
    lookup = LatencyLookup(prof, "graph")
    us = lookup.collective_us("allreduce", 16384, 2)
    expected = cm.collective_us("allreduce", 16384, 2, prof.collectives_on, algorithm="auto").latency_us
    assert us == expected and cm.custom_enabled(prof.collectives_on, 2, 16384)
    assert any("collective model" in n and "pcie-rtx-pro-6000-4gpu" in n for n in lookup.notes)
    assert not any("collectives are the profile's own" in n for n in lookup.notes)


def test_bad_allreduce_choice_is_refused():
    from simulator.inputs import UserInputError
    from simulator.scenario import load_scenario
    with pytest.raises((UserInputError, ValueError), match="allreduce"):
        load_scenario("scenarios/llama8b_h200.yaml", ["hardware.allreduce=mpi"])
