"""An engine-native profile carried to another GPU, checked against that GPU's own engine runs (issue 46).

    python benchmarks/bench_engine_carry.py [E2E.jsonl.gz] [--profile NAME] [--gpu GPU] [--scenario YAML]
    python benchmarks/bench_engine_carry.py --steady-of NAME --profile NAME --gpu GPU   # the other way

Defaults: the real vLLM 0.26.0 runs on the lent H100 SXM (data/engine_runs/h100_vllm_0.26.0_e2e/:
Llama-3.1-8B + EAGLE-3, num_steps 3 and 0, closed batches of 1-64 requests, 1k and 4k prompts,
acceptance 0.6/0.75/0.9), the H200 vLLM profile (scenarios/vllm_llama8b_h200.yaml's) carried to
h100-sxm. Nothing of those runs is fitted: the carry is fitted on the H200 profile's own points
(simulator/costs/engine_carry.py) and the H100 runs are only compared against.

Per closed batch (the mean of its runs): the steps at the whole batch (every request decoding,
after the last request's first token: what docs/make_requests_table.py calls "whole-batch"), their
median step ms, their tokens over their time (whole-batch tok/s), the realized accept length
(tokens per request per step) and the mean context over them (prompt + tokens generated before
each step). Predicted: the steady batch's step of the scenario at that batch, context, num_steps
and acceptance (the closed form's cycle time, simulator.analytic; the baseline's decode step for
num_steps 0) four ways: the engine model from the op tables (the engine profile dropped: what the
simulator did before for another GPU), the engine profile carried to the GPU, the engine profile
as measured on its own GPU (not carried: how far apart the GPUs are), and that profile with every
GPU part scaled by the datasheets' bandwidth ratio (`costs.compute_latency_scale`: a carry with no
split, everything bandwidth-bound). Predicted tok/s =
batch x the run's realized accept length / the predicted step.

`--steady-of NAME` compares against another engine profile's own steady points instead (its
uninstrumented step at each batch, context and num_steps, the accept length it realized): e.g. the
H100 profile carried to the H200 against the H200 profile's points (`--steady-of
vllm-0.26.0-h200-llama-3.1-8b-eagle3 --profile vllm-0.26.0-h100-llama-3.1-8b-eagle3 --gpu h200-sxm`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibration.engines.build import engine_lines  # noqa: E402
from simulator.acceptance import build_acceptance  # noqa: E402
from simulator.analytic import analyze, baseline_step_us  # noqa: E402
from simulator.costs.forward import CostModel  # noqa: E402
from simulator.inputs import UserInputError  # noqa: E402
from simulator.scenario import load_profile_for, load_scenario  # noqa: E402

DEFAULT_RUNS = ROOT / "data" / "engine_runs" / "h100_vllm_0.26.0_e2e" / "e2e_2026-12-06.jsonl.gz"
DEFAULT_SCENARIO = ROOT / "scenarios" / "vllm_llama8b_h200.yaml"
WAYS = ("op tables", "carried", "not carried", "x bandwidth ratio")


def whole_batch(rep: dict, batch_size: int, prompt_len: int) -> dict:
    """One run's whole-batch steps: median step us, tokens, time us, steps, and the context over them."""
    first_all = max(q["token_times_us"][0] for q in rep["requests"])
    t = np.array([0.0] + [s["t_us"] for s in rep["steps"]])
    generated = np.cumsum([0] + [s["tokens"] for s in rep["steps"]])[:-1] / batch_size  # per request, before
    rows = [(d, s, g) for d, s, g in zip(np.diff(t), rep["steps"], generated)
            if s["t_us"] > first_all and s["emitted"] == batch_size]
    if not rows:
        return {}
    dt = np.array([d for d, _, _ in rows])
    tokens = float(sum(s["tokens"] for _, s, _ in rows))
    return dict(step_us=float(np.median(dt)), tokens=tokens, time_us=float(dt.sum()), steps=len(rows),
                context=prompt_len + float(np.mean([g for _, _, g in rows])))


def measured_points(path: Path) -> list[dict]:
    """Per closed batch: the mean over its runs of `whole_batch`, with tok/s and accept length."""
    _, lines = engine_lines([path], "live", requests=True)
    out = []
    for ln in lines:
        pt = ln["point"]
        if pt["workload"] != "closed_batch" or pt["max_tokens"] < 2:
            continue
        b = pt["batch_size"]
        runs = [r for r in (whole_batch(rep, b, pt["prompt_len"]) for rep in pt["repeats"]) if r]
        if not runs:
            continue
        tokens, time_us, steps = (sum(r[k] for r in runs) for k in ("tokens", "time_us", "steps"))
        out.append(dict(num_steps=pt["num_steps"], batch_size=b, prompt_len=pt["prompt_len"],
                        acceptance_rate=pt["acceptance_rate"], max_tokens=pt["max_tokens"],
                        step_us=float(np.mean([r["step_us"] for r in runs])),
                        tok_per_s=tokens / (time_us / 1e6), accept_length=tokens / (b * steps),
                        context=float(np.mean([r["context"] for r in runs]))))
    return sorted(out, key=lambda r: (r["num_steps"], r["prompt_len"], r["batch_size"], r["acceptance_rate"] or 0,
                                      r["max_tokens"]))


