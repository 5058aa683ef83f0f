"""Pure MQTT rules shared by the simulated and the real broker.

Nothing here does I/O. The module holds

* topic name and topic filter validation and matching (MQTT 3.1.1 §4.7,
  MQTT 5.0 §4.7), including the ``$``-topic rule;
* :class:`TopicTree`, a subscription index that finds the subscribers of a
  topic by walking the topic's levels instead of testing every filter;
* exact control packet sizes (MQTT 3.1.1 §2-§3, MQTT 5.0 §2-§3) so that byte
  counts in simulated and real runs are the bytes a broker would carry;
* :class:`Will`, the last-will message of a session (MQTT 3.1.1 §3.1.2.5);
* fedstrata's topic scheme (``fs/{run}/{tier}/{group}/up/{node}|down|config`` and friends).

Section numbers refer to MQTT Version 3.1.1 (OASIS Standard, 29 October 2014)
unless marked "MQTT 5", which refers to MQTT Version 5.0 (OASIS Standard,
7 March 2019).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from fedstrata.errors import ValidationError

__all__ = [
    "MAX_REMAINING_LENGTH",
    "MAX_STRING_BYTES",
    "PROTOCOL_MQTT5",
    "PROTOCOL_MQTT311",
    "TopicTree",
    "Will",
    "config_topic",
    "connack_size",
    "connect_packet_size",
    "down_topic",
    "group_prefix",
    "member_topic",
    "presence_topic",
    "puback_size",
    "publish_packet_size",
    "publish_size",
    "suback_size",
    "subscribe_packet_size",
    "topic_matches",
    "up_filter",
    "up_topic",
    "validate_filter",
    "validate_topic",
    "varint_size",
]

#: Protocol level byte of MQTT 3.1.1 (§3.1.2.2).
PROTOCOL_MQTT311 = 4
#: Protocol level byte of MQTT 5.0 (MQTT 5 §3.1.2.2).
PROTOCOL_MQTT5 = 5
#: Longest UTF-8 encoded string: a two-byte length prefix (§1.5.3).
MAX_STRING_BYTES = 65_535
#: Largest value of the Remaining Length field (§2.2.3).
MAX_REMAINING_LENGTH = 268_435_455

K = TypeVar("K", bound=Hashable)


# --------------------------------------------------------------------------- topics


def _check_string(value: object, what: str) -> str:
    """Apply the UTF-8 string rules of §1.5.3 and §4.7.3 shared by names and filters."""
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a str, got {type(value).__name__}")
    if not value:
        raise ValidationError(f"{what} must be at least one character long (MQTT 3.1.1 §4.7.3)")
    if "\x00" in value:
        raise ValidationError(f"{what} must not contain U+0000 (MQTT 3.1.1 §1.5.3)")
    try:
        nbytes = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError(f"{what} is not well-formed UTF-8 (MQTT 3.1.1 §1.5.3)") from None
    if nbytes > MAX_STRING_BYTES:
        raise ValidationError(
            f"{what} is {nbytes} bytes, more than {MAX_STRING_BYTES} (MQTT 3.1.1 §1.5.3)"
        )
    return value


def validate_topic(topic: str) -> None:
    """Check that ``topic`` is a valid MQTT topic name (what a PUBLISH carries).

    A topic name is a non-empty UTF-8 string of at most 65,535 bytes without
    U+0000 (§1.5.3, §4.7.3) and without the wildcard characters ``+`` and
    ``#`` (§3.3.2.1, §4.7.1). Empty levels (``a//b``, a leading or trailing
    ``/``) are allowed (§4.7.1.1).

    Parameters
    ----------
    topic
        The topic name.

    Raises
    ------
    ValidationError
        If a rule is broken; the message cites the rule.

    """
    _check_string(topic, "topic name")
    if "+" in topic or "#" in topic:
        raise ValidationError(
            f"topic name {topic!r} must not contain wildcards '+' or '#' (MQTT 3.1.1 §4.7.1)"
        )


def validate_filter(pattern: str) -> None:
    """Check that ``pattern`` is a valid MQTT topic filter (what a SUBSCRIBE carries).

    Besides the string rules of §1.5.3 and §4.7.3, the multi-level wildcard
    ``#`` must occupy a whole level and be the last level (§4.7.1.2), and the
    single-level wildcard ``+`` must occupy a whole level (§4.7.1.3).

    Parameters
    ----------
    pattern
        The topic filter.

    Raises
    ------
    ValidationError
        If a rule is broken; the message cites the rule.

    """
    _check_string(pattern, "topic filter")
    levels = pattern.split("/")
    last = len(levels) - 1
    for i, level in enumerate(levels):
        if "#" in level:
            if level != "#":
                raise ValidationError(
                    f"topic filter {pattern!r}: '#' must occupy a whole level (MQTT 3.1.1 §4.7.1.2)"
                )
            if i != last:
                raise ValidationError(
                    f"topic filter {pattern!r}: '#' must be the last level (MQTT 3.1.1 §4.7.1.2)"
                )
        elif "+" in level and level != "+":
            raise ValidationError(
                f"topic filter {pattern!r}: '+' must occupy a whole level (MQTT 3.1.1 §4.7.1.3)"
            )


def _match_levels(flevels: Sequence[str], tlevels: Sequence[str]) -> bool:
    # §4.7.2: a filter starting with a wildcard does not match a topic starting with '$'.
    if tlevels[0].startswith("$") and flevels[0] in ("+", "#"):
        return False
    ntopic = len(tlevels)
    for i, level in enumerate(flevels):
        if level == "#":
            # §4.7.1.2: '#' also matches the parent level ("a/#" matches "a").
            return True
        if i >= ntopic or (level != "+" and level != tlevels[i]):
            return False
    return len(flevels) == ntopic


def topic_matches(pattern: str, topic: str) -> bool:
    """Return whether the topic filter ``pattern`` matches the topic name ``topic``.

    Matching follows §4.7: levels are separated by ``/``; ``+`` matches exactly
    one level, which may be empty (§4.7.1.3: ``a/+`` matches ``a/`` but not
    ``a``); ``#`` matches any number of levels including the parent
    (§4.7.1.2: ``a/#`` matches ``a``); a filter whose first level is a
    wildcard does not match a topic whose first level starts with ``$``
    (§4.7.2).

    Parameters
    ----------
    pattern
        A valid topic filter.
    topic
        A valid topic name.

    Returns
    -------
    bool
        Whether a subscription to ``pattern`` receives messages on ``topic``.

    Raises
    ------
    ValidationError
        If ``pattern`` or ``topic`` is not valid.

    """
    validate_filter(pattern)
    validate_topic(topic)
    return _match_levels(pattern.split("/"), topic.split("/"))


class _TrieNode:
    """One trie level: child levels and the subscribers of the filter ending here."""

    __slots__ = ("children", "subs")

    def __init__(self) -> None:
        self.children: dict[str, _TrieNode] = {}
        self.subs: dict[Hashable, int] = {}


class TopicTree(Generic[K]):
    """Subscription index: topic filters per subscriber, matched level by level.

    Filters are stored in a trie over their levels, so matching a topic costs
    O(levels x wildcard branches) instead of one test per subscription;
    10,000 subscribers of one filter are found with one walk. Results are
    cached per topic until the next (un)subscription, so a broker publishing
    on the same topics every round pays the walk once.

    A key subscribed through several overlapping filters appears once in a
    match, with the maximum QoS of the matching subscriptions (MQTT 5
    §3.3.4; MQTT 3.1.1 §3.3.5 allows this). Match order is deterministic:
    the order in which the trie is walked (``#``, exact level, ``+`` at each
    level), then subscription order within a filter.

    Parameters
    ----------
    cache_size
        Most topics whose matches are cached; the cache is emptied when full.

    """

    def __init__(self, *, cache_size: int = 4096) -> None:
        self._root = _TrieNode()
        self._by_key: dict[Hashable, dict[str, int]] = {}
        self._cache: dict[str, tuple[tuple[K, int], ...]] = {}
        self._cache_size = cache_size
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, pattern: str, key: K, qos: int = 0) -> bool:
        """Subscribe ``key`` to ``pattern`` with ``qos``; an existing subscription is replaced.

        Parameters
        ----------
        pattern
            A topic filter; validated with :func:`validate_filter`.
        key
            The subscriber (a session, a port...): any hashable.
        qos
            Maximum QoS granted for this subscription (0, 1 or 2).

        Returns
        -------
        bool
            ``True`` if the subscription is new, ``False`` if it replaced one
            with the same filter (§3.8.4).

        """
        validate_filter(pattern)
        if qos not in (0, 1, 2):
            raise ValidationError(f"qos must be 0, 1 or 2, got {qos!r}")
        node = self._root
        for level in pattern.split("/"):
            child = node.children.get(level)
            if child is None:
                child = node.children[level] = _TrieNode()
            node = child
        new = key not in node.subs
        node.subs[key] = qos
        self._by_key.setdefault(key, {})[pattern] = qos
        self._count += new
        self._cache.clear()
        return new

    def remove(self, pattern: str, key: K) -> bool:
        """Unsubscribe ``key`` from ``pattern``; return whether it was subscribed."""
        path = [self._root]
        for level in pattern.split("/"):
            child = path[-1].children.get(level)
            if child is None:
                return False
            path.append(child)
        if path[-1].subs.pop(key, None) is None:
            return False
        filters = self._by_key[key]
        del filters[pattern]
        if not filters:
            del self._by_key[key]
        self._count -= 1
        self._cache.clear()
        # Prune levels left without subscribers or children.
        levels = pattern.split("/")
        for depth in range(len(levels), 0, -1):
            node = path[depth]
            if node.subs or node.children:
                break
            del path[depth - 1].children[levels[depth - 1]]
        return True

    def remove_key(self, key: K) -> list[str]:
        """Remove every subscription of ``key``; return its filters in subscription order."""
        filters = list(self._by_key.get(key, {}))
        for pattern in filters:
            self.remove(pattern, key)
        return filters

    def filters(self, key: K) -> dict[str, int]:
        """Return the filters of ``key`` with their QoS (a copy), in subscription order."""
        return dict(self._by_key.get(key, {}))

    def match(self, topic: str) -> tuple[tuple[K, int], ...]:
        """Return the ``(key, qos)`` pairs subscribed to ``topic``.

        ``topic`` is assumed valid (see :func:`validate_topic`); the hot path
        does not re-validate it.

        Returns
        -------
        tuple of (key, qos)
            Each matching key once, with the maximum QoS of its matching
            subscriptions. The tuple is shared with the cache: do not rely on
            its identity.

        """
        hit = self._cache.get(topic)
        if hit is not None:
            return hit
        found: list[dict[Hashable, int]] = []
        states = [self._root]
        levels = topic.split("/")
        dollar = levels[0].startswith("$")
        for i, level in enumerate(levels):
            wild = not (i == 0 and dollar)  # §4.7.2
            nxt: list[_TrieNode] = []
            for node in states:
                children = node.children
                if wild:
                    multi = children.get("#")
                    if multi is not None and multi.subs:
                        found.append(multi.subs)
                exact = children.get(level)
                if exact is not None:
                    nxt.append(exact)
                if wild:
                    single = children.get("+")
                    if single is not None:
                        nxt.append(single)
            states = nxt
            if not states:
                break
        for node in states:
            if node.subs:
                found.append(node.subs)
            # §4.7.1.2: "a/#" matches "a" itself.
            multi = node.children.get("#")
            if multi is not None and multi.subs:
                found.append(multi.subs)
        result: tuple[tuple[K, int], ...]
        if not found:
            result = ()
        elif len(found) == 1:
            result = tuple(found[0].items())  # type: ignore[arg-type]
        else:
            merged: dict[Hashable, int] = {}
            for subs in found:
                for key, qos in subs.items():
                    if qos > merged.get(key, -1):
                        merged[key] = qos
            result = tuple(merged.items())  # type: ignore[arg-type]
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        self._cache[topic] = result
        return result


# --------------------------------------------------------------------------- packet sizes


def varint_size(value: int) -> int:
    """Return the bytes of the Variable Byte Integer encoding of ``value`` (§2.2.3).

    Seven bits per byte: 0-127 take 1 byte, 128-16,383 take 2,
    16,384-2,097,151 take 3 and 2,097,152-268,435,455 take 4.

    Raises
    ------
    ValidationError
        If ``value`` is negative or above 268,435,455.

    """
    if value < 0 or value > MAX_REMAINING_LENGTH:
        raise ValidationError(f"cannot encode {value} as an MQTT Remaining Length (§2.2.3)")
    if value < 128:
        return 1
    if value < 16_384:
        return 2
    if value < 2_097_152:
        return 3
    return 4


def _check_protocol(protocol: int) -> None:
    if protocol not in (PROTOCOL_MQTT311, PROTOCOL_MQTT5):
        raise ValidationError(f"protocol must be 4 (MQTT 3.1.1) or 5 (MQTT 5.0), got {protocol!r}")


def _check_qos(qos: int) -> None:
    if qos not in (0, 1, 2):
        raise ValidationError(f"qos must be 0, 1 or 2, got {qos!r}")


def _packet(remaining: int) -> int:
    """Add the fixed header: one type/flags byte (§2.2) and the Remaining Length varint."""
    return 1 + varint_size(remaining) + remaining


def publish_size(topic_nbytes: int, payload_len: int, qos: int, protocol: int = 4) -> int:
    """Return the PUBLISH packet size from lengths; see :func:`publish_packet_size`.

    This is the form the simulator uses on its hot path, where the topic's
    UTF-8 length is computed once per message.

    Parameters
    ----------
    topic_nbytes
        Length of the UTF-8 encoded topic name.
    payload_len
        Length of the application payload.
    qos
        0, 1 or 2.
    protocol
        4 for MQTT 3.1.1, 5 for MQTT 5.0.

    """
    if topic_nbytes < 0 or payload_len < 0:
        raise ValidationError("lengths must be >= 0")
    _check_qos(qos)
    _check_protocol(protocol)
    remaining = 2 + topic_nbytes + payload_len
    if qos:
        remaining += 2  # Packet Identifier, §3.3.2.2
    if protocol == PROTOCOL_MQTT5:
        remaining += 1  # Property Length 0 (MQTT 5 §3.3.2.3)
    return _packet(remaining)


def publish_packet_size(topic: str, payload_len: int, qos: int, *, protocol: int = 4) -> int:
    """Return the size in bytes of a PUBLISH packet (§3.3).

    Layout: fixed header byte (§3.3.1) + Remaining Length (1-4 bytes,
    §2.2.3) + Topic Name (2-byte length + UTF-8 bytes, §3.3.2.1) + Packet
    Identifier (2 bytes, only for QoS 1 and 2, §3.3.2.2) + in MQTT 5 the
    Property Length (1 byte when there are no properties, MQTT 5 §3.3.2.3)
    + the payload (§3.3.3).

    Parameters
    ----------
    topic
        Topic name (its UTF-8 length is what counts).
    payload_len
        Payload length in bytes.
    qos
        0, 1 or 2.
    protocol
        4 for MQTT 3.1.1 (default), 5 for MQTT 5.0.

    Returns
    -------
    int
        Bytes on the wire for this packet (without TCP/IP/TLS overhead).

    """
    return publish_size(len(topic.encode("utf-8")), payload_len, qos, protocol)


def puback_size(protocol: int = 4) -> int:
    """Return the size of a PUBACK packet: 4 bytes.

    MQTT 3.1.1 §3.4: fixed header (2 bytes) + Packet Identifier (2 bytes).
    MQTT 5 §3.4.2.1: the Reason Code and Property Length may be omitted when
    the reason is Success (0x00) and there are no properties, so a successful
    PUBACK is 4 bytes in MQTT 5 as well.
    """
    _check_protocol(protocol)
    return 4


def subscribe_packet_size(filters: str | Iterable[str], *, protocol: int = 4) -> int:
    """Return the size of a SUBSCRIBE packet for one or more topic filters (§3.8).

    Layout: fixed header + Remaining Length + Packet Identifier (2 bytes,
    §3.8.2) + in MQTT 5 the Property Length (1 byte, MQTT 5 §3.8.2.1) + per
    filter a 2-byte length, the UTF-8 filter and one options byte
    (requested QoS, §3.8.3; subscription options in MQTT 5 §3.8.3.1).
    """
    _check_protocol(protocol)
    items = [filters] if isinstance(filters, str) else list(filters)
    if not items:
        raise ValidationError("a SUBSCRIBE carries at least one topic filter (§3.8.3)")
    remaining = 2 + (1 if protocol == PROTOCOL_MQTT5 else 0)
    for pattern in items:
        remaining += 2 + len(pattern.encode("utf-8")) + 1
    return _packet(remaining)


def suback_size(n_filters: int, *, protocol: int = 4) -> int:
    """Return the size of a SUBACK packet answering ``n_filters`` filters (§3.9).

    Packet Identifier (2 bytes) + in MQTT 5 Property Length (1 byte) + one
    return code per filter (§3.9.3).
    """
    _check_protocol(protocol)
    if n_filters < 1:
        raise ValidationError("a SUBACK answers at least one filter (§3.9.3)")
    return _packet(2 + (1 if protocol == PROTOCOL_MQTT5 else 0) + n_filters)


@dataclass(frozen=True, slots=True)
class Will:
    """A session's last-will message (§3.1.2.5, §3.1.3.2-3).

    The broker publishes it when the session ends without a DISCONNECT
    (crash, network failure, keep-alive expiry, §3.1.2.5); a clean DISCONNECT
    discards it (§3.14.4).

    Parameters
    ----------
    topic
        Will topic (a topic name, no wildcards).
    payload
        Will message bytes.
    qos
        QoS used to publish the will (§3.1.2.6).
    retain
        Whether the will is published as a retained message (§3.1.2.7).

    """

    topic: str
    payload: bytes = b""
    qos: int = 1
    retain: bool = False

    def __post_init__(self) -> None:
        validate_topic(self.topic)
        if not isinstance(self.payload, bytes):
            raise ValidationError(f"will payload must be bytes, got {type(self.payload).__name__}")
        _check_qos(self.qos)


def connect_packet_size(
    client_id: str,
    *,
    will: Will | None = None,
    username: str | None = None,
    password: bytes | None = None,
    protocol: int = 4,
) -> int:
    """Return the size of a CONNECT packet (§3.1).

    Variable header (§3.1.2): Protocol Name ``"MQTT"`` (2 + 4 bytes),
    Protocol Level (1), Connect Flags (1), Keep Alive (2), in MQTT 5 the
    Property Length (1, no properties). Payload (§3.1.3): Client Identifier
    (2 + bytes), then if a will is set (MQTT 5: Will Property Length, 1) the
    Will Topic (2 + bytes) and Will Message (2 + bytes), then User Name and
    Password (2 + bytes each) when present.
    """
    _check_protocol(protocol)
    v5 = protocol == PROTOCOL_MQTT5
    remaining = 10 + (1 if v5 else 0) + 2 + len(client_id.encode("utf-8"))
    if will is not None:
        remaining += (1 if v5 else 0) + 2 + len(will.topic.encode("utf-8"))
        remaining += 2 + len(will.payload)
    if username is not None:
        remaining += 2 + len(username.encode("utf-8"))
    if password is not None:
        remaining += 2 + len(password)
    return _packet(remaining)


def connack_size(protocol: int = 4) -> int:
    """Return the size of a CONNACK packet: 4 bytes in 3.1.1 (§3.2), 5 in MQTT 5 without properties.

    MQTT 5 §3.2.2 adds a Property Length byte after the Connect Acknowledge
    Flags and the Reason Code.
    """
    _check_protocol(protocol)
    return 5 if protocol == PROTOCOL_MQTT5 else 4


# --------------------------------------------------------------------------- topic scheme


def _part(what: str, value: object) -> str:
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise ValidationError(f"{what} must be a str or int, got {type(value).__name__}")
    text = str(value)
    if not text or any(ch in text for ch in "/+#\x00") or text.startswith("$"):
        raise ValidationError(
            f"{what} {text!r} must be non-empty, not start with '$' and contain no '/', '+', '#'"
        )
    return text


def group_prefix(run: str, tier: str, group: str | int) -> str:
    """Return ``fs/{run}/{tier}/{group}/``, the topic prefix of one aggregation group.

    This is what a broker owning the group lists in its ``serves`` prefixes.
    """
    return f"fs/{_part('run', run)}/{_part('tier', tier)}/{_part('group', group)}/"


def up_topic(run: str, tier: str, group: str | int, node: str) -> str:
    """Return ``fs/{run}/{tier}/{group}/up/{node}``: child ``node`` publishes its updates here.

    One topic per child, so that the broker's ACL can let each child write its own
    only: the topic names the publisher (MQTT carries no publisher identity).
    """
    return group_prefix(run, tier, group) + "up/" + _part("node", node)


def up_filter(run: str, tier: str, group: str | int) -> str:
    """Return ``fs/{run}/{tier}/{group}/up/+``: the aggregator reads every child's updates."""
    return group_prefix(run, tier, group) + "up/+"


def down_topic(run: str, tier: str, group: str | int) -> str:
    """Return ``fs/{run}/{tier}/{group}/down``: the aggregator publishes (retained) state here."""
    return group_prefix(run, tier, group) + "down"


def config_topic(run: str, tier: str, group: str | int) -> str:
    """Return ``fs/{run}/{tier}/{group}/config``: the group's run configuration (retained).

    What every model of the run needs besides the model itself (the algorithm's
    extras, such as the heat-kernel references), published once by the root and
    relayed by each middle tier to its own group.
    """
    return group_prefix(run, tier, group) + "config"


def member_topic(run: str, tier: str, group: str | int, node: str) -> str:
    """Return ``fs/{run}/{tier}/{group}/to/{node}``: the aggregator's messages for one member.

    Secure aggregation's per-member rounds (key lists, forwarded shares, unmasking
    requests) go here, each to the one child it is for.
    """
    return group_prefix(run, tier, group) + "to/" + _part("node", node)


def presence_topic(run: str, node: str) -> str:
    """Return ``fs/{run}/presence/{node}``: the node's last-will (presence) topic."""
    return f"fs/{_part('run', run)}/presence/{_part('node', node)}"
