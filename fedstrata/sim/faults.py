"""Fault injection: crashes, partitions, degradations, availability and round dropout.

Reach it as ``sim.faults`` on a :class:`~fedstrata.sim.kernel.Simulation`.
Every random fault draws from its own stream named after the fault and the
node (e.g. ``availability/c17``), so adding one fault does not change the
draws of another.

Availability models are evaluated lazily, when asked: a node that is never
asked costs nothing. A :class:`TraceAvailability` answers any time in any
order; a :class:`MarkovAvailability` samples its chain at the times asked,
in O(1) time and memory per query, and so must be asked in non-decreasing
time (the kernel asks at the current virtual time only).
"""

from __future__ import annotations

import bisect
import math
import struct
from array import array
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from fedstrata.errors import ValidationError
from fedstrata.sim import lifecycle
from fedstrata.sim.links import Degradation, Outage, Sampler, Window
from fedstrata.sim.state import Availability, NodeState

if TYPE_CHECKING:
    from fedstrata.sim.kernel import Simulation

__all__ = ["Faults", "MarkovAvailability", "TraceAvailability", "fault_stream"]


def fault_stream(kind: str, node_id: str) -> str:
    """Name of the random stream of fault ``kind`` at ``node_id`` (e.g. ``dropout/c17``).

    The simulator seeds each node's ``dropout`` and ``availability`` draws from
    :func:`~fedstrata.sim.state.stream` under this name; a run over a real broker
    takes the same names (:mod:`fedstrata.scenarios.fault_plan`) to draw the same
    faults.
    """
    return f"{kind}/{node_id}"


#: Grid indices are ``floor(t * (_UP / step) + 1e-9)``: the relative slack (2^-48, about
#: 16 float ulps) and the absolute one (1e-9 step) put a time that is a multiple of
#: ``step`` up to rounding (``0.3`` for step ``0.1``, ``i * 1e-6`` for ``1e-9``) on it.
_UP = 1.0 + 2.0**-48
_DOWN = 1.0 - 2.0**-45  # see MarkovAvailability._before
_NEVER, _GEO, _LOG = 0, 1, 2  # how MarkovAvailability draws the steps until a change


def _bits(x: float) -> int:
    """Return the bit pattern of a non-negative float (ordered like the floats)."""
    return int.from_bytes(struct.pack("<d", x), "little")


def _float(bits: int) -> float:
    """Return the float of a bit pattern from :func:`_bits`."""
    return float(struct.unpack("<d", bits.to_bytes(8, "little"))[0])


def _probability(what: str, value: float) -> float:
    if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
        raise ValidationError(f"{what} must be a probability in [0, 1], got {value!r}")
    return float(value)


