"""The simulated MQTT broker: sessions' subscriptions, retained messages and wills.

:class:`SimBroker` holds broker *state* with real MQTT semantics; time (link
delays, QoS 1 retransmission, PUBACKs) is the kernel's business. One broker
runs per site and owns the topic prefixes listed in ``serves``. Brokers are
not bridged: a message is seen by the subscribers of the broker it was
published to, and the ``serves`` table makes publishers and subscribers of a
topic pick the same broker.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from fedstrata.errors import ValidationError
from fedstrata.mqtt import (
    PROTOCOL_MQTT5,
    TopicTree,
    Will,
    topic_matches,
    validate_filter,
    varint_size,
)

__all__ = ["Message", "SimBroker"]


class Message:
    """One application message (one PUBLISH by a client or one will), shared by all its hops.

    The payload ``bytes`` object is shared by every delivery, never copied
    or re-encoded per subscriber. The PUBLISH packet sizes for QoS 0 and
    QoS 1 are computed once here.

    Parameters
    ----------
    topic, payload, qos, retain
        As published.
    mid
        Run-wide message number, for the event log.
    origin
        Node id of the publisher (the node whose will this is, for wills).
    protocol
        MQTT protocol level used for packet sizes (4 or 5).

    """

    __slots__ = ("mid", "origin", "payload", "qos", "retain", "size0", "size1", "topic")

    def __init__(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        mid: int,
        origin: str,
        protocol: int = 4,
    ) -> None:
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.mid = mid
        self.origin = origin
        tlen = len(topic) if topic.isascii() else len(topic.encode("utf-8"))
        # Inlined publish_size (it validates its inputs; these are known good):
        # 2-byte topic length + topic + payload (+ Property Length 0 in MQTT 5), then the
        # packet id for QoS > 0 and the fixed header byte + Remaining Length varint.
        rest = 2 + tlen + len(payload) + (protocol == PROTOCOL_MQTT5)
        if rest < 126:
            self.size0 = rest + 2
            self.size1 = rest + 4
        else:
            self.size0 = 1 + varint_size(rest) + rest
            self.size1 = 3 + varint_size(rest + 2) + rest


class SimBroker:
    """A simulated MQTT broker at one site.

    Parameters
    ----------
    site
        Broker name (used as ``src``/``dst`` in the event log).
    serves
        Topic prefixes this broker owns, e.g. ``("fs/r1/fog/f3/",)``.
    retry_interval
        Seconds the broker waits for a PUBACK before retransmitting a QoS 1
        PUBLISH to a subscriber (with the DUP flag, MQTT 3.1.1 §4.4).
    max_retries
        Retransmissions before the broker gives up on one delivery.

    Notes
    -----
    Semantics kept from MQTT 3.1.1:

    * subscriptions are per session with ``+``/``#`` filters (§4.7); a new
      SUBSCRIBE with an existing filter replaces it and re-sends matching
      retained messages (§3.8.4);
    * a subscriber receives a message with QoS ``min(publish QoS,
      subscription QoS)`` (§3.8.4), once even if several of its filters
      match (with the highest of their QoS);
    * a retained PUBLISH replaces the topic's retained message, one with an
      empty payload clears it and is still forwarded (§3.3.1.3); new
      subscriptions receive matching retained messages with RETAIN set;
    * a QoS 1 PUBLISH received again (a retransmission) is treated as a new
      publication and forwarded again (§4.3.2), so subscribers may see
      duplicates;
    * a session's will is published when the session ends without
      DISCONNECT and discarded on DISCONNECT (§3.1.2.5, §3.14.4).

    """

    def __init__(
        self,
        site: str,
        serves: Sequence[str] = (),
        *,
        retry_interval: float = 5.0,
        max_retries: int = 10,
    ) -> None:
        if not isinstance(site, str) or not site:
            raise ValidationError(f"broker site must be a non-empty str, got {site!r}")
        if isinstance(serves, str):
            raise ValidationError("serves must be a sequence of topic prefixes, not one str")
        if not retry_interval > 0:
            raise ValidationError(f"retry_interval must be > 0, got {retry_interval!r}")
        if max_retries < 0:
            raise ValidationError(f"max_retries must be >= 0, got {max_retries!r}")
        self.site = site
        self.serves = tuple(serves)
        self.retry_interval = float(retry_interval)
        self.max_retries = int(max_retries)
        self.subscriptions: TopicTree[Hashable] = TopicTree()
        self.retained: dict[str, Message] = {}
        self._wills: dict[Hashable, Will] = {}
        #: The site's shared access link (:class:`~fedstrata.sim.fair_share.FairShare`
        #: towards the broker, then from it), or ``None``: every connection is its own pipe.
        self.access: tuple[Any, Any] | None = None

    def __repr__(self) -> str:
        return f"SimBroker({self.site!r}, serves={self.serves!r})"

    def prefix_score(self, topic: str) -> int:
        """Return the length of the longest ``serves`` prefix of ``topic``, or -1 if none."""
        best = -1
        for prefix in self.serves:
            if len(prefix) > best and topic.startswith(prefix):
                best = len(prefix)
        return best

    def subscribe(self, key: Hashable, pattern: str, qos: int) -> list[Message]:
        """Add (or replace) a subscription; return the retained messages now due to ``key``.

        Parameters
        ----------
        key
            The subscribing session.
        pattern
            Topic filter, validated.
        qos
            Maximum QoS requested.

        Returns
        -------
        list of Message
            Retained messages matching ``pattern``, in retention order. A
            filter without wildcards is a dictionary lookup; a wildcard
            filter scans the retained store.

        """
        validate_filter(pattern)
        self.subscriptions.add(pattern, key, qos)
        if "+" not in pattern and "#" not in pattern:
            hit = self.retained.get(pattern)
            return [] if hit is None else [hit]
        return [m for topic, m in self.retained.items() if topic_matches(pattern, topic)]

    def unsubscribe(self, key: Hashable, pattern: str) -> bool:
        """Remove one subscription; return whether it existed."""
        return self.subscriptions.remove(pattern, key)

    def set_will(self, key: Hashable, will: Will) -> None:
        """Register the will of session ``key`` (as carried by its CONNECT)."""
        self._wills[key] = will

    def disconnect(self, key: Hashable, *, clean: bool) -> Will | None:
        """End session ``key``: drop its subscriptions and return the will to publish, if any.

        Parameters
        ----------
        key
            The session.
        clean
            ``True`` for a DISCONNECT (the will is discarded), ``False`` for
            an unclean end (the will is returned for publication).

        Returns
        -------
        Will or None
            The will to publish now, or ``None``.

        """
        self.subscriptions.remove_key(key)
        will = self._wills.pop(key, None)
        return None if clean else will

    def retain(self, msg: Message) -> None:
        """Store ``msg`` as its topic's retained message, or clear it if the payload is empty."""
        if msg.payload:
            self.retained[msg.topic] = msg
        else:
            self.retained.pop(msg.topic, None)

    def accept(self, msg: Message) -> tuple[tuple[Hashable, int], ...]:
        """Take a PUBLISH in: update the retained store and return the ``(key, sub_qos)`` to serve.

        The caller delivers to each key with QoS ``min(msg.qos, sub_qos)``
        (the kernel inlines this: :meth:`retain` if ``msg.retain``, then
        ``subscriptions.match``).
        """
        if msg.retain:
            self.retain(msg)
        return self.subscriptions.match(msg.topic)
