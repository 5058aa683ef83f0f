"""Drive one sans-IO node over a real MQTT broker with aiomqtt.

The runner is the real-network twin of the simulator's engine: it turns the
world into events (``Started``, ``Delivered``, ``TimerFired``) and carries out the
node's effects (``Subscribe``, ``Publish``, ``SetTimer``, ``CancelTimer``,
``Compute``, ``Record``, ``Finished``). It holds no protocol logic: it works with any
object that has a ``node_id`` and a ``handle(event) -> list[Effect]`` method.

Clocks are wall-clock seconds since the run started (:class:`RunLog.t0`), so the
``now`` of every event and the ``t`` of every record mean the same as the
simulator's virtual time.

Sessions persist across reconnects (MQTT 3.1.1 ``clean_session=False``; MQTT 5
``clean_start`` on the first connection only, with a session expiry interval), so a
node that comes back gets the QoS 1 messages it missed while away; when the node is
done the runner connects once more with a clean session so that no session is left
on the broker. With a ``presence`` topic the node registers a last will there (empty
payload, QoS 1, not retained) and publishes ``b"online"`` on every connection. A will
arriving on a presence topic the node subscribed to is handed to it as
:class:`~fedstrata.nodes.events.PeerLost` (a translation only; what to do about it is
the node's business); other presence messages are not delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from fedstrata.errors import (
    NodeProtocolError,
    TransportError,
    ValidationError,
    error_reason,
    missing_extra,
)

try:
    import aiomqtt
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties
except ImportError as exc:  # a usage error that names the extra, not a bug
    raise missing_extra("mqtt", "the MQTT transport", exc) from exc

from fedstrata.broker.endpoint import Endpoint, parse_broker_url
from fedstrata.broker.lane import Lane
from fedstrata.mqtt import PROTOCOL_MQTT5, PROTOCOL_MQTT311, Will, publish_packet_size
from fedstrata.nodes.events import (
    CancelTimer,
    Compute,
    Delivered,
    Event,
    Finished,
    PeerLost,
    Publish,
    Record,
    SetTimer,
    Started,
    Subscribe,
    TimerFired,
)

#: ``fs/{run}/presence/{node}`` (see :func:`fedstrata.mqtt.presence_topic`).
_PRESENCE = re.compile(r"^fs/[^/]+/presence/([^/]+)$")
#: How long a PUBLISH or SUBSCRIBE (and a first CONNECT) waits for the broker's answer.
ACK_TIMEOUT_S = 10.0
#: How long a CONNECT after a lost connection waits for its CONNACK before the next try.
RECONNECT_TIMEOUT_S = 3.0
#: Seconds after a reconnect at which a runner publishes its last messages again (it
#: does so at once, at these delays, and at ``2 * backoff_max_s + 1``).
REPUBLISH_AFTER_S = (0.5, 1.5)
#: What a node publishes on its presence topic when it connects.
ONLINE = b"online"
#: Its last will there: an empty payload.
OFFLINE = b""

__all__ = [
    "OFFLINE",
    "ONLINE",
    "REPUBLISH_AFTER_S",
    "LinkShaper",
    "NodeRunner",
    "RunLog",
    "SansIONode",
    "Traffic",
    "clear_retained",
    "parse_broker_url",
    "probe_broker",
]


class LinkShaper(Protocol):
    """An emulated link (``--emulate-links``): how long a message takes, or ``None``: lost.

    ``outbound`` is asked for every PUBLISH of the node before it is sent,
    ``inbound`` for every message delivered to it before the node sees it; a
    positive delay holds the message back that long.
    """

    def outbound(self, topic: str, nbytes: int, qos: int, now: float) -> float | None:
        """Delay in seconds before the node's PUBLISH leaves, or ``None`` if lost."""
        ...

    def inbound(self, topic: str, nbytes: int, qos: int, now: float) -> float | None:
        """Delay in seconds before a delivered message reaches the node, or ``None``."""
        ...


