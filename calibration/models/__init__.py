"""Random-weight models the calibration times and the live loop runs (torch).

  ops_torch   the simulator's op vocabulary (`simulator.costs.ops`), one torch function per op;
  op_runners  one op with random inputs, as a closure (what calibration/bench/ops.py times);
  llama       the single-device Llama-style target and EAGLE-3 draft, built from those ops;
  tp_llama    their tensor-parallel (Megatron-style) versions over a process group.
"""
