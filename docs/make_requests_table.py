"""Where a closed batch's time goes inside vLLM (issue 45): the table of docs/engines/requests.md.

    python docs/make_requests_table.py [POINTS.jsonl.gz]

Reads the request-level runs of queue vllm-e2e (default: the lent H100's, data/engine_runs/
h100_vllm_0.26.0_e2e/) and prints, per closed batch (the mean of its two runs, each its own fresh
prompts): the whole run (`generate`), the same batch's prefill alone (1 new token), when the last
request had its first token, the decode phase after it, its engine steps split into steps at the
whole batch and the drain (steps after the first request finished), the median step at the whole
batch, the drain's time; the decode tok/s a user computes ((B x N - B) / (generate - prefill alone))
against the rate of the whole-batch steps alone (the steady batch's, what a steady-batch prediction
prices), and their gap.

The second table sets that measured gap (num_steps 3, 1k prompts, 256 new tokens) beside the same gap
in the serving DES's closed batch (`serving.arrivals.kind: closed_batch`) of the shipped
scenarios/vllm_llama8b_h200.yaml at each batch size and acceptance (its H200 engine-native profile:
another GPU, so only the gap, a ratio within one run, is compared; the DES's own seed 0), and the
prefill alone as measured on the H100 and as the serving DES prices it (the op tables of the
project's own loop on the H200, not the engine's: an H100 has the H200's bf16 rate).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibration.engines.build import engine_lines  # noqa: E402
from calibration.engines.request_records import prefill_alone_s, users_decode_tok_per_s  # noqa: E402

DEFAULT = ROOT / "data" / "engine_runs" / "h100_vllm_0.26.0_e2e" / "e2e_2026-12-06.jsonl.gz"


def phases(rep: dict, batch_size: int) -> dict:
    """One run's phases (times in s)."""
    first_all = max(q["token_times_us"][0] for q in rep["requests"])
    t = np.array([0.0] + [s["t_us"] for s in rep["steps"]])
    dt = np.diff(t)
    dec = [(d, s) for d, s in zip(dt, rep["steps"]) if s["t_us"] > first_all]
    full = [(d, s) for d, s in dec if s["emitted"] == batch_size]
    drain = [(d, s) for d, s in dec if s["emitted"] < batch_size]
    return dict(first_step_ms=dec[0][0] / 1e3 if dec else float("nan"), generate=rep["elapsed_us"] / 1e6, first_all=first_all / 1e6, decode=(rep["elapsed_us"] - first_all) / 1e6,
                full_steps=len(full), drain_steps=len(drain), full_step_ms=float(np.median([d for d, _ in full])) / 1e3,
                drain=sum(d for d, _ in drain) / 1e6,
                full_tok_per_s=sum(s["tokens"] for _, s in full) / (sum(d for d, _ in full) / 1e6))


def rows(path: Path) -> list[dict]:
    _, lines = engine_lines([path], "live", requests=True)
    prefill = prefill_alone_s(lines)
    out = []
    for ln in lines:
        pt = ln["point"]
        if pt["workload"] != "closed_batch" or pt["max_tokens"] < 2:
            continue
        b, n = pt["batch_size"], pt["max_tokens"]
        ph = [phases(r, b) for r in pt["repeats"]]
        mean = {k: float(np.mean([p[k] for p in ph])) for k in ph[0]}
        t1 = prefill[(ln["label"], b, pt["prompt_len"])]
        users = users_decode_tok_per_s(b, n, mean["generate"], t1)
        out.append(dict(k=pt["num_steps"], b=b, p=pt["prompt_len"], a=pt["acceptance_rate"], n=n, t1=t1,
                        spread=max(p["generate"] for p in ph) / min(p["generate"] for p in ph) - 1,
                        users=users, gap=users / mean["full_tok_per_s"] - 1, **mean))
    return sorted(out, key=lambda r: (r["k"], r["p"], r["b"], r["a"] or 0, r["n"]))


def des_gap(batch_size: int, prompt_len: int, acceptance_rate: float, max_tokens: int) -> tuple[float, float]:
    """(users' decode tok/s over the whole-batch steps' rate - 1, the prefill alone in s) of the serving
    DES's closed batch on the shipped vLLM scenario, its draws pooled (`num_draws`)."""
    from simulator.scenario import load_profile_for, load_scenario
    from simulator.serving.run import mean_wall_s, run_serving, run_serving_draws

    def scenario(n: int):
        return load_scenario(ROOT / "scenarios" / "vllm_llama8b_h200.yaml", [
            f"workload.batch_size={batch_size}", f"workload.context_len={prompt_len}",
            f"acceptance.acceptance_rate={acceptance_rate}", "serving.arrivals.kind=closed_batch",
            f"serving.num_requests={batch_size}", "serving.input_len.kind=fixed", f"serving.input_len.tokens={prompt_len}",
            "serving.output_len.kind=fixed", f"serving.output_len.tokens={n}", "serving.max_running_requests=64",
            "serving.chunked_prefill_tokens=16384"])
    sc = scenario(max_tokens)
    prof = load_profile_for(sc)[0]
    runs, alone = run_serving_draws(sc, prof, True), run_serving(scenario(1), prof, True)
    t_n, t_1 = mean_wall_s(runs), float(alone.finish_us.max()) / 1e6
    users = (batch_size * max_tokens - batch_size) / (t_n - t_1)
    full = [r.step_batch_size == batch_size for r in runs]
    whole = (sum(r.step_accepted[f].sum() for r, f in zip(runs, full))
             / (sum((r.step_end_us - r.step_start_us)[f].sum() for r, f in zip(runs, full)) / 1e6))
    return users / whole - 1, t_1


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    print("| num_steps | batch | prompt | acceptance | new tokens | generate s (2 runs apart) | prefill alone s | "
          "last first token s | decode s | first decode step ms | steps: whole batch + drain | whole-batch step ms | "
          "drain s | "
          "users' decode tok/s | whole-batch tok/s | gap |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows(path):
        a = "-" if r["a"] is None else f"{r['a']:g}"
        print(f"| {r['k']} | {r['b']} | {r['p']} | {a} | {r['n']} | {r['generate']:.3f} ({r['spread'] * 100:.1f}%) | "
              f"{r['t1']:.3f} | {r['first_all']:.3f} | {r['decode']:.3f} | {r['first_step_ms']:.1f} | {r['full_steps']:.1f} + {r['drain_steps']:.1f} "
              f"| {r['full_step_ms']:.2f} | {r['drain']:.3f} | {r['users']:,.0f} | {r['full_tok_per_s']:,.0f} | "
              f"{r['gap'] * 100:+.1f}% |")
    print()
    print("| batch | acceptance | measured gap (H100) | serving DES gap | prefill alone s, measured (H100) | "
          "prefill alone s, serving DES |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows(path):
        if r["k"] == 3 and r["p"] == 1024 and r["n"] == 256 and r["b"] > 1:
            gap, t1 = des_gap(r["b"], r["p"], r["a"], r["n"])
            print(f"| {r['b']} | {r['a']:g} | {r['gap'] * 100:+.1f}% | {gap * 100:+.1f}% | {r['t1']:.3f} | {t1:.3f} |")


if __name__ == "__main__":
    main()