class _Shaped:
    """A PUBLISH whose emulated delay is over: send it as it is."""

    __slots__ = ("publish",)

    def __init__(self, publish: Publish) -> None:
        self.publish = publish


class SansIONode(Protocol):
    """What the runner needs of a node."""

    node_id: str

    def handle(self, event: Event) -> list[Any]:
        """Consume one event and return the effects to carry out."""
        ...


def _protocol_version(protocol: int) -> aiomqtt.ProtocolVersion:
    if protocol == PROTOCOL_MQTT5:
        return aiomqtt.ProtocolVersion.V5
    if protocol == PROTOCOL_MQTT311:
        return aiomqtt.ProtocolVersion.V311
    raise ValidationError(f"protocol must be 4 (MQTT 3.1.1) or 5 (MQTT 5.0), got {protocol!r}")


def _endpoint(broker: str | Endpoint, port: int) -> Endpoint:
    return broker if isinstance(broker, Endpoint) else Endpoint(broker, port)


async def probe_broker(
    broker: str | Endpoint,
    port: int = 1883,
    *,
    timeout_s: float = 5.0,
    protocol: int = PROTOCOL_MQTT311,
) -> None:
    """Connect to the broker once and disconnect.

    ``broker`` is a host name (with ``port``) or an :class:`Endpoint` (credentials, TLS).

    Raises
    ------
    TransportError
        If no MQTT session can be opened within ``timeout_s``; one line.

    """
    endpoint = _endpoint(broker, port)
    try:
        async with asyncio.timeout(timeout_s):
            async with aiomqtt.Client(
                **endpoint.client_kwargs(),
                protocol=_protocol_version(protocol),
                timeout=timeout_s,
                identifier=f"fs-probe-{random.getrandbits(48):012x}",
            ):
                pass
    except TimeoutError:
        # e.g. a TLS listener spoken to in plain MQTT resets the connection, and paho
        # only notices when the wait ends
        hint = "plain MQTT listener?" if endpoint.tls else "TLS listener (use mqtts://)?"
        raise TransportError(
            f"cannot reach the MQTT broker at {endpoint.url}: no MQTT answer within "
            f"{timeout_s:g} s (wrong port, firewall, or a {hint})"
        ) from None
    except (aiomqtt.MqttError, OSError) as exc:
        detail = str(exc).strip() or type(exc).__name__
        raise TransportError(f"cannot reach the MQTT broker at {endpoint.url}: {detail}") from None


@dataclass
class Traffic:
    """One node's traffic over its broker connection.

    ``payload_bytes_*`` sum the application payloads, ``packet_bytes_*`` the MQTT
    PUBLISH packets carrying them (:func:`fedstrata.mqtt.publish_packet_size`);
    *out* is node → broker, *in* is broker → node. ``connects`` counts the
    connections that were opened (``reconnects`` those after the first), ``clears``
    the final clean connection that removes the session; presence messages (the
    ``online`` notices and wills) are counted in ``presence_*`` only, so that the
    other counters hold the protocol's own messages, as in the simulator.
    ``emulated_lost_*`` count the messages an emulated link (``link``) lost for good.
    """

    publishes: int = 0
    payload_bytes_out: int = 0
    packet_bytes_out: int = 0
    delivered: int = 0
    payload_bytes_in: int = 0
    packet_bytes_in: int = 0
    compute_flops: float = 0.0
    connects: int = 0
    timers_fired: int = 0
    presence_publishes: int = 0
    presence_bytes_out: int = 0
    presence_delivered: int = 0
    presence_bytes_in: int = 0
    emulated_lost_out: int = 0
    emulated_lost_in: int = 0
    clears: int = 0

    @property
    def reconnects(self) -> int:
        """Connections opened after the first one."""
        return max(0, self.connects - 1)


