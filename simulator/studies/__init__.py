"""Studies: many predictions of the model, arranged to answer a question.

- `grid`: what-if grids over scenario fields (`--grid` specs, their expansion into scenarios);
- `sweep`, `sweep_grouped`: a grid run point by point (either solver) or grouped (the closed form
  as arrays); `points`: one point's metrics, and points run in chunks on a backend (sweeps and
  searches); `sweep_files`: what a sweep produced, writes and reads (sweep.csv, sweep.json);
  `serving_sweep`: the serving columns of a sweep and the load at which speculation stops paying;
- `search`: the best configuration for an objective and its Pareto front;
- `backend`: where points run (local processes or Ray tasks);
- `plots`, `sweep_plots`, `serving_plots`, `calibration_curves`: the dashboard page and its charts.

The model (everything in simulator/ outside this package and simulator/cli/) never imports a
study (tests/test_structure.py holds that rule). This package's __init__ imports nothing.
"""
