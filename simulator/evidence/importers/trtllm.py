"""TensorRT-LLM: the report `trtllm-bench throughput` / `trtllm-bench latency` prints.

The report is a series of '= SECTION' blocks of 'Label:   value' lines: REQUEST DETAILS ('Number of
concurrent requests:'), PERFORMANCE OVERVIEW ('Total Output Throughput (tokens/sec):', with
streaming 'Average time-per-output-token [TPOT] (ms):' and 'Per User Output Speed (tps/user):')
and, with speculative decoding, DECODING STATISTICS (<mode>) holding percentile lines
'[DT] AVERAGE: F' (draft tokens per request), '[ADT] AVERAGE: F' (accepted draft tokens),
'[DAR] AVERAGE: F' (draft acceptance rate, a fraction) and '[AL] AVERAGE: F' (acceptance length:
a request's output tokens / (decode iterations + 1), bonus included).

Source: tensorrt_llm/bench/dataclasses/reporting.py (`ReportUtility.report_statistics`);
the acceptance length in tensorrt_llm/bench/dataclasses/statistics.py.
"""

from __future__ import annotations

import re

from simulator.evidence.importers.observed import ObservedRun, observed_run
from simulator.evidence.importers.report_text import LABEL_VALUE, line_error, to_float

MARKER = "PERFORMANCE OVERVIEW"
EXPECTED = ("'Total Output Throughput (tokens/sec):  F' under '= PERFORMANCE OVERVIEW' "
            "(tensorrt_llm/bench/dataclasses/reporting.py)")
_PERCENTILE = re.compile(r"^\[(?P<tag>DT|ADT|DAR|AL)\]\s+AVERAGE\s*:\s*(?P<value>\S+)\s*$")


def parse_report(text: str, path: str) -> list[ObservedRun]:
    """One ObservedRun from a trtllm-bench report.

    batch_size: 'Number of concurrent requests' (a mean). tpot_ms: 'Average time-per-output-token
    [TPOT] (ms)' (streaming runs only). speculative: a DECODING STATISTICS section is present.
    accept_length: [AL] AVERAGE; acceptance_rate: [DAR] AVERAGE (means over requests).

    Raises:
        UserInputError: no 'Total Output Throughput (tokens/sec)' line, or a value that is not a number.
    """
    values: dict[str, tuple[int, str]] = {}
    averages: dict[str, tuple[int, str]] = {}
    overview_line, decoding = None, False
    for line_no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if MARKER in line and overview_line is None:
            overview_line = line_no
        if line.startswith("= DECODING STATISTICS"):
            decoding = True
        if (m := _PERCENTILE.match(line)) is not None:
            averages[m.group("tag")] = (line_no, m.group("value"))
        elif (m := LABEL_VALUE.match(line)) is not None:
            values.setdefault(m.group("label").strip(), (line_no, m.group("value")))
    key = "Total Output Throughput (tokens/sec)"
    if key not in values:
        raise line_error(path, overview_line or 1, "trtllm-bench report without 'Total Output Throughput "
                         "(tokens/sec)'", EXPECTED)

    def num(table: dict[str, tuple[int, str]], label: str) -> float | None:
        if label not in table:
            return None
        line_no, value = table[label]
        return to_float(value, path, line_no, repr(label), EXPECTED)

    return [observed_run(
        engine="trtllm", source_file=path, source_format="trtllm_bench", source_line=overview_line,
        speculative=decoding, batch_size=num(values, "Number of concurrent requests"),
        output_tok_per_s=num(values, key), tpot_ms=num(values, "Average time-per-output-token [TPOT] (ms)"),
        accept_length=num(averages, "AL") if decoding else None,
        acceptance_rate=num(averages, "DAR") if decoding else None)]
