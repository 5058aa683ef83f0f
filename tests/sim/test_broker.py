"""SimBroker state: subscriptions, retained messages, wills, routing prefixes."""

from __future__ import annotations

import pytest

from fedstrata.errors import ValidationError
from fedstrata.mqtt import Will, publish_packet_size
from fedstrata.sim.broker import Message, SimBroker


def msg(topic: str, payload: bytes = b"x", qos: int = 1, retain: bool = False) -> Message:
    return Message(topic, payload, qos, retain, 1, "n")


def test_message_sizes() -> None:
    m = msg("fs/r/fog/f1/up", bytes(300))
    assert m.size0 == publish_packet_size("fs/r/fog/f1/up", 300, 0)
    assert m.size1 == publish_packet_size("fs/r/fog/f1/up", 300, 1)
    m5 = Message("é", b"", 0, False, 1, "n", protocol=5)
    assert m5.size0 == publish_packet_size("é", 0, 0, protocol=5) == 1 + 1 + 2 + 2 + 1


def test_accept_routes_and_retains() -> None:
    b = SimBroker("b")
    b.subscribe("s1", "a/+", 1)
    b.subscribe("s2", "a/b", 0)
    b.subscribe("s1", "#", 0)
    assert dict(b.accept(msg("a/b"))) == {"s1": 1, "s2": 0}
    b.accept(msg("a/b", b"v", retain=True))
    assert b.subscribe("s3", "a/b", 1)[0].payload == b"v"
    assert [m.topic for m in b.subscribe("s4", "a/#", 1)] == ["a/b"]
    assert b.subscribe("s5", "x/#", 1) == []
    b.accept(msg("a/b", b"", retain=True))
    assert b.retained == {}


def test_resubscribe_replaces_and_resends_retained() -> None:
    b = SimBroker("b")
    b.accept(msg("t", b"v", retain=True))
    assert len(b.subscribe("s", "t", 0)) == 1
    assert len(b.subscribe("s", "t", 1)) == 1  # §3.8.4: re-sent
    assert dict(b.accept(msg("t"))) == {"s": 1}
    assert b.unsubscribe("s", "t")
    assert b.accept(msg("t")) == ()


def test_wills() -> None:
    b = SimBroker("b")
    w = Will("p/n", b"gone")
    b.set_will("s", w)
    b.subscribe("s", "t", 1)
    assert b.disconnect("s", clean=True) is None  # DISCONNECT discards the will
    assert b.accept(msg("t")) == ()
    b.set_will("s", w)
    assert b.disconnect("s", clean=False) is w
    assert b.disconnect("s", clean=False) is None


def test_prefix_score_and_validation() -> None:
    b = SimBroker("fog", ["fs/r/fog/", "fs/r/fog/f1/"])
    assert b.prefix_score("fs/r/fog/f1/up") == len("fs/r/fog/f1/")
    assert b.prefix_score("fs/r/fog/f2/up") == len("fs/r/fog/")
    assert b.prefix_score("other") == -1
    with pytest.raises(ValidationError):
        SimBroker("")
    with pytest.raises(ValidationError):
        SimBroker("b", "fs/")
    with pytest.raises(ValidationError):
        SimBroker("b", retry_interval=0)
    with pytest.raises(ValidationError):
        b.subscribe("s", "a/#/b", 1)
