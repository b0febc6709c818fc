"""The engines calibration measures in, one backend each, and the registry that lists them.

  base.py          what the run loop asks of a backend (EngineBackend), what a step hands back
                   (StepTimes), the hooks and probes the real engines share, and EngineSpec: what the
                   rest of calibration knows of an engine kind (its start, and where it differs)
  vllm.py          vLLM in process (its scheduler, model runner, CUDA graphs, sampler), timed
  sglang.py        SGLang's scheduler in process, timed (sglang_model.py: its model-side patches)
  fake.py          a fake engine with known costs (CPU: the tests and CI)

`ENGINES` is the one list of engine kinds: `ProcessPlan.engine`, `--engine`'s choices and every
other list of kinds derive from it, and no module outside this folder compares an engine's name;
what differs between engines is a field of its `EngineSpec` (worker.start_backend starts a plan's
backend through it; build.py, records.py, plans.py and the CLI read its facts).

A new engine (TensorRT-LLM, say) touches three files:
  1. backends/<engine>.py: the backend (EngineBackend's methods), its `start(plan, workdir, rank)`
     and `SPEC = EngineSpec("<engine>", start, ...)`;
  2. this file: one `register(<engine>.SPEC)` line;
  3. simulator/engines/fields.py: its name in CALIBRATED_ENGINES (the engine-native profile's
     `engine`; a test holds ENGINES to that tuple).
tests/engine_toy.py is such an engine in one file (the fake one under another name), registered
at run time by the test that runs a campaign through it.
"""

from __future__ import annotations

from calibration.engines.backends import fake, sglang, vllm
from calibration.engines.backends.base import EngineSpec

ENGINES: dict[str, EngineSpec] = {}


def register(spec: EngineSpec) -> EngineSpec:
    """Add an engine kind (after those registered before it: `--engine` lists them in this order)."""
    if spec.name in ENGINES:
        raise ValueError(f"engine {spec.name!r} is registered already")
    ENGINES[spec.name] = spec
    return spec


register(vllm.SPEC)
register(sglang.SPEC)
register(fake.SPEC)


def engine_spec(name: str) -> EngineSpec:
    """The registered engine of that name.

    Raises:
        ValueError: no such engine (naming the registered ones).
    """
    try:
        return ENGINES[name]
    except KeyError:
        raise ValueError(f"engine {name!r}: one of {', '.join(ENGINES)}") from None
