"""Which sweep and search points lie beyond what their profile measured, in a few words per point.

A point's `extrapolation` (a column of sweep.csv, best_num_steps.csv and search.csv; '' where none)
names every way its prices leave measured ground:

- priced by an engine-native profile (simulator.costs.engine_native): a batch above (or below) the
  batch sizes the profile measured, num_steps above the largest it measured, a context outside the
  measured contexts (10% slack, as `simulator.engines.profile.outside_measured`), a verify above the
  largest CUDA-graph capture size (the engine runs it without graphs), a batch above the engine's
  max_num_seqs. A num_steps or batch between measured ones is interpolated (fitted forms), not flagged.
- a scenario that names an engine profile the profile cannot price (another target, draft, TP size,
  GPU: `profile_mismatch`): said, and the op tables' words below.
- priced from the op tables (simulator.costs.lookup): op tables and collective sizes read past
  their measured range (roofline-scaled), whole-forward tables clamped at their edge, the heavy
  ops (GEMMs, attention, MoE experts) and collectives whose shape or TP group no table holds
  (roofline). The small bookkeeping kernels no profile tables (id copies, concats) are not counted.

The words come from pricing the point: its cost model is run on a latency lookup that records the
notes each op gave when first priced (`_RecordingLookup`), so a point gets the notes of the ops it
uses, not of every op the process priced. Answers are cached per (profile, cost key).
"""

from __future__ import annotations

import re

from simulator.config import Scenario
from simulator.costs.lookup import LatencyLookup

HEAVY_OPS = ("gemm", "attention", "mla_attention", "moe_experts")  # shapes whose missing table is flagged
_CACHE: dict[tuple, str] = {}
_LOOKUPS: dict[tuple, "_RecordingLookup"] = {}
_CACHE_MAX = 65536


class _RecordingLookup(LatencyLookup):
    """A LatencyLookup whose `notes`, once reset, collect what the ops priced since then said: an op's
    notes are kept when it is first priced (op_us caches it) and given again on every later call."""

    def __init__(self, profile, collective_mode: str):
        super().__init__(profile, collective_mode)
        self._op_notes: dict = {}
        cached = self.op_us

        def op_us(op):
            if op not in self._op_notes:
                kept, self.notes = self.notes, set()
                cached(op)
                self._op_notes[op] = frozenset(self.notes)
                self.notes = kept
            self.notes |= self._op_notes[op]
            return cached(op)
        self.op_us = op_us


def engine_beyond(prof, batch_size: int, num_steps: int, context_len: float) -> list[str]:
    """Where a point lies beyond what the engine profile `prof` measured (module docstring), in words."""
    pts = prof.points
    bs = sorted({p.batch_size for p in pts})
    ks = sorted({p.num_steps for p in pts if p.num_steps})
    cs = [p.context_len for p in pts]
    out = []
    if batch_size > bs[-1]:
        out.append(f"batch {batch_size} > measured {bs[-1]}")
    elif batch_size < bs[0]:
        out.append(f"batch {batch_size} < measured {bs[0]}")
    if num_steps and (not ks or num_steps > ks[-1]):
        out.append(f"num_steps {num_steps} > measured {ks[-1]}" if ks else "no speculative point measured")
    lo, hi = min(cs), max(cs)
    if not lo * 0.9 <= context_len <= hi * 1.1:
        out.append(f"context {context_len:,} outside measured {lo:,.0f}-{hi:,.0f}")
    if prof.max_num_seqs and batch_size > prof.max_num_seqs:
        out.append(f"batch {batch_size} > the engine's max_num_seqs {prof.max_num_seqs}")
    sizes = prof.cudagraph_capture_sizes
    if sizes and prof.engine == "sglang" and batch_size > sizes[-1]:
        out.append(f"batch {batch_size} > largest CUDA-graph batch {sizes[-1]}")
    elif sizes and prof.engine != "sglang" and batch_size * (num_steps + 1) > sizes[-1]:
        out.append(f"verify of {batch_size * (num_steps + 1):,} tokens > largest CUDA-graph size {sizes[-1]}")
    return out


_POINT_NUMBER = re.compile(r"^(batch|num_steps|verify of|context) ([\d,]+)( .*)$")
_OUTSIDE = re.compile(r"^(\S+) outside measured \[")
_CLAMPED = re.compile(r"^forward (\S+) (\S+): .* outside measured range: clamped$")
_NO_TABLE = re.compile(r"^no table for ([a-z_]+)")
_COLLECTIVE = re.compile(r"^(\w+) world (\d+): (no table|.* outside measured sizes)")


