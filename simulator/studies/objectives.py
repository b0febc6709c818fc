"""What a configuration search optimises (`specdecsim search --objective`): each objective's row
column and whether it is maximised.

- tok_per_s: system tokens/s; tok_per_s_per_user: tok/s / batch_size; tok_per_s_per_gpu: tok/s /
  GPUs used (a dedicated draft GPU included, `Placement.num_gpus`);
- tpot_p50_ms (minimised): the serving mode's p50 when it runs, else the closed form's mean TPOT,
  which is the p50 of alike requests up to the spread of accept lengths; in ms, as the engines' benches
  print TPOT;
- goodput: serving mode's goodput tok/s (the serving DES per point).

The search itself is `simulator.studies.search`; this module imports nothing, so the CLI names the
objectives in its help without loading the model.
"""

OBJECTIVES = {  # name -> (row column, True to maximise)
    "tok_per_s_per_user": ("tok_per_s_per_user", True),
    "tok_per_s": ("tok_per_s", True),
    "tok_per_s_per_gpu": ("tok_per_s_per_gpu", True),
    "tpot_p50_ms": ("tpot_p50_ms", False),
    "goodput": ("serving_goodput_tok_per_s", True),
}
