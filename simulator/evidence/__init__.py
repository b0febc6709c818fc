"""Evidence: what the model is held to, and measurements read into its terms.

- `live_records`: a live GPU run (LiveRun, LiveServingRun) in the simulator's terms, the
  scenario it ran embedded;
- `validate`: predictions from a profile alone beside live records (`specdecsim validate`);
  `validate_serving`: live serving runs beside the serving DES (`specdecsim validate-serving`);
- `cases`: published figures of SGLang, vLLM and TensorRT-LLM runs replayed from mechanisms and
  scored, and the leave-out protocol of sweeps (`specdecsim cases`);
- `trace_profile`: a profile from torch.profiler traces of the live loop alone
  (`specdecsim calibrate from-traces`).
- `engine_fit`: serving engines' host times and kernel efficiency fitted to observed runs (least
  squares); `engine_defaults`: that fit on the published figures marked `role: fit`, the shipped
  ENGINE_HOST_DEFAULTS (`python -m simulator.evidence.engine_defaults` prints them);
- `engine_profile_fit`: the fitted forms of an engine-native profile's parts (`specdecsim calibrate
  engine`);
- `importers`: engine outputs (server logs, benchmark output, /metrics scrapes, torch.profiler
  traces) read into ObservedRuns; an engine's MoE benchmark output (`importers.moe_bench`).

This package's __init__ imports nothing.
"""
