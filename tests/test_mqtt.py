"""MQTT rules: topic validation and matching, the subscription index, packet sizes, topics."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fedstrata.errors import ValidationError
from fedstrata.mqtt import (
    MAX_REMAINING_LENGTH,
    TopicTree,
    Will,
    connack_size,
    connect_packet_size,
    down_topic,
    group_prefix,
    presence_topic,
    puback_size,
    publish_packet_size,
    publish_size,
    suback_size,
    subscribe_packet_size,
    topic_matches,
    up_filter,
    up_topic,
    validate_filter,
    validate_topic,
    varint_size,
)

# ----------------------------------------------------------------------------- reference


def ref_match(pattern: str, topic: str) -> bool:
    """Straightforward reference: translate the filter into a regular expression (§4.7)."""
    if topic.startswith("$") and pattern[:1] in ("+", "#"):
        return False
    rx = ""
    for i, level in enumerate(pattern.split("/")):
        sep = "/" if i else ""
        if level == "#":
            rx += f"(?:{sep}.*)?" if i else ".*"
        elif level == "+":
            rx += sep + "[^/]*"
        else:
            rx += sep + re.escape(level)
    return re.fullmatch(rx, topic, re.DOTALL) is not None


def ref_varint(value: int) -> bytes:
    """The encoding algorithm of §2.2.3, byte by byte."""
    out = bytearray()
    while True:
        digit, value = value % 128, value // 128
        if value > 0:
            digit |= 0x80
        out.append(digit)
        if value == 0:
            return bytes(out)


topic_levels = st.lists(st.sampled_from(["a", "b", "", "$s", "ab", "é"]), min_size=1, max_size=4)
filter_levels = st.lists(st.sampled_from(["a", "b", "", "+", "$s", "é"]), min_size=1, max_size=4)


@st.composite
def topics(draw: st.DrawFn) -> str:
    topic = "/".join(draw(topic_levels))
    assume(topic)
    return topic


@st.composite
def filters(draw: st.DrawFn) -> str:
    levels = draw(filter_levels)
    if draw(st.booleans()):
        levels = [*levels[:-1], "#"] if draw(st.booleans()) else [*levels, "#"]
    pattern = "/".join(levels)
    assume(pattern)
    return pattern


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize("topic", ["a", "a/b", "/", "a//b", "/a", "a/", "$SYS/x", "é/ü", " "])
def test_valid_topic_names(topic: str) -> None:
    validate_topic(topic)


@pytest.mark.parametrize("topic", ["", "a/+", "a/#", "+", "#", "a\x00b", 1, "a" * 65536])
def test_invalid_topic_names(topic: object) -> None:
    with pytest.raises(ValidationError):
        validate_topic(topic)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "pattern", ["#", "+", "a/#", "+/+", "/+", "a/+/b", "+/#", "$SYS/#", "a//#"]
)
def test_valid_filters(pattern: str) -> None:
    validate_filter(pattern)


@pytest.mark.parametrize("pattern", ["", "a#", "a/#/b", "#/a", "a+", "a/b+/c", "++", "##", "\x00"])
def test_invalid_filters(pattern: str) -> None:
    with pytest.raises(ValidationError, match=r"MQTT 3\.1\.1"):
        validate_filter(pattern)


def test_topic_too_long_in_bytes_not_chars() -> None:
    validate_topic("é" * 32767)  # 65,534 bytes
    with pytest.raises(ValidationError, match="65535"):
        validate_topic("é" * 32768)


# ----------------------------------------------------------------------------- matching

SPEC_EXAMPLES = [
    # §4.7.1.2
    ("sport/tennis/player1/#", "sport/tennis/player1", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
    ("sport/#", "sport", True),
    ("#", "anything/at/all", True),
    # §4.7.1.3
    ("sport/tennis/+", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/+", "sport", False),
    ("sport/+", "sport/", True),
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+", "/finance", False),
    # §4.7.2
    ("#", "$SYS/broker", False),
    ("+/monitor/Clients", "$SYS/monitor/Clients", False),
    ("$SYS/#", "$SYS/monitor/Clients", True),
    ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
    # case sensitive, exact levels
    ("a/b", "a/B", False),
    ("a/b", "a/b/", False),
]


@pytest.mark.parametrize(("pattern", "topic", "expected"), SPEC_EXAMPLES)
def test_spec_examples(pattern: str, topic: str, expected: bool) -> None:
    assert topic_matches(pattern, topic) is expected
    assert ref_match(pattern, topic) is expected


@given(filters(), topics())
def test_matching_agrees_with_reference(pattern: str, topic: str) -> None:
    assert topic_matches(pattern, topic) == ref_match(pattern, topic)


def test_matching_rejects_invalid_input() -> None:
    with pytest.raises(ValidationError):
        topic_matches("a/#/b", "a")
    with pytest.raises(ValidationError):
        topic_matches("a", "a/+")


@settings(max_examples=200)
@given(
    st.lists(st.tuples(filters(), st.integers(0, 5), st.integers(0, 2)), max_size=25),
    st.lists(topics(), min_size=1, max_size=5),
)
def test_topic_tree_matches_brute_force(
    subs: list[tuple[str, int, int]], probes: list[str]
) -> None:
    tree: TopicTree[int] = TopicTree()
    table: dict[tuple[str, int], int] = {}
    for pattern, key, qos in subs:
        tree.add(pattern, key, qos)
        table[(pattern, key)] = qos  # a re-subscription replaces
    assert len(tree) == len(table)
    for topic in probes:
        expected: dict[int, int] = {}
        for (pattern, key), qos in table.items():
            if ref_match(pattern, topic):
                expected[key] = max(qos, expected.get(key, -1))
        got = tree.match(topic)
        assert len(got) == len(dict(got)), "a key appears once"
        assert dict(got) == expected
        assert tree.match(topic) == got  # cached answer is the same


@settings(max_examples=100)
@given(
    st.lists(st.tuples(filters(), st.integers(0, 3)), min_size=1, max_size=20, unique=True),
    st.data(),
)
@pytest.mark.slow
def test_topic_tree_removal(subs: list[tuple[str, int]], data: st.DataObject) -> None:
    tree: TopicTree[int] = TopicTree()
    for pattern, key in subs:
        tree.add(pattern, key, 1)
    gone = data.draw(st.lists(st.sampled_from(subs), unique=True))
    for pattern, key in gone:
        assert tree.remove(pattern, key)
        assert not tree.remove(pattern, key)
    kept = [s for s in subs if s not in gone]
    assert len(tree) == len(kept)
    for topic in data.draw(st.lists(topics(), min_size=1, max_size=4)):
        expected = {key for pattern, key in kept if ref_match(pattern, topic)}
        assert {k for k, _ in tree.match(topic)} == expected
    for pattern, key in kept:
        tree.remove(pattern, key)
    assert len(tree) == 0
    assert tree._root.children == {}, "empty levels are pruned"


def test_topic_tree_remove_key_and_filters() -> None:
    tree: TopicTree[str] = TopicTree()
    tree.add("a/+", "s1", 1)
    tree.add("a/#", "s1", 0)
    tree.add("a/b", "s2", 1)
    assert tree.filters("s1") == {"a/+": 1, "a/#": 0}
    assert dict(tree.match("a/b")) == {"s1": 1, "s2": 1}
    assert tree.remove_key("s1") == ["a/+", "a/#"]
    assert dict(tree.match("a/b")) == {"s2": 1}
    assert tree.remove_key("nobody") == []


def test_topic_tree_many_subscribers_of_one_filter() -> None:
    tree: TopicTree[int] = TopicTree()
    for key in range(10_000):
        tree.add("fs/r/fog/f1/down", key, 1)
    tree.add("fs/r/fog/+/down", -1, 0)
    got = tree.match("fs/r/fog/f1/down")
    assert len(got) == 10_001
    # Exact-level branch first, then the '+' branch; subscription order within a filter.
    assert [k for k, _ in got[:3]] == [0, 1, 2]
    assert got[-1] == (-1, 0)
    assert tree.match("fs/r/fog/f2/down") == ((-1, 0),)


def test_topic_tree_validates() -> None:
    tree: TopicTree[int] = TopicTree()
    with pytest.raises(ValidationError):
        tree.add("a/#/b", 1)
    with pytest.raises(ValidationError):
        tree.add("a", 1, qos=3)


# ----------------------------------------------------------------------------- packet sizes


@pytest.mark.parametrize(
    ("value", "size"),
    [
        (0, 1),
        (127, 1),
        (128, 2),
        (16_383, 2),
        (16_384, 3),
        (2_097_151, 3),
        (2_097_152, 4),
        (268_435_455, 4),
    ],
)
def test_varint_boundaries(value: int, size: int) -> None:
    assert varint_size(value) == size == len(ref_varint(value))


@given(st.integers(0, MAX_REMAINING_LENGTH))
def test_varint_matches_encoder(value: int) -> None:
    assert varint_size(value) == len(ref_varint(value))


@pytest.mark.parametrize("value", [-1, MAX_REMAINING_LENGTH + 1])
def test_varint_out_of_range(value: int) -> None:
    with pytest.raises(ValidationError):
        varint_size(value)


def test_publish_hand_computed() -> None:
    # "a/b", 10-byte payload. QoS 0: 0x30, RL=15, 00 03 'a/b', payload -> 1 + 1 + 15.
    assert publish_packet_size("a/b", 10, 0) == 17
    # QoS 1 adds the 2-byte packet identifier.
    assert publish_packet_size("a/b", 10, 1) == 19
    assert publish_packet_size("a/b", 10, 2) == 19
    # MQTT 5 adds a 1-byte Property Length (0).
    assert publish_packet_size("a/b", 10, 1, protocol=5) == 20
    assert publish_packet_size("a/b", 10, 0, protocol=5) == 18
    # The topic counts in UTF-8 bytes: "é" is 2.
    assert publish_packet_size("é", 0, 0) == 1 + 1 + 2 + 2


@pytest.mark.parametrize(
    ("payload", "remaining", "total"),
    [
        (124, 127, 129),  # topic "t": remaining = 2 + 1 + payload
        (125, 128, 131),
        (16_380, 16_383, 16_386),
        (16_381, 16_384, 16_388),
        (2_097_148, 2_097_151, 2_097_155),
        (2_097_149, 2_097_152, 2_097_157),
        (268_435_452, 268_435_455, 268_435_460),
    ],
)
def test_publish_varint_boundaries(payload: int, remaining: int, total: int) -> None:
    assert 1 + len(ref_varint(remaining)) + remaining == total
    assert publish_packet_size("t", payload, 0) == total
    # QoS 1 moves the boundary by the 2-byte packet id.
    assert publish_packet_size("t", payload - 2, 1) == total


def test_publish_too_large() -> None:
    with pytest.raises(ValidationError):
        publish_packet_size("t", 268_435_453, 0)


@given(st.text(min_size=1, max_size=30), st.integers(0, 300_000), st.sampled_from([0, 1, 2]))
def test_publish_size_layout(topic: str, payload: int, qos: int) -> None:
    assume("\x00" not in topic and not any(0xD800 <= ord(c) <= 0xDFFF for c in topic))
    tlen = len(topic.encode())
    for protocol in (4, 5):
        remaining = 2 + tlen + (2 if qos else 0) + (1 if protocol == 5 else 0) + payload
        expected = 1 + len(ref_varint(remaining)) + remaining
        assert publish_packet_size(topic, payload, qos, protocol=protocol) == expected
        assert publish_size(tlen, payload, qos, protocol) == expected


def test_other_packets() -> None:
    assert puback_size() == 4
    assert puback_size(5) == 4  # reason code omitted on success (MQTT 5 §3.4.2.1)
    # SUBSCRIBE "a/b": packet id 2 + (2 + 3 + options 1) = 8 -> 10 bytes.
    assert subscribe_packet_size("a/b") == 10
    assert subscribe_packet_size("a/b", protocol=5) == 11
    assert subscribe_packet_size(["a/b", "c"]) == 1 + 1 + 2 + 6 + 4
    assert suback_size(1) == 5
    assert suback_size(2, protocol=5) == 7
    # CONNECT "c1": variable header 10 + client id 2 + 2 = 14 -> 16 bytes.
    assert connect_packet_size("c1") == 16
    assert connect_packet_size("c1", protocol=5) == 17
    will = Will("w", b"x")
    assert connect_packet_size("c1", will=will) == 16 + 3 + 3
    assert connect_packet_size("c1", will=will, protocol=5) == 17 + 1 + 3 + 3
    assert connect_packet_size("c1", username="u", password=b"pw") == 16 + 3 + 4
    assert connack_size() == 4
    assert connack_size(5) == 5
    with pytest.raises(ValidationError):
        puback_size(3)
    with pytest.raises(ValidationError):
        subscribe_packet_size([])


# ----------------------------------------------------------------------------- scheme, will


def test_topic_scheme() -> None:
    assert up_topic("r1", "fog", "f3", "client-2") == "fs/r1/fog/f3/up/client-2"
    assert up_filter("r1", "fog", "f3") == "fs/r1/fog/f3/up/+"
    assert down_topic("r1", "fog", 3) == "fs/r1/fog/3/down"
    assert group_prefix("r1", "cloud", "root") == "fs/r1/cloud/root/"
    assert presence_topic("r1", "client-7") == "fs/r1/presence/client-7"
    up = up_topic("r1", "fog", "f3", "client-2")
    assert topic_matches(group_prefix("r1", "fog", "f3") + "#", up)
    # the aggregator's filter reads every child's topic, and nothing of another group
    assert topic_matches(up_filter("r1", "fog", "f3"), up)
    assert not topic_matches(up_filter("r1", "fog", "f3"), up_topic("r1", "fog", "f4", "c"))
    assert not topic_matches(up_filter("r1", "fog", "f3"), down_topic("r1", "fog", "f3"))
    for bad in ("", "a/b", "+", "#", "$x"):
        with pytest.raises(ValidationError):
            up_topic("r1", "fog", bad, "client-2")
        with pytest.raises(ValidationError):
            up_topic("r1", "fog", "f3", bad)  # the node names the topic: no wildcard
        with pytest.raises(ValidationError):
            up_filter("r1", "fog", bad)
    with pytest.raises(ValidationError):
        presence_topic("r/1", "n")


def test_will_validates() -> None:
    assert Will("fs/r/presence/n", b"gone").qos == 1
    with pytest.raises(ValidationError):
        Will("a/+")
    with pytest.raises(ValidationError):
        Will("a", "text")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Will("a", b"", qos=3)
