"""The fitted forms of an engine profile's GPU parts (simulator.engines.profile's module docstring).

    roofline = offset + (mem^4 + (f T)^4)^(1/4) + kv b C (+ q (T - b) C for a multi-token verify)

with T the padded tokens of the forward, b requests, C their context. A dense target reads its weights
whatever the tokens: mem = w. An MoE target's forward reads the experts its tokens touch: mem = w + x D / E,
with D = E (1 - (1 - k / E)^N) the distinct experts N independent tokens touch out of E at top-k (the
occupancy argument of simulator.costs.moe_ops.expected_distinct_experts; N the forward's real tokens,
not the CUDA graph's padding) and x (`experts_us`) the time to read every expert of every layer. The
dense form cannot follow that: fitted on Qwen3-30B-A3B's num_steps 0 and 3 on the H100 (vLLM, experts
drawn uniformly) it prices num_steps 5 22.6% off at the median, the MoE form 0.4%
(benchmarks/bench_moe_form.py).
"""

from __future__ import annotations

import numpy as np

ROOFLINE_OFFSETS = {"target_forward_us": ("decode_us", "verify_us"), "draft_us": ("extend_us",),
                    "sample_us": ("base_us", "spec_us")}  # each part's offsets (verify_us, spec_us: a speculative one's)
SPEC_OFFSETS = ("verify_us", "spec_us")


def verify_tokens(profile, num_steps: int) -> int:
    """Tokens per request of the target's forward in an engine profile's step at num_steps: 1 for the baseline's
    decode, the tree's num_draft_tokens where it verifies a tree (topk > 1), else num_steps + 1."""
    if num_steps == 0:
        return 1
    return profile.num_draft_tokens if profile.topk > 1 and profile.num_draft_tokens else num_steps + 1


def experts_touched_frac(target: dict | None, real_tokens):
    """D / E (module docstring) of the forward's `real_tokens` on the target shape `target` (a profile's
    `target` fields); None for a dense target."""
    e, k = (target or {}).get("n_routed_experts"), (target or {}).get("num_experts_per_tok")
    if not e or not k:
        return None
    n = np.maximum(np.asarray(real_tokens, float), 0.0)
    return 1.0 - (1.0 - min(k, e) / e) ** n


def roofline(p: dict, tokens, batch, context, offset: str, multi_token: bool = True, touched=None):
    """A roofline form (module docstring) of the parameters `p` at `tokens` (padded), `batch` requests
    and `context`, us; `offset` names the constant (decode_us, verify_us, ...); `touched` the share of the
    experts the tokens touch (experts_touched_frac), where `p` holds `experts_us`.

    Raises:
        ValueError: `p` holds experts_us and no `touched` is given.
    """
    t = np.asarray(tokens, float)
    b = np.asarray(batch, float)
    c = np.asarray(context, float)
    mem = p["weights_us"]
    if p.get("experts_us"):
        if touched is None:
            raise ValueError("an MoE form (experts_us) is priced at the share of the experts its tokens touch")
        mem = mem + p["experts_us"] * np.asarray(touched, float)
    comp = p["per_token_us"] * t
    out = p[offset] + (mem ** 4 + comp ** 4) ** 0.25 + p.get("kv_us_per_token", 0.0) * b * c
    if multi_token:
        out = out + p.get("multi_query_us_per_token", 0.0) * np.maximum(t - b, 0.0) * c
    return out


def priced(params: dict, t, b, c, off, touched, multi: bool = True) -> np.ndarray:
    """The roofline form of `params` at rows' tokens, batches, contexts and offset names (arrays; `touched`: the
    experts' share each row's tokens touch, or None), us."""
    out = np.empty(len(t))
    for o in set(off):
        m = off == o
        out[m] = roofline(params, t[m], b[m], c[m], o, multi_token=multi, touched=None if touched is None else touched[m])
    return out


def part_rows(profile, part: str, points=None) -> list[tuple]:
    """Rows of an engine profile's GPU-bound points (all of `profile.points` unless `points`) that measured the roofline
    part `part` (target_forward_us, draft_extend_us, draft_step_us, sample_us): (padded tokens, batch, context,
    measured us, offset name, real tokens: the forward's tokens before the CUDA graph's padding)."""
    rows = []
    for pt in profile.points if points is None else points:
        if pt.gpu_bound is False:  # a host-bound window's GPU spans hold waits for the host's launches
            continue
        k, b = pt.num_steps, pt.batch_size
        if part == "target_forward_us" and pt.target_forward_us:
            q = verify_tokens(profile, k)
            t = pt.target_tokens_padded or profile.padded_tokens(b * q, b)
            rows.append((t, b, pt.context_len, pt.target_forward_us, "decode_us" if k == 0 else "verify_us", b * q))
        elif part == "draft_extend_us" and k and pt.draft_extend_us:
            t = pt.draft_extend_tokens_padded or profile.padded_tokens(b * (k + 1), b)
            rows.append((t, b, pt.context_len, pt.draft_extend_us, "extend_us", b * (k + 1)))
        elif part == "draft_step_us" and k >= 2 and pt.draft_steps_us:
            rows.append((profile.padded_tokens(b * profile.topk, b), b, pt.context_len, pt.draft_steps_us / (k - 1),
                         "step_us", b * profile.topk))
        elif part == "sample_us" and pt.sample_us:
            t = profile.padded_tokens(b * (k + 1), b)
            rows.append((t, b, 0.0, pt.sample_us, "base_us" if k == 0 else "spec_us", b * (k + 1)))
    return rows


