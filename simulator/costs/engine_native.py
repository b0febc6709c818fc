"""Prices from an engine-native profile (simulator.engines.profile): the parts of one engine step
at (batch_size, num_steps, context_len), for the cost model where a scenario's
`serving_engine.engine_profile` names a profile that prices it as measured.

`NativeCosts` prices a part from the measured points of that batch and num_steps (linear in the
context between them, or along the fitted slope from one), else from the profile's fitted form
(simulator.engines.profile's docstring). `profile_mismatch` says why a profile cannot price a
scenario as measured; `native_costs` gives the scenario's NativeCosts and its notes. Where the
scenario's `hardware` names another catalog GPU than the profile's, the GPU parts are carried to it
(simulator.costs.engine_carry; `carried_to`).

Profiles are found by what was asked: where the scenario's named profile cannot price it (a tree asked of
a chain's profile, say) and a shipped one (data/engine_profiles/) can, that one prices it (`shipped_match`:
the same engine, GPU, target and draft shapes compared by value, TP and draft placement, draft method and
topology topk / num_draft_tokens, overlap scheduling), and a note names both; where the scenario names
none, a note names the shipped one that would price it and the field that uses it.
"""

from __future__ import annotations

import bisect
from functools import cached_property

import numpy as np

from simulator.costs.engine_carry import EngineCarry, carry_notes, effective_shape, engine_carry_for, measured_shapes
from simulator.engines.forms import experts_touched_frac, linear_priced, roofline, verify_tokens
from simulator.engines.profile import (EnginePoint, EngineProfile, full_graph_verify, outside_measured,
                                       placement_label, with_capture_sizes)


HOST_HOLDS_WAIT_FRAC = 0.95  # host busy / step of a GPU-bound step at or above this: the host waited for the GPU


