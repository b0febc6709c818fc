"""The serving engines a user runs (SGLang, vLLM, TensorRT-LLM, the project's own live loop): the
engine model only.

- `models`: the scenario's `serving_engine:` section: one schema per engine kind, with its
  sourced defaults and release presets; `ENGINE_CLASSES`, from which every list of kinds derives
  (`ENGINE_KINDS`, the union `ServingEngine`); re-exported here, so `from simulator.engines import
  VllmEngine` works.
- `profile`: the engine-native profile's schema (`EngineProfile`, its `EnginePoint`s and fitted
  forms `PartFit`; an engine's own cycle parts measured inside it by `specdecsim calibrate engine`,
  docs/engines/README.md), reading one (`load_engine_profile`), and the engine's CUDA-graph
  capture sizes (`full_graph_verify`, `with_capture_sizes`).

What is built on the model lives elsewhere: the prices from an engine profile beside the other
costs (simulator.costs.engine_native, simulator.costs.engine_notes); the fits and the importers of
engine outputs in simulator.evidence (engine_fit, engine_defaults, engine_profile_fit, importers).
Nothing here imports those, the scenario loader or the solvers (tests/test_structure.py).

Only `models` is imported with the package.
"""

from simulator.engines.models import (ENGINE_CLASSES, ENGINE_HOST_DEFAULTS, ENGINE_KINDS, ENGINE_MODEL_KINDS,
                                      ENGINE_PHASES, LIVE_LOOP_ONLY, MOE_TABLE_MAX_ENTRIES, VERSION_PRESETS,
                                      EngineKind, EngineModel, GraphMode, LiveLoopEngine, ServingEngine, SglangEngine,
                                      TrtllmEngine, VllmEngine)

__all__ = ["ENGINE_CLASSES", "ENGINE_HOST_DEFAULTS", "ENGINE_KINDS", "ENGINE_MODEL_KINDS", "ENGINE_PHASES",
           "LIVE_LOOP_ONLY", "MOE_TABLE_MAX_ENTRIES", "VERSION_PRESETS", "EngineKind", "EngineModel", "GraphMode",
           "LiveLoopEngine", "ServingEngine", "SglangEngine", "TrtllmEngine", "VllmEngine"]