ROOFLINE_ROWS = {"target_forward_us": ("target_forward_us",), "draft_us": ("draft_extend_us", "draft_step_us"),
                 "sample_us": ("sample_us",)}  # each roofline fit's rows (part_rows)


def linear_rows(points, fit_name: str) -> list[tuple[int, int, float]]:
    """(batch, num_steps, measured us) of the points a linear fit (simulator.evidence.engine_profile_fit) is fitted
    on: the draft phase's own small kernels (propose_overhead_us), the step's other GPU work where GPU-bound, the
    host's work per step; a part measured 0 counts as 1 us."""
    spec = not fit_name.endswith("_baseline")
    part = fit_name.removesuffix("_baseline")
    out = []
    for p in points:
        if (p.num_steps > 0) != spec:
            continue
        if part == "propose_overhead_us":
            if p.propose_us is None or p.gpu_bound is False:
                continue
            v = max(0.0, p.propose_us - (p.draft_extend_us or 0.0) - (p.draft_steps_us or 0.0))
        elif part == "other_gpu_us":
            if not p.gpu_bound or p.other_gpu_us is None:
                continue
            v = p.other_gpu_us
        elif part == "host_busy_us" and p.host_busy_us is not None:
            v = p.host_busy_us
        else:
            continue
        out.append((p.batch_size, p.num_steps, max(v, 1.0)))
    return out


def linear_priced(params: dict, batch, num_steps):
    """A linear form (c0 + per request b + per draft token b num_steps) at a batch and num_steps (numbers, or arrays
    of them), us."""
    return params.get("c0_us", 0.0) + params.get("per_request_us", 0.0) * batch \
        + params.get("per_draft_token_us", 0.0) * batch * num_steps


FIT_OFF_ITS_POINTS = 2.0  # a fitted form prices its own points within this factor at the median
FIT_SLACK_US = 50.0  # ... or off by at most this many us (a part of a few us measured, a few more fitted)


def fitted_and_measured(profile, name: str, fit) -> tuple[np.ndarray, np.ndarray] | None:
    """The fitted form `fit` (the profile's fits[name]) at each point it is fitted on, and the points' measured
    times, us (None: no such point)."""
    if fit.form == "roofline":
        rows = [r for part in ROOFLINE_ROWS.get(name, ()) for r in part_rows(profile, part) if r[4] in fit.params]
        if not rows:
            return None
        t, b, c, y, off, n = (np.array([r[i] for r in rows], dtype=object if i == 4 else float) for i in range(6))
        touched = experts_touched_frac(profile.target, n) if "experts_us" in fit.params else None
        return priced(fit.params, t, b, c, off, touched, name == "target_forward_us"), y
    rows = linear_rows(profile.points, name)
    if not rows:
        return None
    b, k, y = (np.array([r[i] for r in rows], float) for i in range(3))
    return linear_priced(fit.params, b, k), y


def check_fits(profile) -> None:
    """Refuse an engine profile any of whose fitted forms prices the profile's own points more than
    FIT_OFF_ITS_POINTS times off at the median, and by more than FIT_SLACK_US: the form is not these points' (a
    hand-edited parameter, say; the fits `specdecsim calibrate engine --from-points` writes are 0.85-1.34x them at
    the median: `python benchmarks/bench_profile_fits.py`).

    Raises:
        ValueError: naming the fit and how far off it is.
    """
    for name, fit in profile.fits.items():
        if (got := fitted_and_measured(profile, name, fit)) is None:
            continue
        pred, y = got
        m = float(np.median(pred / y))
        lo, hi = 1 / FIT_OFF_ITS_POINTS, FIT_OFF_ITS_POINTS
        if not lo <= m <= hi and float(np.median(np.abs(pred - y))) > FIT_SLACK_US:
            raise ValueError(f"fits.{name}: prices the profile's own points {m:.3g}x their measured times at the "
                             f"median (allowed {lo:g}..{hi:g}x; `specdecsim calibrate engine --from-points` rebuilds "
                             "the fits from the points)")
