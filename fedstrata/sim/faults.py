"""Fault injection: crashes, partitions, degradations, availability and round dropout.

Reach it as ``sim.faults`` on a :class:`~fedstrata.sim.kernel.Simulation`.
Every random fault draws from its own stream named after the fault and the
node (e.g. ``availability/c17``), so adding one fault does not change the
draws of another.

Availability models are evaluated lazily: the state at time ``t`` is
computed when first asked, from state changes drawn in time order, so a
node that is never asked costs nothing and the result does not depend on
when it is asked.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fedstrata.errors import ValidationError
from fedstrata.sim import lifecycle
from fedstrata.sim.links import Degradation, Outage, Sampler, Window
from fedstrata.sim.state import Availability, NodeState

if TYPE_CHECKING:
    from fedstrata.sim.kernel import Simulation

__all__ = ["Faults", "MarkovAvailability", "TraceAvailability"]


def _probability(what: str, value: float) -> float:
    if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
        raise ValidationError(f"{what} must be a probability in [0, 1], got {value!r}")
    return float(value)


class MarkovAvailability(Availability):
    """Two-state (online/offline) Markov chain evaluated every ``step`` seconds.

    At each multiple of ``step`` an online node goes offline with
    probability ``p_on_to_off`` and an offline one comes back with
    probability ``p_off_to_on``. Sojourn times are therefore ``step`` times
    geometric variables, which is how they are drawn: one draw per state
    change, not per step.

    Parameters
    ----------
    p_on_to_off, p_off_to_on
        Transition probabilities per step, in [0, 1].
    step
        Seconds between transitions, > 0.
    rng
        The node's availability stream.
    start_online
        State on ``[0, step)``.

    """

    def __init__(
        self,
        p_on_to_off: float,
        p_off_to_on: float,
        step: float,
        rng: np.random.Generator,
        *,
        start_online: bool = True,
    ) -> None:
        self._p = (
            _probability("p_on_to_off", p_on_to_off),
            _probability("p_off_to_on", p_off_to_on),
        )
        if not (isinstance(step, int | float) and math.isfinite(step) and step > 0):
            raise ValidationError(f"step must be a finite number > 0, got {step!r}")
        self._step = float(step)
        self._rng = rng
        self._start = bool(start_online)
        self._toggles: list[float] = []
        self._state = self._start  # state after the last recorded toggle
        self._next = self._sojourn(0.0)

    def _sojourn(self, t: float) -> float:
        p = self._p[0] if self._state else self._p[1]
        if p == 0:
            return math.inf
        return t + self._step * int(self._rng.geometric(p))

    def _extend(self, t: float) -> None:
        while self._next <= t:
            self._toggles.append(self._next)
            self._state = not self._state
            self._next = self._sojourn(self._next)

    def is_online(self, t: float) -> bool:
        """Return whether the node is online at ``t`` (a change at ``t`` already applies)."""
        self._extend(t)
        flips = bisect.bisect_right(self._toggles, t)
        return self._start != (flips % 2 == 1)

    def next_online(self, t: float) -> float | None:
        """Return the first time >= ``t`` the node is online, or ``None`` if never."""
        if self.is_online(t):
            return t
        k = bisect.bisect_right(self._toggles, t)
        nxt = self._toggles[k] if k < len(self._toggles) else self._next
        return None if math.isinf(nxt) else nxt


class TraceAvailability(Availability):
    """Availability from a trace of intervals ``[start, end)``.

    Parameters
    ----------
    intervals
        Non-overlapping ``(start, end)`` pairs; ``end`` may be ``inf``.
    online
        ``True``: the intervals are when the node is online (offline
        elsewhere). ``False``: they are when it is offline.

    """

    def __init__(self, intervals: Iterable[tuple[float, float]], *, online: bool = True) -> None:
        pairs = sorted((float(a), float(b)) for a, b in intervals)
        bounds: list[float] = []
        for a, b in pairs:
            if not (math.isfinite(a) and a >= 0) or not b > a:
                raise ValidationError(f"availability interval ({a}, {b}) needs 0 <= start < end")
            if bounds and a < bounds[-1]:
                raise ValidationError(f"availability intervals overlap at {a}")
            bounds.extend((a, b))
        self._bounds = bounds
        self._online = bool(online)

    def is_online(self, t: float) -> bool:
        """Return whether the node is online at ``t``."""
        inside = bisect.bisect_right(self._bounds, t) % 2 == 1
        return inside == self._online

    def next_online(self, t: float) -> float | None:
        """Return the first time >= ``t`` the node is online, or ``None`` if never."""
        if self.is_online(t):
            return t
        k = bisect.bisect_right(self._bounds, t)
        if k >= len(self._bounds) or math.isinf(self._bounds[k]):
            return None
        return self._bounds[k]


class Faults:
    """Fault injection for one simulation (``sim.faults``).

    Parameters
    ----------
    sim
        The simulation to inject into.

    """

    def __init__(self, sim: Simulation) -> None:
        self._sim = sim

    def _states(self, node_ids: str | Iterable[str]) -> list[NodeState]:
        ids = [node_ids] if isinstance(node_ids, str) else list(node_ids)
        if not ids:
            raise ValidationError("no node ids given")
        return [self._sim.node_state(i) for i in ids]

    def _check_time(self, what: str, t: float) -> float:
        if not (isinstance(t, int | float) and math.isfinite(t) and t >= self._sim.now):
            raise ValidationError(
                f"{what} must be a finite time >= now ({self._sim.now}), got {t!r}"
            )
        return float(t)

    def crash(
        self,
        node_id: str,
        at: float,
        restart_after: float | None = None,
        factory: Callable[[], Any] | None = None,
    ) -> None:
        """Crash ``node_id`` at ``at``: its session ends uncleanly.

        The brokers publish its will; messages in flight to it, its timers
        and any Compute in progress are dropped (deliveries are logged as
        ``drop``/``crashed``). With ``restart_after`` it reconnects that many
        seconds later and gets ``Started``: with a new node object from
        ``factory()`` (a process restart, memory lost) or, without a factory,
        the same object (its memory survives, like a device that only lost
        its connection). It must subscribe again.

        Parameters
        ----------
        node_id
            The node.
        at
            Crash time, >= now.
        restart_after
            Seconds until the restart, > 0; ``None`` means never.
        factory
            Builds the restarted node; it must have the same ``node_id``.

        """
        ns = self._sim.node_state(node_id)
        at = self._check_time("crash time", at)
        if restart_after is not None and not (
            isinstance(restart_after, int | float)
            and math.isfinite(restart_after)
            and restart_after > 0
        ):
            raise ValidationError(
                f"restart_after must be a finite number > 0, got {restart_after!r}"
            )
        if factory is not None and not callable(factory):
            raise ValidationError("factory must be callable")
        eng = self._sim.engine
        eng.call(at - self._sim.now, lifecycle.crash, eng, ns, restart_after, factory)

    def _add_window(self, node_ids: str | Iterable[str], window: Window) -> None:
        for ns in self._states(node_ids):
            wired = [p for p in ns.ports if p.link is not None]
            if not wired:
                raise ValidationError(
                    f"{ns.node_id} has only co-located connections (link=None): no link to fault"
                )
            for port in wired:
                port.set_link(port.link.with_windows(window))  # type: ignore[union-attr]

    def partition(self, node_ids: str | Iterable[str], start: float, end: float) -> None:
        """Cut the links of ``node_ids`` to their brokers during ``[start, end)``.

        An :class:`~fedstrata.sim.links.Outage` is added to every link of
        these nodes (co-located connections are unaffected): everything they
        send or are sent inside the window is lost (``drop``/``outage``).
        QoS 1 senders keep retrying, so such messages arrive at the first
        retry after the window (if ``max_retries`` allows).
        """
        self._add_window(node_ids, Outage(start, end))

    def degrade(
        self,
        node_ids: str | Iterable[str],
        start: float,
        end: float,
        *,
        latency_factor: float = 1.0,
        extra_latency: float = 0.0,
        bandwidth_factor: float = 1.0,
        loss: float | None = None,
    ) -> None:
        """Make the links of ``node_ids`` worse during ``[start, end)``.

        See :class:`~fedstrata.sim.links.Degradation` for the parameters.
        """
        window = Degradation(start, end, latency_factor, extra_latency, bandwidth_factor, loss)
        self._add_window(node_ids, window)

    def availability_markov(
        self,
        node_id: str,
        p_on_to_off: float,
        p_off_to_on: float,
        step: float,
        *,
        start_online: bool = True,
    ) -> None:
        """Switch ``node_id`` on and off by a two-state Markov chain (:class:`MarkovAvailability`).

        While offline, messages to the node are dropped (``drop``/``offline``;
        QoS 1 senders retry), its publishes are dropped at the source (its
        QoS 1 retries continue) and it gets no events: its timers and its
        ``Started`` wait until it is back online.
        """
        ns = self._sim.node_state(node_id)
        rng = self._sim.rng(f"availability/{node_id}")
        ns.avail = MarkovAvailability(
            p_on_to_off, p_off_to_on, step, rng, start_online=start_online
        )

    def availability_trace(
        self,
        node_id: str,
        intervals: Sequence[tuple[float, float]],
        *,
        online: bool = True,
    ) -> None:
        """Take ``node_id`` on and off by a trace (see :class:`TraceAvailability`).

        ``intervals`` are the online periods (``online=True``, the usual
        form of device availability traces) or the offline ones. Offline
        semantics are those of :meth:`availability_markov`.
        """
        self._sim.node_state(node_id).avail = TraceAvailability(intervals, online=online)

    def round_dropout(
        self,
        node_ids: str | Iterable[str],
        probability: float,
        topic_suffix: str = "/down",
    ) -> None:
        """Make ``node_ids`` miss rounds: per-round client dropout.

        Each time a message whose topic ends with ``topic_suffix`` (the
        aggregator's round broadcast) arrives at one of these nodes, with
        ``probability`` the node misses that round: the delivery is
        suppressed and logged as ``drop``/``dropout``. The draw is made once
        per message and node; at the MQTT level the message was received
        (PUBACK sent), so QoS 1 does not resend it and duplicates of it are
        suppressed too. Other topics are unaffected.
        """
        p = _probability("dropout probability", probability)
        if not isinstance(topic_suffix, str) or not topic_suffix:
            raise ValidationError("topic_suffix must be a non-empty str")
        for ns in self._states(node_ids):
            ns.dropout_p = p
            ns.dropout_suffix = topic_suffix
            ns.dropout_draw = Sampler(self._sim.rng(f"dropout/{ns.node_id}").random)