class NativeCosts:
    """The parts of one engine step at (batch_size, num_steps, context_len), us (module docstring).

    Attributes:
        chosen: the shipped profile's name where one the scenario did not name prices it (`shipped_match`),
            else None (the scenario's own).
        carry: where the scenario's GPU is another: the parts carried to it (engine_carry), else None.
    """

    def __init__(self, profile: EngineProfile, chosen: str | None = None, carry: EngineCarry | None = None,
                 host_ratio: float = 1.0):
        self.profile = profile
        self.chosen = chosen
        self.carry = carry
        self.host_ratio = host_ratio  # the priced host's probe over the profile's (host_speed_ratio)
        self.sources: set[str] = set()  # 'measured' / 'fitted' per part priced, for the notes

    @property
    def collectives_measured(self) -> bool:
        """The TP group's collectives are in the parts as priced: measured with them, and not carried to
        another TP size (whose collectives the box's links price: simulator.costs.forward)."""
        return self.profile.collectives_measured and not (self.carry is not None and self.carry.tp_carried)

    def _carried(self, part: str, us: float, batch_size: int, num_steps: int, context_len: float,
                 tokens: int) -> float:
        """A part priced on the profile's GPU, carried to the scenario's where it is another."""
        if self.carry is None:
            return us
        return us * self.carry.ratio(part, batch_size, num_steps, context_len, tokens)

    def _usable(self, p: EnginePoint, value_of, gpu: bool) -> bool:
        return value_of(p) is not None and not (gpu and p.gpu_bound is False)

    def _measured(self, value_of, batch_size: int, num_steps: int, context_len: float,
                  gpu: bool = True) -> float | None:
        pts = [p for p in self.profile.points
               if p.batch_size == batch_size and p.num_steps == num_steps and self._usable(p, value_of, gpu)]
        if not pts:
            return None
        by_prompt: dict[int, list[EnginePoint]] = {}
        for p in pts:
            by_prompt.setdefault(p.prompt_len, []).append(p)
        groups = sorted((float(np.mean([p.context_len for p in g])), float(np.mean([value_of(p) for p in g])))
                        for g in by_prompt.values())
        cs, vs = [c for c, _ in groups], [v for _, v in groups]
        if len(cs) == 1:
            return vs[0]
        i = min(max(bisect.bisect_left(cs, context_len), 1), len(cs) - 1)  # extrapolate along the end segment
        c0, c1, v0, v1 = cs[i - 1], cs[i], vs[i - 1], vs[i]
        return max(0.0, v0 + (v1 - v0) * (context_len - c0) / (c1 - c0))

    def _price(self, label: str, value_of, fitted, batch_size: int, num_steps: int, context_len: float,
               gpu: bool = True) -> float:
        """A part from the measured points of this batch and num_steps (GPU parts: GPU-bound points
        only), else from its fitted form."""
        m = self._measured(value_of, batch_size, num_steps, context_len, gpu)
        if m is not None:
            pts = [p for p in self.profile.points if p.batch_size == batch_size and p.num_steps == num_steps
                   and self._usable(p, value_of, gpu)]
            if len({p.prompt_len for p in pts}) == 1 and fitted is not None:
                c0 = float(np.mean([p.context_len for p in pts]))
                m += fitted(context_len) - fitted(c0)  # the fitted form's context slope
            self.sources.add(f"{label}: measured")
            return max(0.0, m)
        if fitted is None:
            raise KeyError(f"engine profile {self.profile.name!r} has no {label} measurement or fit")
        self.sources.add(f"{label}: fitted")
        return max(0.0, float(fitted(context_len)))

    def _roof(self, fit_name: str, offset: str, tokens: int, batch_size: int, multi: bool = True):
        fit = self.profile.fits.get(fit_name)
        if fit is None or offset not in fit.params:
            return None
        t = self.profile.padded_tokens(tokens, batch_size)
        touched = experts_touched_frac(self.profile.target, tokens) if "experts_us" in fit.params else None
        return lambda c: float(roofline(fit.params, t, batch_size, c, offset, multi_token=multi, touched=touched))

    def _lin(self, fit_name: str, batch_size: int, num_steps: int):
        fit = self.profile.fits.get(fit_name)
        if fit is None:
            return None
        v = linear_priced(fit.params, batch_size, num_steps)
        return lambda c: v

    def verify_tokens(self, num_steps: int) -> int:
        """Tokens per request the target's forward runs at num_steps (1 for the baseline decode)."""
        return verify_tokens(self.profile, num_steps)

    def target_forward_us(self, batch_size: int, num_steps: int, context_len: float) -> float:
        off = "decode_us" if num_steps == 0 else "verify_us"
        tokens = batch_size * self.verify_tokens(num_steps)
        us = self._price("target forward", lambda p: p.target_forward_us,
                         self._roof("target_forward_us", off, tokens, batch_size), batch_size, num_steps, context_len)
        return self._carried("target_forward", us, batch_size, num_steps, context_len,
                             self.profile.padded_tokens(tokens, batch_size))

    def sample_us(self, batch_size: int, num_steps: int, context_len: float) -> float:
        off = "base_us" if num_steps == 0 else "spec_us"
        us = self._price("sampling", lambda p: p.sample_us,
                         self._roof("sample_us", off, batch_size * (num_steps + 1), batch_size, multi=False),
                         batch_size, num_steps, 0.0)
        return self._carried("sample", us, batch_size, num_steps, context_len,
                             batch_size * self.verify_tokens(num_steps))

    def draft_extend_us(self, batch_size: int, num_steps: int, context_len: float) -> float:
        us = self._price("draft extend", lambda p: p.draft_extend_us,
                         self._roof("draft_us", "extend_us", batch_size * (num_steps + 1), batch_size, multi=False),
                         batch_size, num_steps, context_len)
        return self._carried("draft_extend", us, batch_size, num_steps, context_len,
                             self.profile.padded_tokens(batch_size * (num_steps + 1), batch_size))

    def draft_step_us(self, batch_size: int, num_steps: int, context_len: float) -> float:
        """One draft forward after the first (num_steps >= 2); on a host of another speed, where the host paces
        the draft loop (`host_paces_gpu`), its fixed share scaled by `host_ratio`."""
        us = self._price("draft step", lambda p: p.draft_steps_us / (p.num_steps - 1) if p.draft_steps_us
                         and p.num_steps >= 2 else None,
                         self._roof("draft_us", "step_us", batch_size * self.profile.topk, batch_size, multi=False),
                         batch_size, num_steps, context_len)
        us = self._carried("draft_step", us, batch_size, num_steps, context_len,
                           self.profile.padded_tokens(batch_size * self.profile.topk, batch_size))
        if self.host_ratio != 1.0 and self.host_paces_gpu and (fixed := self.draft_step_fixed_us) is not None:
            us = max(0.0, us + (self.host_ratio - 1.0) * fixed)
        return us

    @cached_property
    def host_paces_gpu(self) -> bool:
        """Whether the host's speed moves the GPU period of a speculative step: a profile whose host measure
        holds the wait for the GPU (`spec_host_holds_gpu_wait`, SGLang's overlapped EAGLE worker), whose draft
        loop's launches and the gaps between the step's phases are the scheduler's Python (two H100 hosts,
        docs/engines/host-speed.md: the draft steps' fixed share and the other GPU work moved with the host, the
        target's forward, the draft extend and the sampler did not)."""
        return self.spec_host_holds_gpu_wait

    @cached_property
    def draft_step_fixed_us(self) -> float | None:
        """The draft step's fixed share (engine_carry.PartSplit: what neither the bandwidth nor the FLOPs
        explain), us, on the scenario's shapes; None where it is not split (no catalog GPU, no draft steps)."""
        carry = self.carry
        if carry is None and self.profile.catalog_gpu:
            from simulator.costs.engine_carry import engine_carry_for
            carry = engine_carry_for(self.profile, self.profile.catalog_gpu)
        split = carry.splits.get("draft_step") if carry is not None else None
        if split is None:
            return None
        return split.fixed_us * (carry.fixed_scale("draft_step") if carry.shape_carried else 1.0)

    def propose_overhead_us(self, batch_size: int, num_steps: int, context_len: float) -> float:
        """The draft phase's own small kernels (hidden-state fc, input preparation)."""
        def rest(p):
            if p.propose_us is None:
                return None
            return max(0.0, p.propose_us - (p.draft_extend_us or 0.0) - (p.draft_steps_us or 0.0))
        return self._price("draft overhead", rest, self._lin("propose_overhead_us", batch_size, num_steps),
                           batch_size, num_steps, context_len)

    def other_gpu_us(self, batch_size: int, num_steps: int, context_len: float) -> float:
        """The GPU's step less its timed parts; none where no GPU-bound point measured it (a
        host-bound engine's GPU period holds its idle gaps, not work)."""
        name = "other_gpu_us" if num_steps else "other_gpu_us_baseline"
        fitted = self._lin(name, batch_size, num_steps)
        if fitted is None and self._measured(lambda p: p.other_gpu_us if p.gpu_bound else None, batch_size, num_steps,
                                             context_len) is None:
            self.sources.add("other GPU work: none (no GPU-bound point measured it)")
            return 0.0
        us = self._price("other GPU work", lambda p: p.other_gpu_us if p.gpu_bound else None,
                         fitted, batch_size, num_steps, context_len)
        return us * self.host_ratio if num_steps and self.host_paces_gpu else us

    def draft_loop_host_us(self, batch_size: int, num_steps: int, context_len: float) -> float:
        """Where the host paces the speculative step (`host_paces_gpu`): its share of the GPU period as measured, the
        draft steps' fixed shares and the other GPU work (gaps between launches: host work too); 0 elsewhere."""
        if not (num_steps and self.host_paces_gpu):
            return 0.0
        fixed = self.draft_step_fixed_us or 0.0
        return (num_steps - 1) * fixed + self.other_gpu_us(batch_size, num_steps, context_len) / self.host_ratio

    def host_us(self, batch_size: int, num_steps: int, context_len: float) -> float:
        """The host's work of a step. Where the profile's speculative host measure holds the wait for the GPU
        (`spec_host_holds_gpu_wait`: SGLang's overlapped EAGLE worker, busy through the whole GPU-bound step) it is
        the measured step, not a floor for another: carried (another GPU, shape or TP size), at a num_steps not
        measured (the fitted form would stretch the step: 2.6 ms of host at num_steps 5 from an H100 profile of 3,
        the engine's step 2.7 ms shorter), or on a host of another speed, the baseline's host work at this batch
        is taken instead (a lower bound). So too where no speculative step measured its host (no `host_busy_us`
        fit: vLLM's V1 runner times it only where the host paced the step). On another host the work is scaled by
        `host_ratio` and holds the draft loop's host-paced share (`draft_loop_host_us`)."""
        value = lambda p: p.host_busy_us if p.host_busy_us is not None else p.host_pace_us  # noqa: E731
        unmeasured = num_steps and "host_busy_us" not in self.profile.fits
        if unmeasured or num_steps and self.spec_host_holds_gpu_wait and (
                self.carry is not None or num_steps not in self.measured_num_steps or self.host_ratio != 1.0):
            self.sources.add("host work: the baseline's (" + (
                "no speculative step measured its host's work: each was GPU-bound" if unmeasured else
                "the speculative steps' host measure holds the wait for the GPU") + ")")
            us = self._price("host work", value, self._lin("host_busy_us_baseline", batch_size, 0),
                             batch_size, 0, context_len, gpu=False)
            if self.host_ratio != 1.0:  # at the profile's own host the launches sit inside the GPU period as measured
                us += self.draft_loop_host_us(batch_size, num_steps, context_len)
        else:
            name = "host_busy_us" if num_steps else "host_busy_us_baseline"
            us = self._price("host work", value, self._lin(name, batch_size, num_steps),
                             batch_size, num_steps, context_len, gpu=False)
        return us * self.host_ratio

    @cached_property
    def measured_num_steps(self) -> frozenset[int]:
        """The num_steps the profile's points measured (0: the baseline)."""
        return frozenset(p.num_steps for p in self.profile.points)

    @cached_property
    def spec_host_holds_gpu_wait(self) -> bool:
        """Whether the profile's GPU-bound speculative points measured a host busy through the whole step (the
        median of host busy / step at least HOST_HOLDS_WAIT_FRAC): the host measure holds the wait for the GPU."""
        ratios = [p.host_busy_us / p.step_us for p in self.profile.points
                  if p.num_steps and p.gpu_bound and p.host_busy_us is not None and p.step_us]
        return bool(ratios) and float(np.median(ratios)) >= HOST_HOLDS_WAIT_FRAC

    def step_us(self, batch_size: int, num_steps: int, context_len: float) -> tuple[float, float]:
        """(GPU, host) us of one engine step: the cycle (or decode step) takes the longer."""
        gpu = self.target_forward_us(batch_size, num_steps, context_len) \
            + self.sample_us(batch_size, num_steps, context_len) + self.other_gpu_us(batch_size, num_steps, context_len)
        if num_steps:
            gpu += self.draft_extend_us(batch_size, num_steps, context_len) \
                + self.propose_overhead_us(batch_size, num_steps, context_len)
            if num_steps >= 2:
                gpu += (num_steps - 1) * self.draft_step_us(batch_size, num_steps, context_len)
        return gpu, self.host_us(batch_size, num_steps, context_len)


