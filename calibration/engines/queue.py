"""A device session's engine processes, written beforehand as ProcessPlan JSON files in the
order they run (`specdecsim calibrate engine-queue-run DIR POINTS --deadline-s S` runs them;
`bash calibration/engines/device.sh start` with QUEUE=DIR).

    specdecsim calibrate engine-queue sglang-h200 OUT_DIR

`sglang-h200`: what SGLang 0.5.15 on the H200 still needs after the first session (issue 25), in
priority order: a second calibration process of num_steps 3 (the first ran slower than its live
process at the same points); the chain grid's num_steps 6, 2 and 4 (calibration then live); a
tree (topk 4, 8 draft tokens, num_steps 3); the seed case's TP8 rank of Kimi-K2 (3 and 9
layers, baseline and 5 steps); the overlap scheduler off (baseline and num_steps 3); the seed
shard at 2 and 3 steps (the best step count). Processes whose points are already in the
points file are skipped when the queue runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from calibration.engines.plans import (DEFAULT_BATCH_SIZES, DEFAULT_CALIBRATE_ACCEPTANCE, DEFAULT_LIVE_ACCEPTANCES,
                                       DEFAULT_PROMPT_LENS, ProcessPlan, calibrate_plans, interleave, live_plans,
                                       model_configs, spread_order)
from calibration.engines.shard import shard_plans
from simulator.acceptance import iid_mean_accept_length

MOE_POINTS = "qwen3-30b-a3b.points.jsonl"  # sglang_h200_moe's MoE processes (their labels are the chain's)
SEED_ACCEPT_LENGTH, SEED_STEPS, SEED_CONTEXT = 2.1, 5, 2048  # ../shared/CASES.md (the context is assumed)


def _variant(plans: list[ProcessPlan], suffix: str, **fields) -> list[ProcessPlan]:
    return [p.model_copy(update={"label": p.label + suffix, **fields}) for p in plans if p.num_steps]


def seed_acceptance() -> float:
    """The iid per-token rate whose mean accept length at 5 steps is the seed's 2.1."""
    from scipy.optimize import brentq
    return brentq(lambda a: iid_mean_accept_length(a, SEED_STEPS) - SEED_ACCEPT_LENGTH, 1e-9, 1 - 1e-9)


def sglang_h200() -> list[ProcessPlan]:
    t_cfg, d_cfg = model_configs()
    base = dict(engine="sglang", target_config=t_cfg, draft_config=d_cfg)
    bs, ps = DEFAULT_BATCH_SIZES, DEFAULT_PROMPT_LENS
    out = [p.model_copy(update={"label": "calibrate_s3_r2"}) for p in
           calibrate_plans(base, [3], bs, ps, DEFAULT_CALIBRATE_ACCEPTANCE) if p.num_steps == 3]
    order = spread_order([1, 2, 3, 4, 6])
    chain = interleave(calibrate_plans(base, order, bs, ps, DEFAULT_CALIBRATE_ACCEPTANCE),
                       live_plans(base, order, bs, ps, DEFAULT_LIVE_ACCEPTANCES), order[0])
    out += chain
    tree = interleave(calibrate_plans(base, [3], bs, ps, DEFAULT_CALIBRATE_ACCEPTANCE),
                      live_plans(base, [3], bs, ps, DEFAULT_LIVE_ACCEPTANCES), 3)
    out += _variant(tree, "_t4_n8", topk=4, num_draft_tokens=8)
    k_t, k_d = model_configs("kimi-k2-instruct", "eagle3-kimi-k2")
    a = seed_acceptance()
    out += shard_plans(k_t, k_d, 8, [3, 9], [SEED_STEPS], [1], SEED_CONTEXT, a)
    no_overlap = interleave(calibrate_plans(base, [3], bs, ps, DEFAULT_CALIBRATE_ACCEPTANCE),
                            live_plans(base, [3], bs, ps, DEFAULT_LIVE_ACCEPTANCES), 3)
    out += [p.model_copy(update={"label": p.label + "_nooverlap", "overlap": False}) for p in no_overlap]
    extra = shard_plans(k_t, k_d, 8, [3, 9], [2, 3], [1], SEED_CONTEXT, a)
    out += [p for p in extra if p.num_steps]
    return out


