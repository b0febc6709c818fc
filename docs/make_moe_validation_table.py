"""Table of docs/engines/moe.md: the MoE targets (Qwen3-30B-A3B on each engine, DeepSeek-V2-Lite's
MLA on SGLang, each with its EAGLE-3 draft), its live records predicted from that engine's own profile (each record names it), whole and
by batch size (issue 26's bar: median <= 5%, max <= 12%).

    python docs/make_moe_validation_table.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs"))

from make_engine_validation_table import row, stats  # noqa: E402
from simulator.evidence.validate import compare, load_records  # noqa: E402
from simulator.profile import load_profile, resolve_profile_path  # noqa: E402

LIVE = ROOT / "data" / "live"
FOLDERS = {"vLLM 0.26.0 (model runner V1), Qwen3-30B-A3B": "h200_vllm_0.26.0_qwen3-30b-a3b",
           "SGLang 0.5.15, Qwen3-30B-A3B": "h200_sglang_0.5.15_qwen3-30b-a3b",
           "SGLang 0.5.15, DeepSeek-V2-Lite (MLA)": "h200_sglang_0.5.15_deepseek-v2-lite"}


def main() -> None:
    prof = load_profile(resolve_profile_path("h200"))
    print("| set | records | median abs err | max abs err | within 8% | best num_steps (cells) | "
          "batch sizes with every cell's best num_steps right | speedup within 0.05 | crossover within one step |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, folder in FOLDERS.items():
        pts = compare(load_records([LIVE / folder]), prof)
        print(row(label, stats(pts)))
        for name, keep in (("batch 1", lambda b: b == 1), ("batch 2", lambda b: b == 2),
                           ("batch 4-64", lambda b: b >= 4)):
            if some := [p for p in pts if keep(p.batch_size)]:
                print(row(f"  of it {name}", stats(some)))


if __name__ == "__main__":
    main()