def _same_shape(measured: dict | None, shape) -> bool:
    from simulator.model_shape import ModelShape

    if measured is None or shape is None:
        return measured is None and shape is None
    return effective_shape(ModelShape.model_validate({**measured, "name": shape.name})) == effective_shape(shape)


def layer_family(shape) -> str:
    """The family of layers a shape's forward is built of: what a profile of one shape may price another
    of (simulator.costs.engine_carry): dense or MoE MLPs, GQA or MLA attention."""
    return f"{'MoE' if shape.is_moe else 'dense'} {'MLA' if shape.is_mla else 'GQA'}"


def shape_carry_mismatch(profile: EngineProfile, scenario) -> str | None:
    """Why the profile's target and draft cannot be carried to the scenario's (another family of layers,
    a draft on one side only, a profile of no catalog GPU), or None: they can (or are the same)."""
    if _same_shape(profile.target, scenario.target) and _same_shape(profile.draft, scenario.draft):
        return None
    if not profile.catalog_gpu:
        return "its target or draft is another shape, and it names no catalog GPU to carry them on"
    measured, measured_draft = measured_shapes(profile)
    if layer_family(measured) != layer_family(scenario.target):
        return (f"its target ({layer_family(measured)}) is of another family of layers than {scenario.target.name} "
                f"({layer_family(scenario.target)})")
    if (profile.draft is None) != (scenario.draft is None):
        return f"its draft is another shape than {scenario.draft.name if scenario.draft else 'none'}"
    if measured_draft is not None and layer_family(measured_draft) != layer_family(scenario.draft):
        return f"its draft is of another family of layers than {scenario.draft.name}"
    return None


