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