def sglang_h200_next() -> list[ProcessPlan]:
    """After the second session: the seed case's TP8 rank (3 and 9 layers; baseline, 5, 2 and 3
    steps), then a second process of each chain, tree and no-overlap configuration, calibration and
    live (labels `_r2`), so that profiles and checks average over processes and the process-to-
    process spread (benchmarks/bench_engine_process_spread.py) is measured for every configuration."""
    t_cfg, d_cfg = model_configs()
    k_t, k_d = model_configs("kimi-k2-instruct", "eagle3-kimi-k2")
    a = seed_acceptance()
    out = shard_plans(k_t, k_d, 8, [3, 9], [SEED_STEPS], [1], SEED_CONTEXT, a)
    out += [p for p in shard_plans(k_t, k_d, 8, [3, 9], [2, 3], [1], SEED_CONTEXT, a) if p.num_steps]
    base = dict(engine="sglang", target_config=t_cfg, draft_config=d_cfg)
    bs, ps = DEFAULT_BATCH_SIZES, DEFAULT_PROMPT_LENS
    order = spread_order([1, 2, 3, 4, 6])
    chain = interleave(calibrate_plans(base, order, bs, ps, DEFAULT_CALIBRATE_ACCEPTANCE),
                       live_plans(base, order, bs, ps, DEFAULT_LIVE_ACCEPTANCES), order[0])
    out += [p.model_copy(update={"label": p.label + "_r2"}) for p in chain if p.label != "calibrate_s3"]
    tree = interleave(calibrate_plans(base, [3], bs, ps, DEFAULT_CALIBRATE_ACCEPTANCE),
                      live_plans(base, [3], bs, ps, DEFAULT_LIVE_ACCEPTANCES), 3)
    out += _variant(tree, "_t4_n8_r2", topk=4, num_draft_tokens=8)
    out += [p.model_copy(update={"label": p.label + "_nooverlap_r2", "overlap": False}) for p in tree if not p.topk > 1]
    return out


def sglang_h200_moe() -> list[ProcessPlan]:
    """The third session: the seed case's TP8 rank (3 and 9 layers, baseline and 5 steps), then a
    MoE target on SGLang (Qwen3-30B-A3B with its EAGLE-3 draft, experts routed uniformly as the
    shard's are; baseline and num_steps 3, calibration then live: issue 26), then the seed rank at 2
    and 3 steps, then the `_r2` repeats of `sglang-h200-next`."""
    k_t, k_d = model_configs("kimi-k2-instruct", "eagle3-kimi-k2")
    a = seed_acceptance()
    out = shard_plans(k_t, k_d, 8, [3, 9], [SEED_STEPS], [1], SEED_CONTEXT, a)
    q_t, q_d = model_configs("qwen3-30b-a3b", "eagle3-qwen3-30b-a3b")
    base = dict(engine="sglang", target_config=q_t, draft_config=q_d, uniform_expert_routing=True)
    bs, ps = DEFAULT_BATCH_SIZES, DEFAULT_PROMPT_LENS
    moe = interleave(calibrate_plans(base, [3], bs, ps, DEFAULT_CALIBRATE_ACCEPTANCE),
                     live_plans(base, [3], bs, ps, DEFAULT_LIVE_ACCEPTANCES), 3)
    out += [p.model_copy(update={"points_file": MOE_POINTS}) for p in moe]
    out += [p for p in shard_plans(k_t, k_d, 8, [3, 9], [2, 3], [1], SEED_CONTEXT, a) if p.num_steps]
    return out + [p for p in sglang_h200_next() if p.label.endswith("_r2")]


