"""The virtual-time simulation: brokers, nodes, links, faults, run loop and records.

A :class:`Simulation` owns a :class:`simpy.Environment`, the simulated
brokers (:class:`~fedstrata.sim.broker.SimBroker`) and the nodes: plain
sans-IO objects with ``node_id`` and ``handle(event) -> list[Effect]``
(:mod:`fedstrata.nodes.events`). It knows nothing about clustering.

Message path: sender --(sender's link, "up")--> broker --(subscriber's link,
"down")--> subscriber. A node's Publish and Subscribe go to the connection
whose broker ``serves`` the longest prefix of the topic or filter, else to
the node's first connection. A co-located connection (``link=None``) has
zero delay and no loss, and its bytes are not counted as wire bytes.
Brokers are not bridged.

Effects are carried out in order:

* ``Publish``: transmitted over the chosen link (see :mod:`fedstrata.sim.engine`
  for QoS 0/1);
* ``Subscribe``: takes effect at the broker immediately (no SUBSCRIBE
  delay is modelled: subscriptions are set up at start, and modelling the
  delay would only shift the first round); matching retained messages are
  then sent down the subscriber's link;
* ``SetTimer``/``CancelTimer``: named timers, re-arming replaces, a
  replaced or cancelled timer never fires;
* ``Compute(flops)``: the node is busy for ``flops / speed_flops``
  seconds; the remaining effects run afterwards and events arriving
  meanwhile wait, in order, and are handed over with the current time;
* ``Record(kind, fields)``: appended to :attr:`Simulation.records`;
* ``Finished(result)``: stored in :attr:`Simulation.results`; the node
  disconnects cleanly (its will is discarded) and receives nothing more.
  It must be the last effect of its list.

Random streams are derived from the seed and a stable name (``link/{node}/{site}/latency``,
``availability/{node}``, ...), never from ``hash()``, ``id()`` or set order,
so the same seed and setup give byte-identical logs and statistics.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from fedstrata.errors import ValidationError
from fedstrata.mqtt import Will
from fedstrata.sim import lifecycle
from fedstrata.sim.broker import SimBroker
from fedstrata.sim.engine import Engine
from fedstrata.sim.fair_share import FairShare
from fedstrata.sim.faults import Faults
from fedstrata.sim.links import Link
from fedstrata.sim.log import summarize, write_jsonl
from fedstrata.sim.state import NodeState, Port, stream
from fedstrata.sim.tcp import TcpModel

__all__ = ["LINK_MODELS", "Connection", "Simulation"]

#: The link models a simulation can use; the first is the default.
LINK_MODELS = ("tcp", "message-retry")


@dataclass(frozen=True, slots=True)
class Connection:
    """A node's connection to one broker.

    Parameters
    ----------
    broker
        Site name of a broker added with :meth:`Simulation.add_broker`.
    link
        The link to it; ``None`` means co-located with the broker (zero
        delay, never lost, no wire bytes counted).

    """

    broker: str
    link: Link | None = None

    def __post_init__(self) -> None:
        if self.link is not None and not isinstance(self.link, Link):
            raise ValidationError(f"link must be a Link or None, got {self.link!r}")


def _finite_nonneg(what: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(f"{what} must be a finite number, got {value!r}")
    if value < 0:
        raise ValidationError(f"{what} must be >= 0, got {value!r}")
    return float(value)


#: Allocations between young garbage collections during a run (CPython's default: 700).
YOUNG_GC_THRESHOLD = 50_000


class Simulation:
    """A federation in virtual time.

    Parameters
    ----------
    seed
        Non-negative integer; every random stream is derived from it.
    record_events
        Keep the event log (:attr:`events`, :meth:`write_events`). Off by
        default: big runs need only the counters of :meth:`stats`.
    retry_interval
        Seconds a client waits for a PUBACK before retransmitting a QoS 1
        PUBLISH; also the default of brokers.
    max_retries
        Retransmissions before a sender gives up (logged as
        ``drop``/``max_retries``); this bounds every retry loop, so runs
        terminate even towards a node that is gone for good.
    protocol
        MQTT protocol level for packet sizes: 4 (3.1.1) or 5.
    links
        ``"tcp"`` (default): the TCP + MQTT model of :mod:`fedstrata.sim.tcp`
        (segment loss delays a message; only a closed connection loses one;
        ``retry_interval`` and ``max_retries`` are refused there);
        ``"message-retry"``: a lost message is lost whole and resent by MQTT
        every ``retry_interval`` (the model before 0.2, kept for studies that
        compare with it).
    tcp
        Parameters of the ``"tcp"`` model.

    Attributes
    ----------
    env : simpy.Environment
        The SimPy environment.
    faults : Faults
        Fault injection (crash, partition, degrade, availability, dropout).
    records : list of dict
        ``Record`` effects as ``{"t", "node", "kind", "fields"}``.
    results : dict
        ``Finished`` results by node id.
    engine : Engine
        The kernel's internals (node states, brokers, counters).

    Notes
    -----
    Event log entries (when ``record_events``) are dicts with ``t``
    (virtual seconds rounded to 1e-9), ``ev``, ``src``, ``dst``, ``topic``,
    ``bytes``, ``qos``, ``dup`` and, depending on ``ev``, ``mid`` (message
    number), ``retain``, ``wire`` (false on co-located hops), ``reason`` or
    ``name``. ``ev`` is one of ``send`` (a PUBLISH transmission on one hop,
    retransmissions included, ``bytes`` its packet size), ``recv`` (at a
    broker), ``deliver`` (handed to a node), ``duplicate`` (a further copy),
    ``drop`` (``reason`` in :data:`~fedstrata.sim.engine.DROP_REASONS`),
    ``ack_lost``, ``subscribe``, ``timer``, ``start``, ``finish``,
    ``crash``, ``restart``, ``will``.

    """

    def __init__(
        self,
        seed: int,
        *,
        record_events: bool = False,
        retry_interval: float | None = None,
        max_retries: int | None = None,
        protocol: int = 4,
        links: str = "tcp",
        tcp: TcpModel | None = None,
    ) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise ValidationError(f"seed must be an int >= 0, got {seed!r}")
        if links not in LINK_MODELS:
            raise ValidationError(f"links must be one of {LINK_MODELS}, got {links!r}")
        _only_for_message_retry(links, retry_interval, max_retries)
        retry_interval = 5.0 if retry_interval is None else retry_interval
        max_retries = 10 if max_retries is None else max_retries
        if not (isinstance(retry_interval, int | float) and retry_interval > 0):
            raise ValidationError(f"retry_interval must be > 0, got {retry_interval!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValidationError(f"max_retries must be an int >= 0, got {max_retries!r}")
        if protocol not in (4, 5):
            raise ValidationError(f"protocol must be 4 or 5, got {protocol!r}")
        if tcp is not None and not isinstance(tcp, TcpModel):
            raise ValidationError(f"tcp must be a TcpModel, got {tcp!r}")
        self.links = links
        self.seed = int(seed)
        self.env = simpy.Environment()
        self.engine = Engine(
            self.env,
            protocol=protocol,
            retry_interval=float(retry_interval),
            max_retries=max_retries,
            record_events=record_events,
            tcp=(tcp or TcpModel()) if links == "tcp" else None,
        )
        self.faults = Faults(self)
        self.records = self.engine.records
        self.results = self.engine.results

    @property
    def now(self) -> float:
        """Current virtual time in seconds."""
        return self.env.now

    @property
    def events(self) -> list[dict[str, Any]]:
        """The event log (empty unless ``record_events``)."""
        return self.engine.events if self.engine.events is not None else []

    @property
    def brokers(self) -> dict[str, SimBroker]:
        """Brokers by site name."""
        return self.engine.brokers

    def rng(self, name: str) -> np.random.Generator:
        """Return a fresh generator for the stream ``name`` (same seed and name, same draws)."""
        return stream(self.seed, name)

    def node_state(self, node_id: str) -> NodeState:
        """Return the kernel state of ``node_id``; raise ValidationError if unknown."""
        try:
            return self.engine.nodes[node_id]
        except KeyError:
            raise ValidationError(f"unknown node {node_id!r}") from None

    def node(self, node_id: str) -> Any:
        """Return the current node object of ``node_id`` (a new one after a restart)."""
        return self.node_state(node_id).node

    def add_broker(
        self,
        site: str,
        serves: Sequence[str] = (),
        *,
        retry_interval: float | None = None,
        max_retries: int | None = None,
        access_bps: float | None = None,
    ) -> SimBroker:
        """Add the broker of ``site``, owning the topic prefixes ``serves``.

        Parameters
        ----------
        site
            Unique broker name.
        serves
            Topic prefixes this broker owns, e.g. ``["fs/r1/fog/f3/"]``.
        retry_interval, max_retries
            QoS 1 policy towards subscribers; default to the simulation's.
        access_bps
            The site's access capacity in bits per second, shared max-min fairly by
            every wire connection to this broker, in each direction
            (:mod:`fedstrata.sim.fair_share`; ``links="tcp"`` only). ``None``:
            every connection is its own pipe.

        Returns
        -------
        SimBroker
            The broker (for inspection: retained messages, subscriptions).

        """
        _only_for_message_retry(self.links, retry_interval, max_retries)
        if site in self.engine.brokers:
            raise ValidationError(f"broker {site!r} already exists")
        broker = SimBroker(
            site,
            serves,
            retry_interval=self.engine.retry_interval if retry_interval is None else retry_interval,
            max_retries=self.engine.max_retries if max_retries is None else max_retries,
        )
        if access_bps is not None:
            if self.engine.transport is None:
                raise ValidationError("access_bps (a shared access link) needs links='tcp'")
            broker.access = (
                FairShare(self.engine, access_bps),
                FairShare(self.engine, access_bps),
            )
        self.engine.brokers[site] = broker
        return broker

    def add_node(
        self,
        node: Any,
        *,
        connections: Sequence[Connection],
        tier: str = "node",
        speed_flops: float = 1e9,
        will: Will | None = None,
        start_at: float = 0.0,
    ) -> None:
        """Add a node; it gets ``Started`` at ``start_at``.

        Parameters
        ----------
        node
            Object with ``node_id: str`` and ``handle(event) -> list[Effect]``.
        connections
            Its broker connections, at most one per broker; the first is
            the default route.
        tier
            Label for the per-tier counters of :meth:`stats` (e.g.
            ``"client"``, ``"fog"``, ``"cloud"``).
        speed_flops
            Floating-point operations per second, for ``Compute``.
        will
            Last-will message, registered with the broker serving its topic
            when the node starts and published if the node crashes.
        start_at
            Virtual time of ``Started``.

        """
        node_id = getattr(node, "node_id", None)
        if not isinstance(node_id, str) or not node_id:
            raise ValidationError(f"node must have a non-empty str node_id, got {node_id!r}")
        if not callable(getattr(node, "handle", None)):
            raise ValidationError(f"node {node_id!r} has no handle(event) method")
        if node_id in self.engine.nodes:
            raise ValidationError(f"node {node_id!r} already exists")
        if not connections:
            raise ValidationError(f"node {node_id!r} needs at least one connection")
        if not (isinstance(speed_flops, int | float) and math.isfinite(speed_flops)) or not (
            speed_flops > 0
        ):
            raise ValidationError(f"speed_flops must be a finite number > 0, got {speed_flops!r}")
        if will is not None and (not isinstance(will, Will) or will.qos not in (0, 1)):
            raise ValidationError(f"will must be a Will with qos 0 or 1, got {will!r}")
        start_at = _finite_nonneg("start_at", start_at)
        if start_at < self.now:
            raise ValidationError(f"start_at {start_at} is in the past (now {self.now})")
        ns = NodeState(node, str(tier), float(speed_flops), will, start_at)
        for conn in connections:
            if not isinstance(conn, Connection):
                raise ValidationError(f"connections must be Connection objects, got {conn!r}")
            broker = self.engine.brokers.get(conn.broker)
            if broker is None:
                raise ValidationError(f"node {node_id!r}: unknown broker {conn.broker!r}")
            if any(p.broker is broker for p in ns.ports):
                raise ValidationError(f"node {node_id!r}: two connections to {conn.broker!r}")
            model = self.engine.transport.model if self.engine.transport else None
            ns.ports.append(Port(ns, broker, conn.link, self.seed, model))
        self.engine.nodes[node_id] = ns
        self.engine.unfinished += 1
        self.engine.call(start_at - self.now, lifecycle.start, self.engine, ns, ns.inc)

    def run(
        self,
        until: float | None = None,
        *,
        progress: Callable[[float], None] | None = None,
        progress_every: float = 60.0,
    ) -> float:
        """Run until nothing is left to do, every node finished, or ``until``.

        "Nothing left" means no pending delivery, retry, live timer,
        Compute, start, crash or restart (stale timers do not count). Every
        QoS 1 retry loop is bounded by ``max_retries``, so the run always
        ends. Events at exactly ``until`` are not processed (SimPy's rule);
        a later call continues from there.

        Parameters
        ----------
        until
            Virtual time limit, or ``None``.
        progress
            Called with the virtual time every ``progress_every`` virtual
            seconds, and once at the end.
        progress_every
            Virtual seconds between ``progress`` calls, > 0.

        Returns
        -------
        float
            The virtual time reached.

        """
        if until is not None and not (isinstance(until, int | float) and until >= self.now):
            raise ValidationError(f"until must be >= now ({self.now}), got {until!r}")
        if progress is not None and not progress_every > 0:
            raise ValidationError(f"progress_every must be > 0, got {progress_every!r}")
        env = self.env
        # Objects alive now (nodes, ports, brokers) live through the run: move them out of
        # the collector's sight (gc.freeze) so full collections do not rescan them; ~5%
        # of a 10,000-node run. Undone at the end; skipped if someone else froze objects.
        # The run's own garbage is mostly acyclic (freed by reference counting): young
        # collections every YOUNG_GC_THRESHOLD allocations instead of 700 only re-scan
        # fewer live messages (another ~6% at 10,000 clients). Restored at the end.
        freeze = gc.isenabled() and gc.get_freeze_count() == 0
        before = gc.get_threshold()
        if freeze:
            gc.freeze()
            gc.set_threshold(max(before[0], YOUNG_GC_THRESHOLD), *before[1:])
        try:
            self._loop(until, progress, progress_every)
        finally:
            if freeze:
                gc.set_threshold(*before)
                gc.unfreeze()
        if progress is not None:
            progress(env.now)
        return env.now

    def _loop(
        self, until: float | None, progress: Callable[[float], None] | None, every: float
    ) -> None:
        env, eng = self.env, self.engine
        step, peek = env.step, env.peek
        stop = math.inf if until is None else float(until)
        if until is None and progress is None:
            while eng.live > 0 and eng.unfinished > 0:  # the common case: no peeking
                step()
            return
        next_report = stop  # the loop checks one bound: the next report or the stop time
        if progress is not None:
            next_report = min((math.floor(env.now / every) + 1) * every, stop)
        while eng.live > 0 and eng.unfinished > 0:
            t = peek()
            if t >= next_report:
                if t >= stop:
                    break
                progress(next_report)  # type: ignore[misc]
                next_report = min((math.floor(t / every) + 1) * every, stop)
                continue
            step()
        if until is not None and env.now < until and eng.live > 0 and eng.unfinished > 0:
            env.run(until=until)  # nothing left before `until`: just advance the clock

    def stats(self) -> dict[str, Any]:
        """Return the run counters as a plain dict (see :func:`fedstrata.sim.log.summarize`)."""
        return summarize(self.engine, self.env.now)

    def write_events(self, path: str | Path) -> int:
        """Write the event log as JSON lines with sorted keys; return the number of lines.

        Raises
        ------
        ValidationError
            If the simulation was created without ``record_events``.

        """
        if self.engine.events is None:
            raise ValidationError("the event log is off: create the Simulation with record_events")
        return write_jsonl(self.engine.events, path)


def _only_for_message_retry(links: str, retry_interval: object, max_retries: object) -> None:
    """Refuse MQTT resend settings under the TCP model: a live MQTT session never resends."""
    if links == "tcp" and (retry_interval is not None or max_retries is not None):
        raise ValidationError(
            "retry_interval and max_retries are settings of links='message-retry': over TCP "
            "a live MQTT connection never resends (segment loss only delays a message)"
        )
