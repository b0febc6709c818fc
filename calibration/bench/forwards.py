"""Whole forwards on one GPU: a target's forward, a draft's step and extend, timed over a grid.

PointStore keys (read by calibration/build/profile.py: forward_tables):
  fwd:{model}:{tp}:{mode}:{n}:{c}          whole target forward, eager or CUDA graph
  fwd:{model}:{tp}:{mode}:{phase}:{n}:{c}  whole draft step (phase draft) or draft extend
for num_tokens n x context_len c of the grid (`OpGrid.forward_num_tokens` x
`forward_context_len`), batch 1, the models of calibration/models/llama.py (tp > 1:
calibration/bench/tp_forwards.py, which builds its forwards with `models_forward` /
`draft_forward` too). graph: one forward captured in a CUDA graph, replayed between CUDA events
(`timing.time_gpu_us`); eager: one forward launched op by op between events. On the CPU both
are wall clock.

Left out: batch > 1 (the live grid's batch-4 points use the per-op sum), the EAGLE-3 hidden-state
capture in the target's forward.
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


def models_forward(m: ModelShape, device: torch.device, dtype: torch.dtype, max_len: int, model=None
                   ) -> Callable[[int, int], Callable[[], object]]:
    """Whole forward of calibration.models.llama.TargetModel (batch 1, tp 1, no EAGLE-3
    hidden-state capture). The cache holds max_len positions. `model`: an already built model
    with TargetModel's forward to time instead (calibration/bench/tp_forwards.py passes this
    rank's TPTargetModel)."""
    if model is None:
        model = TargetModel(m, device=device, dtype=dtype, seed=TARGET_WEIGHT_SEED, num_aux_states=0)
    cache = model.new_cache(1, max_len)

    def make(num_tokens: int, context_len: int) -> Callable[[], object]:
        ids = torch.randint(0, m.vocab_size, (num_tokens,), device=device)
        kv_lens = torch.full((1,), context_len, dtype=torch.int64, device=device)
        token_pos = context_len + torch.arange(num_tokens, device=device)

        def forward() -> object:
            with torch.no_grad():
                return model.forward(ids, cache, kv_lens, token_pos, num_tokens, context_len)
        return forward
    return make


def draft_forward(m: ModelShape, device: torch.device, dtype: torch.dtype, max_len: int, extend: bool, model=None
                  ) -> Callable[[int, int], Callable[[], object]]:
    """Whole forward of calibration.models.llama.DraftModel (batch 1): a draft step over num_tokens
    tokens given its own hidden states (extend False), or the draft extend over num_tokens
    accepted tokens given the target's num_fc_input_hidden_states hidden states (extend True),
    as the live loop (calibration/live/loop.py) calls it. `model`: an already built draft
    (calibration/bench/tp_forwards.py passes this rank's TPDraftModel). The cache holds max_len
    positions."""
    if model is None:
        model = DraftModel(m, device=device, dtype=dtype, seed=DRAFT_WEIGHT_SEED)
    cache = model.new_cache(1, max_len)
    h, k = m.hidden_size, max(1, m.num_fc_input_hidden_states)

    def make(num_tokens: int, context_len: int) -> Callable[[], object]:
        ids = torch.randint(0, m.vocab_size, (num_tokens,), device=device)
        kv_lens = torch.full((1,), context_len, dtype=torch.int64, device=device)
        token_pos = context_len + torch.arange(num_tokens, device=device)
        states = {"aux": torch.randn(num_tokens, k * h, device=device, dtype=dtype)} if extend else \
            {"hidden": torch.randn(num_tokens, h, device=device, dtype=dtype)}

        def forward() -> object:
            with torch.no_grad():
                return model.forward(ids, cache, kv_lens, token_pos, num_tokens, context_len, **states)
        return forward
    return make


def forward_key(model_name: str, tp_size: int, mode: str, num_tokens: int, context_len: int,
                phase: str = "forward") -> str:
    """PointStore key of a whole-forward point (phase 'forward': a target; 'draft' /
    'draft_extend': a draft's step / extend)."""
    what = "" if phase == "forward" else f"{phase}:"
    return f"fwd:{model_name}:{tp_size}:{mode}:{what}{num_tokens}:{context_len}"


def bench_forwards(store: PointStore, model_name: str, tp_size: int, make_forward: Callable[[int, int], Callable],
                   grid: OpGrid, device: torch.device, settings: TimingSettings, command: str,
                   modes: tuple[str, ...] = ("eager", "graph"), impl: str = "", phase: str = "forward") -> None:
    """Whole-forward latency over grid.forward_num_tokens x grid.forward_context_len, per mode.

    eager: device time of one forward launched op by op (host-bound small forwards show it);
    graph: one forward captured in a CUDA graph (on CPU both are wall-clock).
    `impl` names what ran the forward (recorded with each point); `phase` as in forward_key
    (make_forward builds that phase's forward).
    """
    todo = [(mode, n, c) for mode in modes for n in grid.forward_num_tokens for c in grid.forward_context_len
            if not store.done(forward_key(model_name, tp_size, mode, n, c, phase))]
    with Progress() as bar:
        task = bar.add_task(f"{phase} {model_name} tp{tp_size}", total=len(todo))
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
            store.add(forward_key(model_name, tp_size, mode, n, c, phase),
                      {"model": model_name, "tp_size": tp_size, "mode": mode, "phase": phase,
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
