"""Serving-engine models: per-phase graph modes, release presets, fused kernels, the verify's
attention path, draft methods and host terms, held to exact arithmetic where it exists."""

import pytest
from pydantic import TypeAdapter, ValidationError

from simulator.analytic import cycle_time_us
from simulator.config import Scenario
from simulator.costs import forward_ops as FO
from simulator.costs import ops as O
from simulator.costs.forward import CostModel, chain_span_us
from simulator.engines import ServingEngine
from simulator.scenario import load_profile_for, load_scenario

ENGINE = TypeAdapter(ServingEngine)


@pytest.fixture(scope="module")
def base():
    sc = load_scenario("scenarios/llama8b_h200.yaml")
    return sc, load_profile_for(sc)[0]


def test_every_list_of_engine_kinds_derives_from_the_engine_classes():
    """One tuple of engine schemas (ENGINE_CLASSES): the scenario's union, ENGINE_KINDS, the
    importers' ObservedRun.engine and the union tags the error formatter drops are all its kinds."""
    from typing import get_args

    from simulator import inputs
    from simulator.engines import ENGINE_CLASSES, ENGINE_KINDS, ENGINE_MODEL_KINDS, EngineModel
    from simulator.evidence.importers import ObservedRun
    union, _ = get_args(ServingEngine)
    assert tuple(get_args(member)[0] for member in get_args(union)) == ENGINE_CLASSES
    assert ENGINE_KINDS == tuple(cls.model_fields["kind"].default for cls in ENGINE_CLASSES)
    assert ENGINE_MODEL_KINDS == tuple(k for c, k in zip(ENGINE_CLASSES, ENGINE_KINDS) if issubclass(c, EngineModel))
    assert get_args(ObservedRun.model_fields["engine"].annotation) == ENGINE_KINDS
    assert inputs._union_tags()["serving_engine"] == ENGINE_KINDS
    for kind in ENGINE_KINDS:
        assert ENGINE.validate_python({"kind": kind}).kind == kind


def _sc(sc, **update):
    data = sc.model_dump(mode="json", exclude_none=True)
    for k, v in update.items():
        data[k] = v
    return Scenario.model_validate(data)


def test_a_section_without_kind_is_the_live_loop_and_an_unknown_kind_names_the_kinds():
    assert ENGINE.validate_python({"cuda_graph": False}).kind == "live_loop"
    with pytest.raises(ValidationError, match="live_loop, sglang, vllm, trtllm"):
        ENGINE.validate_python({"kind": "tgi"})


def test_release_presets_fill_only_what_the_scenario_leaves_out():
    early = ENGINE.validate_python({"kind": "vllm", "version": "2025-mid"})
    assert (early.graph_verify, early.graph_draft, early.overlapped) == ("piecewise", "none", False)
    stated = ENGINE.validate_python({"kind": "vllm", "version": "2025-mid", "graph_verify": "full"})
    assert stated.graph_verify == "full"
    assert ENGINE.validate_python({"kind": "sglang", "version": "2025-early"}).graph_draft_extend == "none"
    assert ENGINE.validate_python({"kind": "sglang", "version": "2026"}).overlapped
    assert ENGINE.validate_python({"kind": "trtllm"}).overlapped


def test_batches_above_cuda_graph_max_bs_run_eagerly():
    e = ENGINE.validate_python({"kind": "sglang", "cuda_graph_max_bs": 4})
    assert e.graph_mode("verify", 4) == "full"
    assert e.graph_mode("verify", 5) == "none"
    assert e.collective_mode(5) == "eager"


def test_fused_kernels_fold_add_into_rmsnorm_and_rotary_into_kv_write(base):
    sc, _ = base
    ops = FO.target_forward_ops(sc.target, 1, 1, 1, 1024)
    fused = FO.engine_ops(ops)
    names = [o.name for o in fused]
    assert "add" not in names and names.count("add_rmsnorm") == 2 * sc.target.num_hidden_layers
    assert names.count("rmsnorm") == 1  # the first layer's input norm has no residual add before it
    assert "rotary" not in names and names.count("rotary_kv_write") == sc.target.num_hidden_layers
    assert "attn_mask" not in names and "rope_cos_sin" not in names
    assert all(o.key.startswith("engine_") for o in fused if o.name == "attention")
    # the same bytes move, in fewer kernels
    moved = sum(o.bytes for o in ops if o.name in ("add", "rmsnorm", "rotary", "kv_write"))
    assert sum(o.bytes for o in fused if o.name in ("add_rmsnorm", "rmsnorm", "rotary_kv_write")) == pytest.approx(moved)


