"""SGLang as an engine backend: its own scheduler (event loop, overlap scheduling, CUDA graphs,
EAGLE worker), started in this process and fed requests directly, with timers around its phases.

Started as a user would start `python -m sglang.launch_server` for an EAGLE-3 draft
(`speculative_algorithm EAGLE3`, `speculative_num_steps`, `speculative_eagle_topk`,
`speculative_num_draft_tokens`), with these things fixed for measuring:
- dummy weights from a folder holding only config.json (`load_format="dummy"`, the draft
  inherits it), no tokenizer (`skip_tokenizer_init`), no grammar backend;
- forced acceptance through SGLang's own `SGLANG_SIMULATE_ACC_LEN` (the mean accept length,
  bonus token included; `match-expected` draws the floor or the ceiling so the mean is exact).
  SGLang draws ONE length per verify step for the whole batch, where vLLM draws per request: the
  points record what was drawn (the tokens each request emitted per step);
- the scheduler (`sglang.srt.managers.scheduler.Scheduler`) in this process, its own event loop
  (`run_event_loop`: the overlap loop unless `disable_overlap_schedule`) in a thread; requests go
  in through its request receiver and come out through its output sender, both replaced by
  queues, in place of the tokenizer manager and detokenizer processes of `launch_server`;
- the watchdog off (it would signal this process's parent).

In a TP group (issue 28; calibration.engines.tp_launch starts one process a rank, each on its
GPU) every rank builds its own Scheduler (`tp_rank`, `gpu_id`, the group joined at the launcher's
port), as `launch_server --tp N` does in its scheduler processes. Rank 0 alone is fed: its request
receiver reads this backend's inbox where SGLang's reads its socket, and SGLang's own broadcast
hands every request, abort, acceptance change and the final ShutdownReq to all ranks on the same
loop iteration (SGLang's simulated accept length is drawn on each rank from the same seed). The
EAGLE draft runs in the target's group (SGLang has no draft TP setting); the TP its layers were
built for is recorded.

Timers, all in the scheduler's thread: CUDA events at the EAGLE worker's (or, for the baseline,
the target worker's) `forward_batch_generation` entry for a decode batch (the step's start on the
GPU stream), around `draft` (the num_steps - 1 draft forwards from the last draft extend's
output), the target model runner's `forward` (the verify over batch x num_draft_tokens tokens, or
the baseline decode), `eagle_sample` (or the baseline's `sample`), and `_draft_extend_for_decode`
(the draft over the verified tokens, which proposes the next first draft token); on the host, the
time `process_batch_result_decode` waits for the GPU's output copy (`copy_done`). The step clock
is the scheduler thread's own: the time each step's output left the scheduler.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from array import array
from pathlib import Path

from calibration.engines.backends.base import (EngineInfo, EngineSpec, RecordingWindow, StepTimes, fastest_cpu,
                                               host_speed_probe_us, module_tp_size, thread_cpu, wrap_method,
                                               window_step_times)
from calibration.engines.backends.sglang_model import check_sglang_model, stub_dsa_backend, uniform_routing
from simulator.acceptance import iid_mean_accept_length

US_PER_S = 1e6
STEP_TIMEOUT_S = 300.0  # an engine step that takes this long has hung
ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
       "SGLANG_SIMULATE_ACC_METHOD": "match-expected"}


iid_accept_length = iid_mean_accept_length  # the mean accept length SGLANG_SIMULATE_ACC_LEN is set to


class _Control:
    """A setting for every rank of a TP group, carried with the requests (`_install_group_io`)."""

    def __init__(self, what: str, value=None):
        self.what, self.value = what, value


def note_blocked(backend, result) -> None:
    """In SGLang's `process_batch_result_decode` (the scheduler's thread): the time the host waits for the step's
    output copy, added to the window's last step. The window's list is taken before the wait: the runner's thread
    may close the window and start the next one while this thread waits (a run's last steps, a batch ahead), and
    before 2026-12-07 the hook then read the new, empty list and stopped the scheduler with an IndexError (5 times
    in the queue sglang-h100-requests-warm, campaign_warm_2026-12-07.log.gz)."""
    steps = backend._steps
    if not backend._recording or not steps or getattr(result, "copy_done", None) is None:
        return
    t0 = time.perf_counter()
    result.copy_done.synchronize()
    steps[-1]["blocked_s"] = steps[-1].get("blocked_s", 0.0) + time.perf_counter() - t0


class SglangBackend(RecordingWindow):
    """One SGLang scheduler (a target, and an EAGLE-3 draft with `num_steps` when > 0), in process; in a
    TP group one rank's scheduler (rank 0 is driven; the others `serve`)."""

    spmd = False
    sends_at_arrival = True  # its scheduler reads the inbox in its own thread: a Poisson run sends at arrival

    def __init__(self, target_dir: Path, draft_dir: Path | None, num_steps: int, *, max_model_len: int,
                 max_num_seqs: int, mem_fraction_static: float, topk: int = 1, num_draft_tokens: int | None = None,
                 overlap: bool = True, seed: int = 0, initial_acceptance: float = 0.7,
                 capture_sizes: list[int] | None = None, uniform_expert_routing: bool = False,
                 max_total_tokens: int | None = None, cuda_graphs: bool = True, tp_size: int = 1, rank: int = 0):
        for k, v in ENV.items():
            os.environ.setdefault(k, v)
        from calibration.engines.tp_launch import in_group
        self.group = in_group()  # a rank of a TP group (calibration.engines.tp_launch)
        if tp_size != 1 and not self.group:
            raise ValueError(f"tp_size {tp_size}: a TP group runs as one process a rank "
                             "(calibration.engines.tp_launch)")
        self.rank, self.tp_size = int(rank), int(tp_size)
        self.num_steps, self.topk = num_steps, topk
        self.num_draft_tokens = (num_draft_tokens or num_steps + 1) if num_steps else 1
        if num_steps:  # read when SGLang's speculative modules are first imported
            os.environ["SGLANG_SIMULATE_ACC_LEN"] = f"{iid_accept_length(initial_acceptance, num_steps):.6f}"
        import torch
        import sglang
        from sglang.srt.entrypoints import engine as sgl_engine
        from sglang.srt.managers.scheduler import Scheduler
        from sglang.srt.server_args import PortArgs, ServerArgs

        self._torch = torch
        stubbed = stub_dsa_backend()
        routing_note = uniform_routing() if uniform_expert_routing else None
        kwargs = dict(model_path=str(target_dir), load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16",
                      context_length=max_model_len, max_running_requests=max_num_seqs,
                      mem_fraction_static=mem_fraction_static, random_seed=seed,
                      disable_overlap_schedule=not overlap, watchdog_timeout=1e9, grammar_backend="none",
                      log_level="warning")
        if capture_sizes:
            kwargs.update(cuda_graph_bs_decode=sorted(capture_sizes))
        if max_total_tokens:
            kwargs.update(max_total_tokens=max_total_tokens)
        if not cuda_graphs:
            kwargs.update(disable_cuda_graph=True)
        if self.group:  # SGLang's own TP: every rank a scheduler, joined at the launcher's port
            kwargs.update(tp_size=self.tp_size, nccl_port=int(os.environ["MASTER_PORT"]))
        if num_steps:
            kwargs.update(speculative_algorithm="EAGLE3", speculative_draft_model_path=str(draft_dir),
                          speculative_num_steps=num_steps, speculative_eagle_topk=topk,
                          speculative_num_draft_tokens=self.num_draft_tokens)
        t0 = time.perf_counter()
        sa = ServerArgs(**kwargs)
        from sglang.srt.utils.common import configure_logger
        configure_logger(sa)
        sgl_engine._set_envs_and_config(sa)
        sa.check_server_args()
        pa = PortArgs.init_new(sa)
        torch.cuda.set_device(self.rank)
        self.sched = Scheduler(sa, pa, gpu_id=self.rank, tp_rank=self.rank, moe_ep_rank=0, pp_rank=0,
                               attn_cp_rank=0, moe_dp_rank=0, dp_rank=None)
        self.server_args = sa
        model_class = check_sglang_model(self.sched.tp_worker.model_runner.model)
        self.vocab_size = int(self.sched.model_config.vocab_size)
        self._info = EngineInfo(engine="sglang", engine_version=sglang.__version__,
                                gpu_name=torch.cuda.get_device_name(), torch_version=torch.__version__,
                                cuda_version=str(torch.version.cuda), max_num_seqs=max_num_seqs,
                                async_scheduling=bool(overlap), tp_size=self.tp_size)
        self._info.notes.append(f"target class {model_class}")
        for note in (stubbed, routing_note):
            if note:
                self._info.notes.append(note)
        engine_env = {k: v for k, v in os.environ.items() if k.startswith("SGLANG_")}
        self._info.notes.append("SGLANG_* settings: " + ", ".join(f"{k}={v}" for k, v in sorted(engine_env.items())))
        self._next_id = 0
        self._recording = False
        self._instrument = False
        self._steps: list[dict] = []
        self._clock_s = time.perf_counter()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._probe_out: queue.SimpleQueue = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._error_where = ""
        self._describe()
        self._install_hooks()
        self._install_group_io() if self.group else self._install_io()
        self._thread = threading.Thread(target=self._loop, name="sglang-scheduler", daemon=True)
        self._thread.start()
        self._info.startup_s = time.perf_counter() - t0

    # ---- set-up ------------------------------------------------------------------------------
    def _describe(self) -> None:
        info, sa, s = self._info, self.server_args, self.sched
        info.attention_backend = str(getattr(sa, "attention_backend", "") or "")
        worker = getattr(s, "draft_worker", None) if self.num_steps else None
        info.model_runner = f"{type(s).__module__}.{type(s).__name__} + " + (
            f"{type(worker).__name__}" if worker is not None else type(s.tp_worker).__name__)
        info.notes.append(f"overlap scheduler {'on' if s.enable_overlap else 'off'}; topk {self.topk}, "
                          f"num_draft_tokens {self.num_draft_tokens}")
        if worker is not None:  # the draft's TP as built (SGLang has no draft TP setting: the target's group)
            dr = getattr(getattr(worker, "draft_worker", worker), "draft_runner", None) or getattr(
                getattr(worker, "draft_worker", worker), "model_runner", None)
            info.draft_tp_size = module_tp_size(getattr(dr, "model", None)) or getattr(dr, "tp_size", None)
            info.notes.append(f"draft TP: layers built for {info.draft_tp_size or 'unknown'}")
        # SGLang's prefill batch: requests added first come first served while the chunk
        # (chunked_prefill_size) and max_prefill_tokens last; a longer prompt is cut at what is left
        # of the chunk. Without enable_mixed_chunk a prefill batch runs alone (decode waits).
        chunk, most = int(getattr(sa, "chunked_prefill_size", 0) or 0), int(getattr(sa, "max_prefill_tokens", 0) or 0)
        info.max_num_batched_tokens = min(x for x in (chunk, most) if x > 0) if (chunk > 0 or most > 0) else 0
        info.mixed_prefill = bool(getattr(sa, "enable_mixed_chunk", False))
        info.enable_prefix_caching = not bool(getattr(sa, "disable_radix_cache", False))
        info.notes.append(f"scheduler: chunked_prefill_size {chunk}, max_prefill_tokens {most}, enable_mixed_chunk "
                          f"{info.mixed_prefill}, radix cache {info.enable_prefix_caching}")
        runner = s.tp_worker.model_runner
        graphs = getattr(runner, "decode_cuda_graph_runner", None)
        sizes = list(getattr(graphs, "capture_bs", None) or [])
        info.cudagraph_capture_sizes = [int(b) for b in sizes]  # batch sizes (SGLang's cuda_graph_bs), not tokens
        info.cudagraph_mode = (f"decode graphs by batch size ({min(sizes)}-{max(sizes)}, "
                               f"{self.num_draft_tokens} tokens each)" if sizes else "no decode graphs")

    def _wrap(self, obj, name: str, label: str, before=None, after=None) -> bool:
        return wrap_method(obj, name, label, self._info, lambda: self._recording, before, after)

    def _install_hooks(self) -> None:
        s = self.sched
        target = s.tp_worker
        runner = target.model_runner
        if self.num_steps:
            spec = s.draft_worker
            self._wrap(spec, "forward_batch_generation", "spec_step", before=self._on_step)
            dw = spec.draft_worker
            self._wrap(dw, "draft", "draft", before=self._ev("dec0"), after=self._ev("dec1"))
            self._wrap(dw, "_draft_extend_for_decode", "draft_extend", before=self._ev("ext0"), after=self._ev("ext1"))
            try:
                from sglang.srt.speculative import eagle_worker_v2
                orig_sample = eagle_worker_v2.eagle_sample
                backend = self

                def eagle_sample(*args, **kwargs):
                    backend._ev("smp0")(args, kwargs)
                    out = orig_sample(*args, **kwargs)
                    backend._ev("smp1")(args, kwargs, out)
                    return out
                eagle_worker_v2.eagle_sample = eagle_sample
                self._info.hooks.append("eagle_sample")
            except Exception as e:  # noqa: BLE001 - recorded, not fatal
                self._info.notes.append(f"hook eagle_sample not installed: {e!r}")
        else:
            self._wrap(target, "forward_batch_generation", "decode_step", before=self._on_step)
            self._wrap(runner, "sample", "sample", before=self._ev("smp0"), after=self._ev("smp1"))
        self._wrap(runner, "forward", "target_forward", before=self._ev("fwd0"), after=self._on_forward_done)
        cls = type(s.batch_result_processor)  # a frozen, slotted dataclass: patched on the class
        orig_decode = cls.process_batch_result_decode
        backend = self

        def process_batch_result_decode(proc, batch, result, *args, **kwargs):
            note_blocked(backend, result)
            return orig_decode(proc, batch, result, *args, **kwargs)
        cls.process_batch_result_decode = process_batch_result_decode
        self._info.hooks.append("host_blocked")

    def _install_io(self) -> None:
        from sglang.srt.managers.scheduler_components.request_receiver import SchedulerRequestReceiver
        backend = self

        def recv_requests(_self):
            return backend._take_controls(backend._drain())
        SchedulerRequestReceiver.recv_requests = recv_requests  # frozen, slotted: patched on the class
        ch = self.sched.ipc_channels

        def send_output(output, recv_obj=None):
            if hasattr(output, "rids") and getattr(output, "output_ids", None) is not None:
                backend._outbox.put((time.perf_counter(), output))
        ch.send_to_detokenizer.send_output = send_output
        ch.send_to_tokenizer.send_output = send_output

    def _install_group_io(self) -> None:
        """A TP group's request path: rank 0's receiver reads the inbox where SGLang's reads its
        socket, and SGLang's own `recv_requests` broadcasts what it read to every rank (so every
        rank takes a request, an abort, an acceptance change or the ShutdownReq on the same loop
        iteration); `_Control` items are applied on every rank and not handed to the scheduler."""
        from sglang.srt.managers.scheduler_components.request_receiver import SchedulerRequestReceiver
        backend = self

        def _pull_raw_reqs(_self):
            return backend._drain() if backend.rank == 0 else None
        orig_recv = SchedulerRequestReceiver.recv_requests

        def recv_requests(_self):
            return backend._take_controls(orig_recv(_self))
        SchedulerRequestReceiver._pull_raw_reqs = _pull_raw_reqs  # frozen, slotted: patched on the class
        SchedulerRequestReceiver.recv_requests = recv_requests
        ch = self.sched.ipc_channels

        def send_output(output, recv_obj=None):
            if backend.rank == 0 and hasattr(output, "rids") and getattr(output, "output_ids", None) is not None:
                backend._outbox.put((time.perf_counter(), output))
        ch.send_to_detokenizer.send_output = send_output
        ch.send_to_tokenizer.send_output = send_output
        self._info.notes.append(f"TP group rank {self.rank} of {self.tp_size}: requests broadcast by SGLang's own "
                                "receiver")

    def _drain(self) -> list:
        out = []
        while True:
            try:
                out.append(self._inbox.get_nowait())
            except queue.Empty:
                return out

    def _take_controls(self, reqs: list) -> list:
        """The requests the scheduler gets: the `_Control` items among them applied here (the scheduler's
        thread) and taken out."""
        if not any(isinstance(r, _Control) for r in reqs):
            return reqs
        for r in reqs:
            if isinstance(r, _Control):
                self._apply(r)
        return [r for r in reqs if not isinstance(r, _Control)]

    def _apply(self, ctl: "_Control") -> None:
        """A control item, in the scheduler's thread (every rank's, in a group)."""
        if ctl.what == "acceptance":
            from sglang.srt.speculative import spec_utils
            spec_utils.SIMULATE_ACC_LEN = float(ctl.value)  # read per verify
        elif ctl.what == "probe" and self.rank == 0:
            self._probe_out.put((host_speed_probe_us(), thread_cpu()))
        elif ctl.what == "pin":  # every rank's scheduler thread to its fastest CPU; rank 0 answers
            pinned = fastest_cpu()
            if self.rank == 0:
                self._probe_out.put(pinned)

    def host_probe(self) -> tuple[float, int | None]:
        """The scheduler thread's core speed (backend.host_speed_probe_us, run in that thread between its
        loop iterations) and the CPU it ran on; what a host-bound SGLang step follows."""
        self._inbox.put(_Control("probe"))
        return self._probe_out.get(timeout=STEP_TIMEOUT_S)

    def pin_fastest_cpu(self) -> tuple[int, dict[int, float]]:
        """Pin the scheduler thread (the one that steps SGLang) to the CPU that runs the host probe
        fastest now (backend.fastest_cpu, in that thread); that CPU and each one's probe."""
        self._inbox.put(_Control("pin"))
        return self._probe_out.get(timeout=STEP_TIMEOUT_S)

    def serve(self) -> None:
        """A TP group's rank other than 0: run until rank 0's ShutdownReq reaches this rank's loop.

        Raises:
            RuntimeError: the scheduler stopped on an error.
        """
        self._thread.join()
        if self._error is not None:
            raise RuntimeError(f"SGLang's scheduler stopped: {self._error!r}")

    def _loop(self) -> None:
        try:
            self._torch.cuda.set_device(self.rank)
            self.sched.run_event_loop()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's next step
            import traceback
            self._error = e
            frames = traceback.extract_tb(e.__traceback__)[-4:]  # where in SGLang: kept in the point's error line
            self._error_where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames))
        finally:
            self._outbox.put(None)

    # ---- hooks (scheduler thread) --------------------------------------------------------------
    def _on_step(self, args, kwargs) -> None:
        batch = args[0] if args else kwargs.get("batch")
        mode = getattr(batch, "forward_mode", None)
        if mode is None or not mode.is_decode():
            return
        self._begin_step()

    def _ev(self, name: str):
        def hook(args, kwargs, out=None):
            steps = self._steps  # this window's list: the runner's thread may start a new one meanwhile
            if not self._instrument or not steps or "ev" not in steps[-1]:
                return
            evs = steps[-1]["ev"]
            if name in evs:  # the first forward of the step only (a prefill inside a step is not one)
                return
            ev = self._torch.cuda.Event(enable_timing=True)
            ev.record()
            evs[name] = ev
        return hook

    def _on_forward_done(self, args, kwargs, out) -> None:
        self._ev("fwd1")(args, kwargs, out)
        steps = self._steps
        if not steps or "tokens" in steps[-1]:
            return
        graphs = getattr(self.sched.tp_worker.model_runner, "decode_cuda_graph_runner", None)
        if getattr(out, "can_run_graph", False) and graphs is not None and getattr(graphs, "bs", None):
            steps[-1]["tokens"] = int(graphs.bs) * self.num_draft_tokens
        else:
            steps[-1]["tokens"] = None

    # ---- EngineBackend -----------------------------------------------------------------------
    def info(self) -> EngineInfo:
        return self._info

    def clock_us(self) -> float:
        """The time the last step's output left the scheduler (its thread's clock), us."""
        return self._clock_s * US_PER_S

    def start_clock_us(self) -> float:
        """The time now on clock_us's clock (perf_counter): a request-level run's start. Before 2026-12-07
        the runs started at clock_us, the last output before them, and so counted the idle time since
        (about 0.5 s after a run: abort's wait) into their wall time and first requests' TTFT."""
        return time.perf_counter() * US_PER_S

    def set_acceptance(self, acceptance_rate: float | None) -> None:
        if not self.num_steps or acceptance_rate is None:
            return
        length = iid_accept_length(acceptance_rate, self.num_steps)
        if self.group:  # every rank draws the same lengths: the change reaches them all on one loop iteration
            self._inbox.put(_Control("acceptance", length))
            return
        from sglang.srt.speculative import spec_utils
        spec_utils.SIMULATE_ACC_LEN = length  # read per verify

    def add_requests(self, prompts: list[list[int]], max_tokens: int) -> list[str]:
        from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
        from sglang.srt.sampling.sampling_params import SamplingParams
        ids = []
        for p in prompts:
            rid = f"r{self._next_id:09d}#"  # SGLang aborts by rid prefix: fixed width and an end mark
            self._next_id += 1
            sp = SamplingParams(max_new_tokens=max_tokens, temperature=0.0, ignore_eos=True, stream_interval=1)
            sp.normalize(None)
            sp.verify(self.vocab_size)
            self._inbox.put(TokenizedGenerateReqInput(
                rid=rid, input_text=None, input_ids=array("q", p), input_embeds=None, mm_inputs=None,
                token_type_ids=None, sampling_params=sp, return_logprob=False, logprob_start_len=-1,
                top_logprobs_num=0, token_ids_logprob=None, stream=True))
            ids.append(rid)
        return ids

    def _next_output(self, timeout_s: float):
        msg = self._outbox.get(timeout=timeout_s)
        if msg is None:
            self._outbox.put(None)
            raise RuntimeError(f"SGLang's scheduler stopped: {self._error!r}"
                               + (f" at {self._error_where}" if self._error_where else ""))
        return msg

    def step(self) -> dict[str, int]:
        t, out = self._next_output(STEP_TIMEOUT_S)
        self._clock_s = t
        counts: dict[str, int] = {}
        for rid, ids in zip(out.rids, out.output_ids):
            counts[rid] = counts.get(rid, 0) + len(ids)
        return counts

    def abort(self, request_ids: list[str]) -> None:
        """Abort these (unfinished) requests, then read outputs until the scheduler holds no request.

        Never given a finished request's rid: before 2026-12-07 a request-level run aborted all of its
        requests, finished ones too, and every run waited 0.5 s here for outputs a finished request never
        sends (the idle time that was then counted into the next run's wall time). The two IndexErrors that
        stopped SGLang's scheduler in that campaign were put down to those aborts; they came back without
        them, and the place then recorded is this backend's own hook (`note_blocked`, fixed)."""
        from sglang.srt.managers.io_struct import AbortReq
        for rid in request_ids:
            self._inbox.put(AbortReq(rid=rid))
        deadline = time.monotonic() + 120.0
        while time.monotonic() < deadline:
            try:
                self._next_output(0.01)
            except queue.Empty:
                s = self.sched
                if self._inbox.empty() and s.running_batch.is_empty() and not s.waiting_queue:
                    return

    def end_window(self) -> list[StepTimes]:
        out = window_step_times(self._close_window(), {"target_tokens_padded": "tokens"})
        for t in out:  # SGLang's draft phase is its draft extend and its draft steps
            if t.draft_extend_us is not None or t.draft_steps_us is not None:
                t.propose_us = (t.draft_extend_us or 0.0) + (t.draft_steps_us or 0.0)
        return out

    def shutdown(self) -> None:
        if self.group and self.rank == 0:  # through the ranks' loops, each ending on the same iteration
            from sglang.srt.managers.io_struct import ShutdownReq
            self._inbox.put(ShutdownReq())
        else:
            self.sched.gracefully_exit = True
        self._thread.join(timeout=30.0)


def start(plan, workdir: Path, rank: int = 0) -> SglangBackend:
    """The plan's SGLang scheduler, from folders holding the models' config.json under workdir."""
    from calibration.engines.backends.vllm import write_model_dirs
    target, draft = write_model_dirs(workdir / plan.label, plan.target_config,
                                     plan.draft_config if plan.num_steps else None)
    return SglangBackend(target, draft, plan.num_steps, max_model_len=plan.max_model_len,
                         max_num_seqs=plan.max_num_seqs, mem_fraction_static=plan.gpu_memory_utilization,
                         topk=plan.topk, num_draft_tokens=plan.num_draft_tokens, overlap=plan.overlap,
                         seed=plan.prompt_seed, capture_sizes=plan.capture_sizes or None,
                         uniform_expert_routing=plan.uniform_expert_routing,
                         max_total_tokens=plan.max_total_tokens, cuda_graphs=plan.cuda_graphs,
                         tp_size=plan.tensor_parallel_size, rank=rank)


SPEC = EngineSpec("sglang", start, serving_kind="sglang", requires=("torch", "sglang"), own_draft_tp=False,
                  tree_and_overlap=True, host_paced_by_gpu_idle=True, acceptance_per_batch_step=True,
                  clock_was_last_output=True)