def sglang_h200_eager() -> list[ProcessPlan]:
    """The fourth session: the seed rank without CUDA graphs (hypothesis S3 of
    docs/cases/seed-sglang-native.md: 3 and 9 layers, baseline and 5 steps); then the num_steps-3
    chain's live process before its calibration (`_r3`: both earlier calibrations ran slower than
    both live processes; this order tells a process's role from its place in the machine's
    session); then the `_r2` repeats not yet run."""
    k_t, k_d = model_configs("kimi-k2-instruct", "eagle3-kimi-k2")
    out = shard_plans(k_t, k_d, 8, [3, 9], [SEED_STEPS], [1], SEED_CONTEXT, seed_acceptance(), cuda_graphs=False)
    t_cfg, d_cfg = model_configs()
    base = dict(engine="sglang", target_config=t_cfg, draft_config=d_cfg)
    bs, ps = DEFAULT_BATCH_SIZES, DEFAULT_PROMPT_LENS
    s3 = [p for p in live_plans(base, [3], bs, ps, DEFAULT_LIVE_ACCEPTANCES) if p.num_steps == 3] + \
        [p for p in calibrate_plans(base, [3], bs, ps, DEFAULT_CALIBRATE_ACCEPTANCE) if p.num_steps == 3]
    out += [p.model_copy(update={"label": p.label + "_r3"}) for p in s3]
    return out + [p for p in sglang_h200_next() if p.label.endswith("_r2")]


def sglang_h200_protocol() -> list[ProcessPlan]:
    """The fifth session: why SGLang's num_steps-3 calibration processes run slower than its live ones
    (all three, +12% at the 1k prompt, +6% at 4k; num_steps 0, 1, 2, 6 within 2%: benchmarks/
    bench_engine_process_spread.py) - the live grid timed in the calibration's 48-step windows
    (`live_s3_w48`), a calibration timed in the live grid's 40-step windows (`calibrate_s3_w40`), a
    plain pair again (`_r4`); then the no-overlap repeats not yet run."""
    t_cfg, d_cfg = model_configs()
    base = dict(engine="sglang", target_config=t_cfg, draft_config=d_cfg)
    bs, ps = DEFAULT_BATCH_SIZES, DEFAULT_PROMPT_LENS
    live = [p for p in live_plans(base, [3], bs, ps, DEFAULT_LIVE_ACCEPTANCES) if p.num_steps == 3][0]
    cal = [p for p in calibrate_plans(base, [3], bs, ps, DEFAULT_CALIBRATE_ACCEPTANCE) if p.num_steps == 3][0]
    def windows(plan: ProcessPlan, label: str, steps: int) -> ProcessPlan:
        return plan.model_copy(update={"label": label, "points": [{**q, "timed_steps": steps} for q in plan.points]})
    out = [windows(live, "live_s3_w48", 48), windows(cal, "calibrate_s3_w40", 40),
           cal.model_copy(update={"label": "calibrate_s3_r4"}), live.model_copy(update={"label": "live_s3_r4"})]
    return out + [p for p in sglang_h200_next() if p.label.endswith("_nooverlap_r2")]


DIAG_POINTS = "diag.points.jsonl"


def vllm_capture_sizes_for_spec(num_steps: int, max_size: int = 512) -> list[int]:
    """vLLM's default capture sizes each rounded up to a multiple of num_steps + 1 (model runner
    V1's `adjust_cudagraph_sizes_for_spec_decode` does this; V2 keeps the list as given)."""
    from calibration.engines.vllm_backend import default_capture_sizes
    from simulator.engines.profile import rounded_to_query
    return rounded_to_query(default_capture_sizes(max_size), num_steps)


