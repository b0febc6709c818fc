"""The campaign files: one device session's queue of engine processes each, `<queue name>.yaml`
(expanded to ProcessPlans by calibration.engines.queue; shipped as package data)."""

from __future__ import annotations

from pathlib import Path

CAMPAIGNS_DIR = Path(__file__).parent


def campaign_names() -> list[str]:
    """The queues there are: the campaign files' names."""
    return sorted(f.stem for f in CAMPAIGNS_DIR.glob("*.yaml"))
