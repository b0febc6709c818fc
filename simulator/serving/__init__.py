"""Serving mode: arrivals, queueing, chunked prefill and a changing decode batch (a scenario's
`serving:` section).

- config.py    the `serving:` schema (arrivals, lengths, limits, spec policy, SLOs)
- workload.py  arrivals and request lengths; trace and length files
- costs.py     engine-step durations from the steady-batch CostModel at each batch size
- scheduler.py the SimPy scheduler: admission, preemption, chunked prefill, engine steps; its records
- metrics.py   records -> TTFT, TPOT, ITL, latency percentiles, throughput, goodput
- run.py       `simulate_serving`: one scenario -> ServingResult (with its no-speculation baseline)

The concurrency at which speculation stops paying along a swept load is a study's
(simulator.studies.serving_sweep). The steady-batch mode (simulator.simulate) stays the default
when a scenario has no `serving:`.
This package's __init__ imports nothing: simulator.config imports serving.config.
"""