def vllm_h200_diag_moe() -> list[ProcessPlan]:
    """vLLM 0.26.0, a fresh machine: (1) the no-full-graph cell (num_steps 2 at batch 4: a 12-token
    verify replays piecewise graphs and is host-bound; its step took 7.7 to 15.7 ms by window and by
    process) in six windows a point, with its full-graph neighbours (batch 2 and 8), the engine
    thread's CPU time per step and the machine's CPU load per window recorded, to tell a slower
    host from a host that waits; (2) Qwen3-30B-A3B on model runner V1 with its phase timers
    (issue 26): num_steps 3 calibration and live (`_r2`: the first pair ran without V1 timers), the
    baseline's pair; (3) the same cell with capture sizes rounded to multiples of 3 (a full graph
    for the 12-token verify: what the fix is worth)."""
    t_cfg, d_cfg = model_configs()
    base = dict(engine="vllm", target_config=t_cfg, draft_config=d_cfg, points_file=DIAG_POINTS)
    pts = [dict(batch_size=b, prompt_len=p, acceptance_rate=0.7, timed_steps=48, repeats=6, instrument_first=True)
           for p, b in ((4096, 4), (4096, 8), (1024, 8), (1024, 4), (1024, 2))]
    diag = ProcessPlan(**base, session="calibrate", label="diag_s2", num_steps=2, points=pts)
    cap3 = diag.model_copy(update={"label": "diag_s2_cap3", "capture_sizes": vllm_capture_sizes_for_spec(2),
                                   "points": [q for q in pts if q["batch_size"] == 4]})
    q_t, q_d = model_configs("qwen3-30b-a3b", "eagle3-qwen3-30b-a3b")
    moe_base = dict(engine="vllm", target_config=q_t, draft_config=q_d, points_file=MOE_POINTS)
    bs, ps = DEFAULT_BATCH_SIZES, DEFAULT_PROMPT_LENS
    cal = calibrate_plans(moe_base, [3], bs, ps, DEFAULT_CALIBRATE_ACCEPTANCE)
    live = live_plans(moe_base, [3], bs, ps, DEFAULT_LIVE_ACCEPTANCES)
    by = {p.label: p for p in cal + live}
    moe = [by["calibrate_s3"].model_copy(update={"label": "calibrate_s3_r2"}),
           by["live_s3"].model_copy(update={"label": "live_s3_r2"}), by["calibrate_s0"], by["live_s0"]]
    return [diag, *moe, cap3]


def vllm_h200_moe_base() -> list[ProcessPlan]:
    """vLLM 0.26.0, what `vllm-h200-diag-moe` left unrun: Qwen3-30B-A3B's baseline pair on model
    runner V1 (`calibrate_s0`, `live_s0`: the num_steps-3 pair `_r2` ran with V1's phase timers, the
    baseline did not, so no MoE profile could be built: issue 26), then the no-full-graph cell with
    capture sizes rounded up to multiples of 3 (`diag_s2_cap3`: a full graph for the 12-token verify,
    what that engine setting is worth: issue 24)."""
    plans = {p.label: p for p in vllm_h200_diag_moe()}
    return [plans["calibrate_s0"], plans["live_s0"], plans["diag_s2_cap3"]]


MLA_POINTS = "deepseek-v2-lite.points.jsonl"


def sglang_h200_mla() -> list[ProcessPlan]:
    """An MLA target on SGLang (issue 26): DeepSeek-V2-Lite's shape (MLA with kv_lora_rank 512, no q
    compression, 64 experts top-6 and 2 shared) with an EAGLE-3 draft, experts routed uniformly; the
    baseline and num_steps 3 at contexts 1k to 16k (the verify's cost by context), calibration then
    live. The KV pool is capped (max_total_tokens): the GQA draft's pool takes the MLA target's token
    count."""
    t_cfg, d_cfg = model_configs("deepseek-v2-lite", "eagle3-deepseek-v2-lite")
    base = dict(engine="sglang", target_config=t_cfg, draft_config=d_cfg, uniform_expert_routing=True,
                max_model_len=32768, max_total_tokens=600_000, points_file=MLA_POINTS)
    bs, ps = [1, 8, 32], [1024, 4096, 8192, 16384]
    return interleave(calibrate_plans(base, [3], bs, ps, DEFAULT_CALIBRATE_ACCEPTANCE),
                      live_plans(base, [3], bs, ps, DEFAULT_LIVE_ACCEPTANCES), 3)


def vllm_h200_mla() -> list[ProcessPlan]:
    """The MLA target of `sglang-h200-mla` on vLLM 0.26.0 (its own MLA backend and model runner): the
    num_steps-3 calibration first (the verify's cost by context), then the baseline's, as far as the
    session's device time goes."""
    t_cfg, d_cfg = model_configs("deepseek-v2-lite", "eagle3-deepseek-v2-lite")
    base = dict(engine="vllm", target_config=t_cfg, draft_config=d_cfg, max_model_len=32768, points_file=MLA_POINTS)
    plans = {p.num_steps: p for p in calibrate_plans(base, [3], [1, 8, 32], [1024, 4096, 8192, 16384],
                                                     DEFAULT_CALIBRATE_ACCEPTANCE)}
    return [plans[3], plans[0]]


