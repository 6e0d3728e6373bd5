"""Loop timing statistics, allocation-free per tick: ring buffers + counters.

Percentiles are computed only when diagnostics are published (decimated), never in the tick.
"""

from __future__ import annotations

import numpy as np


class LoopStats:
    """Tick compute time, start lateness (jitter) and deadline misses.

    A deadline miss is a tick whose command was published after its deadline (scheduled
    start + period), or a period slot that got no tick at all (the loop fell behind and
    skipped it). Both are counted, never hidden.
    """

    def __init__(self, period_s: float, window: int = 4096):
        self.period_s = period_s
        self.tick_s = np.zeros(window)       # scheduled start → command published [s]
        self.compute_s = np.zeros(window)    # actual start → command published [s]
        self.late_s = np.zeros(window)       # actual start − scheduled start [s]
        self._i = 0
        self.n = 0                            # ticks run
        self.misses = 0                       # late publishes + skipped slots
        self.skipped = 0
        self.max_compute_s = 0.0

    def record(self, scheduled: float, started: float, published: float) -> None:
        i = self._i
        self.tick_s[i] = published - scheduled
        c = published - started
        self.compute_s[i] = c
        self.late_s[i] = started - scheduled
        self._i = (i + 1) % self.tick_s.size
        self.n += 1
        if c > self.max_compute_s:
            self.max_compute_s = c
        if published - scheduled > self.period_s:
            self.misses += 1

    def skip(self, slots: int) -> None:
        self.skipped += slots
        self.misses += slots

    def summary(self) -> dict[str, float]:
        """p50/p99/max of the window [µs] and the counters."""
        k = min(self.n, self.tick_s.size)
        out = {"ticks": float(self.n), "deadline_misses": float(self.misses),
               "skipped_slots": float(self.skipped),
               "deadline_miss_rate": self.misses / max(1, self.n + self.skipped),
               "max_compute_us_all": self.max_compute_s * 1e6}
        if k == 0:
            return out
        c = self.compute_s[:k] * 1e6
        late = self.late_s[:k] * 1e6
        p = np.percentile(c, (50, 99))
        out.update({"compute_p50_us": p[0], "compute_p99_us": p[1], "compute_max_us": float(c.max()),
                    "start_late_p50_us": float(np.percentile(late, 50)),
                    "start_late_p99_us": float(np.percentile(late, 99)),
                    "start_late_max_us": float(late.max())})
        return out
