"""The fitted forms of an engine-native profile's parts (simulator.engines.profile's docstring says
which): scipy least squares on relative errors, rooflines for the forwards and the sampler,
non-negative least squares for the small linear parts."""

from __future__ import annotations

import numpy as np

from simulator.engines.forms import experts_touched_frac, linear_priced, linear_rows, part_rows, priced
from simulator.engines.profile import EnginePoint, EngineProfile, PartFit


def _fit_family(rows, offsets: list[str], with_kv: bool, with_multi: bool,
                moe_target: dict | None = None) -> PartFit | None:
    """The roofline form (simulator.engines.forms) of `rows` (simulator.engines.forms.part_rows); with `moe_target`
    (an MoE target's shape fields) its weights term grows with the experts the rows' real tokens touch
    (`experts_us`)."""
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


RELATIVE_TO_FORM = ("other_gpu_us", "other_gpu_us_baseline")  # linear fits on residuals relative to their own price


def _fit_linear(points: list[EnginePoint], fit_name: str) -> PartFit | None:
    """part ~ c0 + c_batch b (+ c_batch_steps b num_steps) over simulator.engines.forms.linear_rows: non-negative
    least squares on residuals relative to the measured times; the step's other GPU work (RELATIVE_TO_FORM) on
    residuals relative to the form's own price (iteratively reweighted): it is the GPU period less its timed parts, a difference that
    scatters widely and is 0 at some points (SGLang), where residuals relative to the measured times pull the form
    to 0 (the SGLang H200 profiles' sat at 0.001-0.1x their points at the median before)."""
    from scipy.optimize import nnls

    rows = linear_rows(points, fit_name)
    if not rows:
        return None
    b, k, y = (np.array([r[i] for r in rows], float) for i in range(3))
    cols = [np.ones(len(rows)), b] + ([b * k] if not fit_name.endswith("_baseline") else [])
    names = ["c0_us", "per_request_us", "per_draft_token_us"][:len(cols)]
    names, cols = names[:max(1, min(len(names), len(rows)))], cols[:max(1, min(len(cols), len(rows)))]
    a = np.stack(cols, axis=1)
    if fit_name in RELATIVE_TO_FORM:
        coef, _ = nnls(a, y)
        for _ in range(100):
            w = np.maximum(a @ coef, 1.0)
            nxt, _ = nnls(a / w[:, None], y / w)
            if np.allclose(nxt, coef, rtol=1e-10, atol=1e-9):
                break
            coef = nxt
    else:
        coef, _ = nnls(a / y[:, None], np.ones(len(rows)))
    params = dict(zip(names, map(float, coef)))
    err = np.abs(linear_priced(params, b, k) / y - 1.0)
    return PartFit(form="linear", params=params, num_points=len(rows),
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
        "target_forward_us": lambda: _fit_family(part_rows(profile, "target_forward_us"), ["decode_us", "verify_us"],
                                                 with_kv=True, with_multi=True, moe_target=profile.target),
        "draft_us": lambda: _fit_family(part_rows(profile, "draft_extend_us") + part_rows(profile, "draft_step_us"),
                                        ["extend_us", "step_us"], with_kv=True, with_multi=False),
        "sample_us": lambda: _fit_family(part_rows(profile, "sample_us"), ["base_us", "spec_us"], with_kv=False,
                                         with_multi=False),
        **{name: (lambda name=name: _fit_linear(pts, name)) for name in (
            "propose_overhead_us", "other_gpu_us", "other_gpu_us_baseline", "host_busy_us", "host_busy_us_baseline")},
    }
