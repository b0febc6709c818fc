"""SGLang's speculative step on two hosts of the lent H100 (issue 46): which parts of the step moved with the host.

    python docs/make_host_speed_parts_table.py [OTHER_PROFILE]

The two H100 calibrations of SGLang 0.5.15 (Llama-3.1-8B + EAGLE-3, num_steps 3 and the baseline, batch 1-64,
prompts 1k and 4k): data/engine_runs/h100_sglang_0.5.15/calibrate_2026-12-07.jsonl.gz (the first machine, whose
cores ran at two speeds) and data/engine_runs/h100_sglang_0.5.15_requests/calibrate_2026-12-07.jsonl.gz (the
shipped profile's, cores at one speed). Each is built into a profile by calibration.engines.build (the first in
memory); per speculative point, each part's time on the first host less the second's, and the draft step's fixed
share (simulator.costs.engine_carry.PartSplit) of each, with what the host probe's ratio makes of the second's.
With OTHER_PROFILE (e.g. sglang-0.5.15-h200-llama-3.1-8b-eagle3), that profile's points (the mean of its processes'
at each point) stand in for the first host's.
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


def main(argv: list[str]) -> None:
    from calibration.engines.build import build_profile
    from simulator.costs.engine_carry import engine_carry_for
    from simulator.engines.profile import load_engine_profile
    second = load_engine_profile(SHIPPED)
    first = (load_engine_profile(argv[0]) if argv else
             build_profile([FIRST], "sglang-h100-first-host", second.target, second.draft))
    if argv:
        print(f"{first.name} ({first.gpu_name}, host probe {'not recorded' if first.host_probe_us is None else first.host_probe_us}) "
              f"as the first, {SHIPPED} ({second.host_probe_us:,.0f} us) as the second\n")
    else:
        print(f"host probe, median of the calibration windows: first host {first.host_probe_us:,.0f} us, second "
              f"{second.host_probe_us:,.0f} us (ratio {first.host_probe_us / second.host_probe_us:.2f})\n")
    print("| batch | prompt | " + " | ".join(f"{label}, us: first - second" for _, label in PARTS) + " |")
    print("|---:|---:|" + "---:|" * len(PARTS))
    key = lambda p: (p.num_steps, p.batch_size, p.prompt_len)  # noqa: E731
    by_key = {key(p): p for p in second.points}
    mine: dict = {}
    for p in first.points:
        mine.setdefault(key(p), []).append(p)
    mean = lambda pts, f: sum(getattr(p, f) or 0.0 for p in pts) / len(pts)  # noqa: E731
    for k, pts in sorted(mine.items()):
        q = by_key.get(k)
        if not k[0] or q is None:
            continue
        cells = [f"{mean(pts, f) - (getattr(q, f) or 0.0):+,.0f}" for f, _ in PARTS]
        print(f"| {k[1]} | {k[2]} | " + " | ".join(cells) + " |")
    base = [abs(mean(pts, "step_us") - by_key[k].step_us) for k, pts in sorted(mine.items()) if not k[0] and k in by_key]
    print(f"\nThe baseline's {len(base)} points: step first - second within {max(base):,.0f} us (median "
          f"{sorted(base)[len(base) // 2]:,.0f} us)")
    if argv:
        return
    f1 = engine_carry_for(first, first.catalog_gpu).splits["draft_step"].fixed_us
    f2 = engine_carry_for(second, second.catalog_gpu).splits["draft_step"].fixed_us
    ratio = first.host_probe_us / second.host_probe_us
    print(f"\nThe draft step's fixed share: first host {f1:,.0f} us, second {f2:,.0f} us; the second's x the probes' "
          f"ratio: {f2 * ratio:,.0f} us, the first's / it: {f1 / ratio:,.0f} us")


if __name__ == "__main__":
    main(sys.argv[1:])
