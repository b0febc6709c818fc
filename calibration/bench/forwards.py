"""Whole forwards on one GPU: a target's forward, a draft's step and extend, timed over a grid.

PointStore keys (read by calibration/build/profile.py: forward_tables):
  fwd:{model}:{tp}:{mode}:{n}:{c}              whole target forward, eager or CUDA graph, batch 1
  fwd:{model}:{tp}:{mode}:{phase}:{n}:{c}      whole draft step (phase draft) or draft extend, batch 1
  fwd:{model}:{tp}:{mode}[:{phase}]:{n}:{c}:b{b}  the same at batch b (any b, 1 included; the record
                                               carries `batch_size`): `bench_batch_forwards`
for num_tokens n (per request) x context_len c of the grid (`OpGrid.forward_num_tokens` x
`forward_context_len`), the models of calibration/models/llama.py (tp > 1:
calibration/bench/tp_forwards.py, which builds its forwards with `models_forward` /
`draft_forward` too). graph: one forward captured in a CUDA graph, replayed between CUDA events
(`timing.time_gpu_us`); eager: one forward launched op by op between events. On the CPU both
are wall clock.

Batch points (`bench_batch_forwards`, `specdecsim calibrate forwards-batch`): the live batch
grid's models over BATCH_SIZES x the tokens per request each phase runs there (BATCH_NUM_TOKENS)
x BATCH_CONTEXT_LEN, CUDA graphs; every request of a forward at the same context.

Left out: the EAGLE-3 hidden-state capture in the target's forward; requests of one forward at
different contexts.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch
from rich.progress import Progress

from calibration.bench.ops import DEFAULT_GRID, OpGrid
from calibration.build.store import PointStore
from calibration.models.llama import DRAFT_WEIGHT_SEED, TARGET_WEIGHT_SEED, DraftModel, TargetModel
from calibration.shapes import is_draft
from calibration.timing import TimingSettings, elapsed_us, sample_stats, time_cpu_us, time_gpu_us
from simulator.config import ModelShape


def _batch_inputs(vocab_size: int, batch_size: int, num_tokens: int, context_len: int, device: torch.device
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids (b * n,), kv_lens (b,), token_pos (b * n,)) of a forward over num_tokens new tokens per
    request, every request at context_len."""
    ids = torch.randint(0, vocab_size, (batch_size * num_tokens,), device=device)
    kv_lens = torch.full((batch_size,), context_len, dtype=torch.int64, device=device)
    token_pos = (context_len + torch.arange(num_tokens, device=device)).repeat(batch_size)
    return ids, kv_lens, token_pos


def models_forward(m: ModelShape, device: torch.device, dtype: torch.dtype, max_len: int, model=None,
                   batch_size: int = 1) -> Callable[[int, int], Callable[[], object]]:
    """Whole forward of calibration.models.llama.TargetModel (tp 1, no EAGLE-3 hidden-state
    capture) over `batch_size` requests. The cache holds max_len positions per request. `model`:
    an already built model with TargetModel's forward to time instead (calibration/bench/tp_forwards.py
    passes this rank's TPTargetModel)."""
    if model is None:
        model = TargetModel(m, device=device, dtype=dtype, seed=TARGET_WEIGHT_SEED, num_aux_states=0)
    cache = model.new_cache(batch_size, max_len)

    def make(num_tokens: int, context_len: int) -> Callable[[], object]:
        ids, kv_lens, token_pos = _batch_inputs(m.vocab_size, batch_size, num_tokens, context_len, device)

        def forward() -> object:
            with torch.no_grad():
                return model.forward(ids, cache, kv_lens, token_pos, num_tokens, context_len)
        return forward
    return make


def draft_forward(m: ModelShape, device: torch.device, dtype: torch.dtype, max_len: int, extend: bool, model=None,
                  batch_size: int = 1) -> Callable[[int, int], Callable[[], object]]:
    """Whole forward of calibration.models.llama.DraftModel over `batch_size` requests: a draft step over num_tokens
    tokens given its own hidden states (extend False), or the draft extend over num_tokens
    accepted tokens given the target's num_fc_input_hidden_states hidden states (extend True),
    as the live loop (calibration/live/loop.py) calls it. `model`: an already built draft
    (calibration/bench/tp_forwards.py passes this rank's TPDraftModel). The cache holds max_len
    positions."""
    if model is None:
        model = DraftModel(m, device=device, dtype=dtype, seed=DRAFT_WEIGHT_SEED)
    cache = model.new_cache(batch_size, max_len)
    h, k = m.hidden_size, max(1, m.num_fc_input_hidden_states)

    def make(num_tokens: int, context_len: int) -> Callable[[], object]:
        ids, kv_lens, token_pos = _batch_inputs(m.vocab_size, batch_size, num_tokens, context_len, device)
        t = batch_size * num_tokens
        states = {"aux": torch.randn(t, k * h, device=device, dtype=dtype)} if extend else \
            {"hidden": torch.randn(t, h, device=device, dtype=dtype)}

        def forward() -> object:
            with torch.no_grad():
                return model.forward(ids, cache, kv_lens, token_pos, num_tokens, context_len, **states)
        return forward
    return make


