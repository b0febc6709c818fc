"""Calibration inside the serving engine a user deploys (vLLM, SGLang), and live runs of it.

Backends (one per engine) and campaigns (which processes a device session runs, as data):

  backends/         the engines, one small object each (EngineSpec: its start, and where it differs)
                    in a registry that is the one list of engine kinds: base.py (the interface the
                    run loop drives, EngineBackend and StepTimes, and the shared hooks and probes),
                    vllm.py, sglang.py, fake.py (known costs: CPU tests, CI)
  campaigns/        a device session's queue per file (<queue name>.yaml)
  queue.py          a campaign file -> ProcessPlans in run order (`specdecsim calibrate engine-queue`)
  plans.py          which points a calibration, a few-run calibration or a live grid measures, as
                    ProcessPlans (one engine process each); the building blocks campaigns use
  shard.py          one TP rank as a model of its own (a shard's plans; profiles carried to the depth)
  run_loop.py       one measured point: a steady batch of requests decoding at a context, timed over
                    windows of engine steps (the same code for every backend)
  worker.py         one engine process: start the engine once, measure a plan's points, append each
                    as a JSON line (resumable)
  tp_launch.py      a TP group: one process a rank
  campaign.py       the processes of a calibration, a live grid or a queue, one after another
  points.py         the points file's schemas (what --from-points accepts)
  build.py          points -> an engine-native profile
  records.py        points -> live records
  device.sh         the lent GPU machine: the engine bundle installed, a queue run as a daemon
"""
