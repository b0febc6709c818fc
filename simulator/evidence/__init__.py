"""Evidence: what the model is held to, and measurements read into its terms.

- `live_records`: a live GPU run (LiveRun, LiveServingRun) in the simulator's terms, the
  scenario it ran embedded;
- `validate`: predictions from a profile alone beside live records (`specdecsim validate`);
  `validate_serving`: live serving runs beside the serving DES (`specdecsim validate-serving`);
- `cases`: published figures of SGLang, vLLM and TensorRT-LLM runs replayed from mechanisms and
  scored, and the leave-out protocol of sweeps (`specdecsim cases`);
- `trace_profile`: a profile from torch.profiler traces of the live loop alone
  (`specdecsim calibrate from-traces`).

This package's __init__ imports nothing.
"""
