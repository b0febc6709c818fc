"""What an engine-native profile measured, in words: the lines a sweep or search over a scenario
that names one prints (the caller reads the profile once and passes it)."""

from __future__ import annotations

from simulator.engines.profile import EngineProfile, capture_sizes_for, full_graph_verify


def study_note(prof: EngineProfile) -> str:
    """One line for a sweep or search over a scenario that names the engine profile `prof`: what the
    profile measured, and what prices the other points (`simulate` on a point names which)."""
    ks = sorted({p.num_steps for p in prof.points if p.num_steps})
    bs = sorted({p.batch_size for p in prof.points})
    cs = [p.context_len for p in prof.points]
    return (f"engine profile {prof.name} ({prof.engine} {prof.engine_version}) measured num_steps "
            f"{', '.join(map(str, ks))}, batch {', '.join(map(str, bs))}, contexts {min(cs):,.0f}-{max(cs):,.0f}, "
            f"tp {prof.tp_size}: points between them use its fitted forms, points of another target, draft, TP "
            "size or GPU the engine model from the op tables (`specdecsim simulate` on a point says which)")


def graph_gap_note(scenario, prof: EngineProfile, cells) -> str | None:
    """One line for a sweep or search over a vLLM scenario with the engine profile `prof`: the (batch,
    num_steps) cells whose verify gets no full CUDA graph at the capture sizes it runs with (the
    scenario's `cudagraph_capture_sizes`, else the profile's): there vLLM runs piecewise graphs and the
    host paces the step, which moved about 2x between processes where measured; None where no cell does."""
    if scenario.serving_engine.kind != "vllm" or prof.engine != "vllm":
        return None
    sizes = getattr(scenario.serving_engine, "cudagraph_capture_sizes", None)
    gaps = []
    for b, k in sorted(set(cells)):
        captured = capture_sizes_for(prof, sizes, k) if sizes is not None else prof.cudagraph_capture_sizes
        if k and captured and b * (k + 1) <= captured[-1] and \
                not full_graph_verify(b, k, captured, prof.max_num_seqs):
            gaps.append((b, k))
    if not gaps:
        return None
    shown = ", ".join(f"batch {b} num_steps {k}" for b, k in gaps[:6]) + (f" and {len(gaps) - 6} more" if len(gaps) > 6
                                                                          else "")
    fix = "" if sizes is not None else ("; `--set serving_engine.cudagraph_capture_sizes=rounded_to_query` prices "
                                        "the capture sizes that give every verify a full graph")
    return (f"vllm: {len(gaps)} swept cell(s) get no full CUDA graph for the verify ({shown}): vLLM runs them "
            f"piecewise and host-bound, and their step moved about 2x between processes where measured{fix}")
