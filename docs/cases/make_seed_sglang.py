"""The seed case (../shared/CASES.md) from SGLang's own per-rank costs (docs/cases/seed-sglang-native.md).

Reads the TP8-rank shard points SGLang measured on the H200 (labels `shard8_l{layers}_s{k}` in
data/engine_runs/h200_sglang_0.5.15/points.jsonl.gz; calibration/engines/shard.py), carries them
from the two shards' MoE layer counts to Kimi-K2's 60 (`carry_points`), writes the engine-native
profile data/engine_profiles/sglang-0.5.15-kimi-k2-tp8-rank-h200.json (collectives_measured false:
the simulator adds the TP group's collectives from the box's links), and predicts the seed's
figures under each hypothesis of the doc with nothing fitted.

    python docs/cases/make_seed_sglang.py           # print the tables
    python docs/cases/make_seed_sglang.py --write   # and write the profile and the doc's section below '---'
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "cases"))

from calibration.engines.build import engine_lines, engine_point  # noqa: E402
from calibration.engines.shard import carry_points, moe_layers  # noqa: E402
from make_seed_hypotheses import ALPHA, FP8, PUB_AL, PUB_BASELINE, PUB_SPEC, STEPS, run, scenario  # noqa: E402
from simulator.engines.profile import EngineProfile  # noqa: E402
from simulator.evidence.engine_profile_fit import fit_parts  # noqa: E402
from simulator.files import write_json_atomic  # noqa: E402

DOC = ROOT / "docs" / "cases" / "seed-sglang-native.md"
POINTS = ROOT / "data" / "engine_runs" / "h200_sglang_0.5.15" / "points.jsonl.gz"
PROFILE = ROOT / "data" / "engine_profiles" / "sglang-0.5.15-kimi-k2-tp8-rank-h200.json"
PROFILE_EAGER = ROOT / "data" / "engine_profiles" / "sglang-0.5.15-kimi-k2-tp8-rank-h200-eager.json"  # S3
BOX = "h200-nvl-pcie-8gpu"
TP = 8
LABEL = re.compile(rf"^shard{TP}_l(\d+)_s(\d+)(_eager)?$")
TARGET_LAYERS = 61


def _shard(label: str, eager: bool):
    m = LABEL.match(label)
    return m if m and bool(m.group(3)) == eager else None


def shard_points(paths: list[Path], eager: bool = False) -> tuple[dict[int, list], list[dict]]:
    """{decoder layers: EnginePoints} of the shard processes (those without CUDA graphs, labels
    `_eager`, for S3), and their engine lines."""
    engines, lines = engine_lines(paths, "calibrate")
    out: dict[int, list] = {}
    for ln in lines:
        m = _shard(ln["label"], eager)
        if not m:
            continue
        ep = engine_point(ln["point"], "sglang")
        if ep is not None:
            out.setdefault(int(m.group(1)), []).append(ep)
    return out, [e for e in engines if _shard(e["label"], eager)]


def build_profile(paths: list[Path], eager: bool = False) -> tuple[EngineProfile, dict]:
    """The 61-layer profile and what it was carried from."""
    by_layers, engines = shard_points(paths, eager)
    if len(by_layers) < 2:
        raise SystemExit(f"{', '.join(map(str, paths))}: shard points of two layer counts are needed, found "
                         f"{sorted(by_layers)}")
    short, long = sorted(by_layers)[0], sorted(by_layers)[-1]
    cfg = engines[-1]["info"]
    sc = scenario(BOX, FP8, {}, STEPS)
    full = {"num_hidden_layers": TARGET_LAYERS, "first_k_dense_replace": 1, "n_routed_experts": 384}
    moe_s, moe_l = (moe_layers({**full, "num_hidden_layers": n}) for n in (short, long))
    pts = carry_points(by_layers[short], by_layers[long], moe_s, moe_l, moe_layers(full))
    spec = [e["info"] for e in engines if e["num_steps"] == STEPS] or [e["info"] for e in engines if e["num_steps"]]
    src = spec[-1] if spec else cfg
    fields = dict(
        name=(PROFILE_EAGER if eager else PROFILE).stem, engine="sglang", engine_version=cfg.get("engine_version", ""),
        attention_backend=src.get("attention_backend", ""), cudagraph_mode=src.get("cudagraph_mode", ""),
        model_runner=src.get("model_runner", ""), async_scheduling=bool(src.get("async_scheduling", True)),
        gpu_name=cfg.get("gpu_name", ""), catalog_gpu="h200-nvl", torch_version=cfg.get("torch_version", ""),
        cuda_version=cfg.get("cuda_version", ""), target=sc.target.model_dump(mode="json"),
        draft=sc.draft.model_dump(mode="json"), tp_size=TP, collectives_measured=False,
        max_num_seqs=int(cfg.get("max_num_seqs", 0)),
        cudagraph_capture_sizes=sorted({s for e in engines for s in e["info"].get("cudagraph_capture_sizes", [])}),
        how_measured=(f"one TP{TP} rank of Kimi-K2 and its EAGLE-3 draft (calibration/engines/shard.py) run by SGLang "
                      f"on one GPU as a TP-1 model, shards of {short} and {long} decoder layers ({moe_s} and {moe_l} "
                      f"MoE), the target's parts carried linearly to {moe_layers(full)} MoE layers "
                      "(calibration/engines/shard.carry_points); CUDA events as the SGLang calibration's; the TP "
                      "group's collectives not measured (the simulator adds them from the box's links)"),
        notes=sorted({n for e in engines for n in e["info"].get("notes", [])}
                     | {"catalog_gpu h200-nvl by hypothesis (docs/cases/seed-sglang-native.md S1): measured on the "
                        "lent H200 SXM, the same GH100 chip and HBM3e"}),
        points=sorted(pts, key=lambda p: (p.num_steps, p.batch_size, p.prompt_len)))
    prof = EngineProfile(**fields, fits=fit_parts(EngineProfile.model_construct(**fields)))
    raw = {n: {(p.num_steps, p.batch_size): p for p in by_layers[n]} for n in (short, long)}
    return prof, {"short": short, "long": long, "moe_short": moe_s, "moe_long": moe_l, "raw": raw}


def predict(hid: str, published: bool, profile_path: Path, steps_measured: list[int]) -> dict:
    engine = {"engine_profile": str(profile_path)}
    an, cost = run(scenario(BOX, FP8, engine, STEPS), published)
    b = an.breakdown_us
    draft = sum(v for k, v in b.items() if k.startswith("draft"))
    verify = cost.verify_forward()
    comm = sum(k.gpu_us for k in verify.kernels if k.category == "comm")
    best = max(((s, run(scenario(BOX, FP8, engine, s), published)[0].tok_per_s) for s in steps_measured),
               key=lambda x: x[1])
    tuned = max(((s, run(scenario(BOX, FP8, engine, s, 1.0, 0.7), published)[0].tok_per_s) for s in steps_measured),
                key=lambda x: x[1])
    return {"id": hid, "baseline": an.baseline_tok_per_s, "spec": an.tok_per_s, "speedup": an.speedup,
            "verify_ms": verify.span_us / 1000.0, "verify_comm_ms": comm / 1000.0,
            "draft_share": draft / an.cycle_time_us, "cycle_ms": an.cycle_time_us / 1000.0,
            "best": best, "tuned": tuned, "notes": sorted(cost.lookup.notes)}


def table(rows: list[dict]) -> str:
    lines = ["| hypothesis | baseline tok/s (pub. 90) | error | tok/s at 5 steps (pub. 71.3) | error | speedup "
             "(pub. 0.79) | verify ms (pub. 21-28), of it collectives | draft share (pub. < 5%) | cycle ms | "
             "best measured steps: tok/s | collectives x0.7: best, tok/s (pub. 94) |", "|" + "---|" * 11]
    for r in rows:
        lines.append(f"| {r['id']} | {r['baseline']:.1f} | {r['baseline'] / PUB_BASELINE - 1:+.1%} | {r['spec']:.1f} | "
                     f"{r['spec'] / PUB_SPEC - 1:+.1%} | {r['speedup']:.2f} | {r['verify_ms']:.1f}, "
                     f"{r['verify_comm_ms']:.1f} | {r['draft_share']:.1%} | {r['cycle_ms']:.1f} | "
                     f"{r['best'][0]}: {r['best'][1]:.1f} | {r['tuned'][0]}: {r['tuned'][1]:.1f} |")
    return "\n".join(lines)


def shard_table(info: dict) -> str:
    """What SGLang measured on each shard, batch 1 (us per engine step)."""
    raw = info["raw"]
    lines = ["| num_steps | shard layers | step us | target forward us | draft extend us | draft steps us | "
             "sample us | host busy us |", "|---|---|---|---|---|---|---|---|"]

    def f(v):
        return "" if v is None else f"{v:,.0f}"
    for n in (info["short"], info["long"]):
        for (k, b), p in sorted(raw[n].items()):
            lines.append(f"| {k} | {n} | {f(p.step_us)} | {f(p.target_forward_us)} | {f(p.draft_extend_us)} | "
                         f"{f(p.draft_steps_us)} | {f(p.sample_us)} | {f(p.host_busy_us)} |")
    return "\n".join(lines)


def verdict(rows: list[dict]) -> str:
    ok = [r["id"] for r in rows if abs(r["baseline"] / PUB_BASELINE - 1) <= 0.10
          and abs(r["spec"] / PUB_SPEC - 1) <= 0.10 and 21 <= r["verify_ms"] <= 28]
    return (f"Baseline within 10% of 90, 5 steps within 10% of 71.3 and the verify inside 21-28 ms: {', '.join(ok)}."
            if ok else "No hypothesis has the baseline within 10% of 90 tok/s, 5 steps within 10% of 71.3 tok/s "
                       "and the verify inside 21-28 ms.")


def account(prof: EngineProfile, rows: list[dict]) -> str:
    """Which part of the cycle the measured rank leaves short of the published figures."""
    by_k = {p.num_steps: p for p in prof.points if p.batch_size == 1}
    if 0 not in by_k or STEPS not in by_k:
        return ""
    dec, ver = by_k[0], by_k[STEPS]
    s1 = rows[0]
    pub_step_ms = 1000.0 / PUB_BASELINE
    pub_cycle_ms = 1000.0 * PUB_AL / PUB_SPEC
    draft_ms = ((ver.draft_extend_us or 0.0) + (ver.draft_steps_us or 0.0)) / 1000.0
    return (
        "\n### What is missing (S1)\n\n"
        f"- The rank's target forward, carried to 61 layers: {dec.target_forward_us / 1000:.2f} ms for the 1-token "
        f"decode, {ver.target_forward_us / 1000:.2f} ms for the 6-token verify ({ver.target_forward_us / dec.target_forward_us:.2f}x). "
        f"With the group's collectives S1 prices the decode step at {1000.0 / s1['baseline']:.2f} ms (published "
        f"{pub_step_ms:.2f} ms) and the verify at {s1['verify_ms']:.1f} ms, of it {s1['verify_comm_ms']:.1f} ms "
        f"collectives; the published verify (21-28 ms) is {21 / pub_step_ms:.1f}-{28 / pub_step_ms:.1f}x the "
        f"published decode step, the measured one {s1['verify_ms'] * s1['baseline'] / 1000.0:.2f}x.\n"
        f"- The cycle at {STEPS} steps: S1 {s1['cycle_ms']:.1f} ms, published {pub_cycle_ms:.1f} ms (accept length "
        f"{PUB_AL} at {PUB_SPEC} tok/s): {pub_cycle_ms - s1['cycle_ms']:.1f} ms missing. It is not in the draft: the "
        f"draft's measured GPU parts on the rank are {draft_ms:.2f} ms, and with its collectives the draft is "
        f"{s1['draft_share']:.0%} of S1's cycle, more than the published < 5% already. The host's work per speculative step is "
        f"{(ver.host_busy_us or 0) / 1000:.1f} ms, under the GPU's, so it does not pace the 61-layer step.\n"
        f"- So the missing time is in the verify: {21 - s1['verify_ms']:.1f}-{28 - s1['verify_ms']:.1f} ms more than "
        "SGLang's own kernels take for 6 tokens in one CUDA graph on an H200-class GPU with uniformly routed "
        "experts. What would settle it: the seed box's verify measured (a torch profiler trace of one verify on "
        "that box), and the GPU of the B hypotheses of seed-hypotheses.md (RTX PRO 6000 Blackwell, INT4 "
        "experts), which is not lent.\n")


def account_eager(info: dict, row: dict, graphed: dict) -> str:
    """What S3's shards (the rank without CUDA graphs) say of the published figures."""
    raw, s, lg = info["raw"], info["short"], info["long"]
    dm = info["moe_long"] - info["moe_short"]
    if (0, 1) not in raw[s] or (0, 1) not in raw[lg] or dm <= 0:
        return ""

    def per_layer(k):
        a, b = raw[s].get((k, 1)), raw[lg].get((k, 1))
        return None if a is None or b is None else (b.target_forward_us - a.target_forward_us) / dm / 1000.0

    def host_share(k):
        p = raw[lg].get((k, 1))
        return None if p is None or not p.step_us else (p.host_busy_us or 0.0) / p.step_us
    g0 = (graphed["raw"][graphed["long"]][(0, 1)].target_forward_us
          - graphed["raw"][graphed["short"]][(0, 1)].target_forward_us) / dm / 1000.0
    ver = per_layer(STEPS)
    return (
        "\n### What S3 says\n\n"
        f"- Without CUDA graphs SGLang launches the rank's forward kernel by kernel from the host: each MoE layer "
        f"takes {per_layer(0):.2f} ms at the 1-token decode"
        + (f" and {ver:.2f} ms at the {STEPS + 1}-token verify" if ver is not None else "")
        + f" (the two shards' difference over their {dm} MoE layers), against {g0:.3f} ms in a CUDA graph; the "
        f"host is busy {host_share(0):.0%} of the {lg}-layer shard's decode step, so the step is the host's "
        "launch pace, not the GPU's.\n"
        f"- Carried to 61 layers that is a {1000.0 / row['baseline']:.0f} ms decode step ({row['baseline']:.1f} "
        f"tok/s, published 90) and a {row['verify_ms']:.0f} ms verify (published 21-28 ms): {PUB_BASELINE / row['baseline']:.0f}x "
        "and more than 5x too slow. So the seed box did not run this rank uncaptured: with SGLang 0.5.15's kernels "
        f"an eager decode or verify is far slower than anything it published, unless its host launched kernels "
        f"{PUB_BASELINE / row['baseline']:.0f}x faster than the lent machine's. The hypothesis is rejected; the "
        "missing verify time of S1 is not explained by the graph mode.\n")


