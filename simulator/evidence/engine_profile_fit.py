"""The fitted forms of an engine-native profile's parts (simulator.engines.profile's docstring says
which): scipy least squares on relative errors, rooflines for the forwards and the sampler,
non-negative least squares for the small linear parts."""

from __future__ import annotations

import numpy as np

from simulator.engines.forms import experts_touched_frac, forward_rows, priced
from simulator.engines.profile import EnginePoint, EngineProfile, PartFit


def _rows(points: list[EnginePoint], part: str, profile: EngineProfile):
    """(tokens, batch, context, value, offset name, real tokens) of the points that measured `part` (real: the
    forward's tokens before the CUDA graph's padding)."""
    if part == "target_forward_us":
        return forward_rows(profile, points)
    rows = []
    for pt in points:
        if pt.gpu_bound is False:  # a host-bound window's GPU spans hold waits for the host's launches
            continue
        k, b = pt.num_steps, pt.batch_size
        if part == "draft_extend_us" and k and pt.draft_extend_us:
            t = pt.draft_extend_tokens_padded or profile.padded_tokens(b * (k + 1), b)
            rows.append((t, b, pt.context_len, pt.draft_extend_us, "extend_us", b * (k + 1)))
        elif part == "draft_step_us" and k >= 2 and pt.draft_steps_us:
            rows.append((profile.padded_tokens(b * profile.topk, b), b, pt.context_len, pt.draft_steps_us / (k - 1),
                         "step_us", b * profile.topk))
        elif part == "sample_us" and pt.sample_us:
            t = profile.padded_tokens(b * (k + 1), b)
            rows.append((t, b, 0.0, pt.sample_us, "base_us" if k == 0 else "spec_us", b * (k + 1)))
    return rows


def _fit_family(rows, offsets: list[str], with_kv: bool, with_multi: bool,
                moe_target: dict | None = None) -> PartFit | None:
    """The roofline form (simulator.engines.forms) of `rows` (_rows); with `moe_target` (an MoE target's shape
    fields) its weights term grows with the experts the rows' real tokens touch (`experts_us`)."""
    from scipy.optimize import least_squares

    if not rows:
        return None
    touched = experts_touched_frac(moe_target, [r[5] for r in rows])
    names = ["weights_us"] + (["experts_us"] if touched is not None else []) + ["per_token_us"] \
        + (["kv_us_per_token"] if with_kv else []) + (["multi_query_us_per_token"] if with_multi else []) + offsets
    t, b, c, y, off = (np.array([r[i] for r in rows], dtype=object if i == 4 else float) for i in range(5))
    ymin = float(np.min(y))
    x0 = {"weights_us": (0.8 if touched is None else 0.5) * ymin, "experts_us": 0.5 * float(np.max(y)),
          "per_token_us": max(1e-3, float(np.max(y / np.maximum(t, 1.0))) * 0.5),
          "kv_us_per_token": 1e-4, "multi_query_us_per_token": 1e-6, **{o: 0.1 * ymin for o in offsets}}
    # too few points for every parameter: the multi-query term goes first, then the kv term
    while len(names) > len(rows) and ("multi_query_us_per_token" in names or "kv_us_per_token" in names):
        names.remove("multi_query_us_per_token" if "multi_query_us_per_token" in names else "kv_us_per_token")

    def model(x):
        return priced(dict(zip(names, x)), t, b, c, off, touched, with_multi)

    res = least_squares(lambda x: model(x) / y - 1.0, [x0[n] for n in names], bounds=(0.0, np.inf),
                        loss="soft_l1", f_scale=0.02, x_scale="jac", max_nfev=20_000)
    err = np.abs(model(res.x) / y - 1.0)
    return PartFit(form="roofline", params={n: float(v) for n, v in zip(names, res.x)}, num_points=len(rows),
                   median_abs_error_frac=float(np.median(err)), max_abs_error_frac=float(np.max(err)))


def _fit_linear(points: list[EnginePoint], part: str, speculative: bool) -> PartFit | None:
    """part ~ c0 + c_batch b (+ c_batch_steps b num_steps): non-negative least squares."""
    from scipy.optimize import nnls

    pts = [p for p in points if getattr(p, part) is not None and (p.num_steps > 0) == speculative]
    if not pts:
        return None
    cols = [np.ones(len(pts)), np.array([p.batch_size for p in pts], float)]
    names = ["c0_us", "per_request_us"]
    if speculative:
        cols.append(np.array([p.batch_size * p.num_steps for p in pts], float))
        names.append("per_draft_token_us")
    names, cols = names[:max(1, min(len(names), len(pts)))], cols[:max(1, min(len(cols), len(pts)))]
    y = np.maximum(np.array([getattr(p, part) for p in pts], float), 1.0)  # a part measured 0 (SGLang's
    a = np.stack(cols, axis=1) / y[:, None]  # relative residuals              propose overhead) counts as 1 us
    coef, _ = nnls(a, np.ones(len(pts)))
    pred = np.stack(cols, axis=1) @ coef
    err = np.abs(pred / y - 1.0)
    return PartFit(form="linear", params=dict(zip(names, map(float, coef))), num_points=len(pts),
                   median_abs_error_frac=float(np.median(err)), max_abs_error_frac=float(np.max(err)))


def fit_parts(profile: EngineProfile) -> dict[str, PartFit]:
    """The fitted form of every part the profile's points measured.

    Raises:
        ValueError: a part whose times give no finite fit (times of a few 1e-300 us, say), named.
    """
    import warnings

    fitters = _part_fitters(profile)
    fits: dict[str, PartFit] = {}
    for name, fitter in fitters.items():
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore", RuntimeWarning)
                fit = fitter()
        except (ValueError, FloatingPointError, ZeroDivisionError) as e:
            raise ValueError(f"{name}: the measured times give no finite fit ({e}); they are not an engine's "
                             "times (microseconds per step)") from None
        if fit is not None:
            fits[name] = fit
    return fits


def _part_fitters(profile: EngineProfile) -> dict:
    """Each part's fit, not yet run (fit_parts runs them)."""
    pts = profile.points
    return {
        "target_forward_us": lambda: _fit_family(_rows(pts, "target_forward_us", profile), ["decode_us", "verify_us"],
                                                 with_kv=True, with_multi=True, moe_target=profile.target),
        "draft_us": lambda: _fit_family(_rows(pts, "draft_extend_us", profile) + _rows(pts, "draft_step_us", profile),
                                        ["extend_us", "step_us"], with_kv=True, with_multi=False),
        "sample_us": lambda: _fit_family(_rows(pts, "sample_us", profile), ["base_us", "spec_us"], with_kv=False,
                                         with_multi=False),
        "propose_overhead_us": lambda: _fit_linear([p.model_copy(update={"propose_us": max(0.0, p.propose_us - (
            p.draft_extend_us or 0.0) - (p.draft_steps_us or 0.0))}) for p in pts
            if p.propose_us is not None and p.gpu_bound is not False], "propose_us", True),
        "other_gpu_us": lambda: _fit_linear([p for p in pts if p.gpu_bound], "other_gpu_us", True),
        "other_gpu_us_baseline": lambda: _fit_linear([p for p in pts if p.gpu_bound], "other_gpu_us", False),
        "host_busy_us": lambda: _fit_linear(pts, "host_busy_us", True),
        "host_busy_us_baseline": lambda: _fit_linear(pts, "host_busy_us", False),
    }
