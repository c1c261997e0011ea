"""Clocks: the one thing a replay and a live run do differently.

The engine asks its clock for ``now()`` and to ``wait_until(t)`` the next
event. A :class:`SimulatedClock` jumps there at once; a :class:`WallClock`
sleeps until real time gets there (the idea of SimPy's ``rt.py``), so the
same loop can pace a live controller.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    def wait_until(self, t: float) -> float:
        """Block until time ``t`` (or return at once if it is past); return the new now."""
        ...


class SimulatedClock:
    """Virtual time: waiting is free and exact."""

    __slots__ = ("_now",)

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def wait_until(self, t: float) -> float:
        if t > self._now:
            self._now = float(t)
        return self._now


class WallClock:
    """Real time in seconds since construction (monotonic), optionally scaled.

    ``speed`` > 1 runs faster than real time (a demo); ``sleep`` and ``monotonic``
    are injectable so tests need no real sleeping.
    """

    def __init__(
        self,
        speed: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if speed <= 0:
            raise ValueError("speed must be > 0")
        self._speed = speed
        self._mono = monotonic
        self._sleep = sleep
        self._t0 = monotonic()

    def now(self) -> float:
        return (self._mono() - self._t0) * self._speed

    def wait_until(self, t: float) -> float:
        while True:
            left = (t - self.now()) / self._speed
            if left <= 0:
                return self.now()
            self._sleep(left)
