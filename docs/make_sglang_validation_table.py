"""Table of docs/engines/sglang.md: SGLang's live records predicted from its engine-native
profiles (each record names the profile of its shape).

    python docs/make_sglang_validation_table.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs"))

from make_engine_validation_table import row, stats  # noqa: E402
from simulator.evidence.validate import compare, load_records  # noqa: E402
from simulator.profile import load_profile, resolve_profile_path  # noqa: E402

LIVE = ROOT / "data" / "live"
FOLDERS = {
    "Llama-3.1-8B chain, overlap on": "h200_sglang_0.5.15",
    "Llama-3.1-8B tree (topk 4, 8 draft tokens, num_steps 3)": "h200_sglang_0.5.15_tree",
    "Llama-3.1-8B, overlap scheduler off": "h200_sglang_0.5.15_no_overlap",
    "Qwen3-30B-A3B (MoE) chain, overlap on": "h200_sglang_0.5.15_qwen3-30b-a3b",
}


def main() -> None:
    prof = load_profile(resolve_profile_path("h200"))
    print("| set | records | median abs err | max abs err | within 8% | best num_steps (cells) | "
          "batch sizes with every cell's best num_steps right | speedup within 0.05 | crossover within one step |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i, (label, folder) in enumerate(FOLDERS.items()):
        pts = compare(load_records([LIVE / folder]), prof)
        print(row(label, stats(pts)))
        if i == 0:  # the 8B chain by num_steps, and its second processes
            for k in sorted({p.num_steps for p in pts}):
                print(row(f"  of it num_steps {k}", stats([p for p in pts if p.num_steps == k])))
            second = [p for p in pts if re.search(r"_r\d+\.json$", p.source)]
            if second:
                print(row("  of it later processes (`_r2`, `_r3`)", stats(second)))
    print("\n`0 of 0`: a set of one num_steps has no cell to pick the best num_steps in. Crossover `n of m (k "
          "measured)`: of m cells (rate x context), n have the predicted batch where speculation stops paying "
          "within one batch step of the measured one, k of them with a crossover measured inside batch 1-64.")


if __name__ == "__main__":
    main()
