"""vLLM outputs: the spec-decode metrics log line, the Prometheus counters and the latency benchmark.

The serving benchmark block is shared with SGLang and lives in `serving_bench.py`. vLLM's older V0
'Speculative metrics: Draft acceptance rate: ...' line is not read.
"""

from __future__ import annotations

import math

import re
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from simulator.evidence.importers.observed import ObservedRun, observed_run
from simulator.evidence.importers.report_text import json_numbers, line_error, to_float, to_int
from simulator.inputs import quote
from simulator.units import MS_PER_S

SPEC_MARKER = "SpecDecoding metrics:"
SPEC_EXPECTED = ("'SpecDecoding metrics: Mean acceptance length: F, Accepted throughput: F tokens/s, Drafted "
                 "throughput: F tokens/s, Accepted: N tokens, Drafted: N tokens, Per-position acceptance rate: F, "
                 "..., Avg Draft acceptance rate: F%' (vllm/v1/spec_decode/metrics.py)")
_SPEC_FIELDS = {  # label -> regex of its value; the label ends at ': '
    "Mean acceptance length": r"(\S+?)",
    "Accepted": r"(\S+) tokens",
    "Drafted": r"(\S+) tokens",
    "Per-position acceptance rate": r"(\S+?(?:, [-+0-9.eE]+)*)",
    "Avg Draft acceptance rate": r"(\S+?)%",
    "Draft acceptance rate": r"(\S+?)%",
}
_REQUIRED = ("Mean acceptance length", "Accepted", "Drafted")
# The engine's periodic stats line, logged just before the spec-decode line of the same interval.
_STATS = re.compile(r"Avg generation throughput: (?P<tput>\S+) tokens/s, Running: (?P<running>\d+) reqs")


def _spec_field(body: str, label: str) -> str | None:
    m = re.search(r"(?:^|, )" + re.escape(label) + r": " + _SPEC_FIELDS[label] + r"(?:,|$)", body)
    return m.group(1) if m else None


def parse_spec_decode_log(text: str, path: str) -> list[ObservedRun]:
    """One ObservedRun per 'SpecDecoding metrics:' line of a vLLM (V1 engine) server log.

    The line covers one logging interval: 'Mean acceptance length' = 1 + accepted / drafts (bonus
    included), 'Accepted: N tokens' / 'Drafted: N tokens' are the interval's counts,
    'Per-position acceptance rate' lists accepted-at-position-i / drafts (unconditional), 'Avg
    Draft acceptance rate: F%' = accepted / drafted (older releases: 'Draft acceptance rate: F%'
    first). num_steps = the number of positions. When the engine's stats line ('Avg generation
    throughput: F tokens/s, Running: N reqs', vllm/v1/metrics/loggers.py) precedes it, its
    throughput and running requests are attached.

    Source: vllm/v1/spec_decode/metrics.py (`SpecDecodingLogging.log`).

    Raises:
        UserInputError: a spec-decode line without 'Mean acceptance length', 'Accepted: N tokens' or
            'Drafted: N tokens', or a value that is not a number.
    """
    return list(iter_spec_decode_log(text.splitlines(), path))


def iter_spec_decode_log(lines, path: str):
    """`parse_spec_decode_log` one line at a time (a server log of any length, not held whole)."""
    stats = None
    for line_no, line in enumerate(lines, 1):
        if (m := _STATS.search(line)) is not None:
            stats = (line_no, m)
        if SPEC_MARKER not in line:
            continue
        body = line.split(SPEC_MARKER, 1)[1].strip().rstrip(".")
        found = {label: _spec_field(body, label) for label in _SPEC_FIELDS}
        for label in _REQUIRED:
            if found[label] is None:
                what = f"{label}: N tokens" if label in ("Accepted", "Drafted") else label
                raise line_error(path, line_no, f"vLLM spec-decode line without {what!r}", SPEC_EXPECTED)
        per_pos = None
        if found["Per-position acceptance rate"] is not None:
            per_pos = [to_float(p, path, line_no, "'Per-position acceptance rate'", SPEC_EXPECTED)
                       for p in found["Per-position acceptance rate"].split(", ")]
        rate_text = found["Avg Draft acceptance rate"] or found["Draft acceptance rate"]
        if rate_text == "nan":  # vLLM prints nan% for an interval with no drafted tokens
            rate_text = None
        tput = running = None
        if stats is not None:
            s_no, s = stats
            tput = to_float(s.group("tput"), path, s_no, "'Avg generation throughput'", SPEC_EXPECTED)
            running = int(s.group("running"))
            stats = None
        yield observed_run(
            engine="vllm", source_file=path, source_format="vllm_spec_decode_log", source_line=line_no,
            speculative=True, batch_size=running, output_tok_per_s=tput,
            accept_length=to_float(found["Mean acceptance length"], path, line_no, "'Mean acceptance length'",
                                   SPEC_EXPECTED),
            accepted_tokens=to_int(found["Accepted"], path, line_no, "'Accepted'", SPEC_EXPECTED),
            drafted_tokens=to_int(found["Drafted"], path, line_no, "'Drafted'", SPEC_EXPECTED),
            acceptance_rate=(to_float(rate_text, path, line_no, "'Draft acceptance rate'", SPEC_EXPECTED) / 100.0
                             if rate_text is not None else None),
            per_position_acceptance=per_pos, num_steps=len(per_pos) if per_pos else None)


PROM_PREFIX = "vllm:spec_decode_"
PROM_EXPECTED = ("Prometheus text lines 'vllm:spec_decode_num_drafts_total{...} N' (and _num_draft_tokens_total, "
                 "_num_accepted_tokens_total, _num_accepted_tokens_per_pos_total{position=\"i\"}) "
                 "(vllm/v1/spec_decode/metrics.py, SpecDecodingProm)")
