"""Which cycles a trace covers: a window of cycles A to B-1, written `A:B`, and the default window.

`specdecsim simulate --trace` traces `--trace-cycles A:B` (`parse_window`), by default every cycle
when the trace fits DEFAULT_WINDOW_BYTES, else the first cycles that do (`default_window`, from
`simulator.estimate.trace_estimate`'s bytes per cycle); a window estimated above TRACE_LIMIT_BYTES
needs --force. The spans themselves are written by `simulator.trace`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from simulator.inputs import UserInputError, quote

DEFAULT_WINDOW_BYTES = 64 * 2**20  # the default window: every cycle when the trace fits, else the first that do
TRACE_LIMIT_BYTES = 2**30  # an estimated trace above this needs --force


@dataclass(frozen=True)
class TraceWindow:
    """Cycles [start_cycle, stop_cycle) of a run, counted from 0 at the first simulated cycle
    (warm-up cycles included)."""

    start_cycle: int
    stop_cycle: int

    @property
    def num_cycles(self) -> int:
        return self.stop_cycle - self.start_cycle

    def __str__(self) -> str:
        return f"{self.start_cycle}:{self.stop_cycle}"


_WINDOW = re.compile(r"\s*([0-9]{0,15})\s*:\s*([0-9]{0,15})\s*", re.ASCII)  # ASCII digits, at most 15 (1e15 cycles)


def parse_window(text: str, total_cycles: int, flag: str = "--trace-cycles") -> TraceWindow:
    """`A:B` (cycles A..B-1, as a Python slice; `A:` to the end, `:B` from 0) of a run of
    `total_cycles` cycles.

    Raises:
        UserInputError: not of the form A:B with whole numbers, or outside 0 <= A < B <= total_cycles.
    """
    m = _WINDOW.fullmatch(text)
    if m is None:
        raise UserInputError(f"{flag} {quote(text)}: expected A:B, cycles A to B-1 (whole numbers in digits 0-9, "
                             f"e.g. 0:100; "
                             f"A: runs to the end, :B starts at 0)")
    start = int(m.group(1)) if m.group(1) else 0
    stop = int(m.group(2)) if m.group(2) else total_cycles
    if not 0 <= start < stop <= total_cycles:
        raise UserInputError(f"{flag} {quote(text)}: need 0 <= A < B <= {total_cycles:,} (the run's cycles, warm-up "
                             f"included, are 0..{total_cycles - 1:,})")
    return TraceWindow(start, stop)


def default_window(total_cycles: int, bytes_per_cycle: float) -> TraceWindow:
    """Every cycle when the trace fits DEFAULT_WINDOW_BYTES, else the first cycles that do (at least one)."""
    fit = int(DEFAULT_WINDOW_BYTES // max(bytes_per_cycle, 1.0))
    return TraceWindow(0, max(1, min(total_cycles, fit)))
