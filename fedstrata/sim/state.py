"""Per-node and per-message state of the kernel, kept to a few slots each.

These classes are the kernel's internals; they are public only so that
:mod:`fedstrata.sim.faults` and tests can reach them. SimPy events here
subclass :class:`simpy.events.Event` without calling its ``__init__``: they
are created already triggered (``_ok = True``) and scheduled once with
``env.schedule``, so one delivery costs one heap entry and one callback and
no process or generator (DESIGN.md, performance notes).
"""

from __future__ import annotations

import enum
import hashlib
import math
from array import array
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from simpy.events import Event

from fedstrata.sim.links import Link, Sampler
from fedstrata.sim.tcp import TcpConnection, TcpModel

if TYPE_CHECKING:
    from fedstrata.mqtt import Will
    from fedstrata.sim.broker import Message, SimBroker

__all__ = [
    "FAST",
    "LOCAL",
    "LOST",
    "OUTAGE",
    "SLOW",
    "Availability",
    "Call",
    "Hop",
    "NodeState",
    "Port",
    "Relay",
    "Status",
    "TimerEvent",
    "stream",
]

#: Returned by :meth:`Port.transmit` for a transmission lost at random.
LOST = -1.0
#: Returned by :meth:`Port.transmit` for a transmission sent during an outage.
OUTAGE = -2.0
#: :attr:`Port.mode` of a co-located connection.
LOCAL = 0
#: :attr:`Port.mode` of a link without loss, jitter or windows.
FAST = 1
#: :attr:`Port.mode` of any other link.
SLOW = 2


def stream(seed: int, name: str) -> np.random.Generator:
    """Return the random generator of the stream called ``name`` under ``seed``.

    The name is hashed with BLAKE2b to 64 bits (not Python's salted
    ``hash()``), so a stream is the same in every process and run, and
    10^5 names collide with probability ~1e-10 (crc32 would reach ~1 in 1000
    at 10^4 names).
    """
    digest = int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "big")
    return np.random.default_rng([seed, digest])


class Status(enum.Enum):
    """Life cycle of a node inside the simulation."""

    PENDING = "pending"  # added, not Started yet
    LIVE = "live"
    CRASHED = "crashed"
    FINISHED = "finished"
    OFFLINE = "offline"  # never started: offline for good when its Started was due


class Availability:
    """Interface of availability models (see :mod:`fedstrata.sim.faults`)."""

    __slots__ = ()

    def is_online(self, t: float) -> bool:
        """Return whether the node is online at time ``t``."""
        raise NotImplementedError

    def next_online(self, t: float) -> float | None:
        """Return the first time >= ``t`` the node is online, or ``None`` if never."""
        raise NotImplementedError


class NodeState:
    """Everything the kernel knows about one node id, across crashes and restarts.

    ``inc`` (incarnation) is bumped on every crash; messages and timers
    carry the incarnation they were meant for, so nothing addressed to a
    crashed incarnation reaches its successor.
    """

    __slots__ = (
        "avail",
        "busy",
        "delivered",
        "drop_kinds",
        "dropout_draw",
        "dropout_p",
        "dropout_suffix",
        "dropped",
        "duplicates",
        "inc",
        "node",
        "node_id",
        "payload_in",
        "payload_out",
        "pending",
        "ports",
        "publishes",
        "routes",
        "speed",
        "start_at",
        "status",
        "tier",
        "timers",
        "will",
    )

    def __init__(
        self, node: Any, tier: str, speed: float, will: Will | None, start_at: float
    ) -> None:
        self.node = node
        self.node_id: str = node.node_id
        self.tier = tier
        self.speed = speed
        self.will = will
        self.start_at = start_at
        self.ports: list[Port] = []
        self.status = Status.PENDING
        self.inc = 0
        self.busy = False
        self.pending: deque[Any] | None = None  # made on first use: an empty deque is 760 B
        self.timers: dict[str, int] = {}
        self.routes: dict[str, Port] = {}
        self.avail: Availability | None = None
        self.dropout_p = 0.0
        self.dropout_suffix = "/down"
        self.dropout_draw: Callable[[], float] | None = None
        self.publishes = 0
        self.payload_out = 0  # len(payload) of every PUBLISH the node made
        self.delivered = 0
        self.payload_in = 0  # len(payload) of every PUBLISH handed to the node
        self.duplicates = 0
        self.dropped = 0
        self.drop_kinds: dict[str, int] | None = None  # drops by kind, made on first drop

    def wait(self, event: Any) -> None:
        """Queue ``event`` until the node's current Compute ends."""
        if self.pending is None:
            self.pending = deque()
        self.pending.append(event)