def forward_key(model_name: str, tp_size: int, mode: str, num_tokens: int, context_len: int,
                phase: str = "forward", batch_size: int | None = None) -> str:
    """PointStore key of a whole-forward point (phase 'forward': a target; 'draft' /
    'draft_extend': a draft's step / extend); `batch_size` None: a batch-1 point of the batch-1
    tables (the key as it always was), else a point of the batch-axis tables (`:b{batch_size}`)."""
    what = "" if phase == "forward" else f"{phase}:"
    batch = "" if batch_size is None else f":b{batch_size}"
    return f"fwd:{model_name}:{tp_size}:{mode}:{what}{num_tokens}:{context_len}{batch}"


def bench_forwards(store: PointStore, model_name: str, tp_size: int, make_forward: Callable[[int, int], Callable],
                   grid: OpGrid, device: torch.device, settings: TimingSettings, command: str,
                   modes: tuple[str, ...] = ("eager", "graph"), impl: str = "", phase: str = "forward",
                   batch_size: int | None = None) -> None:
    """Whole-forward latency over grid.forward_num_tokens x grid.forward_context_len, per mode.

    eager: device time of one forward launched op by op (host-bound small forwards show it);
    graph: one forward captured in a CUDA graph (on CPU both are wall-clock).
    `impl` names what ran the forward (recorded with each point); `phase` and `batch_size` as in
    forward_key (make_forward builds that phase's forward at that batch; None: batch 1, old keys).
    """
    todo = [(mode, n, c) for mode in modes for n in grid.forward_num_tokens for c in grid.forward_context_len
            if not store.done(forward_key(model_name, tp_size, mode, n, c, phase, batch_size))]
    if not todo:
        return
    batch = {} if batch_size is None else {"batch_size": batch_size}
    with Progress() as bar:
        task = bar.add_task(f"{phase} {model_name} tp{tp_size}" + (f" b{batch_size}" if batch else ""), total=len(todo))
        for mode, n, c in todo:
            fn = make_forward(n, c)
            one = dataclasses.replace(settings, max_reps=1, target_replay_us=0.0)
            if device.type != "cuda":
                t = time_cpu_us([fn], one)
            elif mode == "graph":
                t = time_gpu_us([fn], one)
            else:
                fn()
                t = sample_stats([elapsed_us(fn, 1, device) for _ in range(settings.num_replays)]) | {"mode": "eager"}
            store.add(forward_key(model_name, tp_size, mode, n, c, phase, batch_size),
                      {"model": model_name, "tp_size": tp_size, "mode": mode, "phase": phase, **batch,
                       "num_tokens": n, "context_len": c,
                       **{k: t[k] for k in ("latency_us", "p10_latency_us", "p90_latency_us")},
                       "timing_mode": t["mode"], "impl": impl, "command": command})
            bar.advance(task)


def bench_model_forwards(store: PointStore, m: ModelShape, grid: OpGrid, device: torch.device, dtype: torch.dtype,
                         settings: TimingSettings, command: str, modes: tuple[str, ...] = ("eager", "graph"),
                         max_len: int | None = None) -> None:
    """Whole forwards of one model at tp 1 into `store`: a target's forward, or an EAGLE-3 draft's
    step and extend (a draft without num_fc_input_hidden_states is left out: per-op only), in each
    of `modes`. The caches hold `max_len` positions (default: the grid's largest context + tokens).
    Records `meta:model:{name}` (the shape, for the decomposition check) when not there yet."""
    if not store.done(f"meta:model:{m.name}"):
        store.add(f"meta:model:{m.name}", m.model_dump(mode="json"))
    max_len = max_len or max(grid.forward_context_len) + max(grid.forward_num_tokens)
    if is_draft(m):
        if m.num_fc_input_hidden_states < 1:  # not an EAGLE-3 draft the live loop can run: per-op only
            return
        for phase in ("draft", "draft_extend"):
            make = draft_forward(m, device, dtype, max_len, extend=phase == "draft_extend")
            bench_forwards(store, m.name, 1, make, grid, device, settings, command, modes=modes,
                           impl="calibration.models.llama.DraftModel", phase=phase)
            del make
    else:
        make = models_forward(m, device, dtype, max_len)
        bench_forwards(store, m.name, 1, make, grid, device, settings, command, modes=modes,
                       impl="calibration.models.llama.TargetModel")
        del make
    if device.type == "cuda":
        torch.cuda.empty_cache()