def vllm_h200_next() -> list[ProcessPlan]:
    """For the next vLLM session: the MLA target's num_steps 3 and baseline on model runner V1
    (`VLLM_USE_V2_MODEL_RUNNER=0`: on V2 the EAGLE-3 draft failed vLLM's own warm-up beside the MLA
    target), experts routed uniformly (vLLM's routing simulator), in a points file of their own."""
    return [p.model_copy(update={"uniform_expert_routing": True, "engine_env": {"VLLM_USE_V2_MODEL_RUNNER": "0"},
                                 "points_file": "deepseek-v2-lite-v1.points.jsonl"}) for p in vllm_h200_mla()]


MLA_PATH_CONTEXTS = [2048, 10000, 30000]  # the contexts of the published Kimi-K2.5 verify-path case (data/cases/public.yaml)


def vllm_h200_mla_paths() -> list[ProcessPlan]:
    """vLLM's two MLA verify paths on the MLA target (issue 26: "absorbed vs not"), num_steps 3 at batch 1
    and 8 over the contexts of the published Kimi-K2.5 case, on model runner V1 with experts routed
    uniformly: first with the target's MLA layers on TRITON_MLA (queries of one token only: the 4-token
    verify runs MLA's prefill path, the context up-projected, with no full graph: what vLLM picks on an
    RTX PRO 6000, SM120), then on vLLM's own choice for the H200 (FLASH_ATTN_MLA: the absorbed decode
    kernels in a full graph). Each in a points file of its own."""
    t_cfg, d_cfg = model_configs("deepseek-v2-lite", "eagle3-deepseek-v2-lite")
    base = dict(engine="vllm", target_config=t_cfg, draft_config=d_cfg, max_model_len=32768,
                uniform_expert_routing=True, engine_env={"VLLM_USE_V2_MODEL_RUNNER": "0"})
    out = []
    for backend, name in (("TRITON_MLA", "triton"), (None, "default")):
        plan = next(p for p in calibrate_plans({**base, "mla_attention_backend": backend,
                                                "points_file": f"deepseek-v2-lite-paths-{name}.points.jsonl"},
                                               [3], [1, 8], MLA_PATH_CONTEXTS, DEFAULT_CALIBRATE_ACCEPTANCE)
                    if p.num_steps)
        out.append(plan.model_copy(update={"label": f"calibrate_s3_mla_{name}"}))  # a chain's label (build.label_variant)
    return out


def vllm_h200_mla_all() -> list[ProcessPlan]:
    """The next vLLM session's MLA work in one queue (one engine bundle, one device session): the two
    verify paths (`vllm-h200-mla-paths`) first, then the MLA target's calibration on model runner V1
    (`vllm-h200-next`), as far as the device time goes."""
    return vllm_h200_mla_paths() + vllm_h200_next()


def vllm_h200_routing_check() -> list[ProcessPlan]:
    """One short vLLM process: Qwen3-30B-A3B's baseline at batch 1, 8 and 64 (1k prompt) with each token's
    experts drawn uniformly (vLLM's routing simulator), against the committed baseline that routed by the
    dummy router weights: whether those spread tokens over the experts as a uniform draw does."""
    q_t, q_d = model_configs("qwen3-30b-a3b", "eagle3-qwen3-30b-a3b")
    base = dict(engine="vllm", target_config=q_t, draft_config=q_d, uniform_expert_routing=True,
                points_file="qwen3-30b-a3b-uniform.points.jsonl")
    return [p for p in calibrate_plans(base, [3], [1, 8, 64], [1024], DEFAULT_CALIBRATE_ACCEPTANCE)
            if p.num_steps == 0]


GROUP_POINTS = "group.points.jsonl"  # the TP-group processes (issue 28), apart from the single-GPU campaigns


