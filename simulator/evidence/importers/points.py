"""Operating points: the runs of one file that describe one engine set-up, averaged.

A server log states one figure per `--decode-log-interval` decode steps: a day's log holds
hundreds of thousands of lines, most at the few batch sizes the load kept the server at. A fit of
host times needs one prediction per distinct set-up, not per line; `operating_points` folds the
runs of one file that share what the simulator is given of a run (engine, format, speculation on,
batch size rounded, num_steps, topk, num_draft_tokens, CUDA graph, and which throughput and
acceptance fields it states) into one run whose figures are the means of theirs, with
`num_intervals` counting them. It reads its input once, holding one accumulator per point, so a
file streamed through it (simulator.evidence.importers.load.iter_runs) is never held whole.

What the mean loses: the spread of accept lengths and throughputs within a point (the
scenario's context and the throughput's dependence on the accept length are taken at the mean).
"""

from __future__ import annotations

from collections.abc import Iterable

from simulator.evidence.importers.observed import ObservedRun

MEANED = ("output_tok_per_s", "tpot_ms", "step_ms", "accept_length", "acceptance_rate", "e2e_latency_ms")


def _key(run: ObservedRun) -> tuple:
    stated = tuple(getattr(run, f) is not None for f in MEANED)
    per_pos = len(run.per_position_acceptance) if run.per_position_acceptance else 0
    return (run.engine, run.source_file, run.source_format, run.speculative,
            round(run.batch_size) if run.batch_size else None, run.num_steps, run.topk, run.num_draft_tokens,
            run.cuda_graph, stated, per_pos)


def operating_points(runs: Iterable[ObservedRun]) -> list[ObservedRun]:
    """The runs folded into operating points (module docstring), in order of each point's first
    run; a run that traces stated (phase times, cycles) is kept as it is, alone."""
    acc: dict[tuple, list] = {}
    alone: list[tuple[int, ObservedRun]] = []
    order: dict[tuple, int] = {}
    for i, run in enumerate(runs):
        if run.phase_gpu_us is not None or run.num_cycles is not None:
            alone.append((i, run))
            continue
        k = _key(run)
        w = run.num_intervals
        if k not in acc:
            order[k] = i
            acc[k] = [run, 0, {f: 0.0 for f in MEANED}, None]
        a = acc[k]
        a[1] += w
        for f in MEANED:
            v = getattr(run, f)
            if v is not None:
                a[2][f] += w * v
        if run.per_position_acceptance:
            pp = [w * x for x in run.per_position_acceptance]
            a[3] = pp if a[3] is None else [x + y for x, y in zip(a[3], pp)]
    out = []
    for k, (first, n, sums, pp) in acc.items():
        update = {f: sums[f] / n for f in MEANED if getattr(first, f) is not None}
        if pp is not None:
            update["per_position_acceptance"] = [x / n for x in pp]
        if first.batch_size:
            update["batch_size"] = float(round(first.batch_size))
        out.append((order[k], first.model_copy(update={**update, "num_intervals": n})))
    return [r for _, r in sorted(out + alone, key=lambda t: t[0])]
