"""What an engine-native profile measured, in words: the one line a sweep or search over a
scenario that names one prints."""

from __future__ import annotations

from simulator.engines.native import load_engine_profile


def study_note(scenario) -> str | None:
    """One line for a sweep or search over a scenario that names an engine profile: what the
    profile measured, and what prices the other points (`simulate` on a point names which)."""
    ref = getattr(scenario.serving_engine, "engine_profile", None)
    if not ref:
        return None
    prof = load_engine_profile(ref)
    ks = sorted({p.num_steps for p in prof.points if p.num_steps})
    bs = sorted({p.batch_size for p in prof.points})
    cs = [p.context_len for p in prof.points]
    return (f"engine profile {prof.name} ({prof.engine} {prof.engine_version}) measured num_steps "
            f"{', '.join(map(str, ks))}, batch {', '.join(map(str, bs))}, contexts {min(cs):,.0f}-{max(cs):,.0f}, "
            f"tp {prof.tp_size}: points between them use its fitted forms, points of another target, draft, TP "
            "size or GPU the engine model from the op tables (`specdecsim simulate` on a point says which)")