SESSION_CONTEXT_LEN = (1024, 2048)  # the live grid's context and the next grid point above it
SESSION_MAX_LEN = 4096 + 64  # KV positions of every session forward's cache


def time_session_forwards(store: PointStore, models: list[ModelShape], device: torch.device, command: str,
                          grid: OpGrid | None = None) -> None:
    """The tp-1 CUDA-graph whole forwards of `models` (targets; drafts' step and extend) timed
    afresh at contexts SESSION_CONTEXT_LEN, so a profile built with them and live records taken
    minutes later share one session of the machine (docs/validation.md, take 3).

    Args:
        grid: default DEFAULT_GRID with forward_context_len SESSION_CONTEXT_LEN.
    """
    grid = grid or dataclasses.replace(DEFAULT_GRID, forward_context_len=SESSION_CONTEXT_LEN)
    for m in models:
        bench_model_forwards(store, m, grid, device, torch.bfloat16 if device.type == "cuda" else torch.float32,
                             TimingSettings(), command, modes=("graph",), max_len=SESSION_MAX_LEN)


BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)  # the live batch grid's (calibration/live/grid.py: BATCH_GRID_SIZES)
BATCH_CONTEXT_LEN = (1024, 2048)  # the live grid's context and the next grid point above it
QUICK_BATCH_CONTEXT_LEN = (1024,)
# Tokens per request of each phase in the live batch grid (num_steps 1, 3, 5): decode 1 and verify
# s + 1 = 2, 4, 6 (every count between, for the interpolation), a draft step 1, the draft extend
# over 1..s + 1 accepted tokens.
BATCH_NUM_TOKENS = {"forward": (1, 2, 3, 4, 5, 6), "draft": (1,), "draft_extend": (1, 2, 3, 4, 5, 6)}


def bench_batch_forwards(store: PointStore, models: list[ModelShape], device: torch.device, command: str,
                         batch_sizes: tuple[int, ...] = BATCH_SIZES,
                         context_lens: tuple[int, ...] = BATCH_CONTEXT_LEN,
                         num_tokens: dict[str, tuple[int, ...]] | None = None,
                         settings: TimingSettings | None = None) -> None:
    """Whole forwards of `models` at tp 1 over batch_size x tokens per request x context, CUDA
    graphs (wall clock on the CPU), into `store` under the batch keys of `forward_key`: a
    target's forward, an EAGLE-3 draft's step and extend (a draft without
    num_fc_input_hidden_states is left out). One model in memory at a time; one KV cache per
    batch size (max(context_lens) + the most tokens positions per request). Resumes: points
    already in `store` are skipped. Records `meta:model:{name}` when not there yet.

    Args:
        num_tokens: tokens per request by phase; default BATCH_NUM_TOKENS.
        settings: default TimingSettings().
    """
    num_tokens = num_tokens or BATCH_NUM_TOKENS
    settings = settings or TimingSettings()
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    for m in models:
        if not store.done(f"meta:model:{m.name}"):
            store.add(f"meta:model:{m.name}", m.model_dump(mode="json"))
        draft = is_draft(m)
        if draft and m.num_fc_input_hidden_states < 1:
            continue
        phases = ("draft", "draft_extend") if draft else ("forward",)
        max_len = max(context_lens) + max(max(num_tokens[p]) for p in phases)
        model = (DraftModel(m, device=device, dtype=dtype, seed=DRAFT_WEIGHT_SEED) if draft else
                 TargetModel(m, device=device, dtype=dtype, seed=TARGET_WEIGHT_SEED, num_aux_states=0))
        for phase in phases:
            grid = dataclasses.replace(DEFAULT_GRID, forward_num_tokens=tuple(num_tokens[phase]),
                                       forward_context_len=tuple(context_lens))
            for b in batch_sizes:
                if all(store.done(forward_key(m.name, 1, "graph", n, c, phase, b))
                       for n in grid.forward_num_tokens for c in grid.forward_context_len):
                    continue
                make = (draft_forward(m, device, dtype, max_len, phase == "draft_extend", model, b) if draft
                        else models_forward(m, device, dtype, max_len, model, b))
                bench_forwards(store, m.name, 1, make, grid, device, settings, command, modes=("graph",),
                               impl=f"calibration.models.llama.{type(model).__name__}", phase=phase,
                               batch_size=b)
                del make
                if device.type == "cuda":
                    torch.cuda.empty_cache()
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