@dataclass
class RunLog:
    """What the runners of one run share: the clock origin, the records, the tier bytes.

    Records have the simulator's shape: ``{"t", "node", "kind", "fields",
    "wire_bytes"}``, ``wire_bytes`` the cumulative PUBLISH packet bytes per tier
    (both directions) when the record was made.
    """

    t0: float = field(default_factory=time.monotonic)
    records: list[dict[str, Any]] = field(default_factory=list)
    tier_bytes: dict[str, int] = field(default_factory=dict)
    #: With a list: every :meth:`add_bytes` as ``(t, tier, nbytes)``, so that the
    #: logs of several processes can be merged.
    byte_events: list[tuple[float, str, int]] | None = None

    def now(self) -> float:
        """Wall-clock seconds since the run started."""
        return max(0.0, time.monotonic() - self.t0)

    def add_bytes(self, tier: str, nbytes: int) -> None:
        """Count ``nbytes`` of PUBLISH packets on a connection of a node of ``tier``."""
        self.tier_bytes[tier] = self.tier_bytes.get(tier, 0) + nbytes
        if self.byte_events is not None:
            self.byte_events.append((self.now(), tier, nbytes))


async def clear_retained(
    endpoint: Endpoint, topics: set[str] | list[str], *, protocol: int = PROTOCOL_MQTT311
) -> int:
    """Remove the retained messages of ``topics`` from the broker; return how many.

    An empty retained PUBLISH deletes a topic's retained message (MQTT 3.1.1
    §3.3.1.3). Run it once a run's nodes are gone, so that a shared broker does not
    keep every run's last global model; it is still delivered to whoever subscribes
    at that moment. Never raises for transport problems (returns 0).
    """
    if not topics:
        return 0
    try:
        async with asyncio.timeout(10.0):
            async with aiomqtt.Client(
                **endpoint.client_kwargs(),
                protocol=_protocol_version(protocol),
                identifier=f"fs-clear-{random.getrandbits(48):012x}",
            ) as client:
                for topic in sorted(topics):
                    await client.publish(topic, b"", qos=1, retain=True)
    except (aiomqtt.MqttError, OSError, TimeoutError, TransportError):
        return 0
    return len(topics)


