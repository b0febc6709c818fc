"""How much an engine's step time moves from one engine process to another at the same point.

    python benchmarks/bench_engine_process_spread.py [POINTS.jsonl[.gz]]

Default: the committed SGLang 0.5.15 campaign on the lent H200 (data/engine_runs/h200_sglang_0.5.15/).
A calibration process and a live process measure the same points (batch x prompt, acceptance 0.7,
and the baseline); within one process the repeats agree to about 1% (validate's "repeat spread"),
but a profile built from one process predicts another. This table compares the uninstrumented
wall time per step of every pair of processes of one configuration at the points both measured:
the gap is what no profile from one process can close for another, the floor under validate's
errors at those points.
"""

from __future__ import annotations

import itertools
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibration.engines.build import label_variant  # noqa: E402
from calibration.engines.worker import read_lines  # noqa: E402

DEFAULT = ROOT / "data" / "engine_runs" / "h200_sglang_0.5.15" / "points.jsonl.gz"


def step_times(path: Path) -> dict:
    """{(variant, num_steps): {label: {(batch, prompt): us per step}}} at acceptance 0.7 or the baseline."""
    out: dict = defaultdict(lambda: defaultdict(dict))
    for r in read_lines(path):
        if r.get("kind") != "point":
            continue
        v = label_variant(r["label"])
        p = r["point"]
        if v is None or p["acceptance_rate"] not in (None, 0.7):
            continue
        reps = [x for x in p["repeats"] if not x["instrumented"] and x["num_incomplete_steps"] == 0]
        if reps:
            out[(v, p["num_steps"])][r["label"]][(p["batch_size"], p["prompt_len"])] = statistics.mean(
                x["elapsed_us"] / x["num_cycles"] for x in reps)
    return out


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    times = step_times(path)
    w = max([44, *(len(a) + len(b) + 4 for by in times.values() for a in by for b in by)])
    print(f"{'configuration':<24}{'processes':<{w}}{'points':>7}{'median gap':>12}{'max gap':>10}"
          f"{'1st slower':>12}  worst point")
    gaps_all = []
    for (v, k), by_label in sorted(times.items(), key=lambda x: (x[0][0][0], not x[0][0][2], x[0][1])):
        topk, ndt, overlap = v
        name = f"num_steps {k}" + (f", topk {topk}/{ndt}" if topk > 1 else "") + ("" if overlap else ", no overlap")
        for a, b in itertools.combinations(sorted(by_label), 2):
            keys = sorted(set(by_label[a]) & set(by_label[b]))
            if not keys:
                continue
            gaps = [(abs(by_label[a][x] / by_label[b][x] - 1.0), x) for x in keys]
            gaps_all += [g for g, _ in gaps]
            worst = max(gaps)
            slower = sum(by_label[a][x] > by_label[b][x] for x in keys)  # points where the first is the slower
            print(f"{name:<24}{a + ' / ' + b:<{w}}{len(keys):>7}{statistics.median(g for g, _ in gaps):>12.1%}"
                  f"{worst[0]:>10.1%}{f'{slower} of {len(keys)}':>12}  batch {worst[1][0]}, prompt {worst[1][1]}")
    if gaps_all:
        print(f"{'all pairs':<{24 + w}}{len(gaps_all):>7}{statistics.median(gaps_all):>12.1%}{max(gaps_all):>10.1%}")
    by_role(times)


def by_role(times: dict) -> None:
    """The calibration processes' mean step against the live processes' at each point, by prompt
    length (a live process runs three rates at its shortest prompt, one at the others; a
    calibration process one everywhere): median and range over the batch sizes."""
    print(f"\n{'configuration':<24}{'prompt':>7}{'calibration / live':>20}{'median':>9}{'min':>9}{'max':>9}")
    for (v, k), by_label in sorted(times.items(), key=lambda x: (x[0][0][0], not x[0][0][2], x[0][1])):
        cal = [lab for lab in by_label if lab.startswith("calibrate_")]
        live = [lab for lab in by_label if lab.startswith("live_")]
        if not cal or not live:
            continue
        topk, ndt, overlap = v
        name = f"num_steps {k}" + (f", topk {topk}/{ndt}" if topk > 1 else "") + ("" if overlap else ", no overlap")
        for prompt in sorted({x[1] for lab in by_label for x in by_label[lab]}):
            gaps = []
            for b in sorted({x[0] for lab in by_label for x in by_label[lab] if x[1] == prompt}):
                c = [by_label[lab][(b, prompt)] for lab in cal if (b, prompt) in by_label[lab]]
                w = [by_label[lab][(b, prompt)] for lab in live if (b, prompt) in by_label[lab]]
                if c and w:
                    gaps.append(statistics.mean(c) / statistics.mean(w) - 1.0)
            if gaps:
                print(f"{name:<24}{prompt:>7}{f'{len(cal)} / {len(live)} processes':>20}"
                      f"{statistics.median(gaps):>+9.1%}{min(gaps):>+9.1%}{max(gaps):>+9.1%}")


if __name__ == "__main__":
    main()