class MarkovAvailability(Availability):
    """Two-state (online/offline) Markov chain stepped every ``step`` seconds.

    At each multiple of ``step`` an online node goes offline with
    probability ``a = p_on_to_off`` and an offline one comes back with
    probability ``b = p_off_to_on``. The chain is sampled online, at the
    times it is asked about, in O(1) time and memory per query whatever the
    number of steps in between: it keeps only the state known last, the
    grid index of its next change (a geometric number of steps after the
    index it was drawn from: memoryless) and the time of that change. A
    query before the change answers the known state. A query at or past it
    knows the state at the change (the other one) and draws the state at
    its own index, ``n`` steps later, from the closed-form ``n``-step
    transition of the chain (``λ = 1 - a - b``)::

        P(on at n | on)  = b/(a+b) + a/(a+b) λ^n
        P(on at n | off) = b/(a+b) - b/(a+b) λ^n

    (``a + b = 2`` alternates, ``a + b = 0`` never changes: no draw), then
    draws the next change from there. The answers follow the chain's law at
    any set of query times, and the same seed and the same queries give the
    same answers; as a sample is drawn only where asked, queries must come
    in non-decreasing time (the kernel asks at the current virtual time).

    Times map to grid indices (exact Python ints at any size) by
    ``floor(t * ((1 + 2^-48) / step) + 1e-9)``: the state on ``[k step,
    (k + 1) step)`` is that of index ``k``, and a time that is a multiple of
    ``step`` up to float rounding (``0.3`` for step ``0.1``, ``i * 1e-6``
    for step ``1e-9``) is on that multiple: a change at ``t`` already
    applies at ``t``. :meth:`next_online` returns the first float time of
    the change's index, at which :meth:`is_online` says online. Where
    ``step`` is below the float spacing of ``t`` (1e-9 s at t = 1e9 s)
    several indices share one float; the state there is that of the last
    one, drawn by the chain.

    Parameters
    ----------
    p_on_to_off, p_off_to_on
        Transition probabilities per step, in [0, 1].
    step
        Seconds between transitions, > 0.
    rng
        The node's availability stream; uniforms and geometric draws are
        taken from it in blocks (8 growing to 256).
    start_online
        State on ``[0, step)``.

    """

    __slots__ = (
        "_a",
        "_b",
        "_fast_gbufs",
        "_gblock",
        "_gbufs",
        "_gmode",
        "_inv",
        "_k1",
        "_last",
        "_on",
        "_pi",
        "_rng",
        "_slack",
        "_step",
        "_t1",
        "_t_fast",
        "_trans",
        "_ublock",
        "_ubuf",
    )

    def __init__(
        self,
        p_on_to_off: float,
        p_off_to_on: float,
        step: float,
        rng: np.random.Generator,
        *,
        start_online: bool = True,
    ) -> None:
        a = _probability("p_on_to_off", p_on_to_off)
        b = _probability("p_off_to_on", p_off_to_on)
        if not (isinstance(step, int | float) and math.isfinite(step) and step > 0):
            raise ValidationError(f"step must be a finite number > 0, got {step!r}")
        self._a, self._b = a, b
        self._step = float(step)
        self._inv = _UP / self._step
        # Below it, k * step and _before(k) are plain float products (no overflow or
        # subnormal rounding): is_online uses them without checks.
        self._t_fast = 1e300 if self._step >= 1e-290 else -1.0
        self._slack = 1e-6 * self._step
        self._rng = rng
        self._ubuf = array("d")  # uniforms, reversed: pop() hands them out in draw order
        self._ublock = 8
        # Leaving a state (index 0: offline, 1: online) with probability p: geometric
        # numbers of steps drawn by NumPy in blocks (_GEO), one at a time from a uniform
        # when p is too small for int64 draws (_LOG), or never (_NEVER, p = 0).
        self._gmode = tuple(_NEVER if p == 0 else _GEO if p >= 1e-12 else _LOG for p in (b, a))
        self._gbufs = tuple(array("q") if m == _GEO else None for m in self._gmode)
        self._fast_gbufs = self._gbufs if self._t_fast > 0.0 else (None, None)  # is_online
        self._gblock = [8, 8]
        s = a + b
        self._pi = b / s if s > 0 else 1.0
        # n-step transition: None when λ = 0 (pi after one step), else (log |λ|, λ < 0);
        # (0.0, False) never changes state, (0.0, True) alternates.
        if s == 1.0:
            self._trans: tuple[float, bool] | None = None
        elif 0.0 < s < 1.0:
            self._trans = (math.log1p(-s), False)
        elif 1.0 < s < 2.0:
            self._trans = (math.log(s - 1.0), True)
        else:
            self._trans = (0.0, s == 2.0)
        self._on = bool(start_online)  # state at the last index looked at
        self._last = 0.0  # time of the last query
        self._k1: int | None = None  # grid index of the next change (None: never)
        self._t1 = math.inf  # a time before which no index reaches _k1 (inf: never)
        self._redraw(0)

    # -- draws ------------------------------------------------------------------------

    def _uniform(self) -> float:
        """Refill the uniform buffer and return its first value."""
        n = self._ublock
        self._ublock = min(2 * n, 256)
        block = array("d")
        block.frombytes(self._rng.random(n)[::-1].tobytes())
        self._ubuf = block
        return block.pop()

    def _geometric(self, on: bool) -> int:
        """Refill the geometric buffer of state ``on`` and return its first value."""
        n = self._gblock[on]
        self._gblock[on] = min(2 * n, 256)
        p = self._a if on else self._b
        draws = self._rng.geometric(p, n).astype(np.int64)[::-1]
        buf = self._gbufs[on]
        assert buf is not None
        buf.frombytes(draws.tobytes())
        return buf.pop()

    def _steps_to_change(self, on: bool) -> int | None:
        """Draw the number of steps until the chain leaves state ``on`` (None: never)."""
        mode = self._gmode[on]
        if mode == _GEO:
            buf = self._gbufs[on]
            assert buf is not None
            return buf.pop() if buf else self._geometric(on)
        if mode == _NEVER:
            return None
        # P(n > m) = (1 - p)^m for n = floor(log(1 - u) / log(1 - p)) + 1, u in [0, 1).
        buf = self._ubuf
        u = buf.pop() if buf else self._uniform()
        q = math.log1p(-u) / math.log1p(-(self._a if on else self._b))
        return math.floor(q) + 1 if q < 1e300 else None

    # -- grid -------------------------------------------------------------------------

    def _index(self, t: float) -> int:
        """Return the grid index of ``t`` (see the class docstring), an exact int."""
        q = t * self._inv + 1e-9
        if math.isfinite(q):
            return int(q)  # exact: a float >= 2**52 is an integer, below it int() floors
        if not math.isfinite(t):
            raise ValidationError(f"availability queried at a non-finite time {t!r}")
        return int(Fraction(t) / Fraction(self._step))  # quotient beyond floats: exact

    def _time_of(self, k: int) -> float | None:
        """Return a float time whose index is ``k``: ``k * step`` or the first one after.

        ``None`` beyond the float range. In the rare case where ``k * step``
        rounds to a time of another index, the first float whose index is
        ``k`` or more is found by bisection over the ordered bit patterns of
        non-negative floats (64 steps at most).
        """
        if k > 1e300:
            return None
        t = k * self._step
        if not t < math.inf:
            return None
        if self._index(t) == k:
            return t
        lo, hi = 0, _bits(t)  # index(float(lo)) < k by the search invariant, hi: >= k
        if self._index(t) < k:
            lo, hi = hi, _bits(math.inf)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._index(_float(mid)) >= k:
                hi = mid
            else:
                lo = mid
        t = _float(hi)
        return t if t < math.inf else None

    def _before(self, k1: int) -> float:
        """Return a time before which every index is below ``k1`` (cheap, not tight).

        ``fl(fl(t * inv) + 1e-9) >= k1`` with ``inv = fl((1 + 2^-48) / step)``
        needs ``t`` within ``k1 2^-48`` and ``1e-9`` steps of ``k1 step`` (up
        to a few roundings of 2^-53): a relative ``2^-45`` and ``1e-6`` steps
        below it are safely out.
        """
        return k1 * self._step * _DOWN - 1e-6 * self._step

    def _redraw(self, k: int) -> None:
        """Draw the next change after index ``k``, where the state is ``_on``."""
        n = self._steps_to_change(self._on)
        if n is None or self._time_of(k + n) is None:
            self._k1, self._t1 = None, math.inf
        else:
            self._k1, self._t1 = k + n, self._before(k + n)

    def _p_on(self, on: bool, n: int) -> float:
        """Return P(online at index i + n | state ``on`` at index i), for n >= 1."""
        pi = self._pi
        trans = self._trans
        if trans is None:
            return pi
        log_lam, negative = trans
        if not log_lam:  # a = b = 0 (constant) or a = b = 1 (alternation)
            return float(on != (negative and n % 2 == 1))
        lam_n = math.exp(n * log_lam) if n < 1e300 else 0.0
        if negative and n % 2:
            lam_n = -lam_n
        return pi + (self._a / (self._a + self._b)) * lam_n if on else pi - pi * lam_n

    # -- queries ----------------------------------------------------------------------

    def _past(self, t: float) -> None:
        raise ValidationError(
            f"availability queried at t={t!r}, before the previous query ({self._last!r}); "
            "queries must come in non-decreasing time"
        )

    def is_online(self, t: float) -> bool:
        """Return whether the node is online at ``t`` (a change at ``t`` already applies).

        Raises
        ------
        ValidationError
            If ``t`` is earlier than the previous query, or not finite.

        """
        if t < self._t1:  # well before the next change
            if t < self._last:
                self._past(t)
            self._last = t
            return self._on
        if t < self._last:  # _t1 is only a bound: it may lie below the last query
            self._past(t)
        try:
            k = int(t * self._inv + 1e-9)  # _index inlined: int() of a float is exact
        except (OverflowError, ValueError):
            k = self._index(t)
        self._last = t
        n = k - self._k1  # type: ignore[operator]
        if n < 0:  # just before the change
            return self._on
        on = not self._on  # the state at the change, n steps before k
        if n:
            p = self._pi if self._trans is None else self._p_on(on, n)
            if 0.0 < p < 1.0:
                buf = self._ubuf
                on = (buf.pop() if buf else self._uniform()) < p
            else:
                on = p >= 1.0
        self._on = on
        # The next change after k; _redraw inlined for geometric draws from the buffer.
        gbuf = self._fast_gbufs[on]
        if gbuf is None:
            self._redraw(k)
            return on
        k1 = k + (gbuf.pop() if gbuf else self._geometric(on))
        try:
            t1 = k1 * self._step
        except OverflowError:  # k1 beyond floats: never (not a time)
            t1 = math.inf
        if t1 < self._t_fast:
            self._k1 = k1
            self._t1 = t1 * _DOWN - self._slack  # _before inlined
        elif self._time_of(k1) is None:
            self._k1, self._t1 = None, math.inf
        else:
            self._k1, self._t1 = k1, self._before(k1)
        return on

    def next_online(self, t: float) -> float | None:
        """Return the first time >= ``t`` the node is online, or ``None`` if never.

        A query at ``t`` like :meth:`is_online` (same ordering rule). When
        offline, the time returned is that of the next change's grid index
        (``k * step`` when that float has index ``k``), where
        :meth:`is_online` says online.
        """
        if self.is_online(t):
            return t
        return None if self._k1 is None else self._time_of(self._k1)


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

        While offline, messages to the node are dropped (``drop``/``offline``,
        counted as lost; QoS 1 senders retry), its publishes are dropped at
        the source (counted as not sent; its QoS 1 retries continue) and it
        gets no events: its timers and its ``Started`` wait until it is back
        online. A node offline for good (``p_off_to_on = 0``) never gets them:
        they are dropped (counted as suppressed) and nothing of it keeps the
        run alive. Each query costs O(1) time and memory whatever ``step``
        (see :class:`MarkovAvailability`).
        """
        ns = self._sim.node_state(node_id)
        rng = self._sim.rng(fault_stream("availability", node_id))
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
            ns.dropout_draw = Sampler(self._sim.rng(fault_stream("dropout", ns.node_id)).random)