def _raise_if_cancelled() -> None:
    """Re-raise a cancellation that an awaited call swallowed.

    aiomqtt waits for PUBACK/SUBACK with :func:`asyncio.wait_for`, which on Python
    3.11 drops a cancellation that arrives as the awaited future completes
    (CPython gh-86296, fixed in 3.12); the task would then wait on its inbox forever
    and Ctrl-C would hang the run.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class _Lost:
    """Inbox marker: the connection the reader was reading from failed."""

    __slots__ = ("client", "error")

    def __init__(self, error: BaseException, client: Lane) -> None:
        self.error = error
        self.client = client


class NodeRunner:
    """Run one sans-IO node against an MQTT broker until it finishes.

    Parameters
    ----------
    node
        Any object with ``node_id`` and ``handle(event) -> list[Effect]``.
    broker, port
        The broker: a host name with ``port``, or an
        :class:`~fedstrata.broker.endpoint.Endpoint` (credentials, TLS; ``port`` unused).
    tier
        The node's tier, for the per-tier byte counts of ``log``.
    log
        Shared clock, records and tier bytes; a private one by default.
    client_id
        MQTT client identifier (default ``node.node_id``); must be unique on the broker.
    protocol
        4 (MQTT 3.1.1, default) or 5 (MQTT 5.0).
    will
        Last-will message the broker publishes if this node vanishes (default: an
        empty, non-retained QoS 1 message on ``presence``, if given).
    presence
        The node's presence topic (:func:`fedstrata.mqtt.presence_topic`): ``b"online"``
        is published there (QoS 1, not retained) on every connection.
    clean_session
        MQTT 3.1.1 clean-session flag; ``False`` (default) keeps the session's
        subscriptions and queued QoS 1 messages across a reconnect. With MQTT 5 the
        session is clean on the first connection only.
    session_expiry_s
        MQTT 5 session expiry interval: how long the broker keeps the session of a
        node that went away.
    clear_session
        Whether to end with a clean connection that removes the session from the
        broker (default ``True``) once the node finished or the runner stops.
    max_attempts
        Connection attempts in a row before the node gives up (records
        ``transport_failed`` and stops).
    backoff_s, backoff_max_s
        First and largest pause between attempts (exponential, with ±50 % jitter).
    keepalive
        MQTT keep-alive in seconds.
    link
        An emulated link (:class:`LinkShaper`) that delays or loses the node's
        messages; ``None`` (default): the real network only.
    idle_timeout_s
        Stop the node (:attr:`idled_out` says why) when no message arrived on a
        topic starting with one of ``idle_topics`` (every topic when empty) for this
        long since it last heard one, not counting the time the node itself spent
        in ``handle``: the clients of an aggregator that is gone end instead of
        waiting forever. The clock starts with the first such message
        (devices start in any order: a parent not yet up is not gone). ``None``:
        never.
    republish
        After a reconnect, publish the node's last message of every topic again: at
        once, then :data:`REPUBLISH_AFTER_S` seconds later and once more ``2 *
        backoff_max_s + 1`` seconds later (by then every peer that lost the same
        broker has reconnected and subscribed again), the latest message of each
        topic each time (one the node sent after the reconnect may have reached a
        broker where its receiver had not subscribed again yet). A broker restart
        drops what it held for the sessions it forgot; receivers count and drop the
        copies they already had, so a restart costs seconds, not a round deadline.

    Attributes
    ----------
    result
        What the node left with ``Finished`` (``None`` until then).
    finished
        Whether the node finished.
    failure
        Why the runner gave up, or ``None``.
    crashed, crashed_at
        ``"Type: message"`` of the exception the node's ``handle`` raised, and when
        (``None`` if it never did). The runner then records ``node_crashed``, drops
        the connection without a DISCONNECT (the broker publishes the will, as for a
        crashed device) and stops.
    idled_out
        Why the node was stopped by ``idle_timeout_s``, or ``None``.
    republished
        Messages published again after reconnects (see ``republish``).
    traffic
        The node's :class:`Traffic`.
    retained_topics
        The topics the node published a retained message on (see
        :func:`clear_retained`).

    """

    def __init__(
        self,
        node: SansIONode,
        broker: str | Endpoint,
        port: int = 1883,
        *,
        tier: str = "edge",
        log: RunLog | None = None,
        client_id: str | None = None,
        protocol: int = PROTOCOL_MQTT311,
        will: Will | None = None,
        presence: str | None = None,
        clean_session: bool = False,
        session_expiry_s: int = 300,
        clear_session: bool = True,
        max_attempts: int = 8,
        backoff_s: float = 0.1,
        backoff_max_s: float = 2.0,
        keepalive: int = 30,
        link: LinkShaper | None = None,
        idle_timeout_s: float | None = None,
        idle_topics: tuple[str, ...] = (),
        republish: bool = True,
    ) -> None:
        self.node = node
        self.node_id = str(node.node_id)
        self.endpoint = _endpoint(broker, port)
        self.tier = tier
        self.log = log if log is not None else RunLog()
        self.client_id = client_id or self.node_id
        self.protocol = protocol
        self._version = _protocol_version(protocol)
        if will is None and presence is not None:
            will = Will(presence, OFFLINE, qos=1, retain=False)
        self.will = will
        self.presence = presence
        self.clean_session = clean_session
        self.session_expiry_s = int(session_expiry_s)
        self.clear_session = clear_session
        self.max_attempts = max(1, int(max_attempts))
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.keepalive = keepalive
        self.link = link
        self.traffic = Traffic()
        self.retained_topics: set[str] = set()
        self.result: Any = None
        self.finished = False
        self.failure: str | None = None
        self._subs: dict[str, int] = {}
        self._todo: deque[Any] = deque()
        self._timers: dict[str, tuple[int, asyncio.TimerHandle]] = {}
        self._token = 0
        self._inbox: asyncio.Queue[Any] | None = None
        self._started = False
        self._jitter = random.Random()
        self._client_now: Lane | None = None
        self._aborted = False
        self._lost_at: float | None = None
        self.crashed: str | None = None
        self.crashed_at: float | None = None
        self.idle_timeout_s = idle_timeout_s
        self.idle_topics = tuple(idle_topics)
        self.idled_out: str | None = None
        self._heard_at = 0.0
        self._idle_handle: asyncio.TimerHandle | None = None
        self.republish = republish
        self.republished = 0
        self._last_publish: dict[str, Publish] = {}

    # -- public ------------------------------------------------------------------------

    async def run(self) -> Any:
        """Connect, feed ``Started``, then events until the node finishes; return its result.

        Never raises for transport problems: after ``max_attempts`` failed
        connections in a row the node records ``transport_failed`` and stops with
        :attr:`failure` set. An exception of the node's ``handle``, or an effect it
        got wrong, crashes the node (:attr:`crashed`) and ends :meth:`run`.
        """
        self._inbox = asyncio.Queue()
        failures = 0
        try:
            while not self.finished and not self._aborted:
                _raise_if_cancelled()
                try:
                    await self._session()
                    failures = 0
                except (aiomqtt.MqttError, OSError) as exc:
                    # a cancelled session whose DISCONNECT failed (not answered in time,
                    # a broken socket) raises that error instead of CancelledError: it is
                    # a stop, not a lost connection to reconnect (a run would go on after
                    # Ctrl-C)
                    _raise_if_cancelled()
                    if self._aborted:
                        break
                    if self._lost_at is None:
                        self._lost_at = self.log.now()
                        if self._started:
                            self._record("transport_lost", {"node": self.node_id})
                    failures += 1
                    if failures >= self.max_attempts:
                        self._give_up(exc, failures)
                        break
                    delay = min(self.backoff_max_s, self.backoff_s * 2 ** (failures - 1))
                    await asyncio.sleep(delay * (0.5 + self._jitter.random()))
        finally:
            for _, handle in self._timers.values():
                handle.cancel()
            self._timers.clear()
            if self._idle_handle is not None:
                self._idle_handle.cancel()
            if self.clear_session and self.finished and not self._aborted:
                # leave no session behind on a shared broker. Only after a normal finish:
                # a connect attempted inside a cancelled task can swallow the
                # cancellation and hang the run's shutdown (seen with aiomqtt).
                with contextlib.suppress(aiomqtt.MqttError, OSError, TimeoutError):
                    async with asyncio.timeout(2.0):
                        await self._clear()
        return self.result

    @property
    def connected(self) -> bool:
        """Whether the node holds a broker connection now (its CONNACK came)."""
        return self._client_now is not None

    async def forget_session(self) -> None:
        """Remove the session the broker keeps for this client id, if any (never raises).

        A restarted incarnation of a crashed node calls it before :meth:`run`: it starts
        without the old subscriptions and queued messages, as a fresh process would.
        """
        with contextlib.suppress(aiomqtt.MqttError, OSError, TimeoutError):
            async with asyncio.timeout(5.0):
                await self._clear()

    def abort(self) -> None:
        """Crash on purpose (fault injection): drop the connection and stop.

        The TCP connection is shut down without an MQTT DISCONNECT, so the broker
        publishes the will; the runner neither reconnects nor clears the session, and
        :meth:`run` returns ``None``.
        """
        self._aborted = True
        client = self._client_now
        if client is None:
            return
        sock = client._client.socket()  # paho's socket: no public handle
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    # -- connection --------------------------------------------------------------------

    def _client(self, *, clear: bool = False) -> aiomqtt.Client:
        will = None
        if self.will is not None and not clear:
            will = aiomqtt.Will(
                self.will.topic, self.will.payload, qos=self.will.qos, retain=self.will.retain
            )
        kwargs: dict[str, Any] = {}
        if self._version is aiomqtt.ProtocolVersion.V5:
            kwargs["clean_start"] = clear or not self._started
            if not clear:  # no expiry property: the session ends with the connection
                props = Properties(PacketTypes.CONNECT)
                props.SessionExpiryInterval = self.session_expiry_s
                kwargs["properties"] = props
        else:
            kwargs["clean_session"] = clear or self.clean_session
        return aiomqtt.Client(
            **self.endpoint.client_kwargs(),
            identifier=self.client_id,
            protocol=self._version,
            will=will,
            keepalive=self.keepalive,
            # how long CONNECT may wait for its CONNACK (publish and subscribe pass their
            # own): after a lost connection a broker that accepted the TCP connection but
            # never answers (a restart under way) must not hold the node for 10 s
            timeout=RECONNECT_TIMEOUT_S if self._started else ACK_TIMEOUT_S,
            # small request/response messages: do not wait for Nagle's algorithm
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
            **kwargs,
        )

    async def _session(self) -> None:
        """One connection: run until the node finishes or the connection fails."""
        assert self._inbox is not None
        async with self._client() as raw:
            # the per-message path bypasses aiomqtt's (see fedstrata.broker.lane)
            client = Lane(raw, self._deliver, lambda exc: self._inbox_put(_Lost(exc, client)))
            self._client_now = client
            self.traffic.connects += 1
            try:
                if self._lost_at is not None:
                    now = self.log.now()
                    self._record(
                        "transport_reconnect",
                        {
                            "node": self.node_id,
                            "outage_s": now - self._lost_at,
                            "connects": self.traffic.connects,
                        },
                    )
                    self._lost_at = None
                if self.presence is not None:
                    await client.publish(
                        self.presence, ONLINE, qos=1, retain=False, timeout=ACK_TIMEOUT_S
                    )
                    self.traffic.presence_publishes += 1
                    self.traffic.presence_bytes_out += publish_packet_size(
                        self.presence, len(ONLINE), 1, protocol=self.protocol
                    )
                if not self._started:
                    self._started = True
                    self._feed(Started(now=self.log.now()))
                else:  # the broker may have lost the session: subscribe again
                    for pattern, qos in self._subs.items():
                        await client.subscribe(pattern, qos, timeout=ACK_TIMEOUT_S)
                    if self.republish and self._last_publish:
                        await self._republish(client)
                        loop = asyncio.get_running_loop()
                        for delay in (*REPUBLISH_AFTER_S, 2 * self.backoff_max_s + 1.0):
                            loop.call_later(delay, self._inbox_put, ("republish",))
                await self._carry_out(client)
                while not self.finished and not self._aborted:
                    _raise_if_cancelled()
                    item = await self._inbox.get()
                    if isinstance(item, _Lost):
                        if item.client is client:
                            raise item.error
                        continue  # left over from a connection that is already gone
                    if item[0] == "republish":
                        if self.republish:
                            await self._republish(client)
                        continue
                    self._dispatch(item)
                    await self._carry_out(client)
            finally:
                self._client_now = None
                client.close()

    async def _carry_out(self, client: Lane) -> None:
        """Carry out the pending effects (:meth:`_drain`); a wrong one crashes the node.

        An effect the node got wrong (``Finished`` before other effects, an unknown
        effect, a topic or payload MQTT refuses) crashes the node, as an exception of
        its ``handle`` does: the run goes on without it.
        """
        try:
            await self._drain(client)
        except (NodeProtocolError, ValueError, TypeError) as exc:
            self._crash(exc)

    async def _republish(self, client: Lane) -> None:
        """Publish the node's last message of every topic again (see ``republish``)."""
        for eff in list(self._last_publish.values()):
            await client.publish(
                eff.topic, eff.payload, qos=eff.qos, retain=eff.retain, timeout=ACK_TIMEOUT_S
            )
            size = publish_packet_size(eff.topic, len(eff.payload), eff.qos, protocol=self.protocol)
            self.republished += 1
            self.traffic.publishes += 1
            self.traffic.payload_bytes_out += len(eff.payload)
            self.traffic.packet_bytes_out += size
            self.log.add_bytes(self.tier, size)
            _raise_if_cancelled()

    def _arm_idle(self, delay: float | None) -> None:
        if delay is None:
            return
        self._idle_handle = asyncio.get_running_loop().call_later(
            max(delay, 0.0), self._inbox_put, ("idle",)
        )

    def _check_idle(self) -> None:
        """Stop the node if it heard nothing on its idle topics for ``idle_timeout_s``."""
        assert self.idle_timeout_s is not None
        silent = self.log.now() - self._heard_at
        if silent < self.idle_timeout_s:
            self._arm_idle(self.idle_timeout_s - silent)
            return
        where = " or ".join(self.idle_topics) if self.idle_topics else "any topic"
        self.idled_out = (
            f"{self.node_id}: no message on {where} for {silent:.1f} s "
            f"(idle limit {self.idle_timeout_s:g} s): its aggregator is gone"
        )
        self._record("idle_timeout", {"node": self.node_id, "reason": self.idled_out})
        self._aborted = True  # stop like a finished node: a clean DISCONNECT, no will

    async def _clear(self) -> None:
        """Connect with a clean session and no will, then disconnect.

        The broker forgets this client's session (MQTT 3.1.1 §3.1.2.4, MQTT 5
        §3.1.2.4 and §3.1.2.11.2).
        """
        async with self._client(clear=True):
            self.traffic.clears += 1

    def _deliver(self, topic: str, payload: bytes, qos: int) -> None:
        assert self._inbox is not None
        self._inbox.put_nowait(("msg", topic, payload, qos))

    def _give_up(self, exc: BaseException, attempts: int) -> None:
        detail = str(exc).strip() or type(exc).__name__
        self.failure = (
            f"{self.node_id}: lost the broker at {self.endpoint.url} after "
            f"{attempts} attempts: {detail}"
        )
        self._record("transport_failed", {"node": self.node_id, "reason": self.failure})

    # -- events ------------------------------------------------------------------------

    def _dispatch(self, item: tuple[Any, ...]) -> None:
        if item[0] == "msg":
            _, topic, payload, qos = item
            size = publish_packet_size(topic, len(payload), qos, protocol=self.protocol)
            presence = _PRESENCE.match(topic)
            if presence is None:
                if not self.idle_topics or topic.startswith(self.idle_topics):
                    if self._idle_handle is None:  # the first message: the clock starts
                        self._arm_idle(self.idle_timeout_s)
                    self._heard_at = self.log.now()
                self.traffic.delivered += 1
                self.traffic.payload_bytes_in += len(payload)
                self.traffic.packet_bytes_in += size
                self.log.add_bytes(self.tier, size)
                delay = 0.0
                if self.link is not None:
                    delay = self.link.inbound(topic, size, qos, self.log.now())
                if delay is None:
                    self.traffic.emulated_lost_in += 1
                elif delay > 0:
                    asyncio.get_running_loop().call_later(
                        delay, self._inbox_put, ("late", topic, payload)
                    )
                else:
                    self._feed(Delivered(now=self.log.now(), topic=topic, payload=payload))
                return
            self.traffic.presence_delivered += 1
            self.traffic.presence_bytes_in += size
            if payload == OFFLINE:  # a will: the peer went away without a DISCONNECT
                self._feed(PeerLost(now=self.log.now(), node_id=presence.group(1)))
        elif item[0] == "late":  # a delivery held back by the emulated link
            _, topic, payload = item
            self._feed(Delivered(now=self.log.now(), topic=topic, payload=payload))
        elif item[0] == "send":  # a PUBLISH held back by the emulated link
            self._todo.append(_Shaped(item[1]))
        elif item[0] == "idle":
            self._check_idle()
        elif item[0] == "timer":
            _, name, token = item
            live = self._timers.get(name)
            if live is None or live[0] != token:
                return  # re-armed or cancelled after it was queued
            del self._timers[name]
            self.traffic.timers_fired += 1
            self._feed(TimerFired(now=self.log.now(), name=name))

    def _feed(self, event: Event) -> None:
        if self.crashed is not None:
            return
        started = self.log.now()
        try:
            effects = self.node.handle(event)
        except Exception as exc:  # a node's bug or an unchecked body: a crash of that node
            self._crash(exc)
            return
        # the node's own computing (a long local training) is not its parent's silence
        self._heard_at += self.log.now() - started
        self._todo.extend(effects)

    def _crash(self, exc: BaseException) -> None:
        """The node raised: record it and drop the connection without a DISCONNECT.

        The broker then publishes the node's will (``PeerLost`` at its aggregator), as
        for a device that died; what the node had not yet carried out is discarded.
        """
        self.crashed = error_reason(exc)
        self.crashed_at = self.log.now()
        self._todo.clear()
        self._record(
            "node_crashed",
            {"node": self.node_id, "reason": self.crashed, "error": type(exc).__name__},
        )
        self.abort()

    def _timer_due(self, name: str, token: int) -> None:
        self._inbox_put(("timer", name, token))

    def _inbox_put(self, item: Any) -> None:
        assert self._inbox is not None
        self._inbox.put_nowait(item)

    # -- effects -----------------------------------------------------------------------

    async def _drain(self, client: Lane) -> None:
        """Carry out the pending effects in order; one that fails stays pending."""
        todo = self._todo
        while todo:
            eff = todo[0]
            if isinstance(eff, Publish) and self.link is not None:
                size = publish_packet_size(
                    eff.topic, len(eff.payload), eff.qos, protocol=self.protocol
                )
                delay = self.link.outbound(eff.topic, size, eff.qos, self.log.now())
                if delay is None:
                    self.traffic.emulated_lost_out += 1
                    todo.popleft()
                    continue
                if delay > 0:
                    asyncio.get_running_loop().call_later(delay, self._inbox_put, ("send", eff))
                    todo.popleft()
                    continue
                eff = _Shaped(eff)
            if isinstance(eff, _Shaped | Publish):
                if isinstance(eff, _Shaped):
                    eff = eff.publish
                await client.publish(
                    eff.topic, eff.payload, qos=eff.qos, retain=eff.retain, timeout=ACK_TIMEOUT_S
                )
                if self.republish:
                    self._last_publish[eff.topic] = eff
                if eff.retain:
                    self.retained_topics.add(eff.topic)
                size = publish_packet_size(
                    eff.topic, len(eff.payload), eff.qos, protocol=self.protocol
                )
                self.traffic.publishes += 1
                self.traffic.payload_bytes_out += len(eff.payload)
                self.traffic.packet_bytes_out += size
                self.log.add_bytes(self.tier, size)
            elif isinstance(eff, Subscribe):
                await client.subscribe(eff.pattern, eff.qos, timeout=ACK_TIMEOUT_S)
                self._subs[eff.pattern] = eff.qos
            elif isinstance(eff, SetTimer):
                old = self._timers.pop(eff.name, None)
                if old is not None:
                    old[1].cancel()
                self._token += 1
                handle = asyncio.get_running_loop().call_later(
                    eff.delay_s, self._timer_due, eff.name, self._token
                )
                self._timers[eff.name] = (self._token, handle)
            elif isinstance(eff, CancelTimer):
                old = self._timers.pop(eff.name, None)
                if old is not None:
                    old[1].cancel()
            elif isinstance(eff, Compute):
                self.traffic.compute_flops += eff.flops  # the work already happened in handle()
            elif isinstance(eff, Record):
                self._record(eff.kind, eff.fields)
            elif isinstance(eff, Finished):
                if len(todo) != 1:
                    raise NodeProtocolError(f"{self.node_id}: Finished must be the last effect")
                self.result = eff.result
                self.finished = True
            else:
                raise NodeProtocolError(f"{self.node_id}: unknown effect {type(eff).__name__}")
            todo.popleft()
            _raise_if_cancelled()

    def _record(self, kind: str, fields: dict[str, Any]) -> None:
        self.log.records.append(
            {
                "t": self.log.now(),
                "node": self.node_id,
                "kind": kind,
                "fields": fields,
                "wire_bytes": dict(self.log.tier_bytes),
            }
        )
