"""Calibration inside the serving engine a user deploys (vLLM today), and live runs of it.

  backend.py        the interface an engine backend offers the run loop (EngineBackend) and the
                    per-step figures it hands back (StepTimes)
  run_loop.py       one measured point: a steady batch of requests decoding at a context, timed
                    over windows of engine steps (the same code for every backend)
  vllm_backend.py   vLLM (in process): its own scheduler, model runner, CUDA graphs and sampler,
                    with CUDA events around the model runner's phases
  fake_backend.py   a fake engine with the same interface and known costs (CPU tests, CI)
  plans.py          which points a calibration, a few-run calibration or a live grid measures
  worker.py         one engine process: start the engine once, measure a plan's points, append
                    each as a JSON line (resumable)
  campaign.py       the processes of a calibration or live grid, one per engine configuration
"""