def _group1(engine: str) -> list[ProcessPlan]:
    """The TP group's path on one GPU (issue 28, while no multi-GPU machine is lent): the chain's
    num_steps 3 at batch 1, 8 and 32 (1k prompt, acceptance 0.7) run as a group of one rank
    (`group_launch`: vLLM's external_launcher, SGLang's broadcast request path and ShutdownReq), to
    set beside the same points of the committed single-process calibration."""
    t_cfg, d_cfg = model_configs()
    base = dict(engine=engine, target_config=t_cfg, draft_config=d_cfg, group_launch=True, points_file=GROUP_POINTS)
    plan = next(p for p in calibrate_plans(base, [3], [1, 8, 32], [1024], DEFAULT_CALIBRATE_ACCEPTANCE) if p.num_steps)
    return [plan.model_copy(update={"label": "calibrate_s3_group1"})]


def vllm_h200_hostprobe() -> list[ProcessPlan]:
    """vLLM 0.26.0, issue 24's no-full-graph cell (num_steps 2 at batch 4: host-bound piecewise steps that
    moved 7.7-15.7 ms a step between windows and processes with the stepping thread on its CPU all the
    while) in six windows a point at 1k and 4k prompts, with its full-graph neighbours (batch 2 and 8:
    GPU-bound), and after every window the stepping thread's core speed (`host_probe`: a fixed piece of
    Python work timed in that thread, and the CPU it ran on); two processes, so a slow and a fast
    process can be told apart from a slow and a fast core."""
    t_cfg, d_cfg = model_configs()
    base = dict(engine="vllm", target_config=t_cfg, draft_config=d_cfg, points_file="hostprobe.points.jsonl")
    pts = [dict(batch_size=b, prompt_len=p, acceptance_rate=0.7, timed_steps=48, repeats=6, host_probe=True)
           for p, b in ((4096, 4), (1024, 8), (1024, 4), (1024, 2))]
    first = ProcessPlan(**base, session="calibrate", label="diag_s2_probe", num_steps=2, points=pts)
    return [first, first.model_copy(update={"label": "diag_s2_probe_r2"})]


def sglang_h200_hostprobe() -> list[ProcessPlan]:
    """SGLang 0.5.15, the chain's num_steps 3 on Llama-3.1-8B at batch 1, 2, 8 and 32 (1k prompt, acceptance
    0.7: its host-bound steps, the ones issue 25's records miss by up to 18% between processes) in six
    windows a point, the scheduler thread's core speed probed in that thread after every window; two
    processes."""
    t_cfg, d_cfg = model_configs()
    base = dict(engine="sglang", target_config=t_cfg, draft_config=d_cfg, points_file="hostprobe.points.jsonl")
    pts = [dict(batch_size=b, prompt_len=1024, acceptance_rate=0.7, timed_steps=48, repeats=6, host_probe=True)
           for b in (32, 8, 2, 1)]
    first = ProcessPlan(**base, session="calibrate", label="diag_s3_probe", num_steps=3, points=pts)
    return [first, first.model_copy(update={"label": "diag_s3_probe_r2"})]


HOSTSPEED_POINTS = "hostspeed.points.jsonl"


def _pinned(plans: list[ProcessPlan], suffix: str, points_file: str) -> list[ProcessPlan]:
    return [p.model_copy(update={"label": p.label + suffix, "points_file": points_file,
                                 "points": [{**q, "pin_fastest_cpu": True, "host_probe": True} for q in p.points]})
            for p in plans]


