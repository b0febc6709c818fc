"""The live speculative loop on static buffers: real target and draft forwards, eager or CUDA graphs.

One cycle, for a batch of b requests (chain drafting, topk = 1, s = num_steps):
  draft_extend  draft forward over the previous cycle's accepted tokens with the target's hidden
                states, padded to max(accept_length) tokens per request (the first cycle: 1);
  draft         s draft forwards over b tokens, step d feeding the draft's own hidden state;
  verify        one target forward over b x (s + 1) tokens: the last verified token + s drafts;
  accept        `ops_torch.accept` on the GPU;
  sync          the device->host copy of its result (`.tolist()`) and the host's wake-up;
  host          bookkeeping: positions advance by accept_length; one host->device copy of the
                next cycle's positions (`meta`). host = cycle time - the five phases above.
The baseline is one target decode forward over b tokens + argmax ("decode"), then its sync.
`cycle(accept_lengths, clock)` runs one cycle and returns the clock's marks between the phases;
calibration/live/run.py times cycles into a LiveRun, and draws the accept lengths.
Sync modes (`_Loop.sync_mode`): "blocking" (default) lets `.tolist()` block in the CUDA driver;
"spin" first polls a CUDA event from Python until the GPU is done, so the host thread never
sleeps in the driver (what a latency-critical serving loop may do).

KV positions: each request's position stays in a band just below `context_len` (every forward
attends the fixed window context_len + num_new); a request that leaves the band moves back
`span` slots (a finished request replaced by one with the same context). Rollback: positions
advance by accept_length only; rejected slots are overwritten next cycle.

CUDA graphs (serving_engine.cuda_graph): one graph per draft_extend length 1..s+1, per draft step
(step d reads step d-1's graph outputs, so no copies), verify, accept, and baseline decode.
Glue kernels outside the simulator's op list: besides `llama.GLUE_OPS`, the verify input
`cat`, a copy of the target tokens, two gathers in the draft_extend (bonus token, hidden row),
for batch > 1 two copies of the extend inputs, and one copy per baseline decode step.
"""

from __future__ import annotations

import numpy as np
import torch

from calibration.models.llama import DraftModel, TargetModel
from calibration.timing import Clock, capture_graph

WRAP_SPAN_TOKENS = 256  # slots a request moves back when it leaves its position band


class _Loop:
    """Shared state of a speculative or baseline loop: positions band and the meta buffer.

    `kv_lens` (host, (batch_size,) int64) is each request's next KV slot: the slot of its last
    verified (not yet cached) token. `meta` holds the next cycle's positions as named int64
    segments of one GPU buffer, refreshed by one host->device copy per cycle (`_upload`).
    """

    def __init__(self, target: TargetModel, batch_size: int, context_len: int, num_steps: int):
        s, c = num_steps, context_len
        if c < 2 * (s + 1):
            raise ValueError(f"context_len={c} must be >= 2 * (num_steps + 1) = {2 * (s + 1)}")
        self.b, self.s, self.c, self.dev = batch_size, s, c, target.device
        self.hi = c - max(s - 1, 0)  # highest start position: draft step s-1 writes hi + s - 1 <= c
        self.span = min(WRAP_SPAN_TOKENS, self.hi)
        self.kv_lens = np.full(batch_size, self.hi - self.span, dtype=np.int64)
        self.graph = False
        self.sync_mode = "blocking"
        self._done = torch.cuda.Event() if target.device.type == "cuda" else None

    def wait_gpu(self) -> None:
        """In sync_mode "spin" on CUDA, poll an event recorded now until the GPU reaches it."""
        if self.sync_mode == "spin" and self._done is not None:
            self._done.record()
            while not self._done.query():
                pass

    def _segments(self, sizes: dict[str, int]) -> None:
        total = sum(sizes.values())
        self.meta = torch.zeros(total, dtype=torch.int64, device=self.dev)
        self.meta_cpu = torch.zeros(total, dtype=torch.int64, pin_memory=self.dev.type == "cuda")
        self.seg, off = {}, 0
        for name, n in sizes.items():
            self.seg[name] = (off, off + n)
            off += n

    def row(self, name: str) -> torch.Tensor:
        lo, hi = self.seg[name]
        return self.meta[lo:hi]

    def _upload(self, values: dict[str, np.ndarray]) -> None:
        host = self.meta_cpu.numpy()
        for name, v in values.items():
            lo = self.seg[name][0]
            host[lo:lo + len(v)] = v
        self.meta.copy_(self.meta_cpu, non_blocking=True)

    def advance(self, lengths: np.ndarray) -> np.ndarray:
        """Positions advance by `lengths` (kept tokens); leaving the band moves back `span`."""
        old = self.kv_lens.copy()
        new = old + lengths
        self.kv_lens = np.where(new > self.hi, new - self.span, new)
        return old


