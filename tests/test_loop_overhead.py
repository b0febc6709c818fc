"""calibration.bench.loop_overhead: medians over passes, resume without a GPU, probe shapes."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from calibration.bench.loop_overhead import (PROBE_LAYERS, measure, point_key, probe_scenario,  # noqa: E402
                                             table_from_records)
from calibration.build.store import PointStore  # noqa: E402


def _records(values: dict[tuple[str, int, int], tuple[float, float]]) -> dict[str, dict]:
    return {point_key(loop, n, k): {"loop": loop, "num_layers": n, "pass": k, "gpu_us": g, "overhead_us": o}
            for (loop, n, k), (g, o) in values.items()}


def test_table_is_the_median_over_passes_sorted_by_gpu_time():
    recs = _records({("spec", 8, 0): (900.0, 50.0), ("spec", 8, 1): (1100.0, 500.0), ("spec", 8, 2): (1000.0, 60.0),
                     ("spec", 2, 0): (300.0, 40.0), ("spec", 2, 1): (310.0, 45.0),
                     ("baseline", 2, 0): (100.0, 10.0)})
    gpu, over = table_from_records(recs, "spec")
    assert gpu == [pytest.approx(305.0), 1000.0] and over == [pytest.approx(42.5), 60.0]  # 500 is an outlier
    assert table_from_records(recs, "baseline") is None  # one depth is not a table


def test_measure_resumes_without_a_gpu_when_every_point_is_stored(tmp_path):
    store = PointStore(tmp_path / "p.jsonl")
    for k in range(2):
        for n in (2, 4):
            for loop in ("spec", "baseline"):
                store.add(point_key(loop, n, k), {"loop": loop, "num_layers": n, "pass": k,
                                                  "gpu_us": float(n), "overhead_us": 1.0})
    assert measure(store, "cuda", passes=2, layers=(2, 4)) == 0
    with pytest.raises(RuntimeError, match="CUDA"):
        measure(store, "cuda", passes=3, layers=(2, 4))  # a missing pass needs the GPU


def test_probe_is_not_a_validation_target():
    from calibration.shapes import SIZES
    widths = {t.hidden_size for t, _ in SIZES.values()}
    for n in PROBE_LAYERS:
        sc = probe_scenario(n)
        assert sc.target.num_hidden_layers == n and sc.target.hidden_size not in widths
        assert sc.serving_engine.cuda_graph and sc.spec.num_steps == 4
