"""A site's access link, shared by every connection that crosses it (``access_mbps``).

The children of an aggregator reach its broker over their own links, but all of
their traffic also crosses the aggregator site's access link: when ten clients
upload at once, they share it. TCP flows that share a bottleneck converge to
roughly equal shares, and a flow that its own link limits leaves the rest to the
others, so the model is **max-min fair sharing** (processor sharing with
per-flow rate caps, computed by water-filling). It is a fluid model: rates change
only when a flow starts or ends, and the bottleneck is work-conserving, so the
time the last of k simultaneous uploads completes is exact; what it does not
model is the convergence of congestion control to the fair share (a few round
trips) and queueing delay at the bottleneck's buffer.

Events: one scheduled check per change of the set of flows (a start or an end);
a check made stale by a later change is skipped by its token.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from fedstrata.errors import ValidationError

if TYPE_CHECKING:
    from fedstrata.sim.engine import Engine

__all__ = ["FairShare", "max_min_rates"]

#: A flow with less than this many seconds of transfer left is done (float rounding).
_EPS_S = 1e-9


def max_min_rates(capacity: float, caps: list[float]) -> list[float]:
    """Return the max-min fair rates of flows with rate ``caps`` sharing ``capacity``.

    Water-filling: every flow gets an equal share of what is left, except those
    whose cap is below it, which get their cap. Rates sum to at most ``capacity``.
    """
    n = len(caps)
    rates = [0.0] * n
    left, remaining = capacity, n
    for i in sorted(range(n), key=caps.__getitem__):
        share = left / remaining
        rate = caps[i] if caps[i] < share else share
        rates[i] = rate
        left -= rate
        remaining -= 1
    return rates


class _Flow:
    __slots__ = ("cap", "done", "left", "rate")

    def __init__(self, bits: float, cap: float, done: Callable[[float], None]) -> None:
        self.left = bits
        self.cap = cap
        self.rate = 0.0
        self.done = done


class FairShare:
    """One direction of a shared access link: flows of bits sharing ``capacity_bps``.

    Parameters
    ----------
    engine
        The engine that schedules the checks.
    capacity_bps
        The link's capacity in bits per second.

    """

    __slots__ = ("_engine", "_flows", "_t", "_token", "capacity")

    def __init__(self, engine: Engine, capacity_bps: float) -> None:
        if not (isinstance(capacity_bps, int | float) and 0 < capacity_bps < math.inf):
            raise ValidationError(f"capacity_bps must be a finite number > 0, got {capacity_bps!r}")
        self._engine = engine
        self.capacity = float(capacity_bps)
        self._flows: list[_Flow] = []
        self._t = 0.0
        self._token = 0

    def add(self, bits: float, cap_bps: float | None, done: Callable[[float], None]) -> None:
        """Start a flow of ``bits`` limited to ``cap_bps`` (its own link; ``None``: no limit).

        ``done(t)`` is called at the virtual time ``t`` its last bit has crossed.
        """
        now = self._engine.env.now
        self._advance(now)
        self._flows.append(_Flow(bits, math.inf if cap_bps is None else cap_bps, done))
        self._reschedule()

    def _advance(self, now: float) -> None:
        dt = now - self._t
        if dt > 0:
            for f in self._flows:
                f.left -= f.rate * dt
        self._t = now

    def _reschedule(self) -> None:
        flows = self._flows
        if not flows:
            return
        for f, rate in zip(
            flows, max_min_rates(self.capacity, [f.cap for f in flows]), strict=True
        ):
            f.rate = rate
        wait = min(max(f.left, 0.0) / f.rate for f in flows)
        self._token += 1
        self._engine.call(wait, self._check, self._token)

    def _check(self, token: int) -> None:
        if token != self._token:
            return  # a later start or end rescheduled
        now = self._engine.env.now
        self._advance(now)
        finished = [f for f in self._flows if f.left <= f.rate * _EPS_S]
        self._flows = [f for f in self._flows if f.left > f.rate * _EPS_S]
        self._reschedule()
        for f in finished:
            f.done(now)
