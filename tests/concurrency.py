"""Counting blocking calls in flight: what a parallelism knob does, without timing anything.

A latency-bound stage gains from parallelism because several of its blocking calls wait at
once. How many records/s that buys depends on the machine and its load (the benchmarks
measure it); how many calls were in flight together depends only on the knobs.
"""

from __future__ import annotations

import threading
import time


class InFlight:
    """A context manager around each blocking call: ``now`` running, ``peak`` at most at once."""

    def __init__(self):
        self._lock = threading.Lock()
        self.now = self.peak = 0

    def reset(self):
        with self._lock:
            self.peak = self.now

    def __enter__(self):
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def __exit__(self, *exc):
        with self._lock:
            self.now -= 1


class CountingTime:
    """Stands in for a module's ``time`` (monkeypatch ``module.time``): each ``sleep`` is
    counted while it waits, everything else is the real module's."""

    def __init__(self):
        self.in_flight = InFlight()

    def sleep(self, seconds):
        with self.in_flight:
            time.sleep(seconds)

    def __getattr__(self, name):
        return getattr(time, name)


def peak_sleeps(monkeypatch, module, run):
    """The most ``module.time.sleep`` calls waiting at once while ``run()`` ran, and its value.

    Prime the pipeline's ``stages`` first: locating them builds it with other knob values.
    """
    clock = CountingTime()
    with monkeypatch.context() as patch:
        patch.setattr(module, "time", clock)
        value = run()
    return clock.in_flight.peak, value
