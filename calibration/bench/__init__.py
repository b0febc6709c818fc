"""Microbenchmarks: each measures one kind of point into a PointStore (calibration/build/store.py).

  ops            per-op latency tables, host overheads, roofline rates;
  forwards       whole target forwards and draft steps / extends on one GPU;
  collectives    allreduce / broadcast / all_gather over spawned ranks;
  tp_forwards    whole forwards over a tensor-parallel group;
  loop_overhead  the live loop's host time per cycle (tiny models, and a probe target);
  moe            MoE routed experts at small token counts (a JSON of its own, not a point store).
"""