def profile_mismatch(profile: EngineProfile, scenario, carry_shapes: bool = False) -> str | None:
    """Why the profile cannot price this scenario as measured (None: it can). With `carry_shapes`, a target
    and draft of other shapes of the same family of layers are no reason (shape_carry_mismatch): the
    profile is carried to them (simulator.costs.engine_carry)."""
    eng = scenario.serving_engine
    if profile.engine not in (eng.kind, "fake"):
        return f"it was measured on {profile.engine}, the scenario's engine is {eng.kind}"
    if carry_shapes:
        if why := shape_carry_mismatch(profile, scenario):
            return why
    elif not _same_shape(profile.target, scenario.target):
        return f"its target is another shape than {scenario.target.name}"
    elif not _same_shape(profile.draft, scenario.draft):
        return f"its draft is another shape than {scenario.draft.name}"
    if scenario.tp_size != profile.tp_size and not (carry_shapes and profile.catalog_gpu):
        return f"it was measured at tp {profile.tp_size}, the scenario runs tp {scenario.tp_size}"
    if not any(p.num_steps for p in profile.points):
        return "it holds no speculative point (a baseline-only calibration): it prices no speculative cycle"
    ran = profile.draft_tp_size or profile.tp_size
    placement = scenario.placement
    if placement.kind.value == "dedicated":
        return ("the engines run the draft on the target's GPUs; the scenario's placement tp1_dedicated puts it on a "
                "GPU of its own")
    if scenario.spec.method != "ngram" and scenario.draft_tp_size != ran and not (carry_shapes and profile.catalog_gpu):
        return (f"its draft ran at tp {ran} (placement {placement_label(profile.tp_size, ran)}), the scenario's "
                f"placement {scenario.placement.label} runs it at tp {scenario.draft_tp_size}")
    spec = scenario.spec
    if spec.method != profile.method:
        return f"it was measured with {profile.method} drafts"
    if spec.topk != profile.topk or (profile.topk > 1 and spec.num_draft_tokens != profile.num_draft_tokens):
        shape = (f"trees of topk {profile.topk}, {profile.num_draft_tokens} draft tokens" if profile.topk > 1
                 else "chains (topk 1)")
        return f"it was measured with {shape}"
    if profile.engine != "fake" and bool(profile.async_scheduling) != bool(scenario.serving_engine.overlapped):
        return (f"it was measured with the engine's overlap scheduling {'on' if profile.async_scheduling else 'off'}, "
                f"the scenario's is {'on' if scenario.serving_engine.overlapped else 'off'}")
    return None