class SpecLoop(_Loop):
    """EAGLE-3 chain speculation on static buffers; phases run eagerly or as CUDA graphs.

    Args:
        target, draft: models on the same device. batch_size: requests. context_len: static
        attention window (cached tokens). num_steps: draft depth s. cuda_graph: capture graphs.
    """

    def __init__(self, target: TargetModel, draft: DraftModel, batch_size: int, context_len: int,
                 num_steps: int, cuda_graph: bool):
        if draft.shape.lm_head_vocab_size > target.shape.vocab_size:
            raise ValueError(f"draft vocabulary {draft.shape.lm_head_vocab_size} exceeds the target's "
                             f"{target.shape.vocab_size}: draft ids are used as target ids")
        if draft.shape.hidden_size != target.shape.hidden_size:
            raise ValueError(f"draft hidden_size {draft.shape.hidden_size} != target's "
                             f"{target.shape.hidden_size} (the fc reads target hidden states)")
        super().__init__(target, batch_size, context_len, num_steps)
        b, s, n, dev = batch_size, num_steps, num_steps + 1, target.device
        self.target, self.draft = target, draft
        self.tcache = target.new_cache(b, context_len + n)
        self.dcache = draft.new_cache(b, context_len + n)
        vocab, h = draft.shape.lm_head_vocab_size, draft.shape.hidden_size
        gen = torch.Generator(device=dev).manual_seed(0)
        self.verify_ids = torch.randint(0, vocab, (b, n), device=dev, generator=gen)
        self.target_tokens = torch.randint(0, vocab, (b, n), device=dev, generator=gen)
        self.aux = torch.randn(b * n, len(target.aux_layer_ids) * h, device=dev, dtype=target.dtype, generator=gen)
        self.bonus = torch.zeros(b, dtype=torch.int64, device=dev)
        self.hidden0 = torch.zeros(b, h, device=dev, dtype=target.dtype)
        self._segments({"ext_lens": b, "ext_pos": b * n, "step_lens": s * b, "ver_pos": b * n, "last_idx": b})
        self.extend_len = 1
        self.commit(np.zeros(b, dtype=np.int64))  # first cycle: extend over 1 token at the start slot
        if cuda_graph:
            self._capture_all()

    # ---- phases on static buffers (eager, or captured once) -------------------------------
    def _extend(self, length: int) -> None:
        b, n = self.b, self.s + 1
        ids = self.verify_ids[:, :length].reshape(-1)
        aux = self.aux.view(b, n, -1)[:, :length].reshape(b * length, -1)
        _, hidden = self.draft.forward(ids, self.dcache, self.row("ext_lens"), self.row("ext_pos")[:b * length],
                                       length, self.c, aux=aux)
        idx = self.row("last_idx").view(b, 1)
        torch.gather(self.target_tokens, 1, idx, out=self.bonus.view(b, 1))
        h = hidden.shape[-1]
        torch.gather(hidden.view(b, length, h), 1, idx.view(b, 1, 1).expand(b, 1, h), out=self.hidden0.view(b, 1, h))

    def _step(self, d: int, ids: torch.Tensor, hidden: torch.Tensor):
        lens = self.row("step_lens")[d * self.b:(d + 1) * self.b]
        top, hidden = self.draft.forward(ids, self.dcache, lens, lens, 1, self.c, hidden=hidden)
        return top.view(-1), hidden

    def _verify(self, drafts: list[torch.Tensor]) -> None:
        b = self.b
        torch.cat([self.bonus.view(b, 1)] + [t.view(b, 1) for t in drafts], dim=1, out=self.verify_ids)
        ver_lens = self.row("step_lens")[:b]  # verify starts where draft step 0 wrote
        tokens = self.target.forward(self.verify_ids.view(-1), self.tcache, ver_lens, self.row("ver_pos"),
                                     self.s + 1, self.c, aux_out=self.aux)
        self.target_tokens.copy_(tokens.view(b, -1))

    def _accept(self) -> torch.Tensor:
        return self.target.ops.accept(self.verify_ids[:, 1:], self.target_tokens[:, :self.s])

    def _capture_all(self) -> None:
        """Capture every phase; the warm-up calls' writes are undone, so graph and eager runs
        start from the same state."""
        state = [self.verify_ids, self.target_tokens, self.aux] + self.tcache.k + self.tcache.v \
            + self.dcache.k + self.dcache.v
        saved = [t.clone() for t in state]
        self.graph = True
        self.g_extend = {n: capture_graph(self._extend, n)[0] for n in range(1, self.s + 2)}
        self.g_steps, self.step_ids, outs = [], [], (self.bonus, self.hidden0)
        for d in range(self.s):  # step d reads step d-1's graph outputs: no copies between steps
            g, outs = capture_graph(self._step, d, *outs)
            self.g_steps.append(g)
            self.step_ids.append(outs[0])
        self.g_verify, _ = capture_graph(self._verify, self.step_ids)
        self.g_accept, self.accept_out = capture_graph(self._accept)
        for t, v in zip(state, saved):
            t.copy_(v)

    # ---- one cycle ----------------------------------------------------------------------------
    def run_draft_extend(self) -> None:
        self.g_extend[self.extend_len].replay() if self.graph else self._extend(self.extend_len)

    def run_draft(self) -> None:
        if self.graph:
            for g in self.g_steps:
                g.replay()
            return
        ids, hidden, self.step_ids = self.bonus, self.hidden0, []
        for d in range(self.s):
            ids, hidden = self._step(d, ids, hidden)
            self.step_ids.append(ids)

    def run_verify(self) -> None:
        self.g_verify.replay() if self.graph else self._verify(self.step_ids)

    def run_accept(self) -> list[int]:
        """Accept on the GPU, then the device->host sync. Returns accepted drafts per request."""
        return self.read_accept(self.launch_accept())

    def launch_accept(self) -> torch.Tensor:
        """Enqueue the accept (graph replay or eager); returns its (b,) int64 output on the device."""
        if self.graph:
            self.g_accept.replay()
            return self.accept_out
        return self._accept()

    def read_accept(self, out: torch.Tensor) -> list[int]:
        """Device->host copy of the accept output (the sync); accepted drafts per request.

        Raises:
            RuntimeError: a count outside 0..num_steps (corrupt buffers).
        """
        self.wait_gpu()
        accepted = out.tolist()
        if any(not 0 <= a <= self.s for a in accepted):
            raise RuntimeError(f"GPU accept returned {accepted}, outside 0..{self.s}: corrupt buffers")
        return accepted

    def commit(self, lengths: np.ndarray) -> None:
        """Host bookkeeping: advance positions by `lengths` (0 = a finished request keeps its
        slot) and upload next cycle's positions, extend length and gather index."""
        b, s, n = self.b, self.s, self.s + 1
        old = self.advance(lengths)
        self.extend_len = int(max(1, lengths.max()))
        ar = np.arange(n)
        self._upload({
            "ext_lens": old,
            "ext_pos": (old[:, None] + ar[:self.extend_len]).reshape(-1),
            "step_lens": (self.kv_lens[None, :] + np.arange(s)[:, None]).reshape(-1),
            "ver_pos": (self.kv_lens[:, None] + ar).reshape(-1),
            "last_idx": np.maximum(lengths - 1, 0)})

    PHASES = ("draft_extend", "draft", "verify", "accept", "sync")

    def cycle(self, accept_lengths: np.ndarray, clock: Clock | None = None) -> list:
        """Run one cycle keeping `accept_lengths` (b,) tokens per request; returns clock marks
        [start, after draft_extend, after draft, after verify, after accept, after the sync]
        (the gaps are PHASES)."""
        marks = [clock.mark()] if clock else []
        for phase in (self.run_draft_extend, self.run_draft, self.run_verify):
            phase()
            if clock:
                marks.append(clock.mark())
        out = self.launch_accept()
        if clock:
            marks.append(clock.mark())
        self.read_accept(out)
        if clock:
            marks.append(clock.mark())
        self.commit(np.asarray(accept_lengths, dtype=np.int64))
        return marks


