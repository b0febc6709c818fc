"""Model shapes the calibration measures and the live grid runs, and the one EAGLE-3 draft rule.

  LLAMA_8B, LLAMA_1B     Llama-3.1-8B and Llama-3.2-1B (HF config.json of meta-llama/Llama-3.1-8B,
                         meta-llama/Llama-3.2-1B);
  eagle3_draft(target)   its one-layer EAGLE-3 draft, named `eagle3-<target name>` (the name the
                         live records and the shipped profile's draft tables carry);
  DEFAULT_MODELS         what `specdecsim calibrate` measures by default: both targets and drafts;
  SIZES                  the live grid's (target, draft) pairs by size key ('8b', '1b'); TP_SIZES
                         adds 'tiny' for CPU smoke runs over gloo;
  LOOP_TINY              the tiny pair whose live loop measures the loop's host overhead;
  probe_shape(n)         the loop-overhead probe: Llama-3.2-3B widths at n layers.

Shapes only (no torch): the simulator's `ModelShape`.
"""

from __future__ import annotations

from simulator.config import ModelShape
from simulator.model_config import EAGLE3_NUM_FC_INPUT_HIDDEN_STATES  # 3: its one home is the config reader

EAGLE3_DRAFT_VOCAB_SIZE = 32000  # yuhuili/EAGLE3-LLaMA3.1-Instruct-8B config.json: draft_vocab_size

LLAMA_8B = ModelShape(name="llama-3.1-8b", hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, intermediate_size=14336, vocab_size=128256)
LLAMA_1B = ModelShape(name="llama-3.2-1b", hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                      num_key_value_heads=8, head_dim=64, intermediate_size=8192, vocab_size=128256)


def eagle3_draft(target: ModelShape, draft_vocab_size: int = EAGLE3_DRAFT_VOCAB_SIZE) -> ModelShape:
    """EAGLE-3 draft of `target`: one decoder layer at the target's widths, an fc over three of
    the target's hidden states, a smaller draft vocabulary; named `eagle3-<target name>`.

    Args:
        target: the target's shape.
        draft_vocab_size: tokens of the draft's lm_head (32000 for the published Llama drafts;
            tiny test shapes pass fewer).

    Returns:
        The draft's ModelShape.

    Source: Li et al. 2025, arXiv 2503.01840; yuhuili/EAGLE3 draft configs (num_hidden_layers 1,
    draft_vocab_size 32000).
    """
    return target.model_copy(update=dict(name=f"eagle3-{target.name}", num_hidden_layers=1,
                                         draft_vocab_size=draft_vocab_size,
                                         num_fc_input_hidden_states=EAGLE3_NUM_FC_INPUT_HIDDEN_STATES))


def is_draft(shape: ModelShape) -> bool:
    """True for a draft's shape (an fc over target hidden states, or its own draft vocabulary)."""
    return bool(shape.num_fc_input_hidden_states or shape.draft_vocab_size)


DEFAULT_MODELS = (LLAMA_8B, eagle3_draft(LLAMA_8B), LLAMA_1B, eagle3_draft(LLAMA_1B))
SIZES = {"8b": (LLAMA_8B, eagle3_draft(LLAMA_8B)), "1b": (LLAMA_1B, eagle3_draft(LLAMA_1B))}
TINY = ModelShape(name="tiny", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=128, vocab_size=256)
TP_SIZES = {**SIZES, "tiny": (TINY, eagle3_draft(TINY, draft_vocab_size=128))}
LOOP_TINY = TINY.model_copy(update=dict(num_hidden_layers=1))  # one layer: the loop's own cost dominates


def probe_shape(num_layers: int) -> ModelShape:
    """Llama-3.2-3B widths (HF config.json of meta-llama/Llama-3.2-3B) at `num_layers` layers: the
    loop-overhead probe, whose widths differ from the validation targets'."""
    return ModelShape(name=f"loop-probe-3b-L{num_layers}", hidden_size=3072, num_hidden_layers=num_layers,
                      num_attention_heads=24, num_key_value_heads=8, head_dim=128, intermediate_size=8192,
                      vocab_size=128256)
