"""Loop timing statistics, allocation-free per tick: ring buffers, a histogram and counters.

Percentiles are computed only when diagnostics are published (decimated), never in the tick.

Two families of numbers:

- tick timing on the node's monotonic clock: compute time (tick start → command published),
  start lateness (jitter) and deadline misses;
- input → command latency, the quantity "joint state in → command out": from the moment
  the middleware received the /joint_states sample (``received_timestamp`` of the rmw
  message info, stamped by the DDS receive thread on the system clock, CLOCK_REALTIME) to
  the moment the command built from it was handed to the middleware (``time.time_ns()``
  right after ``publish()``: the same clock). Split into dispatch (middleware receive →
  Python callback start: executor wake-up, take, message conversion), wait (callback start
  → tick start: waiting for the loop's deadline) and the rest (tick start → publish). Each
  input is counted once, at the first command computed from it; ticks that reuse an input
  and inputs replaced before any tick used them are counted separately.
"""

from __future__ import annotations

import numpy as np

HIST_BIN_US = 5.0     # input → command histogram: bin width [µs] ...
HIST_BINS = 4000      # ... and count (20 ms); longer latencies fall into the last bin


class LatencyHistogram:
    """Cumulative histogram of a latency over the whole run (for percentiles over ≥ 10⁴ ticks
    without storing samples): ``HIST_BIN_US`` bins, the last bin collects everything longer.

    :meth:`encode` gives the non-empty bins as ``"bin:count,..."`` (bin i covers
    [i·w, (i+1)·w) µs) for /diagnostics; :func:`decode_histogram` and
    :func:`histogram_percentiles` read it back (bench/ros_loop.py).
    """

    def __init__(self, bins: int = HIST_BINS, bin_us: float = HIST_BIN_US):
        self.counts = np.zeros(bins, dtype=np.int64)
        self._per_s = 1e6 / bin_us
        self._last = bins - 1

    def add(self, value_s: float) -> None:
        i = int(value_s * self._per_s)
        self.counts[i if 0 <= i < self._last else (0 if i < 0 else self._last)] += 1

    def encode(self) -> str:
        nz = np.flatnonzero(self.counts)
        return ",".join(f"{i}:{self.counts[i]}" for i in nz)


def decode_histogram(text: str, bins: int = HIST_BINS) -> np.ndarray:
    counts = np.zeros(bins, dtype=np.int64)
    for item in text.split(","):
        if item:
            i, n = item.split(":")
            counts[int(i)] = int(n)
    return counts


def histogram_percentiles(counts: np.ndarray, ps=(50, 99, 99.9), bin_us: float = HIST_BIN_US) -> dict:
    """Percentiles [µs] of a histogram, each as the upper edge of its bin (conservative)."""
    total = int(counts.sum())
    if total == 0:
        return {}
    cum = np.cumsum(counts)
    out = {f"p{p:g}": float((np.searchsorted(cum, p / 100.0 * total) + 1) * bin_us) for p in ps}
    out["n"] = total
    return out


class LoopStats:
    """Tick compute time, start lateness (jitter), deadline misses and input → command latency.

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
        # input → command (see the module docstring), system clock
        self.latency_s = np.zeros(window)     # middleware receive → command published [s]
        self.dispatch_s = np.zeros(window)    # middleware receive → callback start [s]
        self.wait_s = np.zeros(window)        # callback start → tick start [s]
        self._j = 0
        self.inputs = 0                       # inputs that reached a command
        self.max_latency_s = 0.0
        self.latency_hist = LatencyHistogram()
        self.reused_input_ticks = 0           # commands computed from an input already used
        self.overwritten_inputs = 0           # inputs replaced before any tick used them

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

    def record_input(self, received_ns: int, callback_ns: int, started_ns: int, published_ns: int) -> None:
        """One input's path on the system clock [ns]: middleware receive, callback start,
        tick start, command published."""
        j = self._j
        latency = (published_ns - received_ns) * 1e-9
        self.latency_s[j] = latency
        self.dispatch_s[j] = (callback_ns - received_ns) * 1e-9
        self.wait_s[j] = (started_ns - callback_ns) * 1e-9
        self._j = (j + 1) % self.latency_s.size
        self.inputs += 1
        if latency > self.max_latency_s:
            self.max_latency_s = latency
        self.latency_hist.add(latency)

    def skip(self, slots: int) -> None:
        self.skipped += slots
        self.misses += slots

    def summary(self) -> dict[str, float]:
        """p50/p99/max of the window [µs] and the counters."""
        k = min(self.n, self.tick_s.size)
        out = {"ticks": float(self.n), "deadline_misses": float(self.misses),
               "skipped_slots": float(self.skipped),
               "deadline_miss_rate": self.misses / max(1, self.n + self.skipped),
               "max_compute_us_all": self.max_compute_s * 1e6,
               "input_to_command_inputs": float(self.inputs),
               "input_to_command_max_us_all": self.max_latency_s * 1e6,
               "reused_input_ticks": float(self.reused_input_ticks),
               "overwritten_inputs": float(self.overwritten_inputs)}
        if k > 0:
            c = self.compute_s[:k] * 1e6
            late = self.late_s[:k] * 1e6
            p = np.percentile(c, (50, 99))
            out.update({"compute_p50_us": p[0], "compute_p99_us": p[1], "compute_max_us": float(c.max()),
                        "start_late_p50_us": float(np.percentile(late, 50)),
                        "start_late_p99_us": float(np.percentile(late, 99)),
                        "start_late_max_us": float(late.max())})
        k = min(self.inputs, self.latency_s.size)
        if k > 0:
            for name, ring in (("input_to_command", self.latency_s), ("input_dispatch", self.dispatch_s),
                               ("input_wait", self.wait_s)):
                x = ring[:k] * 1e6
                p = np.percentile(x, (50, 99))
                out.update({f"{name}_p50_us": p[0], f"{name}_p99_us": p[1], f"{name}_max_us": float(x.max())})
        return out
