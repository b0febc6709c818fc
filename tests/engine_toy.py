"""A toy engine for calibration, in one file: the fake engine under another name (what a new
engine's backend file holds: its backend, its `start` and its EngineSpec, registered here).
tests/test_engine_backends.py loads this file and runs a campaign through it."""

from __future__ import annotations

from calibration.engines.backends import register
from calibration.engines.backends.base import EngineSpec
from calibration.engines.backends.fake import FakeBackend


class ToyBackend(FakeBackend):
    """The fake engine, naming itself toy in what it records."""

    def info(self):
        info = super().info()
        info.engine = "toy"
        return info


def start(plan, workdir, rank: int = 0) -> ToyBackend:
    """The toy engine of the plan's configuration."""
    return ToyBackend(plan.num_steps, seed=plan.prompt_seed + plan.num_steps, max_model_len=plan.max_model_len,
                      tp_size=plan.tensor_parallel_size, draft_tp_size=plan.draft_tensor_parallel_size, rank=rank)


SPEC = register(EngineSpec("toy", start, serving_kind="vllm", in_process=True))