def _profile_file(prof: EngineProfile, dest: Path) -> Path:
    """Where the profile is written: `dest` with --write, a temporary file otherwise."""
    if "--write" not in sys.argv:
        import atexit
        import shutil
        import tempfile
        tmp = tempfile.mkdtemp()
        atexit.register(shutil.rmtree, tmp, True)
        dest = Path(tmp) / dest.name
    write_json_atomic(dest, prof.model_dump(mode="json", exclude_none=True))
    return dest


def main() -> None:
    prof, info = build_profile([POINTS])
    steps = sorted({p.num_steps for p in prof.points if p.num_steps})
    path = _profile_file(prof, PROFILE)
    rows = [predict("S1", False, path, steps), predict("S2 (published allreduce)", True, path, steps)]
    by_eager, _ = shard_points([POINTS], eager=True)
    if len(by_eager) >= 2:  # S3: the rank without CUDA graphs
        eager, eager_info = build_profile([POINTS], eager=True)
        rows.append(predict("S3 (no CUDA graphs)", False, _profile_file(eager, PROFILE_EAGER),
                            sorted({p.num_steps for p in eager.points if p.num_steps})))
        eager_text = ("\nS3's shards (no CUDA graphs; profile "
                      f"{PROFILE_EAGER.relative_to(ROOT)}):\n\n" + shard_table(eager_info) + "\n")
        eager_account = account_eager(eager_info, rows[-1], info)
    else:
        eager_text = ("\nS3 (no CUDA graphs) is not measured yet: its shard processes (`shard8_l{3,9}_s{0,5}_eager`, "
                      "`specdecsim calibrate engine-queue sglang-h200-eager DIR`) are not in the points file.\n")
        eager_account = ""
    body = ("\n## Results (written by `python docs/cases/make_seed_sglang.py --write`)\n\n"
            f"Profile {PROFILE.relative_to(ROOT)} ({prof.engine} {prof.engine_version}, {prof.attention_backend} "
            f"attention, {prof.cudagraph_mode}, {prof.gpu_name}); measured step counts {', '.join(map(str, steps))}. "
            f"Acceptance iid {ALPHA:.4f} (accept length {PUB_AL} at {STEPS} steps). Nothing fitted.\n\n"
            "What SGLang measured on the two shards (batch 1, context 2048):\n\n" + shard_table(info) + "\n"
            + eager_text + "\n" + table(rows) + "\n\n" + verdict(rows) + "\n" + account(prof, rows)
            + eager_account)
    print(body)
    for r in rows:
        for n in r["notes"]:
            print(f"  note [{r['id']}]: {n}")
    if "--write" in sys.argv:
        text = DOC.read_text(encoding="utf-8")
        head = text[: text.index("\n---\n") + 5] if "\n---\n" in text else text.rstrip("\n") + "\n\n---\n"
        DOC.write_text(head + body, encoding="utf-8")


if __name__ == "__main__":
    main()