def scenario_gpu(scenario, op_profile=None) -> str | None:
    """The catalog GPU a scenario's `hardware` names (its `gpu`, else its box's), else its op-table
    profile's (`op_profile`) where given; None: the engine profile's own."""
    hw = getattr(scenario, "hardware", None)
    if hw is not None and hw.gpu is not None:
        return hw.gpu
    if hw is not None and hw.box is not None:
        from simulator.hardware import default_catalog
        return default_catalog().box(hw.box).gpu
    return getattr(getattr(op_profile, "hardware", None), "catalog_gpu", None)


def carried_to(profile: EngineProfile, scenario) -> str | None:
    """The catalog GPU the profile is carried to for this scenario (simulator.costs.engine_carry): the
    scenario's, where it names another than the one the profile was measured on; else None."""
    gpu = scenario_gpu(scenario)
    return gpu if gpu and profile.catalog_gpu and gpu != profile.catalog_gpu else None


def shipped_match(scenario, gpu: str | None) -> tuple[str, EngineProfile] | None:
    """(name, profile) of the shipped engine profile that prices this scenario as measured: measured on
    the scenario's engine (no fake engine) and GPU (`gpu`, a catalog id; None: no match), and
    `profile_mismatch` none (shapes by value, TP, placement, method, topk / num_draft_tokens, overlap);
    of several, the one with the most measured points. None where none does."""
    from simulator.engines.profile import ENGINE_PROFILES_DIR, load_engine_profile
    from simulator.profile import data_dir

    kind = scenario.serving_engine.kind
    if gpu is None or kind not in ("vllm", "sglang"):
        return None
    found = []
    for path in sorted((data_dir() / ENGINE_PROFILES_DIR).glob("*.json")):
        prof = load_engine_profile(path)
        if prof.engine == kind and prof.catalog_gpu == gpu and profile_mismatch(prof, scenario) is None:
            found.append((path.stem, prof))
    return max(found, key=lambda f: len(f[1].points)) if found else None


