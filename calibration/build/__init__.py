"""Measured points -> profiles (numpy, no torch): what the benchmarks wrote, built into the
simulator's `CalibrationProfile`.

  store           the append-only points file the benchmarks write (resumable);
  profile         a points file -> a validated CalibrationProfile (one table per op key);
  merge           several points files -> one profile (`specdecsim calibrate merge`);
  nccl_tests_log  the text of an nccl-tests log -> its runs;
  nccl_tests      those runs -> collective tables of a profile (`specdecsim calibrate import-nccl-tests`).
"""
