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


def main() -> None:
    print("| engine profile | fit | form | points | fitted / measured, median | median abs error | below 0.5x |")
    print("|---|---|---|---:|---:|---:|---|")
    for path in sorted((data_dir() / "engine_profiles").glob("*.json")):
        prof = load_engine_profile(path)
        for name, fit in sorted(prof.fits.items()):
            got = forms.fitted_and_measured(prof, name, fit)
            if got is None:
                continue
            pred, y = got
            r = float(np.median(pred / y))
            print(f"| {path.stem} | {name} | {fit.form} | {len(y)} | {r:.3f} | "
                  f"{100 * float(np.median(np.abs(pred / y - 1))):.1f}% | {'yes' if r < 0.5 else ''} |")


if __name__ == "__main__":
    main()
