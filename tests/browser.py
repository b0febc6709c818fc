"""A page as a person sees it: headless Chromium (driven by playwright, the `browser` extra) opens an
HTML file, waits for its plotly charts, reports what each drew, every console error and every
request, and keeps a screenshot. Used by tests/test_dashboard_browser.py and
docs/make_dashboard_screenshot.py.

The browser is the system's Chromium (Debian: `apt-get install chromium`, /usr/bin/chromium; .ci/run
installs it), never a download of playwright's own: `find_chromium` says where it is, or None.
"""

from __future__ import annotations

import os
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path

# What works headless on a machine without a display, a GPU or a network; playwright adds --headless
# and a fresh profile folder (its own --user-data-dir) per launch.
CHROMIUM_FLAGS = ("--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync")
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

# Per plotly div: whether plotly laid it out, its svg layers, traces asked for and drawn, its size.
_CHARTS_JS = """() => [...document.querySelectorAll('div.plotly-graph-div')].map(d => {
  const box = d.getBoundingClientRect();
  return {id: d.id, laid_out: !!d._fullLayout, svgs: d.querySelectorAll('svg.main-svg').length,
          traces: (d.data || []).length, drawn: d.querySelectorAll('g.trace, g.hm').length,
          width: box.width, height: box.height};
})"""
_ALL_LAID_OUT_JS = """() => [...document.querySelectorAll('div.plotly-graph-div')]
  .every(d => d._fullLayout && d.querySelector('svg.main-svg'))"""


def find_chromium() -> str | None:
    """The Chromium to drive: BROWSER_PATH (as kaleido reads it) where that is a file, else the first
    of CHROMIUM_NAMES on PATH; None where there is none."""
    if (p := os.environ.get("BROWSER_PATH")) and Path(p).is_file():
        return p
    return next((p for n in CHROMIUM_NAMES if (p := shutil.which(n))), None)


@dataclass
class PageLook:
    """What Chromium showed of a page (`look_at_page`)."""
    title: str
    charts: list[dict]  # per plotly div, in page order (_CHARTS_JS's keys)
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    requests: list[str] = field(default_factory=list)  # every URL the page loaded, the page's own first
    timed_out: bool = False  # the charts were not all laid out in time

    def undrawn(self) -> list[str]:
        """The charts not drawn as asked: not laid out, no svg, no trace drawn, fewer drawn than asked,
        or no size on the page (each as 'id: why')."""
        bad = []
        for c in self.charts:
            why = ("not laid out" if not c["laid_out"] else "no svg" if not c["svgs"] else
                   "no trace" if not c["traces"] else f"{c['drawn']} of {c['traces']} traces drawn"
                   if c["drawn"] < c["traces"] else "no size" if c["width"] < 100 or c["height"] < 100 else None)
            if why:
                bad.append(f"{c['id']}: {why}")
        return bad


def look_at_page(page: Path, chromium: str, screenshot: Path | None = None, width: int = 1200,
                 height: int = 900, full_page: bool = True, timeout_s: float = 60.0) -> PageLook:
    """Open `page` (a file) in headless `chromium`, wait until every plotly chart is laid out (at most
    `timeout_s`), and report it; `screenshot`: a PNG of the page (`full_page`) or its first screen."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright
    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=list(CHROMIUM_FLAGS))
        try:
            tab = browser.new_page(viewport={"width": width, "height": height})
            tab.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            tab.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
            tab.on("request", lambda r: requests.append(r.url))
            tab.goto(Path(page).resolve().as_uri(), wait_until="load", timeout=timeout_s * 1000)
            timed_out = False
            try:
                tab.wait_for_function(_ALL_LAID_OUT_JS, timeout=timeout_s * 1000)
            except PlaywrightTimeout:
                timed_out = True
            look = PageLook(tab.title(), tab.evaluate(_CHARTS_JS), errors, requests, timed_out)
            if screenshot is not None:
                tab.screenshot(path=str(screenshot), full_page=full_page)
        finally:
            browser.close()
    return look


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) of a PNG file, from its header.

    Raises:
        ValueError: not a PNG.
    """
    head = Path(path).read_bytes()[:24]
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise ValueError(f"{path}: not a PNG")
    return struct.unpack(">II", head[16:24])