def op_table_words(notes) -> list[str]:
    """The extrapolation words of a cost model's lookup notes (module docstring)."""
    past = sorted({m.group(1) for n in notes if (m := _OUTSIDE.match(n))})
    clamped = sorted({f"{m.group(1)} {m.group(2)}" for n in notes if (m := _CLAMPED.match(n))})
    unmeasured = sorted({n for n in notes if (m := _NO_TABLE.match(n)) and m.group(1) in HEAVY_OPS})
    colls = sorted({f"{m.group(1)} world {m.group(2)}" for n in notes if (m := _COLLECTIVE.match(n))})
    out = []
    if past:
        out.append(f"{len(past)} op table(s) past their measured range")
    if clamped:
        out.append(f"whole-forward table(s) clamped at their edge ({', '.join(clamped)})")
    if unmeasured:
        out.append(f"{len(unmeasured)} GEMM/attention/MoE shape(s) not measured (roofline)")
    if colls:
        out.append(f"collectives not measured at this size or group ({', '.join(colls)})")
    return out


def point_extrapolation(sc: Scenario, profile_path: str) -> str:
    """The point's extrapolation words joined by '; ' ('' where it lies inside what was measured),
    cached per (profile, cost key)."""
    from simulator.studies.points import cost_key, profile_for
    key = (profile_path, cost_key(sc))
    if key in _CACHE:
        return _CACHE[key]
    from simulator.acceptance import build_acceptance
    from simulator.analytic import analyze
    from simulator.costs.engine_native import profile_mismatch
    from simulator.costs.forward import CostModel
    from simulator.engines.profile import scenario_engine_profile
    profile = profile_for(sc, profile_path)
    mode = sc.serving_engine.collective_mode(sc.workload.batch_size)
    lk_key = (profile_path, sc.hardware.gpu, sc.hardware.box, mode)
    lookup = _LOOKUPS.get(lk_key)
    if lookup is None:
        lookup = _LOOKUPS[lk_key] = _RecordingLookup(profile, mode)
    lookup.notes = set()
    engine_prof = scenario_engine_profile(sc)
    cost = CostModel(sc, profile, lookup=lookup, engine_profile=engine_prof)
    if cost.native is not None:
        words = engine_beyond(cost.native.profile, sc.workload.batch_size, sc.spec.num_steps,
                              sc.workload.context_len)
    else:
        analyze(sc, cost, build_acceptance(sc.acceptance, sc.spec))  # prices every op the point uses
        words = op_table_words(lookup.notes)
        if engine_prof is not None:
            words.insert(0, f"engine profile {engine_prof.name} not used ({profile_mismatch(engine_prof, sc)})")
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[key] = "; ".join(words)
    return _CACHE[key]


def at_batch(sc: Scenario, batch_size: int) -> Scenario:
    """The scenario at another steady batch (a serving point is probed at its mean running batch)."""
    return sc.model_copy(update={"workload": sc.workload.model_copy(update={"batch_size": max(1, int(batch_size))})})


def row_extrapolation(sc: Scenario, profile_path: str, row: dict) -> str:
    """A sweep or search row's extrapolation words: a serving point's at the mean running batch the
    serving DES reported (its steady batch is not what it runs), any other point's at its own."""
    mean_batch = row.get("serving_mean_batch_size")
    if sc.serving is not None and mean_batch is not None:
        return point_extrapolation(at_batch(sc, round(mean_batch)), profile_path)
    return point_extrapolation(sc, profile_path)


def summary(words: list[str], what: str = "points") -> str | None:
    """One line: how many of the points lie beyond what was measured, and the words most of them
    share; None where none does."""
    flagged = [w for w in words if w]
    if not flagged:
        return None
    from collections import Counter
    # phrases that differ only in the point's own number ("num_steps 7 > measured 6", "num_steps 8 > ...")
    # are one kind: "num_steps 7, 8 > measured 6 (points of either)"
    counts, values = Counter(), {}
    for w in flagged:
        for p in w.split("; "):
            m = _POINT_NUMBER.match(p)
            kind = (m.group(1), m.group(3)) if m else (p, "")
            counts[kind] += 1
            if m:
                values.setdefault(kind, set()).add(m.group(2))
    shown = "; ".join(
        (f"{k[0]} {', '.join(sorted(values[k], key=lambda v: float(v.replace(',', ''))))}{k[1]}" if k in values
         else k[0]) + f" ({n:,})" for k, n in counts.most_common(4))
    return (f"{len(flagged):,} of the {len(words):,} {what} lie beyond the profile's measured range, priced by "
            f"fitted forms or the roofline (column extrapolation): {shown}")