class Port:
    """One connection of a node to a broker: the link, its random streams and byte counters.

    ``mode`` selects the path a transmission takes: :data:`LOCAL` for a
    co-located connection (``link=None``: zero delay, never lost, no wire
    bytes), :data:`FAST` for a link without loss, jitter or windows (delay
    = next latency draw + bytes x ``spb``, inlined by the engine) and
    :data:`SLOW` for everything else (:meth:`transmit`). Streams (latency,
    jitter, loss) are separate and created on first use, so turning loss on
    does not change the latency draws of a link, and both paths take
    latencies from the same buffer ``lat_buf``.
    """

    __slots__ = (
        "_jit",
        "_loss",
        "_models",
        "_refill_block",
        "_rngs",
        "_seed",
        "ack_down_bytes",
        "ack_up_bytes",
        "broker",
        "conn",
        "down_bytes",
        "down_msgs",
        "ip_down",
        "ip_up",
        "lat_buf",
        "link",
        "mode",
        "name",
        "ns",
        "spb",
        "up_bytes",
        "up_msgs",
        "wire",
    )

    def __init__(
        self,
        ns: NodeState,
        broker: SimBroker,
        link: Link | None,
        seed: int,
        tcp: TcpModel | None = None,
    ) -> None:
        self.ns = ns
        self.broker = broker
        self.name = f"link/{ns.node_id}/{broker.site}"
        self._seed = seed
        self.up_bytes = self.up_msgs = self.down_bytes = self.down_msgs = 0
        self.ack_up_bytes = self.ack_down_bytes = 0
        # IP-level bytes (TCP/IP headers and ACKs included) by direction of travel.
        self.ip_up = self.ip_down = 0
        self.conn = None if tcp is None else TcpConnection(tcp)
        if tcp is not None and link is not None:  # the session's own bytes, half each way
            self.ip_up = tcp.session_bytes // 2
            self.ip_down = tcp.session_bytes - self.ip_up
        self._rngs: dict[str, np.random.Generator] = {}
        self._models: tuple[object, object] = (None, None)
        self.lat_buf = array("d")  # 8 B per draw: a list of floats takes 32
        self._refill_block = 16
        self._jit: Sampler | None = None
        self._loss: Sampler | None = None
        self.set_link(link)

    def _rng(self, purpose: str) -> np.random.Generator:
        rng = self._rngs.get(purpose)
        if rng is None:
            rng = self._rngs[purpose] = stream(self._seed, f"{self.name}/{purpose}")
        return rng

    def set_link(self, link: Link | None) -> None:
        """Install ``link`` (e.g. with a fault window added) and refresh the derived fields."""
        self.link = link
        self.wire = link is not None
        if link is None:
            self.mode = LOCAL
            self.spb = 0.0
            return
        lat, jit = link.latency, link.jitter
        # A window added by a fault keeps the models: keep the buffers and their draws.
        if lat is not self._models[0] or jit is not self._models[1]:
            self._models = (lat, jit)
            self.lat_buf = array("d")
            self._rng("latency")  # create the stream now: ~50 us, better at build than mid-run
            self._jit = None
            if jit is not None:
                jrng = self._rng("jitter")
                self._jit = Sampler(lambda n: jit.sample_many(jrng, n))
        bw = link.bandwidth_bps
        self.spb = 0.0 if bw is None else 8.0 / bw
        simple = not link.windows and link.loss == 0 and jit is None
        self.mode = FAST if simple else SLOW

    def refill(self) -> float:
        """Draw the next block of latencies into ``lat_buf`` and return the first one.

        Blocks grow 16, 32, 64: an idle link costs little memory and a busy
        one amortises the NumPy call. :class:`Constant` draws nothing.
        """
        model = self._models[0]
        n = self._refill_block
        self._refill_block = min(2 * n, 64)
        draws = model.sample_many(self._rng("latency"), n)  # type: ignore[attr-defined]
        block = array("d")
        block.frombytes(np.ascontiguousarray(draws[::-1], dtype=np.float64).tobytes())
        self.lat_buf = block  # reversed: pop() from the end hands them out in draw order
        return block.pop()

    def _loss_draw(self) -> float:
        if self._loss is None:
            self._loss = Sampler(self._rng("loss").random, max_block=1024)
        return self._loss()

    def transmit(self, nbytes: int, now: float) -> float:
        """Return the delay of ``nbytes`` sent at ``now``, or :data:`LOST` / :data:`OUTAGE`.

        The general path, for wire ports. The loss draw comes first and a
        lost transmission draws no latency.
        """
        link = self.link
        assert link is not None
        if link.windows:
            factor, extra, bw, loss, down = link.conditions(now)
            if down:
                return OUTAGE
        else:
            factor, extra, bw, loss = 1.0, 0.0, link.bandwidth_bps, link.loss
        if loss and self._loss_draw() < loss:
            return LOST
        buf = self.lat_buf
        d = buf.pop() if buf else self.refill()
        if self._jit is not None:
            d += self._jit()
        if factor != 1.0 or extra:
            d = d * factor + extra
        if bw is not None:
            # Same float operations as the engine's inlined path (nbytes * spb), so a
            # FAST link gives the same times whichever path (e.g. with the log on) runs.
            d += nbytes * (self.spb if bw == link.bandwidth_bps else 8.0 / bw)
        return d

    def draw_latency(self) -> float:
        """Return the next one-way latency of the link, jitter included (no windows applied)."""
        buf = self.lat_buf
        lat = buf.pop() if buf else self.refill()
        if self._jit is not None:
            lat += self._jit()
        return lat

    def tcp_delay(self, nbytes: int, now: float, up: bool, qos: int) -> float:
        """Return the delay of ``nbytes`` sent at ``now`` on this connection, or :data:`OUTAGE`.

        See :class:`~fedstrata.sim.tcp.TcpConnection`: one latency draw (jitter
        added) per message, loss draws from the link's loss stream.
        """
        lat = self.draw_latency()
        d = self.conn.delay(self.link, nbytes, now, up, qos, lat, self._loss_draw)  # type: ignore[union-attr, arg-type]
        return OUTAGE if d < 0 else d


