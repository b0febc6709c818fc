"""The engines' own words for the speculative settings, mapped to a scenario's `spec` and `placement`.

vLLM takes one JSON, `--speculative-config '{"method": "eagle3", "num_speculative_tokens": 3, ...}'`
(vllm/config/speculative.py, SpeculativeConfig); SGLang takes flags, `--speculative-algorithm`,
`--speculative-num-steps`, `--speculative-eagle-topk`, `--speculative-num-draft-tokens`
(python/sglang/srt/server_args.py). Each is turned into `--set` overrides of the scenario, applied after
the user's own `--set`s, and a note says what became what.

| engine word | scenario field | source |
|---|---|---|
| vLLM `method` eagle3, eagle, mtp (and `*_mtp`), draft_model, ngram | `spec.method` | SpeculativeConfig.method; model types ending in `_mtp` are normalised to mtp there |
| vLLM `num_speculative_tokens` k | `spec.num_steps` k, `spec.topk` 1, `spec.num_draft_tokens` k + 1 | vLLM's EAGLE / MTP proposers draft a chain of k tokens (a tree only with `speculative_token_tree`, not read here) |
| vLLM `draft_tensor_parallel_size` (1 or the target's TP) | `placement`: the target's TP -> shared_tp, 1 -> tp1_colocated | SpeculativeConfig._verify_and_get_draft_tp: 1 or the target's tensor_parallel_size |
| SGLang `--speculative-algorithm` EAGLE3, EAGLE, NEXTN, STANDALONE, NGRAM | `spec.method` eagle3, eagle, mtp, draft_model, ngram | server_args.py (NEXTN is run as EAGLE on the model's MTP layer) |
| SGLang `--speculative-num-steps` | `spec.num_steps` | server_args.py |
| SGLang `--speculative-eagle-topk` | `spec.topk` | server_args.py |
| SGLang `--speculative-num-draft-tokens` | `spec.num_draft_tokens` (with topk 1: num_steps + 1, as SGLang resets it) | server_args.py: topk 1 sets num_draft_tokens to num_steps + 1 |

Other keys of vLLM's JSON (model, quantization, max_model_len, ...) are named in the note as not read.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simulator.inputs import UserInputError

# A scenario's spec key written in an engine's word -> the field it is here (the hint of an error).
ENGINE_SPEC_KEYS = {
    "num_speculative_tokens": "num_steps (vLLM's num_speculative_tokens: the chain's length)",
    "speculative_num_steps": "num_steps (SGLang's --speculative-num-steps)",
    "speculative_eagle_topk": "topk (SGLang's --speculative-eagle-topk)",
    "eagle_topk": "topk (SGLang's --speculative-eagle-topk)",
    "speculative_num_draft_tokens": "num_draft_tokens (SGLang's --speculative-num-draft-tokens)",
    "draft_tensor_parallel_size": "the scenario's placement (shared_tp: the target's TP; tp1_colocated: 1)",
}
SGLANG_ALGORITHMS = {"EAGLE3": "eagle3", "EAGLE": "eagle", "NEXTN": "mtp", "STANDALONE": "draft_model",
                     "NGRAM": "ngram"}


class VllmSpeculativeConfig(BaseModel):
    """The keys of vLLM's `--speculative-config` JSON this simulator reads (vllm/config/speculative.py);
    other keys are kept and named as not read."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)
    method: str | None = Field(None, description="eagle3, eagle, mtp (or <model>_mtp), draft_model, ngram.")
    num_speculative_tokens: int = Field(ge=1, le=64, description="Draft tokens per step (a chain's length).")
    draft_tensor_parallel_size: int | None = Field(None, ge=1, le=1024, description="1 or the target's TP.")


def spec_key_hint(key: str) -> str | None:
    """The hint for a spec key written in an engine's word (`num_speculative_tokens`), None for others."""
    field = ENGINE_SPEC_KEYS.get(key)
    return None if field is None else (f"that is the engine's name; here the field is {field}; or pass the engine's "
                                       "words: --speculative-config '<vLLM JSON>' or --speculative-num-steps / "
                                       "--speculative-eagle-topk / --speculative-num-draft-tokens")