def test_piecewise_verify_pays_one_attention_launch_and_one_replay_per_layer(base):
    sc, profile = base
    full = CostModel(_sc(sc, serving_engine={"kind": "vllm", "graph_verify": "full"}), profile).verify_forward()
    piece = CostModel(_sc(sc, serving_engine={"kind": "vllm", "graph_verify": "piecewise"}), profile).verify_forward()
    h = profile.host
    per_layer = h.op_launch_us.get("attention", h.default_launch_us) + h.graph_replay_us
    assert full.host_us == pytest.approx(h.graph_replay_us)
    assert piece.host_us == pytest.approx(h.graph_replay_us + sc.target.num_hidden_layers * per_layer)
    assert piece.gpu_us == pytest.approx(full.gpu_us)


def test_mla_verify_on_the_prefill_path_costs_more_and_grows_with_the_context():
    sc = load_scenario("scenarios/kimi_k2_tp8_draft_live_loop.yaml")
    m = sc.target
    absorbed = [O.mla_attention(m, 8, 1, 4, c) for c in (1024, 8192)]
    prefill = [O.mla_attention_prefill(m, 8, 1, 4, c) for c in (1024, 8192)]
    assert prefill[0].bytes > absorbed[0].bytes and prefill[0].flops > absorbed[0].flops
    grow_prefill = prefill[1].bytes - prefill[0].bytes
    grow_absorbed = absorbed[1].bytes - absorbed[0].bytes
    assert grow_prefill > 5 * grow_absorbed
    # per KV token: the latent read plus K and V written and read back
    latent = m.kv_lora_rank + m.qk_rope_head_dim
    h = m.num_attention_heads // 8
    per_kv = latent * m.kv_cache_dtype_bytes + 2 * h * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim) * 2
    assert grow_prefill == pytest.approx(per_kv * 7168)


def test_ngram_has_no_draft_forwards_and_mtp_runs_eh_proj(base):
    sc, profile = base
    spec = {"method": "ngram", "num_steps": 4, "topk": 1, "num_draft_tokens": 5}
    cm = CostModel(_sc(sc, spec=spec, serving_engine={"kind": "vllm"}), profile)
    phases = [f.phase for f in cm.cycle_forwards(2)]
    assert "draft" not in phases and "draft_extend" not in phases and cm.num_draft_forwards == 0
    mtp = FO.draft_forward_ops(sc.draft, 1, 1, 1, 1024, extend=False, method="mtp")
    fc = [o for o in mtp if o.name == "fc"]
    assert len(fc) == 1 and fc[0].key.startswith(f"gemm:k={2 * sc.draft.hidden_size},n={sc.draft.hidden_size}")
    with pytest.raises(ValueError, match="unknown speculative method"):
        FO.draft_forward_ops(sc.draft, 1, 1, 1, 1024, extend=False, method="medusa")


@pytest.mark.parametrize("overlap", [False, True])
def test_cycle_time_is_the_closed_form_of_the_engine_terms(base, overlap):
    sc, profile = base
    engine = {"kind": "sglang", "host_cycle_us": 700.0, "host_draft_step_us": 40.0, "d2h_syncs_per_cycle": 3,
              "overlap_scheduler": overlap}
    cm = CostModel(_sc(sc, serving_engine=engine), profile)
    fwds = cm.cycle_forwards(2)
    span, host = chain_span_us(fwds), sum(f.host_us for f in fwds)
    d = 3 * profile.host.d2h_sync_us
    expect = max(host + 700.0, span) + d if overlap else 700.0 + span + d
    assert cycle_time_us(cm, 2) == pytest.approx(expect, rel=1e-12)
    drafts = [f for f in fwds if f.phase == "draft"]
    assert drafts and all(f.host_us >= 40.0 for f in drafts)
    assert len(drafts) == sc.spec.num_steps - 1  # SGLang: the extend proposes draft token 1
