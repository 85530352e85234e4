"""Progress lines for long steps: counts and rates, at most one line per interval (plus the last)."""

from __future__ import annotations

import time
from typing import Callable, Optional


class Progress:
    """``Progress(log.info, "token_views", total=n)``; call ``update(done, **counts)`` as often as you
    like — a line is logged when ``interval`` seconds have passed since the last one, and
    ``finish()`` always logs the final line. Rates are per second of wall time since the start."""

    def __init__(self, log: Callable[[str], None], label: str, *, total: Optional[int] = None,
                 unit: str = "records", interval: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.log, self.label, self.total, self.unit, self.interval, self.clock = log, label, total, unit, interval, clock
        self.start = clock()
        self.last = self.start
        self.done = 0
        self.counts: dict[str, int] = {}

    def update(self, done: int, **counts: int) -> None:
        self.done, self.counts = done, counts
        now = self.clock()
        if now - self.last >= self.interval:
            self.last = now
            self.log(self.line(now))

    def finish(self) -> None:
        self.log(self.line(self.clock()) + " (done)")

    def line(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-9)
        of = f"/{self.total}" if self.total is not None else ""
        pct = f" ({self.done / self.total:.1%})" if self.total else ""
        parts = [f"{self.label}: {self.done}{of} {self.unit}{pct}, {self.done / elapsed:,.0f} {self.unit}/s"]
        for k, v in self.counts.items():
            parts.append(f"{v} {k} ({v / elapsed:,.0f}/s)")
        return ", ".join(parts) + f", {elapsed:.1f}s elapsed"