def steady_points(name: str) -> list[dict]:
    """Per steady point of an engine profile: its step, tok/s and accept length, as `measured_points`."""
    from simulator.engines.profile import load_engine_profile
    out = [dict(num_steps=p.num_steps, batch_size=p.batch_size, prompt_len=p.prompt_len,
                acceptance_rate=p.acceptance_rate, max_tokens="steady", step_us=p.step_us,
                tok_per_s=p.batch_size * p.mean_accept_length / (p.step_us / 1e6), accept_length=p.mean_accept_length,
                context=p.context_len) for p in load_engine_profile(name).points]
    return sorted(out, key=lambda r: (r["num_steps"], r["prompt_len"], r["batch_size"], r["acceptance_rate"] or 0))


def predicted_step_us(scenario_path: Path, gpu: str, profile_name: str | None, way: str, pt: dict,
                      notes: set[str] | None = None) -> float:
    """The steady step (us) the simulator prices for a measured point, one of WAYS."""
    k = pt["num_steps"]
    sets = [f"workload.batch_size={pt['batch_size']}", f"workload.context_len={int(round(pt['context']))}",
            f"spec.num_steps={k or 3}", f"acceptance.acceptance_rate={pt['acceptance_rate'] or 0.7}"]
    if profile_name is not None:
        sets.append(f"serving_engine.engine_profile={profile_name}")
    sc = load_scenario(scenario_path, sets)
    from simulator.engines.profile import load_engine_profile
    src = load_engine_profile(sc.serving_engine.engine_profile).catalog_gpu
    # carried and op tables: on the runs' GPU; the others: on the profile's own (no carry)
    sc = load_scenario(scenario_path, sets + [f"hardware.gpu={gpu if way in ('op tables', 'carried') else src}"])
    if way == "x bandwidth ratio":  # every GPU part of the uncarried profile x the datasheets' bandwidth ratio
        from simulator.hardware import default_catalog
        cat = default_catalog()
        ratio = cat.gpu(src).memory_bandwidth_gb_per_s / cat.gpu(gpu).memory_bandwidth_gb_per_s
        sc = sc.model_copy(update={"costs": sc.costs.model_copy(update={"compute_latency_scale": ratio})})
    if way == "op tables":
        sc = sc.model_copy(update={"serving_engine": sc.serving_engine.model_copy(update={"engine_profile": None})})
    try:
        cost = CostModel(sc, load_profile_for(sc)[0])
    except UserInputError as e:
        on = gpu if way in ("op tables", "carried") else f"the profile's own GPU {src}"
        raise UserInputError(f"the '{way}' prediction prices on {on}: {e}") from None
    if notes is not None:
        notes.update(cost.notes)
    if k == 0:
        return baseline_step_us(cost)
    return analyze(sc, cost, build_acceptance(sc.acceptance, sc.spec), truncate=False).cycle_time_us


def check_arguments(args) -> None:
    """The scenario, GPU and profiles load, and a --steady-of profile is of the scenario's engine, GPU (--gpu)
    and target and draft shapes (else its points are another question's).

    Raises:
        UserInputError, FileNotFoundError: a scenario, profile or GPU that does not load, or a mismatch.
    """
    from simulator.costs.engine_native import _same_shape
    from simulator.engines.profile import load_engine_profile
    from simulator.hardware import default_catalog
    from simulator.inputs import UserInputError
    from simulator.costs.engine_native import profile_mismatch
    sc = load_scenario(args.scenario)
    catalog = default_catalog()
    catalog.gpu(args.gpu)
    kind = sc.serving_engine.kind
    if kind not in ("vllm", "sglang"):
        raise UserInputError(f"--scenario {args.scenario}: serving_engine.kind {kind} has no engine profile to carry; "
                             "give a scenario of kind vllm or sglang")
    name = args.profile or sc.serving_engine.engine_profile
    if name is None:
        raise UserInputError(f"--scenario {args.scenario} names no serving_engine.engine_profile; give --profile")
    prof = load_engine_profile(name)
    if why := profile_mismatch(prof, sc, carry_shapes=True):
        raise UserInputError(f"--profile {name} does not price --scenario {args.scenario} ({why}): give a profile of its "
                             "engine and models (or of their family of layers)")
    if args.steady_of is None:
        engines, _ = engine_lines([args.runs], "live", requests=True)
        ran = {(e["info"].get("engine"), catalog.gpu_for_device(e["info"].get("gpu_name") or "")) for e in engines}
        for engine, gpu in sorted(ran, key=str):
            if engine and engine != kind:
                raise UserInputError(f"{args.runs}: runs of {engine}, the scenario's engine is {kind}: give a scenario "
                                     "of the runs' engine")
            if gpu and gpu != args.gpu:
                raise UserInputError(f"{args.runs}: runs measured on {gpu}, not --gpu {args.gpu}: give --gpu {gpu}")
        return
    ref = load_engine_profile(args.steady_of)
    why = (f"it was measured on {ref.engine}, the scenario's engine is {sc.serving_engine.kind}"
           if ref.engine != sc.serving_engine.kind else
           f"it was measured on {ref.catalog_gpu}, not --gpu {args.gpu}" if ref.catalog_gpu != args.gpu else
           f"its target or draft is another shape than the scenario's {sc.target.name}"
           if not (_same_shape(ref.target, sc.target) and _same_shape(ref.draft, sc.draft)) else None)
    if why:
        raise UserInputError(f"--steady-of {args.steady_of}: not the points of this question ({why}); give a scenario "
                             "of its engine and models and --gpu its GPU")


