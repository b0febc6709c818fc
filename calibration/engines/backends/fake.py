"""A fake engine with the interface of `VllmBackend` and known costs, on a simulated clock.

CI has no GPU: the run loop, the worker, the campaign, the profile builder, the records and
`validate` are tested end to end through this engine. Its costs follow a structure like vLLM's
(the target's forward padded to CUDA-graph capture sizes, memory-bound below a ridge and
compute-bound above it, attention growing with the context; a draft prefill over every verified
token and num_steps - 1 single-token draft forwards; a scheduler one step ahead, so a step takes
the longer of the GPU's and the host's work), written as plain max() rooflines that the
profile's fitted forms only approximate, so a test of the fit is not a test of an identity.
Acceptance is drawn per request and draft position with the rate asked for.

Over a TP group (`tp_size` > 1, one process a rank: calibration.engines.tp_launch) the ranks
join a gloo group and check every step that they ran the same batch and emitted the same tokens
(a rank out of step raises; none waits forever); the target's compute splits over the group and
pays two allreduces a layer, the draft's splits over `draft_tp_size` and pays its own allreduces
there, and a draft on one GPU of a larger group broadcasts its tokens to the group once a step,
so that which placement is faster depends on the batch.
"""

from __future__ import annotations

import bisect
import os

import numpy as np

from calibration.engines.backends.base import EngineInfo, EngineSpec, StepTimes

FAIL_ENV = "SPECDECSIM_FAKE_RANK_EXIT"  # "RANK:STEP": that rank of a TP group exits at that step (tests)
GROUP_TIMEOUT_S = 120  # a rank waiting this long on another raises instead of hanging
CAPTURE_SIZES = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))


def _padded(n: int) -> int:
    i = bisect.bisect_left(CAPTURE_SIZES, n)
    return CAPTURE_SIZES[i] if i < len(CAPTURE_SIZES) else n


TARGET_LAYERS, DRAFT_LAYERS = 32, 1
HIDDEN_BYTES = 8192  # one token's hidden state, bf16 x 4096


def allreduce_us(tokens: int, tp: int) -> float:
    """One allreduce of `tokens` hidden states over `tp` ranks (0 for one rank): a PCIe-like
    latency and bandwidth."""
    return 0.0 if tp <= 1 else 20.0 + 3.0 * tp + tokens * HIDDEN_BYTES * 2.0 * (tp - 1) / tp / 10e3


class FakeCosts:
    """The fake engine's true costs, us (module docstring)."""

    def __init__(self, scale: float = 1.0):
        self.scale = scale

    def target_forward_us(self, tokens: int, batch_size: int, context_len: float, tp: int = 1) -> float:
        t = _padded(tokens)
        return self.scale * (60.0 + (max(3400.0, 21.0 * t) + 0.0009 * batch_size * context_len * 32 / 4
                                     + 0.00004 * (t - batch_size) * context_len) / tp
                             + 2 * TARGET_LAYERS * allreduce_us(t, tp))

    def sample_us(self, tokens: int, speculative: bool) -> float:
        return self.scale * ((45.0 if speculative else 25.0) + max(230.0, 1.6 * _padded(tokens)))

    def draft_extend_us(self, tokens: int, batch_size: int, context_len: float, tp: int = 1) -> float:
        t = _padded(tokens)
        return self.scale * (40.0 + (max(250.0, 1.1 * t) + 0.0009 * batch_size * context_len / 4) / tp
                             + 2 * DRAFT_LAYERS * allreduce_us(t, tp))

    def draft_step_us(self, batch_size: int, context_len: float, tp: int = 1) -> float:
        b = _padded(batch_size)
        return self.scale * (30.0 + (max(240.0, 1.0 * b) + 0.0009 * batch_size * context_len / 4) / tp
                             + 2 * DRAFT_LAYERS * allreduce_us(b, tp))

    def draft_tokens_broadcast_us(self, batch_size: int, num_steps: int, tp: int) -> float:
        """A draft on fewer GPUs than the target's group sends its tokens to the group once a step."""
        return 0.0 if tp <= 1 else self.scale * (14.0 + 3.0 * tp + 0.01 * batch_size * num_steps)

    def other_gpu_us(self, batch_size: int, num_steps: int) -> float:
        return self.scale * (35.0 + 0.4 * batch_size + 0.1 * batch_size * num_steps)

    def prefill_step_us(self, tokens: int, speculative: bool) -> float:
        """A step of prefill alone over `tokens` prompt tokens (with the draft: its prefill over them too)."""
        return self.scale * (500.0 + (0.06 if speculative else 0.05) * tokens)

    def host_us(self, batch_size: int, num_steps: int) -> float:
        return 900.0 + 14.0 * batch_size + (350.0 + 3.0 * batch_size * (num_steps + 1) if num_steps else 0.0)


