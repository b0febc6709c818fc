"""Table lookup laws (simulator.costs.lookup): linear in context_len, log-log in token counts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.costs.lookup import LatencyLookup
from simulator.costs.ops import Op
from simulator.profile import ForwardTable, OpTable, Provenance
from tests.conftest import flat_profile

MEASURED = Provenance(kind="measured", command="synthetic (test)")


def _forward_table(latency_of, num_tokens=(1, 2, 4, 8), contexts=(1024, 4096)) -> ForwardTable:
    return ForwardTable(model="m", phase="forward", tp_size=1, mode="graph", num_tokens=list(num_tokens),
                        context_len=list(contexts),
                        latency_us=[[latency_of(n, c) for c in contexts] for n in num_tokens], provenance=MEASURED)


@given(a=st.floats(10.0, 1e5), b=st.floats(1e-4, 10.0), context=st.integers(1024, 4096))
@settings(max_examples=60, deadline=None)
def test_a_table_linear_in_context_reads_back_exactly_at_every_context_between(a, b, context):
    table = _forward_table(lambda n, c: a * n + b * c)
    lookup = LatencyLookup(flat_profile(), collective_mode="graph")
    for n in table.num_tokens:
        assert lookup.table_us(table, n, context) == pytest.approx(a * n + b * context, rel=1e-12)


def test_the_1280_context_point_of_a_1024_4096_table_is_the_linear_law_not_log_log():
    # the failing input of the redesign issue: log-log read 2-4% above the linear law here
    table = _forward_table(lambda n, c: 5000.0 + 0.5 * c)
    lookup = LatencyLookup(flat_profile(), collective_mode="graph")
    assert lookup.table_us(table, 1, 1280) == pytest.approx(5000.0 + 0.5 * 1280, rel=1e-12)


def test_token_axis_stays_log_log():
    # latency = 100 * n**0.5 is a straight line in log-log: read back exactly between measured counts
    table = _forward_table(lambda n, c: 100.0 * n ** 0.5 + 0.0 * c)
    lookup = LatencyLookup(flat_profile(), collective_mode="graph")
    assert lookup.table_us(table, 3, 2048) == pytest.approx(100.0 * 3 ** 0.5, rel=1e-9)


def test_attention_op_table_is_linear_in_context_along_with_log_log_batch_and_tokens():
    b_grid, n_grid, c_grid = [1, 2, 4], [1, 4], [512, 2048, 8192]
    lat = lambda b, n, c: (3.0 + 0.01 * c) * b * n ** 0.5  # noqa: E731  linear in c at fixed (b, n)
    values = [lat(b, n, c) for b in b_grid for n in n_grid for c in c_grid]
    table = OpTable(key="attention:test", axes=["batch_size", "num_tokens", "context_len"],
                    grid={"batch_size": b_grid, "num_tokens": n_grid, "context_len": c_grid},
                    latency_us=values, provenance=MEASURED)
    lookup = LatencyLookup(flat_profile(ops=[table]), collective_mode="graph")
    for c in (512, 700, 1500, 2048, 5000, 8192):
        op = Op(name="attention", key="attention:test", axes={"batch_size": 2, "num_tokens": 4, "context_len": c})
        assert lookup.op_us(op) == pytest.approx(lat(2, 4, c), rel=1e-12)


# ---- whole-forward tables with a batch axis ------------------------------------------------------
BATCHES, TOKENS, CONTEXTS = (1, 2, 4, 8, 16, 32, 64), (1, 2, 4, 6), (1024, 2048)


def _batch_latency(b: int, n: int, c: int) -> float:
    # weights read once per forward, plus per-token work and attention over the context
    return 5000.0 + 3.0 * b * n + 0.002 * b * c + 40.0 * (b * n) ** 0.5


def _batch_table(**over) -> ForwardTable:
    data = dict(model="m", phase="forward", tp_size=1, mode="graph", batch_size=list(BATCHES),
                num_tokens=list(TOKENS), context_len=list(CONTEXTS),
                latency_us=[[[_batch_latency(b, n, c) for c in CONTEXTS] for n in TOKENS] for b in BATCHES],
                provenance=MEASURED)
    data.update(over)
    return ForwardTable(**data)


def test_a_batch_axis_table_reads_back_exactly_at_every_node():
    table = _batch_table()
    lookup = LatencyLookup(flat_profile(forwards=[table]), collective_mode="graph")
    for b in BATCHES:
        for n in TOKENS:
            for c in CONTEXTS:
                assert lookup.table_us(table, n, c, b) == pytest.approx(_batch_latency(b, n, c), rel=1e-12)
                assert lookup.forward_us("m", 1, "graph", n, c, batch_size=b) == pytest.approx(
                    _batch_latency(b, n, c), rel=1e-12)
    assert not lookup.notes


@given(b=st.floats(1.0, 64.0), n=st.sampled_from(TOKENS), c=st.sampled_from(CONTEXTS))
@settings(max_examples=80, deadline=None)
def test_a_batch_axis_table_is_monotone_between_batch_nodes(b, n, c):
    table = _batch_table()
    lookup = LatencyLookup(flat_profile(forwards=[table]), collective_mode="graph")
    lo = max(x for x in BATCHES if x <= b)
    hi = min(x for x in BATCHES if x >= b)
    at = lookup.table_us(table, n, c, b)
    assert lookup.table_us(table, n, c, lo) - 1e-9 <= at <= lookup.table_us(table, n, c, hi) + 1e-9
    assert lookup.table_us(table, n, c, min(64.0, b * 1.1)) >= at - 1e-9


def test_batch_axis_is_log_log():
    # latency = 100 * b**0.7 is a straight line in log-log: read back exactly between measured batches
    table = _batch_table(latency_us=[[[100.0 * b ** 0.7 for _ in CONTEXTS] for _ in TOKENS] for b in BATCHES])
    lookup = LatencyLookup(flat_profile(forwards=[table]), collective_mode="graph")
    for b in (3, 5, 12, 24, 48):
        assert lookup.table_us(table, 2, 1500, b) == pytest.approx(100.0 * b ** 0.7, rel=1e-9)


def test_batch_axis_schema_is_checked_and_a_batch_1_table_still_reads_as_before():
    with pytest.raises(ValueError, match="batch_size"):
        _batch_table(batch_size=None)  # a 3-D grid needs its axis
    with pytest.raises(ValueError, match="len\\(batch_size\\)"):
        _batch_table(batch_size=[1, 2])
    with pytest.raises(ValueError, match="strictly increasing"):
        _batch_table(batch_size=[1, 2, 4, 4, 16, 32, 64])
    flat = _forward_table(lambda n, c: 7.0 * n + c)
    assert flat.batch_sizes == [1] and flat.grid_latency_us() == [flat.latency_us]
    assert "batch_size" not in flat.model_dump(exclude_none=True)  # written as before the axis existed
    assert LatencyLookup.table_covers(flat, 2, 2048) and not LatencyLookup.table_covers(flat, 2, 2048, 2)


def test_find_forward_prefers_a_batch_axis_table_spanning_the_batch():
    from simulator.config import ModelShape
    model = ModelShape(name="m", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       intermediate_size=128, vocab_size=256)
    batch1 = _forward_table(lambda n, c: 1.0)
    batched = _batch_table(batch_size=[2, 4, 8, 16, 32, 64, 128])
    lookup = LatencyLookup(flat_profile(forwards=[batch1, batched]), collective_mode="graph")
    assert lookup.find_forward(model, 1, "graph", batch_size=1) is batch1  # batched starts at 2
    assert lookup.find_forward(model, 1, "graph", batch_size=8) is batched
    both = _batch_table()
    lookup = LatencyLookup(flat_profile(forwards=[batch1, both]), collective_mode="graph")
    assert lookup.find_forward(model, 1, "graph", batch_size=1) is both  # timed with its other batches
    assert lookup.find_forward(model, 1, "graph", batch_size=256) is both  # nearest; outside its grid
    assert not LatencyLookup.table_covers(both, 1, 1024, 256)


def test_a_profile_with_a_batch_axis_table_round_trips_through_json(tmp_path):
    from simulator.profile import load_profile, save_profile
    prof = flat_profile(forwards=[_batch_table(), _forward_table(lambda n, c: 7.0 * n + c)])
    save_profile(prof, tmp_path / "p.json")
    back = load_profile(tmp_path / "p.json")
    assert back.forwards == prof.forwards
    assert back.forwards[0].batch_size == list(BATCHES) and back.forwards[1].batch_size is None
