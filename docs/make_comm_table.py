"""Print the Markdown tables of docs/hardware.md's collective-model section.

    python docs/make_comm_table.py

The fitted constants are the committed ones, data/fits/collectives.json
(`simulator.costs.collectives_model.fitted_constants()`; `python -m simulator.costs.collectives_fit`
fits them by scipy least_squares on data/profiles/h200.json, data/points/h200_collectives_stream.jsonl
and the `fit: true` case of data/cases/comm_public.yaml);
the replay table from `replay_comm_cases()` over data/cases/comm_public.yaml.
"""

from __future__ import annotations

import numpy as np

from simulator.costs.collectives_fit import replay_comm_cases
from simulator.costs.collectives_model import PASS_FRAC, fitted_constants


def main() -> None:
    c = fitted_constants()
    print("| fitted constant | value | fitted on |\n|---|---|---|")
    print(f"| NCCL bus-bandwidth fraction, NVLink | {c.nccl_busbw_frac['nvlink']:.3f} | "
          f"{c.sources['nccl_busbw_frac.nvlink']} (sizes >= 1 MiB) |")
    print(f"| eager launch cost (one call after a sync) | {c.eager_launch_us:.1f} us | {c.sources['eager_launch_us']} |")
    print(f"| host time per back-to-back eager call | {c.eager_stream_host_us:.1f} us | "
          f"{c.sources['eager_stream_host_us']} |")
    print(f"| NCCL bus-bandwidth fraction, PCIe (of 48 GB/s Gen5 x16) | {c.nccl_busbw_frac['pcie']:.3f} | "
          f"{c.sources['nccl_busbw_frac.pcie']} |")
    print(f"| custom one-shot base latency, PCIe | {c.custom_base_us['pcie']:.2f} us | "
          f"{c.sources['custom_base_us.pcie']} |")
    print(f"| custom peer read bandwidth, PCIe | {c.custom_bw_gb_per_s['pcie']:.1f} GB/s | "
          f"{c.sources['custom_bw_gb_per_s.pcie']} |")
    print()
    rows = replay_comm_cases()
    print("| case | size (B) | algorithm | model ran | predicted (us) | published (us) | error |\n"
          "|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case_id']} | {r['size_bytes']:,} | {r['algorithm']} | {r['picked']} | "
              f"{r['predicted_us']:.1f} | {r['published_us']:.2f} | {r['error_frac']:+.1%} |")
    print()
    print(f"| case | points | within {PASS_FRAC:.0%} | case | scored |\n|---|---|---|---|---|")
    for case_id in dict.fromkeys(r["case_id"] for r in rows):
        mine = [r for r in rows if r["case_id"] == case_id]
        inside = sum(abs(r["error_frac"]) <= PASS_FRAC for r in mine)
        print(f"| {case_id} | {len(mine)} | {inside} | {'pass' if mine[0]['passed'] else 'FAIL'} | "
              f"{'yes' if mine[0]['scored'] else 'no: fit, not scored'} |")
    host_bound = [r["published_us"] for r in rows if "host-bound stream" in r["picked"]]
    if host_bound:
        print()
        print("| back-to-back eager cases: host time per call, us | value |\n|---|---|")
        print(f"| the published figures where the model is host-bound (median of {len(host_bound)} points) | "
              f"{float(np.median(host_bound)):.1f} |")
        print(f"| fitted on the lent 2x H200 (the model's figure) | {c.eager_stream_host_us:.1f} |")


if __name__ == "__main__":
    main()