def vllm_h200_hostspeed() -> list[ProcessPlan]:
    """vLLM 0.26.0, the host's core speed held still (issues 24 and 26): before each point the stepping
    thread is pinned to the CPU that runs the host probe fastest then (`pin_fastest_cpu`), and the probe
    runs before and after every window. Llama-3.1-8B's calibration and live processes of num_steps 2 (the
    no-full-graph cell, host-bound), 4 and 3 (the one best-num_steps cell missed, batch 1 at the 4k
    prompt), then Qwen3-30B-A3B's num_steps 3 and baseline pairs (its host-paced batch 1-2 records), each
    the whole grid of its committed counterpart (`_r2`/`_r3`: another process of the same configuration),
    in points files of their own."""
    t_cfg, d_cfg = model_configs()
    base = dict(engine="vllm", target_config=t_cfg, draft_config=d_cfg)
    bs, ps = DEFAULT_BATCH_SIZES, DEFAULT_PROMPT_LENS
    by = {p.label: p for p in calibrate_plans(base, [2, 3, 4], bs, ps, DEFAULT_CALIBRATE_ACCEPTANCE)
          + live_plans(base, [2, 3, 4], bs, ps, DEFAULT_LIVE_ACCEPTANCES)}
    llama = _pinned([by[f"{s}_s{k}"] for k in (2, 4, 3) for s in ("calibrate", "live")], "_r2", HOSTSPEED_POINTS)
    q_t, q_d = model_configs("qwen3-30b-a3b", "eagle3-qwen3-30b-a3b")  # as vllm_h200_diag_moe's
    moe = dict(engine="vllm", target_config=q_t, draft_config=q_d)
    by = {p.label: p for p in calibrate_plans(moe, [3], bs, ps, DEFAULT_CALIBRATE_ACCEPTANCE)
          + live_plans(moe, [3], bs, ps, DEFAULT_LIVE_ACCEPTANCES)}
    qf = "qwen3-30b-a3b-" + HOSTSPEED_POINTS
    qwen = (_pinned([by["calibrate_s3"], by["live_s3"]], "_r3", qf)
            + _pinned([by["calibrate_s0"], by["live_s0"]], "_r2", qf))
    return llama + qwen


def vllm_h200_group1() -> list[ProcessPlan]:
    """`_group1` on vLLM 0.26.0."""
    return _group1("vllm")


def sglang_h200_group1() -> list[ProcessPlan]:
    """`_group1` on SGLang 0.5.15."""
    return _group1("sglang")


def tp_plans(engine: str, tp: int) -> list[ProcessPlan]:
    """Issue 28 on a machine of `tp` GPUs: the target's TP group of `tp` (Llama-3.1-8B's shape with its
    EAGLE-3 draft), the draft sharded with the target (both engines' default), calibration and live
    processes interleaved (num_steps 1, 2, 3 and 6 in `spread_order`, the baseline second), batch 1-64 at
    1k and 4k prompts; then, on vLLM, the draft asked onto one GPU (`draft_tensor_parallel_size` 1) at num_steps
    3, whose engine line records the TP the draft was built for."""
    t_cfg, d_cfg = model_configs()
    base = dict(engine=engine, target_config=t_cfg, draft_config=d_cfg, tensor_parallel_size=tp,
                points_file=GROUP_POINTS)
    ks = spread_order([1, 2, 3, 6])
    sfx = f"_tp{tp}"
    plans = interleave(calibrate_plans(base, ks, DEFAULT_BATCH_SIZES, DEFAULT_PROMPT_LENS, DEFAULT_CALIBRATE_ACCEPTANCE),
                       live_plans(base, ks, DEFAULT_BATCH_SIZES, DEFAULT_PROMPT_LENS, DEFAULT_LIVE_ACCEPTANCES), ks[0])
    plans = [p.model_copy(update={"label": p.label + sfx}) for p in plans]
    if engine == "vllm":
        one = {**base, "draft_tensor_parallel_size": 1}
        cal = [p for p in calibrate_plans(one, [3], DEFAULT_BATCH_SIZES, DEFAULT_PROMPT_LENS,
                                          DEFAULT_CALIBRATE_ACCEPTANCE) if p.num_steps]
        live = [p for p in live_plans(one, [3], DEFAULT_BATCH_SIZES, DEFAULT_PROMPT_LENS, DEFAULT_LIVE_ACCEPTANCES)
                if p.num_steps]
        plans += [p.model_copy(update={"label": p.label + sfx + "_d1"}) for p in cal + live]
    return plans


E2E_POINTS = "e2e.points.jsonl"  # request-level runs (issue 45), apart from the steady windows
E2E_BATCH_SIZES = [64, 32, 16, 8, 4, 1]
E2E_ACCEPTANCES = [0.6, 0.75, 0.9]
E2E_MAX_TOKENS = 256


