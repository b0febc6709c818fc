"""A host of another speed than an engine profile's (issue 46): the ratio of the scenario's host probe
(serving_engine.host_probe_us) to the profile's (EngineProfile.host_probe_us), which
simulator.costs.engine_native.NativeCosts scales the host's share of a step by (docs/engines/host-speed.md)."""

from __future__ import annotations

from simulator.engines.profile import EngineProfile


def host_speed_ratio(profile: EngineProfile, scenario, notes: set[str], paces_gpu: bool = False) -> float:
    """The scenario's host probe over the profile's (serving_engine.host_probe_us, EngineProfile.host_probe_us):
    how much longer the host's Python work takes on the box priced; 1 where either is not known (a note says
    which). `paces_gpu`: the host paces the speculative step's GPU period too (NativeCosts.host_paces_gpu)."""
    kind, want = scenario.serving_engine.kind, getattr(scenario.serving_engine, "host_probe_us", None)
    if want is None:
        return 1.0
    if profile.host_probe_us is None:
        notes.add(f"{kind}: the host as measured: engine profile {profile.name} recorded no host probe to scale "
                  f"serving_engine.host_probe_us {want:,.0f} us against")
        return 1.0
    ratio = want / profile.host_probe_us
    paced = " and the gaps it leaves in the speculative step's draft loop" if paces_gpu else ""
    kept = "; the prefill's fit kept as measured (its host share not separated)" if profile.prefill else ""
    notes.add(f"{kind}: the host's work{paced} scaled by {ratio:.3f}: serving_engine.host_probe_us {want:,.1f} us "
              f"against the {profile.host_probe_us:,.1f} us engine profile {profile.name} stepped at{kept}")
    return ratio


def note_host_probe_unused(scenario, native, notes: set[str]) -> None:
    """A note where the scenario names its host's speed and no engine profile prices it (`native` None): the
    field scales an engine profile's host work only."""
    if native is None and getattr(scenario.serving_engine, "host_probe_us", None) is not None:
        notes.add(f"{scenario.serving_engine.kind}: serving_engine.host_probe_us not used: it scales an engine "
                  "profile's host work, and no engine profile prices this scenario (the op tables' host times are "
                  "host_cycle_us, host_decode_step_us or the profile's)")


OP_TABLE_KNOBS = ("kernel_efficiency", "host_cycle_us", "host_decode_step_us", "host_draft_step_us",
                  "d2h_syncs_per_cycle", "cuda_graph_max_bs")  # simulator.costs.forward's alone


def note_op_table_knobs_unused(scenario, native, notes: set[str]) -> None:
    """A note where an engine profile prices the scenario (`native`) and the scenario sets serving-engine fields only
    the op tables read (OP_TABLE_KNOBS): the profile's measured parts stand in their place."""
    given = [k for k in OP_TABLE_KNOBS if k in scenario.serving_engine.model_fields_set]
    if native is not None and given:
        notes.add(f"{scenario.serving_engine.kind}: serving_engine.{', serving_engine.'.join(given)} not used: the "
                  f"engine profile {native.profile.name} prices every part as measured (these set the op tables' "
                  "prices)")
