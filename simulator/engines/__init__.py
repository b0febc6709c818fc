"""The serving engines a user runs (SGLang, vLLM, TensorRT-LLM, the project's own live loop).

- `models`: the scenario's `serving_engine:` section: one schema per engine kind, with its
  sourced defaults and release presets; `ENGINE_CLASSES`, from which every list of kinds derives
  (`ENGINE_KINDS`, the union `ServingEngine`); re-exported here, so `from simulator.engines import
  VllmEngine` works.
- `defaults`: the engines' host defaults as the fit on the published cases marked `role: fit`
  (`python -m simulator.engines.defaults` prints them).
- `fit`: engine host times and kernel efficiency fitted to observed runs (least squares).
- `native`: engine-native profiles (an engine's own cycle parts measured inside it by `specdecsim
  calibrate engine`), read by the cost model when a scenario's `serving_engine.engine_profile`
  names one (docs/engines/README.md).
- `runs`: engine outputs (server logs, benchmark output, /metrics scrapes, torch.profiler
  traces) read into `ObservedRun`s; an engine's MoE benchmark output (`runs.moe_bench`).

Only `models` is imported with the package: the fit and the importers import the cost model,
which imports the scenario schema, which imports `models`.
"""

from simulator.engines.models import (ENGINE_CLASSES, ENGINE_HOST_DEFAULTS, ENGINE_KINDS, ENGINE_MODEL_KINDS,
                                      ENGINE_PHASES, LIVE_LOOP_ONLY, MOE_TABLE_MAX_ENTRIES, VERSION_PRESETS,
                                      EngineKind, EngineModel, GraphMode, LiveLoopEngine, ServingEngine, SglangEngine,
                                      TrtllmEngine, VllmEngine)

__all__ = ["ENGINE_CLASSES", "ENGINE_HOST_DEFAULTS", "ENGINE_KINDS", "ENGINE_MODEL_KINDS", "ENGINE_PHASES",
           "LIVE_LOOP_ONLY", "MOE_TABLE_MAX_ENTRIES", "VERSION_PRESETS", "EngineKind", "EngineModel", "GraphMode",
           "LiveLoopEngine", "ServingEngine", "SglangEngine", "TrtllmEngine", "VllmEngine"]
