"""Progress lines for long steps: counts and rates, at most one line per interval (plus the last)."""

from __future__ import annotations

import time
from typing import Callable, Optional


# a sub-phase of a step that ends within this many seconds logs no progress line (its step's summary
# lines carry its counts): see Progress.quiet_below
SUBPHASE_QUIET_S = 2.0


class Progress:
    """``Progress(log.info, "token_views", total=n)``; call ``update(done, **counts)`` as often as you
    like — a line is logged when ``interval`` seconds have passed since the last one, and
    ``finish()`` logs the final line. Rates are per second of wall time since the start.

    ``quiet_below``: a phase that finished within this many seconds without logging a line on the
    way logs nothing at all — for the phases of a step whose summary line says what they did: each
    line is an event Dagster stores (milliseconds each), and a release rebuild has dozens of
    sub-second phases."""

    def __init__(self, log: Callable[[str], None], label: str, *, total: Optional[int] = None,
                 unit: str = "records", interval: float = 10.0, clock: Callable[[], float] = time.monotonic,
                 quiet_below: float = 0.0):
        self.log, self.label, self.total, self.unit, self.interval, self.clock = log, label, total, unit, interval, clock
        self.quiet_below = quiet_below
        self.start = clock()
        self.last = self.start
        self.logged = False
        self.done = 0
        self.counts: dict[str, int] = {}

    def update(self, done: int, **counts: int) -> None:
        self.done, self.counts = done, counts
        now = self.clock()
        if now - self.last >= self.interval:
            self.last = now
            self.logged = True
            self.log(self.line(now))

    def finish(self) -> None:
        now = self.clock()
        if not self.logged and now - self.start < self.quiet_below:
            return
        self.log(self.line(now) + " (done)")

    def line(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-9)
        of = f"/{self.total}" if self.total is not None else ""
        pct = f" ({self.done / self.total:.1%})" if self.total else ""
        parts = [f"{self.label}: {self.done}{of} {self.unit}{pct}, {self.done / elapsed:,.0f} {self.unit}/s"]
        for k, v in self.counts.items():
            parts.append(f"{v} {k} ({v / elapsed:,.0f}/s)")
        return ", ".join(parts) + f", {elapsed:.1f}s elapsed"
