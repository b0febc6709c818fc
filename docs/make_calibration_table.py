"""Print the Markdown tables of docs/calibration.md from the committed H200 profile and points.

    python docs/make_calibration_table.py

Every figure comes from data/profiles/h200.json and data/points/*.jsonl, which
`bash calibration/h200_run.sh calibrate` (one H200), `bash calibration/h200_run.sh collectives`
and `bash calibration/h200_run.sh tp-forwards` (2x H200) measured on the lent machines.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from calibration.build.profile import loop_overhead_us
from calibration.build.store import PointStore
from simulator.profile import load_profile

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    p = load_profile(ROOT / "data" / "profiles" / "h200.json")
    pts = PointStore(ROOT / "data" / "points" / "h200.jsonl").records()
    hw, rf, host = p.hardware, p.roofline, p.host
    print("| what | value |\n|---|---|")
    print(f"| GPU | {hw.gpu_name}, driver {hw.driver_version}, CUDA {hw.cuda_version}, torch {hw.torch_version}, "
          f"NCCL {hw.nccl_version} |")
    print(f"| HBM device copy (read + write, 1 GiB) | {rf.hbm_bandwidth_gb_per_s:,.0f} GB/s |")
    print(f"| bf16 / fp8 matmul (8192^3, random data) | {rf.bf16_tflops:,.0f} / {rf.fp8_tflops:,.0f} TFLOP/s |")
    print(f"| fastest op point (roofline floor) | {rf.kernel_floor_us:.2f} us |")
    print(f"| op tables / whole-forward tables / collective tables | {len(p.ops)} / {len(p.forwards)} / "
          f"{len(p.collectives)} |")
    print(f"| CUDA graph replay, host side | {host.graph_replay_us:.1f} us |")
    print(f"| device->host sync: GPU idle / after a 2 ms GPU job | {pts['host:d2h_sync']['latency_us']:.1f} / "
          f"{pts['host:d2h_sync_busy']['latency_us']:.1f} us |")
    for kind in ("spec", "baseline"):
        a = loop_overhead_us(pts, f"host:loop_overhead:{kind}")
        b = loop_overhead_us(pts, f"host:loop_overhead:{kind}:busy")
        print(f"| live-loop overhead per {'cycle' if kind == 'spec' else 'decode step'} (tiny models, median of "
              f"repeats): short GPU work / with a 5 ms GPU job | {a:.0f} / {b:.0f} us |")
    print(f"| -> host_schedule_us / baseline_host_schedule_us | {host.host_schedule_us:.0f} / "
          f"{host.baseline_host_schedule_us:.0f} us |")
    curve = host.loop_overhead_curve
    if curve is not None:
        for label, xs, ys in (("speculative cycle", curve.gpu_us, curve.host_schedule_us),
                              ("decode step", curve.baseline_gpu_us, curve.baseline_host_schedule_us)):
            pairs = ", ".join(f"{x / 1000:.1f} ms: {y:.0f}" for x, y in zip(xs, ys))
            print(f"| -> host_schedule_us by GPU time per {label} (CUDA graphs; tiny models + GPU sleep, "
                  f"median of 5) | {pairs} us |")
    launch = sorted(host.op_launch_us.items(), key=lambda kv: kv[1])
    print(f"| eager issue cost per op, host side (min .. max) | {launch[0][0]} {launch[0][1]:.1f} .. "
          f"{launch[-1][0]} {launch[-1][1]:.1f} us (median {host.default_launch_us:.1f}) |")
    print(f"| ring fit to the world-2 allreduces | {rf.link_bandwidth_gb_per_s:,.0f} GB/s bus, "
          f"{rf.collective_base_latency_us:.1f} us base |")
    print()
    print("| collective, world 2 (NVLink NV18) | mode | 1 KiB | 14,336 B | 64 KiB | 1 MiB | 16 MiB |")
    print("|---|---|---|---|---|---|---|")
    for t in sorted(p.collectives, key=lambda t: (t.op, t.mode)):
        row = []
        for s in (1024, 14336, 65536, 1 << 20, 1 << 24):
            i = int(np.argmin(np.abs(np.asarray(t.size_bytes) - s)))
            row.append(f"{t.latency_us[i]:.1f}" if t.size_bytes[i] == s else "-")
        print(f"| {t.op} (us) | {t.mode} | " + " | ".join(row) + " |")
    print()
    print("| whole forward, graph, batch 1 (us) | tp | phase | context | 1 token | 2 | 3 | 4 | 5 | 8 | 9 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for f in sorted(p.forwards, key=lambda f: (f.tp_size, f.model, f.phase)):
        if f.mode != "graph":
            continue
        for j, c in enumerate(f.context_len):
            if c not in (1024, 8192):
                continue
            cells = [f"{f.latency_us[f.num_tokens.index(n)][j]:,.0f}" for n in (1, 2, 3, 4, 5, 8, 9)]
            print(f"| {f.model} | {f.tp_size} | {f.phase} | {c} | " + " | ".join(cells) + " |")
    print()
    for k, v in sorted(p.notes.items()):
        if k.startswith("decomposition"):
            print(f"- `{k}`: {v}")


if __name__ == "__main__":
    main()