def with_prefill(profile: EngineProfile, scenario, notes: set[str]) -> EngineProfile:
    """The profile with the prefill the serving DES prices (simulator.serving.costs.StepCosts.engine_prefill,
    once a run): its own fits, carried to the scenario's target and draft where they are other shapes of the
    same family of layers (engine_carry.carry_prefill_shape) and to the scenario's GPU where it runs on another
    (engine_carry.carry_prefill); where it measured none, a shipped profile's of the same engine, shapes and
    draft measured on another GPU, carried the same way (the one of the most prefill runs); else, and at
    another TP size, none (the op tables price the prefill)."""
    from simulator.costs.engine_carry import carry_prefill
    from simulator.engines.profile import ENGINE_PROFILES_DIR, load_engine_profile
    from simulator.hardware import default_catalog, gpu_rates
    from simulator.profile import data_dir

    kind, dst = scenario.serving_engine.kind, scenario_gpu(scenario) or profile.catalog_gpu
    if scenario.tp_size != profile.tp_size:
        if profile.prefill:  # a TP carry prices the decode steps; the prefill runs are not carried to a TP size
            notes.add(f"{kind}: the prefill from the op tables: engine profile {profile.name}'s runs of the prefill "
                      f"alone are of another TP size than {scenario.tp_size}")
        return profile.model_copy(update={"prefill": []})
    if not (_same_shape(profile.target, scenario.target) and _same_shape(profile.draft, scenario.draft)):
        if not profile.prefill or shape_carry_mismatch(profile, scenario):
            return profile.model_copy(update={"prefill": []})
        from simulator.costs.engine_carry import carry_prefill_shape
        fits, how = carry_prefill_shape(profile, scenario.target, scenario.draft)
        notes.add(f"{kind}: the prefill from engine profile {profile.name}'s runs of the prefill alone, carried to "
                  f"{scenario.target.name}'s shape by the FLOPs a prompt token and a token pair take ({how})")
        profile = profile.model_copy(update={"prefill": fits})
    source, fits = profile, profile.prefill
    if not fits:
        found = []
        for path in sorted((data_dir() / ENGINE_PROFILES_DIR).glob("*.json")):
            prof = load_engine_profile(path)
            if (prof.engine == profile.engine and prof.prefill and prof.catalog_gpu
                    and profile_mismatch(prof, scenario) is None):
                found.append(prof)
        if not found:
            return profile
        source = max(found, key=lambda p: sum(f.num_runs for f in p.prefill))
        fits = source.prefill
    if not dst or not source.catalog_gpu or dst == source.catalog_gpu:
        carried = fits
    else:
        catalog = default_catalog()
        carried = carry_prefill(fits, gpu_rates(catalog.gpu(source.catalog_gpu)), gpu_rates(catalog.gpu(dst)))
    if source is not profile or carried is not fits:
        notes.add(f"{kind}: the prefill from {'the' if source is profile else 'the shipped'} engine profile "
                  f"{source.name}'s runs of the prefill alone (measured on {source.catalog_gpu}"
                  + (f", carried to {dst} by the dense tensor rates: unchecked there" if carried is not fits else "")
                  + (f"; {profile.name} measured none" if source is not profile else "") + ")")
    return profile.model_copy(update={"prefill": carried})


def _topology(profile: EngineProfile) -> str:
    return (f"trees of topk {profile.topk}, {profile.num_draft_tokens} draft tokens" if profile.topk > 1
            else "chains")


def native_costs(scenario, profile: EngineProfile | None, notes: set[str], op_profile=None) -> NativeCosts | None:
    """`_native_costs`, with a note where the scenario's host probe is left unused (host_speed)."""
    from simulator.costs.host_speed import note_host_probe_unused, note_op_table_knobs_unused
    native = _native_costs(scenario, profile, notes, op_profile)
    note_host_probe_unused(scenario, native, notes)
    note_op_table_knobs_unused(scenario, native, notes)
    return native