def summary(errors: list[float]) -> str:
    if not errors:
        return "- (0 points)"
    e = np.abs(errors)
    return f"median {np.median(e):.1%}, max {np.max(e):.1%} ({len(e)} points)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="?", type=Path, default=DEFAULT_RUNS)
    ap.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO)
    ap.add_argument("--gpu", default="h100-sxm", help="the catalog GPU the runs were measured on")
    ap.add_argument("--profile", default=None, help="engine profile (default: the scenario's)")
    ap.add_argument("--steady-of", default=None, help="compare with this engine profile's steady points instead")
    args = ap.parse_args()
    notes: set[str] = set()
    try:
        check_arguments(args)
        pts = steady_points(args.steady_of) if args.steady_of else measured_points(args.runs)
        if not pts:
            raise UserInputError(f"{args.steady_of or args.runs}: no closed batch of more than one new token whose "
                                 "whole-batch steps could be read (a calibration's points, or a file of none)")
        preds = [{w: predicted_step_us(args.scenario, args.gpu, args.profile, w, pt, notes if w == "carried" else None)
                  for w in WAYS} for pt in pts]  # every way priced before a line is printed
    except (FileNotFoundError, UserInputError, ValueError) as e:
        sys.exit(f"error: {e}")
    print("| num_steps | batch | prompt | acceptance | new tokens | context | accept length | measured step ms | "
          "op tables ms (err) | carried ms (err) | not carried ms (err) | x bandwidth ratio ms (err) | measured tok/s | "
          "carried tok/s (err) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    errs: dict[str, list[tuple[int, float, float]]] = {w: [] for w in WAYS}
    for pt, pred in zip(pts, preds):
        for w in WAYS:
            tok = pt["batch_size"] * pt["accept_length"] / (pred[w] / 1e6)
            errs[w].append((pt["num_steps"], pred[w] / pt["step_us"] - 1, tok / pt["tok_per_s"] - 1))
        cells = " | ".join(f"{pred[w] / 1e3:.2f} ({errs[w][-1][1]:+.1%})" for w in WAYS)
        tok = pt["batch_size"] * pt["accept_length"] / (pred["carried"] / 1e6)
        a = "-" if pt["acceptance_rate"] is None else f"{pt['acceptance_rate']:g}"
        print(f"| {pt['num_steps']} | {pt['batch_size']} | {pt['prompt_len']} | {a} | {pt['max_tokens']} | "
              f"{pt['context']:,.0f} | {pt['accept_length']:.2f} | {pt['step_us'] / 1e3:.2f} | {cells} | "
              f"{pt['tok_per_s']:,.0f} | {tok:,.0f} ({errs['carried'][-1][2]:+.1%}) |")
    print()
    print("| prediction | step time, all | step time, num_steps 0 | step time, speculative | tok/s, all |")
    print("|---|---|---|---|---|")
    for w in WAYS:
        e = errs[w]
        print(f"| {w} | {summary([s for _, s, _ in e])} | {summary([s for k, s, _ in e if k == 0])} | "
              f"{summary([s for k, s, _ in e if k])} | {summary([t for _, _, t in e])} |")
    from simulator.engines.profile import load_engine_profile
    sc = load_scenario(args.scenario, [f"serving_engine.engine_profile={args.profile}"] if args.profile else [])
    measured_ks = {p.num_steps for p in load_engine_profile(sc.serving_engine.engine_profile).points}
    print()
    print("| num_steps | in the carried profile's points | carried step time | op tables step time |")
    print("|---:|---|---|---|")
    for k in sorted({k for k, _, _ in errs["carried"]}):
        print(f"| {k} | {'yes' if k in measured_ks else 'no'} | {summary([s for j, s, _ in errs['carried'] if j == k])} "
              f"| {summary([s for j, s, _ in errs['op tables'] if j == k])} |")
    print()
    for n in sorted(notes):
        if "carried" in n:
            print(f"note: {n}")


if __name__ == "__main__":
    main()
