"""vLLM as an engine backend: the engine itself (scheduler, model runner, CUDA graphs, sampler),
started in this process, driven step by step, with timers around its phases.

Started as a user would start it for an EAGLE-3 draft (`vllm.LLM` with `speculative_config`),
with three things fixed for measuring:
- dummy weights from a folder holding only config.json (`load_format="dummy"`): costs do not
  depend on the weights' values; acceptance is forced (`rejection_sample_method: synthetic`, the
  per-position rate rewritten between points in the rejection sampler's own tensor);
- the engine core in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so the hooks below see
  the model runner; what differs from `vllm serve` is that the (small) output processing of the
  front end runs in the same process as the scheduler;
- one CUDA-graph capture list for every configuration (vLLM's own default list up to 512 tokens),
  so that the torch.compile cache is shared between the baseline and every `num_steps`.

In a TP group (issue 28; calibration.engines.tp_launch starts one process a rank, each on its GPU,
with torchrun's variables) every rank starts its own engine with `tensor_parallel_size` and
`distributed_executor_backend="external_launcher"` (vLLM's torchrun mode: each rank schedules the
same steps itself, where `vllm serve`'s multiprocessing executor schedules once and sends each
step's scheduler output to its workers) and runs the same points in step; rank 0 records. The
draft's TP as asked (`draft_tensor_parallel_size`) and as built (its layers' `tp_size`) are both
recorded: 0.26's EAGLE proposers build the draft from the target's parallel config whatever is asked.

Timers (vLLM's model runner V2, vllm/v1/worker/gpu/model_runner.py, the default for dense
targets in 0.26): CUDA events at the model runner's `execute_model` entry (the step's start on
the GPU stream), around the target's graph replay (`cudagraph_manager.run_fullgraph`, or
`run_pw_graph`), around `sample` (logits and rejection sampling), around the speculator's
`propose`, its draft-prefill graph (the first draft forward, over every verified token) and its
decode graphs (the other num_steps - 1 draft forwards); on the host, the time `AsyncOutput.
get_output` waits for the GPU's output copy. Every hook that could not be installed is named in
`EngineInfo.hooks` / `notes`, and the points then lack that part rather than carry a wrong one.

Model runner V1 (vllm/v1/worker/gpu_model_runner.py: what 0.26 runs MoE targets such as
Qwen3-30B-A3B on) is timed at the same places by its own names: `execute_model`, `_model_forward`
(the target's forward; padded tokens from its `input_ids`), `_sample`, `propose_draft_token_ids`
(the drafter), the drafter's model calls (the first of a step its draft prefill over the verified
tokens, the rest its decode steps) and `AsyncGPUModelRunnerOutput.get_output`'s wait.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from calibration.engines.backends.base import (EngineInfo, EngineSpec, RecordingWindow, StepTimes, module_tp_size,
                                               wrap_method, window_step_times)

US_PER_S = 1e6
ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
       "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
EVENT_NAMES = ("exec", "fwd0", "fwd1", "smp0", "smp1", "prop0", "prop1", "ext0", "ext1", "dec0", "dec1")


def default_capture_sizes(max_size: int = 512) -> list[int]:
    """vLLM's default CUDA-graph capture sizes (vllm/config/vllm.py `_set_cudagraph_sizes`): 1, 2, 4,
    multiples of 8 below 256, then multiples of 16 up to max_size."""
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, max_size + 1, 16))
    return [s for s in sizes if s <= max_size]


def write_model_dirs(root: Path, target_config: dict, draft_config: dict | None) -> tuple[Path, Path | None]:
    """Folders holding only a config.json each (dummy weights need nothing else)."""
    out = []
    for name, cfg in (("target", target_config), ("draft", draft_config)):
        if cfg is None:
            out.append(None)
            continue
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg, indent=1))
        out.append(d)
    return out[0], out[1]


# vLLM's own MoE routing simulator (vllm/model_executor/layers/fused_moe/router/router_factory.py: with this
# set every FusedMoE layer routes through RoutingSimulatorRouter, whose "uniform_random" strategy draws each
# token's top-k experts uniformly): dummy weights' routers would not spread tokens as real traffic does
VLLM_UNIFORM_ROUTING = {"VLLM_MOE_ROUTING_SIMULATION_STRATEGY": "uniform_random"}


def llm_kwargs(target_dir: Path, draft_dir: Path | None, num_steps: int, *, max_model_len: int, max_num_seqs: int,
               gpu_memory_utilization: float, capture_sizes: list[int], seed: int = 0, initial_acceptance: float = 0.7,
               tp_size: int | None = None, draft_tp_size: int | None = None,
               mla_attention_backend: str | None = None) -> dict:
    """`vllm.LLM`'s arguments for a target (dummy weights) and, with `num_steps`, its EAGLE-3 draft at
    synthetic acceptance; `tp_size`: a rank of a TP group (torchrun's way: external_launcher);
    `mla_attention_backend`: the target's MLA layers' backend (the draft's attention stays vLLM's pick)."""
    kwargs = dict(model=str(target_dir), load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16",
                  max_model_len=max_model_len, max_num_seqs=max_num_seqs, seed=seed,
                  gpu_memory_utilization=gpu_memory_utilization,
                  compilation_config={"cudagraph_capture_sizes": list(capture_sizes)})
    if mla_attention_backend:
        kwargs["attention_config"] = {"backend_per_kind": {"mla_attention": mla_attention_backend}}
    if tp_size is not None:
        kwargs.update(tensor_parallel_size=tp_size, distributed_executor_backend="external_launcher")
    if num_steps:
        kwargs["speculative_config"] = {
            "method": "eagle3", "model": str(draft_dir), "num_speculative_tokens": num_steps,
            "rejection_sample_method": "synthetic",
            "synthetic_acceptance_rates": [initial_acceptance ** (i + 1) for i in range(num_steps)]}
        if draft_tp_size is not None:
            kwargs["speculative_config"]["draft_tensor_parallel_size"] = int(draft_tp_size)
    return kwargs


class VllmBackend(RecordingWindow):
    """One vLLM engine (a target, and an EAGLE-3 draft with `num_steps` when > 0), in process; in a
    TP group one rank's engine (`external_launcher`: every rank schedules the same steps itself)."""

    spmd = True

    def __init__(self, target_dir: Path, draft_dir: Path | None, num_steps: int, *, max_model_len: int,
                 max_num_seqs: int, gpu_memory_utilization: float, capture_sizes: list[int], seed: int = 0,
                 initial_acceptance: float = 0.7, tp_size: int = 1, draft_tp_size: int | None = None,
                 mla_attention_backend: str | None = None):
        for k, v in ENV.items():
            os.environ.setdefault(k, v)
        import torch
        import vllm
        from vllm import LLM

        self._torch = torch
        self.num_steps = num_steps
        self.max_model_len = max_model_len
        from calibration.engines.tp_launch import in_group
        if tp_size != 1 and not in_group():
            raise ValueError(f"tp_size {tp_size}: a TP group runs as one process a rank "
                             "(calibration.engines.tp_launch)")
        kwargs = llm_kwargs(target_dir, draft_dir, num_steps, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                            gpu_memory_utilization=gpu_memory_utilization, capture_sizes=capture_sizes, seed=seed,
                            initial_acceptance=initial_acceptance, tp_size=tp_size if in_group() else None,
                            draft_tp_size=draft_tp_size, mla_attention_backend=mla_attention_backend)
        t0 = time.perf_counter()
        self.llm = LLM(**kwargs)
        startup_s = time.perf_counter() - t0
        self.engine = self.llm.llm_engine
        from vllm.sampling_params import RequestOutputKind, SamplingParams
        self._params = lambda n: SamplingParams(max_tokens=n, ignore_eos=True, temperature=0.0,
                                                output_kind=RequestOutputKind.DELTA)
        self._next_id = 0
        self._recording = False
        self._instrument = False
        self._steps: list[dict] = []
        self._events: list[dict] = []
        self._info = EngineInfo(engine="vllm", engine_version=vllm.__version__, startup_s=startup_s,
                                gpu_name=torch.cuda.get_device_name(), torch_version=torch.__version__,
                                cuda_version=str(torch.version.cuda), max_num_seqs=max_num_seqs, tp_size=tp_size)
        self.runner = self._model_runner()
        self._describe()
        self._describe_draft_tp(draft_tp_size)
        self._install_hooks()
        self._scheduled: list[list[int]] = []
        self._hook_scheduler()

    # ---- set-up ------------------------------------------------------------------------------
    def _model_runner(self):
        ex = getattr(self.engine, "model_executor", None)
        for path in (("driver_worker", "worker", "model_runner"), ("driver_worker", "model_runner")):
            obj = ex
            for name in path:
                obj = getattr(obj, name, None)
            if obj is not None:
                return obj
        raise RuntimeError("vLLM's model runner is not reachable in process (is VLLM_ENABLE_V1_MULTIPROCESSING=0?)")

    def _describe(self) -> None:
        info, cfg = self._info, self.engine.vllm_config
        info.model_runner = f"{type(self.runner).__module__}.{type(self.runner).__name__}"
        info.cudagraph_mode = str(getattr(cfg.compilation_config, "cudagraph_mode", ""))
        info.cudagraph_capture_sizes = list(getattr(cfg.compilation_config, "cudagraph_capture_sizes", None) or [])
        info.async_scheduling = bool(getattr(cfg.scheduler_config, "async_scheduling", False))
        info.max_num_batched_tokens = int(getattr(cfg.scheduler_config, "max_num_batched_tokens", 0) or 0)
        info.mixed_prefill = bool(getattr(cfg.scheduler_config, "enable_chunked_prefill", True))
        prefix = getattr(getattr(cfg, "cache_config", None), "enable_prefix_caching", None)
        info.enable_prefix_caching = None if prefix is None else bool(prefix)
        info.notes.append(f"scheduler: max_num_batched_tokens {info.max_num_batched_tokens}, chunked prefill "
                          f"{getattr(cfg.scheduler_config, 'enable_chunked_prefill', None)}, prefix caching {prefix}")
        try:
            info.attention_backend = self.runner.attn_groups[0][0].backend.get_name()
        except Exception as e:  # noqa: BLE001 - recorded, not fatal
            info.notes.append(f"attention backend not read: {e!r}")

    def _describe_draft_tp(self, asked: int | None) -> None:
        """The draft's TP as built: read from the drafter's layers (model runner V2's speculator or
        V1's drafter), not from the config (vLLM 0.26 accepts draft_tensor_parallel_size 1 for an
        EAGLE-3 draft and builds the draft in the target's group all the same: its proposers build the
        draft from the target's parallel config; only the draft-model proposer reads the draft's)."""
        if not self.num_steps:
            return
        r = self.runner
        holder = getattr(r, "speculator", None) or getattr(r, "drafter", None)
        n = module_tp_size(getattr(holder, "model", None))
        self._info.draft_tp_size = n
        cfg = getattr(self.engine.vllm_config, "speculative_config", None)
        said = getattr(getattr(cfg, "draft_parallel_config", None), "tensor_parallel_size", None)
        self._info.notes.append(f"draft TP: asked {asked if asked is not None else 'default'}, config {said}, "
                                f"layers built for {n if n is not None else 'unknown'}")

    def _wrap(self, obj, name: str, label: str, before=None, after=None) -> bool:
        return wrap_method(obj, name, label, self._info, lambda: self._recording, before, after)

    def _install_hooks(self) -> None:
        r = self.runner
        if getattr(r, "speculator", None) is None and hasattr(r, "_model_forward"):
            self._install_v1_hooks()
            return
        self._wrap(r, "execute_model", "execute_model", before=self._on_exec)
        cg = getattr(r, "cudagraph_manager", None)
        self._wrap(cg, "run_fullgraph", "target_full_graph", before=self._ev("fwd0", pad=True), after=self._ev("fwd1"))
        self._wrap(cg, "run_pw_graph", "target_piecewise_graph", before=self._ev("fwd0"), after=self._ev("fwd1"))
        self._wrap(r, "sample", "sample", before=self._ev("smp0"), after=self._ev("smp1"))
        spec = getattr(r, "speculator", None)
        if self.num_steps and spec is not None:
            self._wrap(spec, "propose", "propose", before=self._ev("prop0"), after=self._ev("prop1"))
            pre = getattr(spec, "prefill_cudagraph_manager", None)
            self._wrap(pre, "run_fullgraph", "draft_prefill_graph", before=self._ev("ext0", pad=True, key="ext"),
                       after=self._ev("ext1"))
            dec = getattr(spec, "decode_cudagraph_manager", None)
            self._wrap(dec, "run_fullgraph", "draft_decode_graph", before=self._ev("dec0", first=True),
                       after=self._ev("dec1"))
        elif self.num_steps:
            self._info.notes.append("no V2 speculator on the model runner: draft phases not timed")
        self._time_output_wait("vllm.v1.worker.gpu.async_utils", "AsyncOutput", "copy_event")

    def _time_output_wait(self, module: str, owner: str, event: str) -> None:
        """The host's wait on the GPU's output copy: `module.owner.get_output` waits on its `event`."""
        try:
            import importlib
            cls = getattr(importlib.import_module(module), owner)
            orig, backend = cls.get_output, self

            def get_output(out_self):
                if backend._recording and backend._steps:
                    t0 = time.perf_counter()
                    getattr(out_self, event).synchronize()
                    backend._steps[-1]["blocked_s"] = backend._steps[-1].get("blocked_s", 0.0) + time.perf_counter() - t0
                return orig(out_self)
            cls.get_output = get_output
            self._info.hooks.append("host_blocked")
        except Exception as e:  # noqa: BLE001
            self._info.notes.append(f"hook host_blocked not installed: {e!r}")

    def _install_v1_hooks(self) -> None:
        """Model runner V1's phases (module docstring)."""
        r = self.runner
        self._info.notes.append("model runner V1 (vllm/v1/worker/gpu_model_runner.py)")
        self._wrap(r, "execute_model", "execute_model", before=self._on_exec)
        self._wrap(r, "_model_forward", "target_forward", before=self._ev_kw("fwd0", "fwd"), after=self._ev("fwd1"))
        self._wrap(r, "_sample", "sample", before=self._ev("smp0"), after=self._ev("smp1"))
        if self.num_steps:
            self._wrap(r, "propose_draft_token_ids", "propose", before=self._ev("prop0"), after=self._ev("prop1"))
            drafter = getattr(r, "drafter", None)
            model = getattr(drafter, "model", None)
            if model is not None:
                drafter.model = _TimedDraftModel(model, self)
                self._info.hooks.append("draft_forwards")
            else:
                self._info.notes.append("hook draft_forwards: the drafter's model not found")
        self._time_output_wait("vllm.v1.worker.gpu_model_runner", "AsyncGPUModelRunnerOutput", "async_copy_ready_event")

    def _ev_kw(self, name: str, key: str):
        """An event hook that also records the forward's padded tokens from its `input_ids`."""
        ev = self._ev(name)

        def hook(args, kwargs, out=None):
            ev(args, kwargs, out)
            ids = kwargs.get("input_ids")
            if ids is None:
                ids = kwargs.get("positions")
            if self._instrument and self._steps and "ev" in self._steps[-1] and hasattr(ids, "shape"):
                self._steps[-1][f"{key}_tokens"] = int(ids.shape[-1])
        return hook

    # ---- hooks -------------------------------------------------------------------------------
    def _on_exec(self, args, kwargs) -> None:
        if kwargs.get("dummy_run"):
            return
        self._begin_step()

    def _ev(self, name: str, pad: bool = False, first: bool = False, key: str = "fwd"):
        def hook(args, kwargs, out=None):
            if not self._instrument or not self._steps or "ev" not in self._steps[-1]:
                return
            evs = self._steps[-1]["ev"]
            if first and name in evs:
                return
            ev = evs.get(name) or self._torch.cuda.Event(enable_timing=True)
            ev.record()
            evs[name] = ev
            if pad and args:
                n = getattr(args[0], "num_tokens", None)
                if n is not None:
                    self._steps[-1][f"{key}_tokens"] = int(n)
        return hook

    def _hook_scheduler(self) -> None:
        """What the scheduler places in each step (request-level runs: prefill chunks beside decodes): per
        schedule call [total tokens, requests, the largest request's tokens]."""
        core = getattr(getattr(self.engine, "engine_core", None), "engine_core", None)
        sched = getattr(core, "scheduler", None)
        orig = getattr(sched, "schedule", None)
        if orig is None:
            self._info.notes.append("hook scheduler: the engine core's scheduler is not reachable in process")
            return

        def schedule(*args, **kwargs):
            out = orig(*args, **kwargs)
            n = getattr(out, "num_scheduled_tokens", None) or {}
            if self._recording:
                self._scheduled.append([int(getattr(out, "total_num_scheduled_tokens", 0) or 0), len(n),
                                    int(max(n.values())) if n else 0])
            return out
        sched.schedule = schedule
        self._info.hooks.append("scheduler")

    def last_scheduled(self) -> list[list[int]]:
        """The schedule calls since the last read ([total tokens, requests, largest request's tokens] each)."""
        out, self._scheduled = self._scheduled, []
        return out

    # ---- EngineBackend -----------------------------------------------------------------------
    def info(self) -> EngineInfo:
        return self._info

    def clock_us(self) -> float:
        return time.perf_counter() * US_PER_S

    def start_clock_us(self) -> float:
        return time.perf_counter() * US_PER_S

    def set_acceptance(self, acceptance_rate: float | None) -> None:
        if not self.num_steps or acceptance_rate is None:
            return
        rates = getattr(getattr(self.runner, "rejection_sampler", None), "synthetic_conditional_rates", None)
        if rates is None:
            raise RuntimeError("the rejection sampler holds no synthetic acceptance rates "
                               "(rejection_sample_method 'synthetic' not in effect)")
        rates.fill_(float(acceptance_rate))  # conditional per position: i.i.d. acceptance

    def add_requests(self, prompts: list[list[int]], max_tokens: int) -> list[str]:
        raw = [{"prompt_token_ids": list(p)} for p in prompts]
        render = getattr(self.llm, "_preprocess_cmpl", None)  # what LLM.generate passes to add_request
        inputs = list(render(raw)) if render is not None else raw
        ids = []
        for inp in inputs:
            rid = f"r{self._next_id}"
            self._next_id += 1
            self.engine.add_request(rid, inp, self._params(max_tokens))
            ids.append(rid)
        return ids

    def step(self) -> dict[str, int]:
        return {o.request_id: len(o.outputs[0].token_ids) for o in self.engine.step() if o.outputs}

    def abort(self, request_ids: list[str]) -> None:
        self.engine.abort_request(list(request_ids))
        for _ in range(1000):
            if not self.engine.has_unfinished_requests():
                return
            self.engine.step()

    def end_window(self) -> list[StepTimes]:
        return window_step_times(self._close_window(), {"target_tokens_padded": "fwd_tokens",
                                                        "draft_extend_tokens_padded": "ext_tokens"})

    def shutdown(self) -> None:
        try:
            self.engine.engine_core.shutdown()
        except Exception:  # noqa: BLE001 - the process ends next
            pass


class _TimedDraftModel:
    """Stands in for model runner V1's drafter model: its first call in a step is the draft prefill
    (events ext0/ext1 and its padded tokens), the later ones the draft decode steps (dec0 at the
    first, dec1 after the last); everything else is the model's own."""

    def __init__(self, model, backend: VllmBackend):
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "_backend", backend)

    def __call__(self, *args, **kwargs):
        b = self._backend
        live = b._recording and b._instrument and b._steps and "ev" in b._steps[-1]
        first = live and "ext0" not in b._steps[-1]["ev"]
        if live:
            (b._ev_kw("ext0", "ext") if first else b._ev("dec0", first=True))(args, kwargs)
        out = self._model(*args, **kwargs)
        if live:
            b._ev("ext1" if first else "dec1")(args, kwargs, out)
        return out

    @property
    def __class__(self):  # isinstance checks see the model's class (the proposer asserts an EAGLE-3 model)
        return type(self._model)

    def __getattr__(self, name):
        return getattr(self._model, name)

    def __setattr__(self, name, value):
        setattr(self._model, name, value)


