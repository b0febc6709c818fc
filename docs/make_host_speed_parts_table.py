"""SGLang's speculative step on two hosts of the lent H100 (issue 46): which parts of the step moved with the host.

    python docs/make_host_speed_parts_table.py

The two H100 calibrations of SGLang 0.5.15 (Llama-3.1-8B + EAGLE-3, num_steps 3 and the baseline, batch 1-64,
prompts 1k and 4k): data/engine_runs/h100_sglang_0.5.15/calibrate_2026-12-07.jsonl.gz (the first machine, whose
cores ran at two speeds) and data/engine_runs/h100_sglang_0.5.15_requests/calibrate_2026-12-07.jsonl.gz (the
shipped profile's, cores at one speed). Each is built into a profile by calibration.engines.build (the first in
memory); per speculative point, each part's time on the first host less the second's, and the draft step's fixed
share (simulator.costs.engine_carry.PartSplit) of each, with what the host probe's ratio makes of the second's.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIRST = ROOT / "data" / "engine_runs" / "h100_sglang_0.5.15" / "calibrate_2026-12-07.jsonl.gz"
SHIPPED = "sglang-0.5.15-h100-llama-3.1-8b-eagle3"
PARTS = (("step_us", "step"), ("target_forward_us", "target forward"), ("draft_extend_us", "draft extend"),
         ("draft_steps_us", "draft steps"), ("sample_us", "sampler"), ("other_gpu_us", "other GPU work"))


def main() -> None:
    from calibration.engines.build import build_profile
    from simulator.costs.engine_carry import engine_carry_for
    from simulator.engines.profile import load_engine_profile
    second = load_engine_profile(SHIPPED)
    first = build_profile([FIRST], "sglang-h100-first-host", second.target, second.draft)
    print(f"host probe, median of the calibration windows: first host {first.host_probe_us:,.0f} us, second "
          f"{second.host_probe_us:,.0f} us (ratio {first.host_probe_us / second.host_probe_us:.2f})\n")
    print("| batch | prompt | " + " | ".join(f"{label}, us: first - second" for _, label in PARTS) + " |")
    print("|---:|---:|" + "---:|" * len(PARTS))
    key = lambda p: (p.num_steps, p.batch_size, p.prompt_len)  # noqa: E731
    by_key = {key(p): p for p in second.points}
    for p in first.points:
        q = by_key.get(key(p))
        if not p.num_steps or q is None:
            continue
        cells = [f"{(getattr(p, f) or 0.0) - (getattr(q, f) or 0.0):+,.0f}" for f, _ in PARTS]
        print(f"| {p.batch_size} | {p.prompt_len} | " + " | ".join(cells) + " |")
    base = [abs(p.step_us - by_key[key(p)].step_us) for p in first.points if not p.num_steps and key(p) in by_key]
    print(f"\nThe baseline's {len(base)} points: step first - second within {max(base):,.0f} us (median "
          f"{sorted(base)[len(base) // 2]:,.0f} us)")
    f1 = engine_carry_for(first, first.catalog_gpu).splits["draft_step"].fixed_us
    f2 = engine_carry_for(second, second.catalog_gpu).splits["draft_step"].fixed_us
    ratio = first.host_probe_us / second.host_probe_us
    print(f"\nThe draft step's fixed share: first host {f1:,.0f} us, second {f2:,.0f} us; the second's x the probes' "
          f"ratio: {f2 * ratio:,.0f} us, the first's / it: {f1 / ratio:,.0f} us")


if __name__ == "__main__":
    main()
