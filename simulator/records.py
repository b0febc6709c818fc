"""Records of live speculative runs on a GPU, in the simulator's terms.

`calibration.live` writes these (one JSON file per run point); `specdecsim validate` reads them
and predicts each point from a profile alone. The embedded `scenario` is a full Scenario dict,
so the prediction runs the very set-up that was measured.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, NonNegativeFloat, PositiveFloat, model_validator

from simulator.config import Scenario, StrictModel
from simulator.profile import HardwareInfo

LIVE_PHASES = ("draft", "verify", "accept", "draft_extend", "host", "decode")


class LiveRun(StrictModel):
    """One measured point: a scenario run for real, speculative or baseline.

    Phase times are means per cycle (per decode step for the baseline), in us, measured with
    CUDA events (graph mode) or host timers around synchronised regions (eager diagnostics).
    """

    schema_version: Literal[1] = 1
    scenario: Scenario
    speculative: bool = Field(description="False = the no-speculation baseline of the same scenario.")
    num_cycles: int = Field(ge=1, description="Timed cycles (decode steps for the baseline).")
    num_tokens: int = Field(ge=1, description="Tokens emitted over the timed cycles, all requests.")
    elapsed_us: PositiveFloat
    tok_per_s: PositiveFloat = Field(description="System throughput: num_tokens / elapsed.")
    repeat_tok_per_s: list[PositiveFloat] = Field(default_factory=list,
                                                  description="tok_per_s of repeats of this point.")
    mean_accept_length: float = Field(ge=1.0)
    accept_length_counts: list[int] = Field(default_factory=list,
                                            description="Count of accept_length 1..num_steps+1.")
    phase_us: dict[str, NonNegativeFloat] = Field(default_factory=dict,
                                                  description="Mean us per cycle by phase.")
    hardware: HardwareInfo | None = None
    created_utc: str | None = None
    git_commit: str | None = None
    command_line: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Self:
        s = self.scenario.spec.num_steps
        top = s + 1 if self.speculative else 1
        if not 1.0 <= self.mean_accept_length <= top:
            raise ValueError(f"mean_accept_length={self.mean_accept_length} outside 1..{top}")
        if self.speculative and len(self.accept_length_counts) != s + 1:
            raise ValueError(f"accept_length_counts has {len(self.accept_length_counts)} entries; "
                             f"num_steps={s} needs {s + 1}")
        if any(c < 0 for c in self.accept_length_counts):
            raise ValueError("accept_length_counts must be >= 0")
        return self
