"""Table of docs/engines/mla.md: vLLM's two verify paths for an MLA target, as the op-table `vllm`
engine model prices them on the lent H200 (DeepSeek-V2-Lite's shape with an EAGLE-3 draft, num_steps 3,
acceptance 0.7), and, once queue `vllm-h200-mla-paths` has run, as vLLM 0.26.0 measured them:

- prefill path: the target's MLA layers on TRITON_MLA (vLLM's pick on an RTX PRO 6000, SM120), which
  takes queries of one token only, so the 4-token verify runs MLA's non-absorbed prefill branch (the
  context's latent gathered and up-projected) outside any full graph: the engine model's
  `verify_attention: prefill, graph_verify: piecewise`, as the published Kimi-K2.5 case states it;
- decode path: vLLM's own choice for the H200 (FLASH_ATTN_MLA: absorbed decode kernels, a full graph
  for the uniform verify): `verify_attention: decode, graph_verify: full`.

The model's columns were written before any of these points was measured (a prediction to hold the
measurement against); the measured columns appear when the points files are in
data/engine_runs/h200_vllm_0.26.0_deepseek-v2-lite/ as the queue names them, gzipped
(deepseek-v2-lite-paths-triton.points.jsonl.gz, deepseek-v2-lite-paths-default.points.jsonl.gz).

    python docs/make_mla_paths_table.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs"))

from calibration.engines.build import engine_lines, engine_point  # noqa: E402
from calibration.engines.queue import queue_plans  # noqa: E402

# the contexts of the published Kimi-K2.5 verify-path case (data/cases/public.yaml), as the queue measures them
MLA_PATH_CONTEXTS = sorted({q["prompt_len"] for p in queue_plans("vllm-h200-mla-paths") for q in p.points})
from make_mla_table import shapes  # noqa: E402  (the MLA target's and draft's shapes, as the SGLang table's)
from simulator.analytic import cycle_time_us  # noqa: E402
from simulator.costs.forward import CostModel  # noqa: E402
from simulator.profile import load_profile, resolve_profile_path  # noqa: E402
from simulator.scenario import scenario_from_dict  # noqa: E402

RUNS = ROOT / "data" / "engine_runs" / "h200_vllm_0.26.0_deepseek-v2-lite"
# path -> (the queue's points file, the backend its MLA layers were asked to run, the engine model's fields)
PATHS = {"prefill": ("deepseek-v2-lite-paths-triton", "TRITON_MLA", dict(verify_attention="prefill", graph_verify="piecewise")),
         "decode": ("deepseek-v2-lite-paths-default", None, dict(verify_attention="decode", graph_verify="full"))}
NUM_STEPS, RATE, BATCHES = 3, 0.7, (1, 8)


def predicted(t: dict, d: dict, path: str, batch: int, context: int) -> tuple[float, float]:
    """(target verify forward GPU us, step us) of the op-table vllm engine model on the h200 profile."""
    data = dict(name="mla-paths", profile="h200", tp_size=1, placement="shared_tp", target=t, draft=d,
                spec=dict(method="eagle3", num_steps=NUM_STEPS, topk=1, num_draft_tokens=NUM_STEPS + 1),
                acceptance=dict(kind="iid", acceptance_rate=RATE),
                workload=dict(batch_size=batch, context_len=context, max_new_tokens=256),
                serving_engine=dict(kind="vllm", version="2026", **PATHS[path][2]))
    cost = CostModel(scenario_from_dict(data, "mla-paths.yaml", ROOT / "scenarios"),
                     load_profile(resolve_profile_path("h200")))
    return cost.verify_forward().gpu_us, cycle_time_us(cost, 1)


def measured(path: str) -> dict[tuple[int, int], tuple[float, float | None]]:
    """(batch, prompt) -> (step us, target forward us or None) of the path's calibration points: the
    queue's points file (committed gzipped, any suffix), from vLLM processes whose MLA layers were asked
    to run the path's backend.

    Raises:
        SystemExit: a file holds points of another engine or backend (it is not this path's).
    """
    stem, backend, _ = PATHS[path]
    files = sorted(RUNS.glob(f"{stem}*.jsonl.gz"))
    if not files:
        return {}
    engines, lines = engine_lines(files, "calibrate")
    ok = {e["label"]: str(e["info"].get("model_runner", "")) for e in engines
          if e["info"].get("engine") == "vllm" and (e["info"].get("variant") or {}).get("mla_attention_backend") == backend}
    if not ok or any(ln["label"] not in ok for ln in lines):
        sys.exit(f"{', '.join(map(str, files))}: points of another engine or MLA backend than vLLM with "
                 f"{backend or 'its own choice'} (the {path} path)")
    out: dict = {}
    for ln in lines:
        ep = engine_point(ln["point"], ln.get("engine"), model_runner=ok[ln["label"]])
        if ep is not None and ep.num_steps == NUM_STEPS:
            out.setdefault((ep.batch_size, ep.prompt_len), []).append((ep.step_us, ep.target_forward_us))
    return {k: (float(np.mean([s for s, _ in v])),
                float(np.mean([f for _, f in v if f])) if any(f for _, f in v) else None) for k, v in out.items()}


def main() -> None:
    t, d = shapes()
    meas = {p: measured(p) for p in PATHS}
    print("| verify path | batch | context | model: verify forward ms | model: step ms | measured: verify forward ms "
          "| measured: step ms | step error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for path in PATHS:
        for b in BATCHES:
            for c in MLA_PATH_CONTEXTS:
                fwd, step = predicted(t, d, path, b, c)
                m = meas[path].get((b, c))
                mcols = (f"{m[1] / 1e3:.2f}" if m and m[1] else "", f"{m[0] / 1e3:.2f}" if m else "",
                         f"{step / m[0] - 1:+.1%}" if m else "not yet measured")
                print(f"| {path} | {b} | {c:,} | {fwd / 1e3:.2f} | {step / 1e3:.2f} | " + " | ".join(mcols) + " |")
    for path in PATHS:
        for b in BATCHES:
            lo, hi = (predicted(t, d, path, b, c)[1] for c in (MLA_PATH_CONTEXTS[0], MLA_PATH_CONTEXTS[-1]))
            print(f"\nmodel, {path} path, batch {b}: the step grows {(hi - lo) / 1e3:.2f} ms from context "
                  f"{MLA_PATH_CONTEXTS[0]:,} to {MLA_PATH_CONTEXTS[-1]:,}", end="")
    print()


if __name__ == "__main__":
    main()
