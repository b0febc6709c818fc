"""The live speculative loop on a GPU: real forwards, a seeded acceptance oracle, LiveRun records.

  loop      the speculative and baseline loops on static buffers (eager or CUDA graphs);
  run       one run point timed into a LiveRun; the models and loops kept across points;
  grid      the single-GPU grid of points, resumable, one LiveRun JSON per point;
  tp        the loops over a tensor-parallel group (draft shared_tp or tp1_colocated);
  tp_grid   the tensor-parallel grid over spawned ranks.
"""