def start(plan, workdir: Path, rank: int = 0) -> VllmBackend:
    """The plan's vLLM engine, from folders holding the models' config.json under workdir."""
    if plan.uniform_expert_routing:  # vLLM's own routing simulator (router_factory), read at model build
        os.environ.update(VLLM_UNIFORM_ROUTING)
    target, draft = write_model_dirs(workdir / plan.label, plan.target_config,
                                     plan.draft_config if plan.num_steps else None)
    backend = VllmBackend(target, draft, plan.num_steps, max_model_len=plan.max_model_len,
                          max_num_seqs=plan.max_num_seqs, gpu_memory_utilization=plan.gpu_memory_utilization,
                          capture_sizes=plan.capture_sizes or default_capture_sizes(), seed=plan.prompt_seed,
                          tp_size=plan.tensor_parallel_size, draft_tp_size=plan.draft_tensor_parallel_size,
                          mla_attention_backend=plan.mla_attention_backend)
    if plan.uniform_expert_routing:
        backend.info().notes.append(
            "uniform expert routing: vLLM's routing simulator (VLLM_MOE_ROUTING_SIMULATION_STRATEGY="
            "uniform_random: each token's top-k experts drawn uniformly, with replacement)")
    return backend


SPEC = EngineSpec("vllm", start, serving_kind="vllm", requires=("torch", "vllm"), mla_attention_backend=True,
                  prefill_graph_edge=True)