class Hop(Event):
    """One message on its way over one link (node to broker or broker to node).

    The hop is itself the SimPy event of its first arrival. It carries the
    QoS 1 flow state: ``t_sent`` (last transmission), ``ack_at`` (earliest
    PUBACK arrival known), ``retry_pending`` and ``delivered`` (0, 1, or 2
    when suppressed by dropout). Rarely used fields are class attributes,
    set on an instance only when needed.
    """

    __slots__ = (
        "ack_at",
        "callbacks",
        "delivered",
        "inc",
        "msg",
        "ns",
        "port",
        "qos",
        "retry_pending",
        "t_sent",
        "up",
    )
    _ok = True
    tries = 0
    retain = False
    twin: Hop | None = None  # first copy, when the broker re-forwards a duplicate publication
    fwd: dict[Port, Hop] | None = None  # copies forwarded by the first arrival (uplink, QoS 1)

    def __init__(
        self,
        callbacks: tuple[Callable[[Any], None], ...],
        msg: Message,
        qos: int,
        port: Port,
        ns: NodeState,
        up: bool,
    ) -> None:
        self.callbacks = callbacks  # type: ignore[assignment]
        self.msg = msg
        self.qos = qos
        self.port = port
        self.ns = ns
        self.inc = ns.inc
        self.up = up
        self.delivered = 0
        self.t_sent = 0.0
        self.ack_at = math.inf
        self.retry_pending = False


class Relay(Event):
    """The arrival of a retransmission of ``hop`` (the hop itself may still be in flight)."""

    __slots__ = ("callbacks", "hop")
    _ok = True

    def __init__(self, callbacks: tuple[Callable[[Any], None], ...], hop: Hop) -> None:
        self.callbacks = callbacks  # type: ignore[assignment]
        self.hop = hop


class Call(Event):
    """A scheduled call ``fn(*args)`` (start, compute end, retry, crash...)."""

    __slots__ = ("args", "callbacks", "fn")
    _ok = True

    def __init__(
        self, callbacks: tuple[Callable[[Any], None], ...], fn: Callable[..., None], args: tuple
    ) -> None:
        self.callbacks = callbacks  # type: ignore[assignment]
        self.fn = fn
        self.args = args


class TimerEvent(Event):
    """A node timer; it fires only if ``ns.timers[name]`` still holds its ``token``."""

    __slots__ = ("callbacks", "name", "ns", "token")
    _ok = True

    def __init__(
        self, callbacks: tuple[Callable[[Any], None], ...], ns: NodeState, name: str, token: int
    ) -> None:
        self.callbacks = callbacks  # type: ignore[assignment]
        self.ns = ns
        self.name = name
        self.token = token