def _vllm_method(method: str | None) -> str:
    if method is None:
        return "eagle3"  # this simulator's drafts; vLLM itself infers it from the draft model
    m = method.lower()
    if m.endswith("_mtp"):
        return "mtp"
    if m in ("eagle3", "eagle", "mtp", "draft_model", "ngram"):
        return m
    raise UserInputError(f"--speculative-config: method {method!r} is not modelled; one of eagle3, eagle, mtp, "
                         "draft_model, ngram")


def _placement(draft_tp: int, tp_size: int) -> str:
    if draft_tp == tp_size:
        return "shared_tp"
    if draft_tp == 1:
        return "tp1_colocated"
    raise UserInputError(f"--speculative-config: draft_tensor_parallel_size {draft_tp}: vLLM takes 1 or the target's "
                         f"tensor parallel size ({tp_size})")


def vllm_overrides(text: str, tp_size: int) -> tuple[list[str], str]:
    """vLLM's `--speculative-config` JSON -> (`--set` overrides, the note saying what became what).

    Raises:
        UserInputError: not a JSON object, a value of the wrong type or range, a method not modelled.
    """
    from simulator.inputs import format_validation_error
    try:
        cfg = VllmSpeculativeConfig.model_validate_json(text)
    except ValidationError as e:
        raise UserInputError(format_validation_error("--speculative-config", e)) from None
    k = cfg.num_speculative_tokens
    sets = [f"spec.method={_vllm_method(cfg.method)}", f"spec.num_steps={k}", "spec.topk=1",
            f"spec.num_draft_tokens={k + 1}"]
    words = [f"method {cfg.method or '(none: eagle3)'} -> spec.method {_vllm_method(cfg.method)}",
             f"num_speculative_tokens {k} -> spec.num_steps {k}, topk 1, num_draft_tokens {k + 1} (a chain)"]
    if cfg.draft_tensor_parallel_size is not None:
        sets.append(f"placement={_placement(cfg.draft_tensor_parallel_size, tp_size)}")
        words.append(f"draft_tensor_parallel_size {cfg.draft_tensor_parallel_size} -> {sets[-1].replace('=', ' ')}")
    unread = sorted(cfg.model_extra or {})
    return sets, ("vLLM --speculative-config: " + "; ".join(words)
                  + (f"; not read: {', '.join(unread)}" if unread else ""))


def sglang_overrides(algorithm: str | None, num_steps: int | None, topk: int | None,
                     num_draft_tokens: int | None) -> tuple[list[str], str]:
    """SGLang's `--speculative-*` flags -> (`--set` overrides, the note). With topk 1 (given or the
    scenario's), num_draft_tokens follows num_steps as SGLang sets it (the overrides' chain rule).

    Raises:
        UserInputError: an algorithm SGLang does not name.
    """
    sets, words = [], []
    if algorithm is not None:
        method = SGLANG_ALGORITHMS.get(algorithm.upper())
        if method is None:
            raise UserInputError(f"--speculative-algorithm {algorithm!r}: one of {', '.join(SGLANG_ALGORITHMS)}")
        sets.append(f"spec.method={method}")
        words.append(f"--speculative-algorithm {algorithm} -> spec.method {method}")
    for flag, field, value in (("--speculative-num-steps", "num_steps", num_steps),
                               ("--speculative-eagle-topk", "topk", topk),
                               ("--speculative-num-draft-tokens", "num_draft_tokens", num_draft_tokens)):
        if value is not None:
            sets.append(f"spec.{field}={value}")
            words.append(f"{flag} {value} -> spec.{field} {value}")
    if topk == 1 and num_steps is not None and num_draft_tokens not in (None, num_steps + 1):
        sets[-1] = f"spec.num_draft_tokens={num_steps + 1}"
        words[-1] += f", reset to num_steps + 1 = {num_steps + 1} as SGLang does for topk 1"
    return sets, "SGLang flags: " + "; ".join(words)