_COUNTERS = {"vllm:spec_decode_num_drafts_total": "num_drafts",
             "vllm:spec_decode_num_draft_tokens_total": "drafted_tokens",
             "vllm:spec_decode_num_accepted_tokens_total": "accepted_tokens"}
_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def parse_prometheus(text: str, path: str) -> list[ObservedRun]:
    """One ObservedRun from a scrape of vLLM's /metrics (Prometheus text exposition format).

    The spec-decode counters are summed over their label sets (engines, models):
    vllm:spec_decode_num_drafts_total, _num_draft_tokens_total, _num_accepted_tokens_total and
    _num_accepted_tokens_per_pos_total{position="0".."k-1"}. Then accept_length = 1 + accepted /
    drafts, acceptance_rate = accepted / drafted, per_position_acceptance[i] = per_pos[i] / drafts
    (unconditional), num_steps = k. Each sample line is parsed by `prometheus_client.parser`, one
    line at a time so that an error names its line; other metrics are skipped.

    Source: vllm/v1/spec_decode/metrics.py (`SpecDecodingProm`; the counters' names get '_total').

    Raises:
        UserInputError: a spec-decode sample line the parser refuses, a per-position sample without
            a whole 'position' label, or a scrape without vllm:spec_decode_num_drafts_total.
    """
    sums = {"num_drafts": 0.0, "drafted_tokens": 0.0, "accepted_tokens": 0.0}
    seen: set[str] = set()
    per_pos: dict[int, float] = {}
    for line_no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line.startswith(PROM_PREFIX):
            continue
        try:
            samples = [s for fam in text_string_to_metric_families(line + "\n") for s in fam.samples]
        except Exception as e:  # the parser raises ValueError, IndexError, ... on a malformed line
            raise line_error(path, line_no, f"not a Prometheus sample line ({type(e).__name__}: {e})",
                             PROM_EXPECTED) from None
        for s in samples:
            if (s.name in _COUNTERS or s.name == _PER_POS) and not (math.isfinite(s.value) and 0 <= s.value <= 1e18):
                raise line_error(path, line_no, f"{s.name} = {s.value:g}: a counter is a finite count 0..1e18",
                                 PROM_EXPECTED)
            if s.name in _COUNTERS:
                sums[_COUNTERS[s.name]] += s.value
                seen.add(_COUNTERS[s.name])
            elif s.name == _PER_POS:
                pos = s.labels.get("position", "")
                if not pos.isdigit():
                    raise line_error(path, line_no, f"per-position sample with position={quote(pos)}", PROM_EXPECTED)
                per_pos[int(pos)] = per_pos.get(int(pos), 0.0) + s.value
    if "num_drafts" not in seen:
        raise line_error(path, 1, "no vllm:spec_decode_num_drafts_total sample in the scrape", PROM_EXPECTED)
    drafts = sums["num_drafts"]
    positions = [per_pos[i] / drafts for i in sorted(per_pos)] if per_pos and drafts > 0 else None
    if per_pos and sorted(per_pos) != list(range(len(per_pos))):
        raise line_error(path, 1, f"per-position samples for positions {sorted(per_pos)}, not 0..k-1", PROM_EXPECTED)
    return [observed_run(
        engine="vllm", source_file=path, source_format="vllm_prometheus", speculative=True,
        num_drafts=int(drafts),
        drafted_tokens=int(sums["drafted_tokens"]) if "drafted_tokens" in seen else None,
        accepted_tokens=int(sums["accepted_tokens"]) if "accepted_tokens" in seen else None,
        accept_length=1.0 + sums["accepted_tokens"] / drafts if drafts > 0 and "accepted_tokens" in seen else None,
        acceptance_rate=(sums["accepted_tokens"] / sums["drafted_tokens"]
                         if sums["drafted_tokens"] > 0 and "accepted_tokens" in seen else None),
        per_position_acceptance=positions, num_steps=len(positions) if positions else None)]


LATENCY_MARKER = "Avg latency:"
LATENCY_EXPECTED = "'Avg latency: F seconds' (vllm/benchmarks/latency.py)"


def parse_latency_text(text: str, path: str) -> list[ObservedRun]:
    """One ObservedRun per 'Avg latency: F seconds' line printed by `vllm bench latency`
    (benchmarks/benchmark_latency.py before): the mean wall time of one `llm.generate` of the whole
    batch. The batch size and lengths are command-line arguments the output does not repeat.

    Source: vllm/benchmarks/latency.py (`main`).
    """
    runs = []
    for line_no, line in enumerate(text.splitlines(), 1):
        if LATENCY_MARKER not in line:
            continue
        m = re.search(r"Avg latency: (\S+) seconds", line)
        if m is None:
            raise line_error(path, line_no, "vLLM latency line in another form", LATENCY_EXPECTED)
        runs.append(latency_run(to_float(m.group(1), path, line_no, "'Avg latency'", LATENCY_EXPECTED),
                                path, line_no))
    return runs


def latency_json_run(rec: dict[str, Any], path: str) -> ObservedRun:
    """`vllm bench latency --output-json`: {avg_latency (s), std_latency, latencies, percentiles}."""
    n = json_numbers(rec, ("avg_latency",), (), path, 1, "vLLM latency result",
                     "an --output-json object with 'avg_latency' (vllm/benchmarks/latency.py)")
    return latency_run(n["avg_latency"], path, 1)


def latency_run(avg_latency_s: float, path: str, line_no: int) -> ObservedRun:
    return observed_run(engine="vllm", source_file=path, source_format="vllm_bench_latency", source_line=line_no,
                       e2e_latency_ms=avg_latency_s * MS_PER_S)