def _native_costs(scenario, profile: EngineProfile | None, notes: set[str], op_profile=None) -> NativeCosts | None:
    """NativeCosts of `profile`, the scenario's engine profile (`serving_engine.engine_profile`, read by
    the caller), where it prices this scenario as measured; else of the shipped profile that does
    (`shipped_match`, on the GPU of the scenario or of `op_profile`, its op-table profile), with a note
    naming both; else None (with a note saying why). Where the scenario names none (`profile` None):
    None, with a note naming a shipped profile that would price it."""
    chosen = None
    kind = scenario.serving_engine.kind
    if profile is None:
        if match := shipped_match(scenario, scenario_gpu(scenario, op_profile)):
            notes.add(f"{kind}: the shipped engine profile {match[0]} was measured on this engine, GPU, model "
                      f"shapes and draft ({_topology(match[1])}): --set serving_engine.engine_profile={match[0]} "
                      "prices the cycle from it (here: the engine model from the profile's op tables)")
        return None
    if why := profile_mismatch(profile, scenario, carry_shapes=True):
        match = shipped_match(scenario, scenario_gpu(scenario, op_profile))
        if match is None:
            notes.add(f"{kind}: engine profile {profile.name} not used ({why}): priced by the engine model from the "
                      "profile's op tables")
            return None
        chosen, profile = match
        notes.add(f"{kind}: engine profile {scenario.serving_engine.engine_profile} not used ({why}); the shipped "
                  f"{chosen}, measured on this engine, GPU, model shapes and draft ({_topology(profile)}), prices "
                  f"it (serving_engine.engine_profile={chosen} names it)")
    b, k, c = scenario.workload.batch_size, scenario.spec.num_steps, scenario.workload.context_len
    carry, gpu = None, carried_to(profile, scenario)
    other_shape = not (_same_shape(profile.target, scenario.target) and _same_shape(profile.draft, scenario.draft))
    other_tp = (scenario.tp_size, scenario.draft_tp_size) != (profile.tp_size, profile.draft_tp_size or profile.tp_size)
    if gpu is not None or other_shape or other_tp:  # fitted on every point the profile measured, before a
        carry = engine_carry_for(profile, gpu or profile.catalog_gpu,  # capture-size change leaves some out
                                 scenario.target if other_shape else None, scenario.draft if other_shape else None,
                                 scenario.tp_size if other_tp else None, scenario.draft_tp_size if other_tp else None)
        notes.update(carry_notes(carry, scenario.serving_engine.kind))
    sizes = getattr(scenario.serving_engine, "cudagraph_capture_sizes", None)
    if sizes is not None and profile.engine == "vllm":
        profile = with_capture_sizes(profile, sizes, k)
        cs = profile.cudagraph_capture_sizes
        shown = ", ".join(map(str, cs[:6])) + (f", ... {cs[-1]}" if len(cs) > 6 else "")
        notes.add(f"vllm: CUDA-graph capture sizes {shown} (the scenario's"
                  f"{', rounded_to_query' if sizes == 'rounded_to_query' else ''}; the profile was measured with its "
                  "own list): the profile's points whose verify these pad to another token count are not used, "
                  "its fitted forms price those")
    for why in outside_measured(profile, b, k, c):
        notes.add(f"{scenario.serving_engine.kind}: engine profile {profile.name}: {why}")
    sizes_now = profile.cudagraph_capture_sizes
    if profile.engine == "vllm" and not profile.full_graph_verify(b, k) and (not sizes_now or b * (k + 1) <= sizes_now[-1]):
        notes.add(f"vllm: at batch {b} with num_steps {k} the verify ({b * (k + 1)} tokens) gets no full CUDA "
                  "graph (the smallest size vLLM captures at or above it is a piecewise one): it runs piecewise "
                  "and host-bound, and its step time varied about 2x from process to process where measured "
                  "(docs/engines/vllm.md)")
    graphs = profile.cudagraph_mode if "graph" in profile.cudagraph_mode else f"{profile.cudagraph_mode or '?'} graphs"
    notes.add(f"{scenario.serving_engine.kind}: priced from the engine-native profile {profile.name} "
              f"({profile.engine} {profile.engine_version}, {profile.attention_backend or '?'} attention, "
              f"{graphs}, {profile.gpu_name or '?'}; {len(profile.points)} measured points, fitted forms between them"
              f"{f'; carried to {gpu}' if gpu else ''}"
              f"{f'; carried to {scenario.target.name} and its draft' if other_shape else ''}"
              f"{f'; carried to a rank of TP {carry.dst_tp}' if carry is not None and carry.tp_carried else ''})")
    from simulator.costs.host_speed import host_speed_ratio
    native = NativeCosts(profile, chosen, carry)
    native.host_ratio = host_speed_ratio(profile, scenario, notes, native.host_paces_gpu)
    return native