class FakeBackend:
    """A started fake engine (target plus a draft of `num_steps`, or the baseline)."""

    spmd = True  # in a TP group every rank runs the same points (calibration.engines.tp_launch)
    simulated_clock = True  # its times are not the host's: no host probe (run_loop.PointPlan.host_probe)

    def __init__(self, num_steps: int, seed: int = 0, costs: FakeCosts | None = None, jitter_cv: float = 0.01,
                 max_model_len: int = 8192, tp_size: int = 1, draft_tp_size: int | None = None, rank: int = 0,
                 max_num_batched_tokens: int = 8192):
        self.tp, self.draft_tp, self.rank = int(tp_size), int(draft_tp_size or tp_size), int(rank)
        self._group = None
        if self.tp > 1:
            import datetime

            import torch.distributed as dist
            if not dist.is_initialized():  # MASTER_ADDR / MASTER_PORT from the group's launcher
                dist.init_process_group("gloo", init_method="env://", rank=self.rank, world_size=self.tp,
                                        timeout=datetime.timedelta(seconds=GROUP_TIMEOUT_S))
            self._group = dist
        self._step_no = 0
        self.num_steps = num_steps
        self.max_model_len = max_model_len
        self.max_num_batched_tokens = int(max_num_batched_tokens)
        self.costs = costs or FakeCosts()
        self.rng = np.random.default_rng(seed)
        self.jitter_cv = jitter_cv
        self.rate = 0.0
        self.now_us = 0.0
        self.requests: dict[str, dict] = {}
        self._next_id = 0
        self._window: list[StepTimes] | None = None
        self._instrument = False

    def info(self) -> EngineInfo:
        return EngineInfo(engine="fake", engine_version="0", attention_backend="FAKE", cudagraph_mode="FULL",
                          model_runner="fake", async_scheduling=True, mixed_prefill=False, gpu_name="fake GPU", max_num_seqs=64,
                          cudagraph_capture_sizes=list(CAPTURE_SIZES), hooks=["all"], tp_size=self.tp,
                          max_num_batched_tokens=self.max_num_batched_tokens,
                          draft_tp_size=self.draft_tp if self.num_steps else None)

    def clock_us(self) -> float:
        return self.now_us

    def start_clock_us(self) -> float:
        return self.now_us

    def idle_until(self, t_us: float) -> None:
        """An idle engine waits for a request due at t_us (requests_loop's Poisson runs): its clock moves there."""
        self.now_us = max(self.now_us, t_us)

    def set_acceptance(self, acceptance_rate: float | None) -> None:
        self.rate = float(acceptance_rate or 0.0)

    def add_requests(self, prompts: list[list[int]], max_tokens: int) -> list[str]:
        ids = []
        for p in prompts:
            rid = f"r{self._next_id}"
            self._next_id += 1
            self.requests[rid] = dict(prompt_len=len(p), emitted=0, max_tokens=max_tokens, prefilled=0)
            ids.append(rid)
        return ids

    def _jitter(self) -> float:
        return float(max(0.5, 1.0 + self.jitter_cv * self.rng.standard_normal()))

    def step(self) -> dict[str, int]:
        live = {r: q for r, q in self.requests.items() if q["emitted"] < q["max_tokens"]}
        if not live:
            return {}
        pending = [r for r, q in live.items() if q["prefilled"] < q["prompt_len"]]
        if pending:  # prefill alone, first come first served, at most max_num_batched_tokens a step
            left, out = self.max_num_batched_tokens, {}
            for r in pending:
                q = live[r]
                n = min(left, q["prompt_len"] - q["prefilled"])
                q["prefilled"] += n
                left -= n
                if q["prefilled"] == q["prompt_len"]:
                    q["emitted"] = 1
                    out[r] = 1
                if left == 0:
                    break
            self.now_us += self.costs.prefill_step_us(self.max_num_batched_tokens - left, bool(self.num_steps))
            self._drop_finished()
            return out
        k, c = self.num_steps, self.costs
        b = len(live)
        ctx = float(np.mean([q["prompt_len"] + q["emitted"] for q in live.values()]))
        t = StepTimes(target_forward_us=c.target_forward_us(b * (k + 1), b, ctx, self.tp) * self._jitter(),
                      sample_us=c.sample_us(b * (k + 1), bool(k)) * self._jitter(),
                      target_tokens_padded=_padded(b * (k + 1)))
        gpu = t.target_forward_us + t.sample_us + c.other_gpu_us(b, k) * self._jitter()
        if k:
            t.draft_extend_us = c.draft_extend_us(b * (k + 1), b, ctx, self.draft_tp) * self._jitter()
            t.draft_steps_us = (k - 1) * c.draft_step_us(b, ctx, self.draft_tp) * self._jitter()
            bcast = c.draft_tokens_broadcast_us(b, k, self.tp) if self.draft_tp < self.tp else 0.0
            t.propose_us = t.draft_extend_us + t.draft_steps_us + 12.0 + bcast
            t.draft_extend_tokens_padded = _padded(b * (k + 1))
            gpu += t.propose_us
        host = c.host_us(b, k) * self._jitter()
        period = max(gpu, host)
        t.gpu_period_us, t.host_period_us, t.host_blocked_us = period, period, period - host
        self.now_us += period
        out = {}
        for r, q in live.items():
            n = 1
            while n <= k and self.rng.random() < self.rate:
                n += 1
            n = min(n, q["max_tokens"] - q["emitted"])
            q["emitted"] += n
            out[r] = n
        self._check_in_step(b, sum(out.values()))
        self._drop_finished()
        if self._window is not None:
            if not self._instrument:
                t = StepTimes(host_period_us=t.host_period_us, host_blocked_us=t.host_blocked_us)
            self._window.append(t)
        return out

    def _drop_finished(self) -> None:
        """A finished request leaves the engine, as vLLM's and SGLang's do (abort is for unfinished ones)."""
        for r in [r for r, q in self.requests.items() if q["emitted"] >= q["max_tokens"]]:
            del self.requests[r]

    def _check_in_step(self, batch_size: int, tokens: int) -> None:
        """Over a TP group: every rank ran this step with the same batch and emitted the same tokens."""
        self._step_no += 1
        if self._group is None:
            return
        if os.environ.get(FAIL_ENV) == f"{self.rank}:{self._step_no}":  # the tests' rank that dies mid-point
            os._exit(17)
        import torch
        mine = torch.tensor([self._step_no, batch_size, tokens], dtype=torch.int64)
        every = [torch.zeros_like(mine) for _ in range(self.tp)]
        self._group.all_gather(every, mine)
        if any(not torch.equal(x, mine) for x in every):
            raise RuntimeError(f"TP ranks out of step at rank {self.rank}: (step, batch, tokens) by rank "
                               f"{[x.tolist() for x in every]}")

    def abort(self, request_ids: list[str]) -> None:
        for r in request_ids:
            self.requests.pop(r, None)

    def start_window(self, instrument: bool) -> None:
        self._window = []
        self._instrument = instrument

    def end_window(self) -> list[StepTimes]:
        out, self._window = self._window or [], None
        return out

    def shutdown(self) -> None:
        self.requests.clear()
        if self._group is not None and self._group.is_initialized():
            self._group.destroy_process_group()


def start(plan, workdir, rank: int = 0) -> FakeBackend:
    """The fake engine of the plan's configuration (nothing written under workdir)."""
    return FakeBackend(plan.num_steps, seed=plan.prompt_seed + plan.num_steps, max_model_len=plan.max_model_len,
                       tp_size=plan.tensor_parallel_size, draft_tp_size=plan.draft_tensor_parallel_size, rank=rank)


# the campaign runs it in this process; it stands in for vLLM (a chain, its own draft TP), whose records it names
SPEC = EngineSpec("fake", start, serving_kind="vllm", in_process=True)