class DecodeLoop(_Loop):
    """No-speculation baseline: one target forward over b tokens + argmax + sync per step."""

    def __init__(self, target: TargetModel, batch_size: int, context_len: int, cuda_graph: bool):
        super().__init__(target, batch_size, context_len, 0)
        self.target = target
        self.tcache = target.new_cache(batch_size, context_len + 1)
        self.ids = torch.zeros(batch_size, dtype=torch.int64, device=target.device)
        self._segments({"lens": batch_size})
        self._upload({"lens": self.kv_lens})
        if cuda_graph:
            self.graph, (self.g_decode, self.out) = True, capture_graph(self._decode)

    def _decode(self) -> torch.Tensor:
        lens = self.row("lens")
        tokens = self.target.forward(self.ids, self.tcache, lens, lens, 1, self.c)
        self.ids.copy_(tokens)
        return tokens

    PHASES = ("decode", "sync")

    def launch_decode(self) -> torch.Tensor:
        """Enqueue the decode forward (graph replay or eager); returns its (b,) tokens on the device."""
        if self.graph:
            self.g_decode.replay()
            return self.out
        return self._decode()

    def read_decode(self, out: torch.Tensor) -> list[int]:
        """Device->host copy of the decode's tokens (the sync)."""
        self.wait_gpu()
        return out.tolist()

    def commit(self) -> None:
        """Host bookkeeping: every request advances one position; upload the next positions."""
        self.advance(np.ones(self.b, dtype=np.int64))
        self._upload({"lens": self.kv_lens})

    def cycle(self, accept_lengths: np.ndarray | None = None, clock: Clock | None = None) -> list:
        """One decode step; marks [start, after the forward, after the token's sync] (PHASES)."""
        marks = [clock.mark()] if clock else []
        out = self.launch_decode()
        if clock:
            marks.append(clock.mark())
        self.read_decode(out)
        if clock:
            marks.append(clock.mark())
        self.commit()
        return marks


def generate(loop: SpecLoop, max_new_tokens: int, accept_lengths: np.ndarray) -> tuple[np.ndarray, int]:
    """Run cycles until every request has emitted exactly `max_new_tokens` tokens.

    A request keeps min(accept_length, tokens still owed) in each cycle, so the cycle that
    reaches max_new_tokens is truncated; a finished request keeps its batch slot (static shapes)
    and keeps 0 tokens until the others finish.

    Args:
        accept_lengths: (num_cycles, batch_size) oracle draws, one row per cycle (enough rows).

    Returns:
        ((batch_size,) tokens emitted per request, cycles run).
    """
    emitted = np.zeros(loop.b, dtype=np.int64)
    num_cycles = 0
    while (emitted < max_new_tokens).any():
        kept = np.minimum(accept_lengths[num_cycles], max_new_tokens - emitted)
        loop.cycle(kept)
        emitted += kept
        num_cycles += 1
    return emitted, num_cycles
