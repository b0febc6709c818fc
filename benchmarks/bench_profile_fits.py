"""Every shipped engine profile's fitted forms against the profile's own points: the median of fitted / measured
over the points each form is fitted on (simulator.engines.forms.check_fits holds each within 2x), and its median
|error|; the forms below 0.5x are marked.

    python benchmarks/bench_profile_fits.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.engines import forms  # noqa: E402
from simulator.engines.profile import load_engine_profile  # noqa: E402
from simulator.profile import data_dir  # noqa: E402


def fitted_and_measured(profile, name: str, fit) -> tuple[np.ndarray, np.ndarray] | None:
    """The form's price and the measured us at each point it is fitted on (None: no such point)."""
    if fit.form == "linear":
        rows = forms.linear_rows(profile.points, name)
        if not rows:
            return None
        b, k, y = (np.array([r[i] for r in rows], float) for i in range(3))
        return forms.linear_priced(fit.params, b, k), y
    rows = [r for part in forms.ROOFLINE_ROWS.get(name, ()) for r in forms.part_rows(profile, part) if r[4] in fit.params]
    if not rows:
        return None
    t, b, c, y, off, n = (np.array([r[i] for r in rows], dtype=object if i == 4 else float) for i in range(6))
    touched = forms.experts_touched_frac(profile.target, n) if "experts_us" in fit.params else None
    return forms.priced(fit.params, t, b, c, off, touched, name == "target_forward_us"), y


def main() -> None:
    print("| engine profile | fit | form | points | fitted / measured, median | median abs error | below 0.5x |")
    print("|---|---|---|---:|---:|---:|---|")
    for path in sorted((data_dir() / "engine_profiles").glob("*.json")):
        prof = load_engine_profile(path)
        for name, fit in sorted(prof.fits.items()):
            got = fitted_and_measured(prof, name, fit)
            if got is None:
                continue
            pred, y = got
            r = float(np.median(pred / y))
            print(f"| {path.stem} | {name} | {fit.form} | {len(y)} | {r:.3f} | "
                  f"{100 * float(np.median(np.abs(pred / y - 1))):.1f}% | {'yes' if r < 0.5 else ''} |")


if __name__ == "__main__":
    main()
