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


def forward_rows(profile, points=None) -> list[tuple]:
    """The target forward's rows of an engine profile's GPU-bound points (all of `profile.points` unless `points`):
    (padded tokens, batch, context, measured us, offset name, real tokens)."""
    rows = []
    for pt in profile.points if points is None else points:
        if pt.gpu_bound is False or not pt.target_forward_us:
            continue
        k, b = pt.num_steps, pt.batch_size
        q = verify_tokens(profile, k)
        t = pt.target_tokens_padded or profile.padded_tokens(b * q, b)
        rows.append((t, b, pt.context_len, pt.target_forward_us, "decode_us" if k == 0 else "verify_us", b * q))
    return rows


FIT_OFF_ITS_POINTS = 2.0  # a target forward's fitted form prices its own points within this factor at the median


def check_forward_fit(profile) -> None:
    """Refuse an engine profile whose target forward's fitted form prices the profile's own GPU-bound points more than
    FIT_OFF_ITS_POINTS times off at the median: the form is not these points' (a hand-edited parameter, say; the
    fits `specdecsim calibrate engine --from-points` writes are within a few percent of them).

    Raises:
        ValueError: naming the fit and how far off it is.
    """
    fit = profile.fits.get("target_forward_us")
    if fit is None or fit.form != "roofline":
        return
    rows = [r for r in forward_rows(profile) if r[4] in fit.params]
    if not rows:
        return
    t, b, c, y, off, n = (np.array([r[i] for r in rows], dtype=object if i == 4 else float) for i in range(6))
    touched = experts_touched_frac(profile.target, n) if "experts_us" in fit.params else None
    m = float(np.median(priced(fit.params, t, b, c, off, touched) / y))
    if not 1 / FIT_OFF_ITS_POINTS <= m <= FIT_OFF_ITS_POINTS:
        raise ValueError(f"fits.target_forward_us: prices the profile's own points {m:.3g}x their measured times at the "
                         "median (a fit of them is within a few percent; `specdecsim calibrate engine --from-points` "
                         "rebuilds it)")