def e2e_points(speculative: bool, batch_sizes=E2E_BATCH_SIZES, prompt_lens=(4096, 1024), repeats: int = 2) -> list[dict]:
    """Request-level points of one engine process (issue 45): closed batches of 256 new tokens at every
    batch size, context and acceptance; 128 and 512 at the middle acceptance and the short prompt; the
    prefill alone (1 new token) at every batch size and context; closed loops at concurrency 4, 16 and 64
    (three times as many requests in all), largest first."""
    rates = E2E_ACCEPTANCES if speculative else [None]
    mid = E2E_ACCEPTANCES[1] if speculative else None
    short = min(prompt_lens)
    pts = []
    for p in prompt_lens:
        for b in batch_sizes:
            cb = dict(workload="closed_batch", batch_size=b, prompt_len=p, repeats=repeats)
            pts += [dict(cb, acceptance_rate=a, max_tokens=E2E_MAX_TOKENS) for a in rates]
            pts.append(dict(cb, acceptance_rate=mid, max_tokens=1))
            if p == short:
                pts += [dict(cb, acceptance_rate=mid, max_tokens=n) for n in (128, 512)]
    for c in (64, 16, 4):
        pts.append(dict(workload="closed_loop", batch_size=c, concurrency=c, num_requests=3 * c, prompt_len=short,
                        acceptance_rate=mid, max_tokens=E2E_MAX_TOKENS, repeats=repeats))
    return pts


def vllm_e2e() -> list[ProcessPlan]:
    """Request-level runs of vLLM (issue 45) on whichever GPU the session holds: Llama-3.1-8B with its
    EAGLE-3 draft at num_steps 3, then the steady calibration of that num_steps (a profile of this GPU's
    own), then the baseline's request-level runs and calibration; request-level runs in e2e.points.jsonl."""
    t_cfg, d_cfg = model_configs()
    base = dict(engine="vllm", target_config=t_cfg, draft_config=d_cfg)
    bs, ps = DEFAULT_BATCH_SIZES, DEFAULT_PROMPT_LENS
    cal = {p.num_steps: p for p in calibrate_plans(base, [3], bs, ps, DEFAULT_CALIBRATE_ACCEPTANCE)}
    e2e = {k: ProcessPlan(**base, session="live", label=f"e2e_s{k}", num_steps=k, points=e2e_points(bool(k)),
                          points_file=E2E_POINTS) for k in (3, 0)}
    return [e2e[3], cal[3], e2e[0], cal[0]]


def _tp_queue(engine: str, tp: int):
    return lambda: tp_plans(engine, tp)


QUEUES = {"vllm-e2e": vllm_e2e, "vllm-h200-mla-all": vllm_h200_mla_all, "vllm-h200-mla-paths": vllm_h200_mla_paths, "vllm-h200-routing-check": vllm_h200_routing_check, "vllm-h200-next": vllm_h200_next, "vllm-h200-mla": vllm_h200_mla, "sglang-h200-mla": sglang_h200_mla, "vllm-h200-moe-base": vllm_h200_moe_base, "vllm-h200-diag-moe": vllm_h200_diag_moe, "sglang-h200-protocol": sglang_h200_protocol,
          "sglang-h200-eager": sglang_h200_eager,
          "sglang-h200-moe": sglang_h200_moe, "sglang-h200-next": sglang_h200_next, "sglang-h200": sglang_h200,
          "vllm-h200-group1": vllm_h200_group1, "vllm-h200-hostspeed": vllm_h200_hostspeed,
          "vllm-h200-hostprobe": vllm_h200_hostprobe,
          "sglang-h200-hostprobe": sglang_h200_hostprobe, "sglang-h200-group1": sglang_h200_group1,
          **{f"{e}-h200x{n}-tp": _tp_queue(e, n) for e in ("vllm", "sglang") for n in (2, 4, 8)}}


def write_queue(plans: list[ProcessPlan], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for i, p in enumerate(plans):
        f = out / f"{i:03d}_{p.label}.json"
        f.write_text(json.dumps(p.model_dump(mode="json"), indent=1), encoding="utf-8")
        files.append(f)
    return files

