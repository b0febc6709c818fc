"""The engine fields that calibration and the simulator both declare: one schema, imported by both.

An engine process the calibration plans (`calibration.engines.plans.ProcessPlan`) and the
engine-native profile it yields (`simulator.engines.profile.EngineProfile`) describe the same
engine configuration: which engine, its draft tree (topk, num_draft_tokens) and its TP group.
Each field's type, bounds and description live here once, as `Annotated` types, so the two models
cannot drift apart; a model declares the field under its own name and default
(`topk: TopK = 1`), which keeps each model's field order (and so its JSON) as it was.

    CALIBRATED_ENGINES  the engines calibration can measure: the one list of their names (the
                        calibration registry, calibration/engines/backends/, holds one backend per
                        name, and a test checks the two agree)
    CalibratedEngine    Literal of those names (EngineProfile.engine)
    TopK, NumDraftTokens    the draft tree: branches per step, tokens verified per request
    TpSize, DraftTpSize     the target's TP group and the draft's TP as the engine built it

Leaves out everything one side alone has (a plan's points and engine settings, a profile's
measured points and fits).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

CALIBRATED_ENGINES = ("vllm", "sglang", "fake")  # fake: known costs, no GPU (calibration's tests and CI)

CalibratedEngine = Literal[CALIBRATED_ENGINES]  # type: ignore[valid-type]

ENGINE_DESCRIPTION = ", ".join(CALIBRATED_ENGINES[:-1]) + " or " + CALIBRATED_ENGINES[-1] + "."

TopK = Annotated[int, Field(ge=1, le=16, description="Draft branches per step (SGLang's speculative_eagle_topk); "
                                                     "1 is a chain.")]

NumDraftTokens = Annotated[int, Field(ge=2, le=256)]
NUM_DRAFT_TOKENS_DESCRIPTION = "Tokens verified per request (SGLang's speculative_num_draft_tokens)"

TpSize = Annotated[int, Field(ge=1)]  # GPUs of the target's TP group; each model bounds it (a plan: one host's 8)
DraftTpSize = Annotated[int, Field(ge=1)]  # the draft's TP: 1 or the target's group
