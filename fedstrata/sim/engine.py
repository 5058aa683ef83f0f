"""The kernel's hot path: moving messages over links and brokers, and driving nodes.

:class:`Engine` carries out node effects and turns the network into node
events. Every hop over a link is one scheduled SimPy event with a callback
(a :class:`~fedstrata.sim.state.Hop`), never a process per message, and a
broadcast shares one payload ``bytes`` object among all subscribers. A
broker hands a message to a co-located subscriber (``link=None``, zero
delay) directly, at the same virtual time, without a heap round trip: it
runs inside the broker's arrival callback, never inside a node's
``handle``, so nothing re-enters a node.

QoS 1 is modelled per hop with the sender's view of MQTT 3.1.1 §4.3.2: the
receiver answers every PUBLISH it gets with a PUBACK over the same link;
the sender retransmits (DUP flag set) every ``retry_interval`` until a
PUBACK has arrived or ``max_retries`` retransmissions were made. The PUBACK
is not a scheduled event: its arrival time is drawn when the receiver sends
it, and a retry is scheduled only if that time is later than the retry
deadline (or the PUBACK is lost). A PUBACK arriving exactly at the deadline
is in time. The outcome is the same as simulating every PUBACK, at no cost
in the loss-free case.

Ties at equal virtual time are broken by scheduling order (SimPy's event
counter), never by hashing or object identity.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import simpy
from simpy.events import NORMAL

from fedstrata.errors import NodeProtocolError, error_reason
from fedstrata.mqtt import puback_size, validate_topic
from fedstrata.nodes.events import (
    CancelTimer,
    Compute,
    Delivered,
    Event,
    Finished,
    Publish,
    Record,
    SetTimer,
    Subscribe,
    TimerFired,
)
from fedstrata.sim import lifecycle
from fedstrata.sim.broker import Message, SimBroker
from fedstrata.sim.state import (
    FAST,
    LOCAL,
    LOST,
    SLOW,
    Call,
    Hop,
    NodeState,
    Port,
    Relay,
    Status,
    TimerEvent,
)
from fedstrata.sim.tcp import TcpModel
from fedstrata.sim.tcp_transport import TcpTransport

__all__ = ["DROP_KINDS", "DROP_REASONS", "Engine"]

#: Every reason a drop can be logged with.
DROP_REASONS = (
    "loss",  # random link loss
    "outage",  # sent inside an Outage window (partition)
    "offline",  # sender or receiver offline (availability model)
    "crashed",  # addressed to a crashed incarnation
    "finished",  # addressed to a node that had already finished
    "dropout",  # round dropout suppressed a /down delivery
    "max_retries",  # QoS 1 sender gave up
)

#: Where a drop happens; every drop is counted under exactly one kind (see
#: :func:`fedstrata.sim.log.summarize` for the invariants they keep).
DROP_KINDS = (
    "lost_up",  # a PUBLISH transmitted on a wire hop towards a broker, then lost
    "lost_down",  # a PUBLISH transmitted on a wire hop towards a node, then lost or refused
    "lost_local",  # the same on a co-located hop (no wire: not counted in messages)
    "not_sent",  # a transmission suppressed at the source (sender offline): never sent
    "gave_up",  # a QoS 1 sender (client or broker) stopped retrying after max_retries
    "suppressed",  # a Started or TimerFired never handed over: the node is offline for good
)


def _slotted_delivered() -> bool:
    """Return whether ``Delivered`` has exactly the slots (now, topic, payload).

    ``Delivered(...)`` re-validates its frozen fields (~1.4 us). The kernel's
    inputs are already valid (``now`` comes from SimPy, the payload from a
    validated ``Publish``), so the hot path sets the slots directly (~0.4 us)
    when the class has this shape, and uses the constructor otherwise.
    """
    fields = tuple(f.name for f in dataclasses.fields(Delivered))
    return fields == ("now", "topic", "payload") and "__slots__" in vars(Delivered)


_FAST_DELIVERED = _slotted_delivered()
_new = object.__new__
_set_now = Delivered.now.__set__  # type: ignore[attr-defined]
_set_topic = Delivered.topic.__set__  # type: ignore[attr-defined]
_set_payload = Delivered.payload.__set__  # type: ignore[attr-defined]
_LIVE = Status.LIVE
_FINISHED = Status.FINISHED
_PUBLISH, _COMPUTE, _TIMER, _CANCEL, _SUBSCRIBE, _RECORD, _FINISH = range(7)
_KINDS: dict[type, int] = {
    Publish: _PUBLISH,
    Compute: _COMPUTE,
    SetTimer: _TIMER,
    CancelTimer: _CANCEL,
    Subscribe: _SUBSCRIBE,
    Record: _RECORD,
    Finished: _FINISH,
}


class Engine:
    """Moves messages and drives nodes for one :class:`~fedstrata.sim.kernel.Simulation`.

    Parameters
    ----------
    env
        The SimPy environment.
    protocol
        MQTT protocol level for packet sizes (4 or 5).
    retry_interval, max_retries
        QoS 1 retransmission policy of the clients (brokers have their own).
    record_events
        Keep the event log in :attr:`events`.
    tcp
        The TCP + MQTT link model (:mod:`fedstrata.sim.tcp`); ``None`` keeps the
        message-retry model described above (``retry_interval``, ``max_retries``).

    Attributes
    ----------
    live
        Scheduled events that still matter (stale timers are not counted);
        the run ends when it reaches 0.
    unfinished
        Nodes that may still act (neither finished nor crashed for good).

    """

    def __init__(
        self,
        env: simpy.Environment,
        *,
        protocol: int,
        retry_interval: float,
        max_retries: int,
        record_events: bool,
        tcp: TcpModel | None = None,
    ) -> None:
        self.env = env
        self._schedule = env.schedule
        self.protocol = protocol
        self.retry_interval = retry_interval
        self.max_retries = max_retries
        self.events: list[dict[str, Any]] | None = [] if record_events else None
        self.records: list[dict[str, Any]] = []
        self.tier_bytes: defaultdict[str, int] = defaultdict(int)  # wire PUBLISH bytes
        self.results: dict[str, Any] = {}
        self.nodes: dict[str, NodeState] = {}
        self.brokers: dict[str, SimBroker] = {}
        self.live = 0
        self.unfinished = 0
        self.publishes = 0
        self.retransmissions = 0
        self.broker_duplicates = 0
        self.acks_lost = 0
        self.timers_fired = 0
        self.drops: dict[str, int] = {}  # by reason
        self.drop_kinds: dict[str, dict[str, int]] = {}  # by kind, then reason
        #: Every crash of a node, in order: ``{"node", "t", "reason"}`` (faults and
        #: nodes whose ``handle`` raised).
        self.crashes: list[dict[str, Any]] = []
        self.drop_tiers: dict[str, dict[str, int]] = {}  # by tier of ``ns``, then reason
        self._mid = 0
        self._token = 0
        self._topics_ok: set[str] = set()
        self._puback = puback_size(protocol)
        self.puback_bytes = self._puback
        self.transport = None if tcp is None else TcpTransport(self, tcp)
        self._cb_broker = (self._arrive_broker,)
        self._cb_node = (self._arrive_node,)
        self._cb_relay_broker = (self._relay_broker,)
        self._cb_relay_node = (self._relay_node,)
        self._cb_call = (self._run_call,)
        self._cb_timer = (self._fire_timer,)

    # ------------------------------------------------------------------ scheduling

    def call(self, delay: float, fn: Any, *args: Any) -> None:
        """Schedule ``fn(*args)`` after ``delay`` virtual seconds (counted as live)."""
        self.live += 1
        self._schedule(Call(self._cb_call, fn, args), NORMAL, delay)

    def _run_call(self, ev: Call) -> None:
        self.live -= 1
        ev.fn(*ev.args)

    def log(self, ev: str, src: str | None, dst: str | None, **fields: Any) -> None:
        """Append one entry to the event log (callers check ``events is not None`` first)."""
        rec = {
            "t": round(self.env.now, 9),
            "ev": ev,
            "src": src,
            "dst": dst,
            "topic": None,
            "bytes": None,
            "qos": None,
            "dup": False,
        }
        rec.update(fields)
        self.events.append(rec)  # type: ignore[union-attr]

    def _log_msg(self, ev: str, hop: Hop, nbytes: int | None, dup: bool, **fields: Any) -> None:
        port, msg = hop.port, hop.msg
        node, site = port.ns.node_id, port.broker.site
        src, dst = (node, site) if hop.up else (site, node)
        self.log(
            ev,
            src,
            dst,
            topic=msg.topic,
            mid=msg.mid,
            bytes=nbytes,
            qos=hop.qos,
            dup=dup,
            retain=hop.retain,
            wire=port.wire,
            **fields,
        )

    def drop(
        self,
        ns: NodeState,
        reason: str,
        hop: Hop | None,
        dup: bool = False,
        *,
        kind: str = "lost",
    ) -> None:
        """Count and log a drop (``reason`` in :data:`DROP_REASONS`) at node ``ns``.

        ``kind`` is ``"lost"`` (a transmitted PUBLISH that did not get through:
        counted as ``lost_up``/``lost_down`` on a wire hop, by the hop's
        direction, and as ``lost_local`` on a co-located hop or without a
        hop) or one of the other :data:`DROP_KINDS`. ``ns`` is the node whose
        tier the drop is counted in: the port's node for a message.
        """
        self.drops[reason] = self.drops.get(reason, 0) + 1
        if kind == "lost":
            if hop is None or not hop.port.wire:
                kind = "lost_local"
            else:
                kind = "lost_up" if hop.up else "lost_down"
        by_reason = self.drop_kinds.get(kind)
        if by_reason is None:
            by_reason = self.drop_kinds[kind] = {}
        by_reason[reason] = by_reason.get(reason, 0) + 1
        by_tier = self.drop_tiers.get(ns.tier)
        if by_tier is None:
            by_tier = self.drop_tiers[ns.tier] = {}
        by_tier[reason] = by_tier.get(reason, 0) + 1
        ns.dropped += 1
        kinds = ns.drop_kinds
        if kinds is None:
            kinds = ns.drop_kinds = {}
        kinds[kind] = kinds.get(kind, 0) + 1
        if self.events is not None:
            if hop is None:
                self.log("drop", ns.node_id, ns.node_id, reason=reason)
            else:
                self._log_msg("drop", hop, None, dup, reason=reason)

    # ------------------------------------------------------------------ transport

    def route(self, ns: NodeState, topic: str) -> Port:
        """Return the port whose broker serves the longest prefix of ``topic`` (else the first)."""
        port = ns.routes.get(topic)
        if port is None:
            best = -1
            port = ns.ports[0]
            for p in ns.ports:
                score = p.broker.prefix_score(topic)
                if score > best:
                    best, port = score, p
            if len(ns.routes) < 1024:
                ns.routes[topic] = port
        return port

    def _send(self, hop: Hop, now: float, dup: bool) -> None:
        """Transmit ``hop`` once: count, log, draw loss and delay, schedule arrival or retry.

        The general path. ``_publish`` and ``_fanout`` inline the common case
        (FAST or LOCAL port, first transmission, no event log, sender online).
        """
        port = hop.port
        q = hop.qos
        up = hop.up
        size = hop.msg.size1 if q else hop.msg.size0
        if up:
            avail = port.ns.avail
            if avail is not None and not avail.is_online(now):
                self.drop(port.ns, "offline", hop, dup, kind="not_sent")
                if q:
                    self._retry_at(hop, now + self.retry_interval, now)
                return
        if port.wire:
            if up:
                port.up_bytes += size
                self.tier_bytes[port.ns.tier] += size
                port.up_msgs += 1
            else:
                port.down_bytes += size
                self.tier_bytes[port.ns.tier] += size
                port.down_msgs += 1
            d = port.transmit(size, now)
        else:
            d = 0.0
        if self.events is not None:
            self._log_msg("send", hop, size, dup)
        ri = self.retry_interval if up else port.broker.retry_interval
        if d < 0:
            self.drop(port.ns, "loss" if d == LOST else "outage", hop, dup)
            if q:
                self._retry_at(hop, now + ri, now)
            return
        self.live += 1
        if dup:
            cb = self._cb_relay_broker if up else self._cb_relay_node
            self._schedule(Relay(cb, hop), NORMAL, d)
        else:
            self._schedule(hop, NORMAL, d)
        if q:
            hop.t_sent = now
            if d >= ri and not hop.retry_pending:
                self._retry_at(hop, now + ri, now)

    def _send_tcp(self, hop: Hop, now: float, dup: bool) -> None:
        """Transmit ``hop`` on its wire port under the TCP model (:attr:`transport` set)."""
        self.transport.send(hop, now)  # type: ignore[union-attr]

    def _retry_at(self, hop: Hop, t: float, now: float) -> None:
        hop.retry_pending = True
        self.call(t - now, self._retry, hop)

    def _retry(self, hop: Hop) -> None:
        hop.retry_pending = False
        now = self.env.now
        if hop.ack_at <= now:
            return
        port = hop.port
        ns = port.ns
        up = hop.up
        # A session that ended takes its in-flight messages with it (clean session);
        # the last transmission's fate is already in the log.
        if hop.inc != ns.inc or (not up and ns.status is not _LIVE):
            return
        limit = self.max_retries if up else port.broker.max_retries
        if hop.tries >= limit:
            self.drop(ns, "max_retries", hop, True, kind="gave_up")
            return
        hop.tries += 1
        self.retransmissions += 1
        self._send(hop, now, True)

    def _ack(self, hop: Hop, now: float) -> None:
        """Send the PUBACK for ``hop`` over a SLOW link and decide whether a retry is due.

        The arrival callbacks inline the same steps for FAST and LOCAL ports.
        """
        port = hop.port
        up = hop.up
        size = self._puback
        if up:
            port.ack_down_bytes += size
        else:
            port.ack_up_bytes += size
        d = port.transmit(size, now)
        if d < 0:
            self.acks_lost += 1
            if self.events is not None:
                self._log_msg("ack_lost", hop, size, False)
            ack_at = math.inf
        else:
            ack_at = now + d
        if ack_at < hop.ack_at:
            hop.ack_at = ack_at
        if not hop.retry_pending:
            due = hop.t_sent + (self.retry_interval if up else port.broker.retry_interval)
            if hop.ack_at > due:
                self._retry_at(hop, max(due, now), now)

    def _relay_broker(self, ev: Relay) -> None:
        self._arrive_broker(ev.hop)

    def _relay_node(self, ev: Relay) -> None:
        self._arrive_node(ev.hop)

    def _arrive_broker(self, hop: Hop) -> None:
        self.live -= 1
        now = self.env.now
        fwd = None
        if hop.qos:
            port = hop.port
            mode = port.mode
            if mode == SLOW:
                self._ack(hop, now)
            else:  # _ack inlined for FAST and LOCAL ports
                if mode == FAST:
                    port.ack_down_bytes += self._puback
                    buf = port.lat_buf
                    ack_at = now + (buf.pop() if buf else port.refill()) + self._puback * port.spb
                else:
                    ack_at = now
                if ack_at < hop.ack_at:
                    hop.ack_at = ack_at
                due = hop.t_sent + self.retry_interval
                if hop.ack_at > due and not hop.retry_pending:
                    self._retry_at(hop, max(due, now), now)
            if hop.delivered:
                self.broker_duplicates += 1
                if self.events is not None:
                    self._log_msg("duplicate", hop, None, True)
            else:
                hop.delivered = 1
                if self.events is not None:
                    self._log_msg("recv", hop, None, False)
            if hop.tries or hop.retry_pending:
                # A retransmission may reach the broker, which forwards it again
                # (§4.3.2): remember these copies to mark the later ones as duplicates.
                fwd = hop.fwd
                if fwd is None:
                    fwd = hop.fwd = {}
        elif self.events is not None:
            self._log_msg("recv", hop, None, False)
        self.fanout(hop.port.broker, hop.msg, now, fwd)

    def fanout(
        self, broker: SimBroker, msg: Message, now: float, fwd: dict[Port, Hop] | None
    ) -> None:
        """Forward ``msg`` from ``broker`` to every matching subscriber (retained store first).

        ``fwd`` (copies already forwarded, by port) marks copies of a duplicate
        publication as duplicates; ``None`` when there can be none.
        """
        mq = msg.qos
        cb = self._cb_node
        general = fwd is not None or self.events is not None
        schedule = self._schedule
        ri = broker.retry_interval
        send = self._send if self.transport is None else self._send_tcp
        general = general or self.transport is not None
        if msg.retain:
            broker.retain(msg)
        for port, sq in broker.subscriptions.match(msg.topic):
            q = sq if sq < mq else mq
            mode = port.mode
            if mode == LOCAL:
                # Co-located subscriber: zero delay, so it gets the message now, inside this
                # callback, not through the heap (same virtual time; this runs in a broker's
                # callback, never inside a node's handle, so nothing re-enters a node).
                if not general and port.ns.avail is None:
                    self._deliver_local(port.ns, msg, now)  # nothing to lose, ack or dedupe
                    continue
                h = Hop(cb, msg, q, port, port.ns, False)
                if fwd is not None:
                    _pair(fwd, port, h)
                if self.events is not None:
                    self._log_msg("send", h, msg.size1 if q else msg.size0, False)
                self.live += 1
                h.t_sent = now
                self._arrive_node(h)
                continue
            h = Hop(cb, msg, q, port, port.ns, False)
            if general or mode == SLOW:
                if fwd is not None:
                    _pair(fwd, port, h)
                send(h, now, False)
                continue
            # _send inlined for FAST ports: one latency draw, one scheduled event.
            size = msg.size1 if q else msg.size0
            port.down_bytes += size
            self.tier_bytes[port.ns.tier] += size
            port.down_msgs += 1
            buf = port.lat_buf
            d = (buf.pop() if buf else port.refill()) + size * port.spb
            self.live += 1
            schedule(h, NORMAL, d)
            if q:
                h.t_sent = now
                if d >= ri:
                    self._retry_at(h, now + ri, now)

    def _arrive_node(self, hop: Hop) -> None:
        self.live -= 1
        now = self.env.now
        ns = hop.ns
        if hop.inc != ns.inc or ns.status is not _LIVE:
            gone = ns.status is _FINISHED and hop.inc == ns.inc
            self.drop(ns, "finished" if gone else "crashed", hop)
            return
        q = hop.qos
        avail = ns.avail
        if avail is not None and not avail.is_online(now):
            self.drop(ns, "offline", hop)
            if q and not hop.retry_pending:
                self._retry_at(hop, max(now, hop.t_sent + hop.port.broker.retry_interval), now)
            return
        if q:
            port = hop.port
            mode = port.mode
            if mode == SLOW:
                self._ack(hop, now)
            else:  # _ack inlined for FAST and LOCAL ports
                if mode == FAST:
                    port.ack_up_bytes += self._puback
                    buf = port.lat_buf
                    ack_at = now + (buf.pop() if buf else port.refill()) + self._puback * port.spb
                else:
                    ack_at = now
                if ack_at < hop.ack_at:
                    hop.ack_at = ack_at
                due = hop.t_sent + port.broker.retry_interval
                if hop.ack_at > due and not hop.retry_pending:
                    self._retry_at(hop, max(due, now), now)
        self.hand_over(ns, hop, now)

    def hand_over(self, ns: NodeState, hop: Hop, now: float) -> None:
        """Give an arrived PUBLISH to its live, online node: once, unless a dropout takes it."""
        first = hop.twin or hop
        msg = hop.msg
        state = first.delivered
        if state:
            if state == 2:
                self.drop(ns, "dropout", hop)
                return
            ns.duplicates += 1
            if self.events is not None:
                self._log_msg("duplicate", hop, None, False)
        else:
            if (
                ns.dropout_p
                and msg.topic.endswith(ns.dropout_suffix)
                and ns.dropout_draw() < ns.dropout_p  # type: ignore[misc]
            ):
                first.delivered = 2
                self.drop(ns, "dropout", hop)
                return
            first.delivered = 1
            ns.delivered += 1
            if self.events is not None:
                self._log_msg("deliver", hop, None, False)
        ns.payload_in += len(msg.payload)
        if _FAST_DELIVERED:
            ev = _new(Delivered)
            _set_now(ev, now)
            _set_topic(ev, msg.topic)
            _set_payload(ev, msg.payload)
        else:
            ev = Delivered(now=now, topic=msg.topic, payload=msg.payload)
        if ns.busy:
            ns.wait(ev)
            return
        try:
            effects = ns.node.handle(ev)
        except Exception as exc:  # a node's bug or an unchecked body: a crash of that node
            self.node_failed(ns, exc)
            return
        if effects:
            self._apply(ns, effects, 0)

    def _deliver_local(self, ns: NodeState, msg: Message, now: float) -> None:
        """Hand ``msg`` to a co-located, always-available subscriber (``_arrive_node`` trimmed).

        No link: nothing is lost, the PUBACK is instant and no copy can be a duplicate.
        """
        if ns.status is not _LIVE:  # unreachable: a session that ended has no subscriptions
            self.drop(ns, "finished" if ns.status is _FINISHED else "crashed", None)
            return
        if (
            ns.dropout_p
            and msg.topic.endswith(ns.dropout_suffix)
            and ns.dropout_draw() < ns.dropout_p  # type: ignore[misc]
        ):
            self.drop(ns, "dropout", None)
            return
        ns.delivered += 1
        ns.payload_in += len(msg.payload)
        if _FAST_DELIVERED:
            ev = _new(Delivered)
            _set_now(ev, now)
            _set_topic(ev, msg.topic)
            _set_payload(ev, msg.payload)
        else:
            ev = Delivered(now=now, topic=msg.topic, payload=msg.payload)
        if ns.busy:
            ns.wait(ev)
            return
        try:
            effects = ns.node.handle(ev)
        except Exception as exc:  # a node's bug or an unchecked body: a crash of that node
            self.node_failed(ns, exc)
            return
        if effects:
            self._apply(ns, effects, 0)

    # ------------------------------------------------------------------ node effects

    def node_failed(self, ns: NodeState, exc: BaseException) -> None:
        """Crash ``ns`` because its ``handle`` raised ``exc``: the run goes on without it.

        The node is treated exactly as under a crash fault (its wills are published,
        its timers and queued events dropped, messages to it dropped as ``crashed``),
        without a restart. A ``node_crashed`` record and the ``crash`` event carry the
        reason: the exception's type and first line of its message.
        """
        reason = error_reason(exc)
        self.records.append(
            {
                "t": self.env.now,
                "node": ns.node_id,
                "kind": "node_crashed",
                "fields": {"node": ns.node_id, "reason": reason, "error": type(exc).__name__},
                "wire_bytes": dict(self.tier_bytes),
            }
        )
        lifecycle.crash(self, ns, None, None, reason=reason)

    def feed(self, ns: NodeState, event: Event) -> None:
        """Hand ``event`` to the node now, or queue it while the node is computing."""
        if ns.busy:
            ns.wait(event)
            return
        try:
            effects = ns.node.handle(event)
        except Exception as exc:
            self.node_failed(ns, exc)
            return
        if effects:
            self._apply(ns, effects, 0)

    def _apply(self, ns: NodeState, effects: Sequence[Any], i: int) -> None:
        """Carry out ``effects[i:]`` in order; stop at a Compute that takes time."""
        n = len(effects)
        while i < n:
            eff = effects[i]
            i += 1
            kind = _KINDS.get(type(eff))
            if kind is None:
                kind = _kind_of(eff)
            if kind == _PUBLISH:
                self._publish(ns, eff)
            elif kind == _COMPUTE:
                dt = eff.flops / ns.speed
                if dt > 0:
                    ns.busy = True
                    self.call(dt, self._resume, ns, ns.inc, effects, i)
                    return
            elif kind == _TIMER:
                self._set_timer(ns, eff.name, eff.delay_s)
            elif kind == _CANCEL:
                if ns.timers.pop(eff.name, None) is not None:
                    self.live -= 1  # its event is stale now
            elif kind == _SUBSCRIBE:
                self._subscribe(ns, eff.pattern, eff.qos)
            elif kind == _RECORD:
                self.records.append(
                    {
                        "t": self.env.now,
                        "node": ns.node_id,
                        "kind": eff.kind,
                        "fields": eff.fields,
                        "wire_bytes": dict(self.tier_bytes),  # cumulative, per tier
                    }
                )
            else:
                if i != n:
                    raise NodeProtocolError(f"{ns.node_id}: Finished must be the last effect")
                lifecycle.finish(self, ns, eff.result)

    def _resume(self, ns: NodeState, inc: int, effects: Sequence[Any], i: int) -> None:
        """End a Compute: carry out the rest of its effects, then the queued events."""
        if ns.inc != inc:
            return
        ns.busy = False
        self._apply(ns, effects, i)
        while ns.pending and not ns.busy and ns.inc == inc and ns.status is _LIVE:
            ev = ns.pending.popleft()
            now = self.env.now
            if ev.now != now:
                ev = dataclasses.replace(ev, now=now)  # the node's clock is the handling time
            try:
                out = ns.node.handle(ev)
            except Exception as exc:
                self.node_failed(ns, exc)
                return
            if out:
                self._apply(ns, out, 0)

    def next_mid(self) -> int:
        """Return a new run-wide message number."""
        self._mid += 1
        return self._mid

    def _publish(self, ns: NodeState, eff: Publish) -> None:
        topic = eff.topic
        if topic not in self._topics_ok:
            validate_topic(topic)
            if len(self._topics_ok) < 65_536:
                self._topics_ok.add(topic)
        ports = ns.ports
        port = ports[0] if len(ports) == 1 else self.route(ns, topic)
        self._mid += 1
        msg = Message(topic, eff.payload, eff.qos, eff.retain, self._mid, ns.node_id, self.protocol)
        self.publishes += 1
        ns.publishes += 1
        ns.payload_out += len(eff.payload)
        q = eff.qos
        hop = Hop(self._cb_broker, msg, q, port, ns, True)
        now = self.env.now
        mode = port.mode
        if self.transport is not None and mode != LOCAL:
            self.transport.send(hop, now)
            return
        if mode == SLOW or ns.avail is not None or self.events is not None:
            self._send(hop, now, False)
            return
        # _send inlined for FAST and LOCAL ports: one latency draw, one scheduled event.
        if mode == FAST:
            size = msg.size1 if q else msg.size0
            port.up_bytes += size
            self.tier_bytes[port.ns.tier] += size
            port.up_msgs += 1
            buf = port.lat_buf
            d = (buf.pop() if buf else port.refill()) + size * port.spb
        else:
            d = 0.0
        self.live += 1
        self._schedule(hop, NORMAL, d)
        if q:
            hop.t_sent = now
            if d >= self.retry_interval:
                self._retry_at(hop, now + self.retry_interval, now)

    def _subscribe(self, ns: NodeState, pattern: str, qos: int) -> None:
        if qos not in (0, 1):
            raise NodeProtocolError(
                f"{ns.node_id}: the simulator supports QoS 0 and 1, got {qos!r}"
            )
        port = self.route(ns, pattern)
        retained = port.broker.subscribe(port, pattern, qos)
        now = self.env.now
        if self.events is not None:
            self.log("subscribe", ns.node_id, port.broker.site, topic=pattern, qos=qos)
        for msg in retained:
            h = Hop(self._cb_node, msg, min(msg.qos, qos), port, ns, False)
            h.retain = True  # §3.3.1.3: RETAIN set on messages sent for a new subscription
            if self.transport is not None and port.wire:
                self.transport.send(h, now)
            else:
                self._send(h, now, False)

    def _set_timer(self, ns: NodeState, name: str, delay: float) -> None:
        self._token += 1
        if ns.timers.get(name) is not None:
            self.live -= 1  # re-arming replaces: the old event is stale
        ns.timers[name] = self._token
        self.live += 1
        self._schedule(TimerEvent(self._cb_timer, ns, name, self._token), NORMAL, delay)

    def _fire_timer(self, ev: TimerEvent) -> None:
        ns = ev.ns
        if ns.timers.get(ev.name) != ev.token:
            return  # stale: uncounted when it was replaced or cancelled
        now = self.env.now
        avail = ns.avail
        if avail is not None and not avail.is_online(now):
            t_on = avail.next_online(now)
            if t_on is not None:
                ev.callbacks = self._cb_timer  # type: ignore[assignment]
                self._schedule(ev, NORMAL, t_on - now)  # fires when the node is back
                return
            del ns.timers[ev.name]
            self.live -= 1
            self.drop(ns, "offline", None, kind="suppressed")
            return
        self.live -= 1
        del ns.timers[ev.name]
        self.timers_fired += 1
        if self.events is not None:
            self.log("timer", ns.node_id, ns.node_id, name=ev.name)
        self.feed(ns, TimerFired(now=now, name=ev.name))


def _pair(fwd: dict[Port, Hop], port: Port, hop: Hop) -> None:
    """Remember the first copy forwarded to ``port``; mark later copies as its twins."""
    first = fwd.get(port)
    if first is None:
        fwd[port] = hop
    else:
        hop.twin = first


def _kind_of(eff: Any) -> int:
    """Resolve an effect subclass to the kind of its nearest known base."""
    for base in type(eff).__mro__:
        kind = _KINDS.get(base)
        if kind is not None:
            return kind
    raise NodeProtocolError(f"unknown effect {eff!r}")
