"""Print the published-cases tables of docs/engines.md (what `specdecsim cases` computes).

    python docs/make_cases_table.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.evidence.cases import replay_cases, summary  # noqa: E402


def main() -> None:
    results = replay_cases(ROOT / "data" / "cases" / "public.yaml", comm_path=ROOT / "data" / "cases" / "comm_public.yaml")
    print("| case | figure | role | published | predicted | error | speedup error | passes |")
    print("|---|---|---|---|---|---|---|---|")
    unit = {"tok_s": "tok/s", "tpot_ms": "ms TPOT", "latency_us": "us"}
    for r in results:
        for f in r.figures:
            if f.role == "not_replayable":
                print(f"| {r.id} | {f.label} | not replayable | {f.published or ''} | | | | ({f.why}) |")
                continue
            label = f.label.split(" (leave-out")[0]
            sp = "" if f.speedup_error is None else f"{f.speedup_error:+.3f}"
            ok = {True: "yes", False: "no", None: ""}[f.passed]
            print(f"| {r.id} | {label} | {f.role} | {f.published:,.4g} {unit[f.metric]} | {f.predicted:,.4g} | "
                  f"{f.error_frac:+.1%} | {sp} | {ok} |")
    s = summary(results)
    print()
    print(f"| scored cases | pass | pass fraction | cases with nothing scored |")
    print("|---|---|---|---|")
    print(f"| {s['scored_cases']} | {s['passed']} | {s['pass_frac'] or 0:.0%} | {s['not_replayable']} |")


if __name__ == "__main__":
    main()
