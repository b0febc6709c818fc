"""Print the Markdown table of docs/hardware.md's MoE-measurement section.

    python docs/make_moe_table.py

From the committed `calibrate moe` outputs data/measurements/moe_<shape>_<dtype>.json (one H200,
`bash calibration/h200_run.sh moe-all`): per shape and dtype, the routed experts' latency and the
fraction of the profile's device-copy bandwidth their weights were read at, at 1, 4, 16 and 64
tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKENS = (1, 4, 16, 64)


def main() -> None:
    print("| shape | dtype | kernel | " + " | ".join(f"{t} tok: us, of copy" for t in TOKENS) + " |")
    print("|---|---|---|" + "---|" * len(TOKENS))
    for path in sorted((ROOT / "data" / "measurements").glob("moe_*_*.json")):
        data = json.loads(path.read_text())
        if "dtype" not in data:  # the first bf16 run, superseded by moe_kimi-k2-tp8_bf16.json
            continue
        rows = {r["num_tokens"]: r for r in data["rows"]}
        cells = [f"{rows[t]['latency_us']:.0f}, {rows[t]['efficiency_vs_copy']:.2f}" if t in rows else "-"
                 for t in TOKENS]
        print(f"| {data['shapes'][0]} | {data['dtype']} | {data['rows'][0].get('kernel', '')} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
