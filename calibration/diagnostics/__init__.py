"""Diagnostics run on a GPU when a live figure and the profile disagree (`specdecsim diagnose ...`).

  drift    this GPU's whole forwards now against the profile; loop overhead per GPU wait;
  sync     the loop's host time with a blocking against a spinning device->host sync;
  tp_skew  a TP forward timed on rank 0, on the last rank to launch, and back to back;
  verify   the live loop's verify graph against the calibration's whole forward;
  trace    torch.profiler traces of the live loop per point (a profile from them: calibrate from-traces).
"""
