"""docs/dashboard.png: the dashboard of `specdecsim plot` as headless Chromium shows it (issue 49).

    python docs/make_dashboard_screenshot.py

Sweeps scenarios/tp1_draft.yaml (Llama-3.1-70B TP8 on the h200 profile: num_steps 1..3, acceptance
0.5/0.7/0.9, the draft sharded or whole on one GPU; closed form), draws its page in a temporary folder
and writes a screenshot of the whole page (1200 px wide) to docs/dashboard.png; prints what each chart
drew and fails where one did not draw or the console showed an error. Needs Chromium (Debian:
apt-get install chromium) and the `browser` extra (tests/browser.py drives it).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.studies.plots import plot_sweep  # noqa: E402
from simulator.studies.sweep import run_sweep  # noqa: E402
from tests.browser import find_chromium, look_at_page, png_size  # noqa: E402

GRIDS = ["spec.num_steps=1..3", "acceptance.acceptance_rate=0.5,0.7,0.9", "placement=shared_tp,tp1_colocated"]
OUT = ROOT / "docs" / "dashboard.png"


def main() -> int:
    chromium = find_chromium()
    if chromium is None:
        print("no Chromium or Chrome on PATH (Debian: apt-get install chromium; BROWSER_PATH names one)")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        sweep = Path(tmp) / "sweep"
        run_sweep(ROOT / "scenarios" / "tp1_draft.yaml", GRIDS, out_dir=sweep, des_sample=0, progress=False)
        index = plot_sweep(sweep, Path(tmp) / "figs", png=False)
        text = index.read_text()  # the summary line names this machine's folders: the repo's paths instead
        index.write_text(text.replace(str(sweep / "sweep.csv"), "sweep.csv").replace(f"{ROOT}/", ""))
        look = look_at_page(index, chromium, screenshot=OUT)
    for c in look.charts:
        print(f"{c['id']}: {c['drawn']} of {c['traces']} traces drawn, {c['width']:.0f}x{c['height']:.0f} px")
    print(f"wrote {OUT.relative_to(ROOT)}: {'x'.join(map(str, png_size(OUT)))} px, {OUT.stat().st_size:,} bytes")
    bad = look.undrawn() + look.errors + (["timed out"] if look.timed_out else [])
    for b in bad:
        print(f"not as it should be: {b}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
