"""The declared body schemas: what each kind accepts and refuses, and the drop records."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedstrata import wire
from fedstrata.errors import WireError
from fedstrata.nodes.bodies import (
    CATEGORIES,
    MODEL,
    SECAGG_TYPES,
    Field,
    MalformedBodyError,
    check_body,
    check_fields,
    dropped,
)
from fedstrata.privacy import secagg


def env(kind: str, body: dict) -> wire.Envelope:
    return wire.Envelope(kind=kind, run="r", round=1, tier="cloud", sender="s", body=body)


def session_messages() -> dict[str, dict]:
    """One genuine message of every secagg type, from a real 3-member session."""
    cfg = secagg.SecAggConfig(vector_length=2, clip=1.0)
    roster = ["a", "b", "c"]
    server = secagg.SecAggServer(roster, cfg)
    clients = {c: secagg.SecAggClient(c, cfg) for c in roster}
    out: dict[str, dict] = {}
    messages = server.start()
    out[secagg.SETUP] = messages["a"]
    for step in range(5):  # keys, shares, masked, signed, reveal
        for c, m in messages.items():
            if step == 2:
                clients[c].set_input(np.zeros(2))
            reply = clients[c].handle(m)
            out[reply["type"]] = reply
            server.receive(c, reply)
        if step < 4:
            messages = server.advance()
            out[next(iter(messages.values()))["type"]] = next(iter(messages.values()))
    return out


def test_genuine_messages_of_every_kind_pass():
    check_body(env("model", {"phase": "iter", "sub": 2, "ask": ["c1"], "config": "ab" * 8}))
    check_body(env("model", {"phase": "final", "quorum": 0.5, "compression": "float16"}))
    check_body(env("update", {"mode": "stats", "n": 3, "contributors": 1, "sub": 0}))
    check_body(env("control", {"config": "0123456789abcdef", "extras": {}}))
    messages = session_messages()
    assert set(messages) == set(SECAGG_TYPES)
    for message in messages.values():
        check_body(env("secagg", {**message, "sub": 1}))
    check_body(env("model", {"phase": "iter", "secagg": messages[secagg.SETUP]}))


@pytest.mark.parametrize(
    ("kind", "body", "field"),
    [
        ("model", {}, "phase"),
        ("model", {"phase": np.zeros(2)}, "phase"),
        ("model", {"phase": "later"}, "phase"),
        ("model", {"phase": "iter", "sub": -1}, "sub"),
        ("model", {"phase": "iter", "sub": True}, "sub"),
        ("model", {"phase": "iter", "sub": 2**40}, "sub"),
        ("model", {"phase": "iter", "ask": "c1"}, "ask"),
        ("model", {"phase": "iter", "ask": ["c1", "c1"]}, "ask"),
        ("model", {"phase": "iter", "ask": [np.zeros(2)]}, "ask"),
        ("model", {"phase": "iter", "quorum": 0.0}, "quorum"),
        ("model", {"phase": "iter", "quorum": math.nan}, "quorum"),
        ("model", {"phase": "iter", "quorum": 1.5}, "quorum"),
        ("model", {"phase": "iter", "compression": "qsgd4"}, "compression"),
        ("model", {"phase": "iter", "config": 7}, "config"),
        ("model", {"phase": "iter", "secagg": [1]}, "secagg"),
        ("update", {"mode": ["stats"]}, "mode"),
        ("update", {"mode": "stats", "contributors": 0}, "contributors"),
        ("update", {"mode": "stats", "n": 1.5}, "n"),
        ("update", {"mode": "stats", "compression": b"x"}, "compression"),
        ("control", {"config": "x"}, "extras"),
        ("secagg", {"type": "secagg/keys", "session": bytes(15)}, "session"),
        ("secagg", {"type": {"a": 1}, "session": bytes(16)}, "type"),
        ("secagg", {"type": "secagg/other", "session": bytes(16)}, "type"),
        ("secagg", {"type": "secagg/keys", "session": bytes(16), "c_pk": bytes(32)}, "s_pk"),
        (
            "secagg",
            {"type": "secagg/masked", "session": bytes(16), "masked": np.zeros(3)},
            "masked",
        ),
        (
            "secagg",
            {"type": "secagg/unmask", "session": bytes(16), "survivors": ["a"], "dropped": [1]},
            "dropped",
        ),
        (
            "secagg",
            {"type": "secagg/collect", "session": bytes(16), "ciphertexts": {"a": "x"}},
            "ciphertexts",
        ),
    ],
)
def test_a_field_that_fails_its_declaration_is_refused(kind, body, field):
    with pytest.raises(MalformedBodyError, match=repr(field)) as info:
        check_body(env(kind, body))
    assert isinstance(info.value, WireError)  # the nodes drop it as any WireError


def test_a_model_secagg_map_must_be_a_whole_setup_message():
    setup = session_messages()[secagg.SETUP]
    with pytest.raises(MalformedBodyError, match="secagg/setup"):
        check_body(env("model", {"phase": "iter", "secagg": {**setup, "type": "secagg/keys"}}))
    with pytest.raises(MalformedBodyError, match="roster"):
        check_body(env("model", {"phase": "iter", "secagg": {**setup, "roster": "abc"}}))


def test_fields_the_schema_does_not_name_are_left_to_the_plug_in():
    check_fields({"phase": "iter", "centers": "anything"}, MODEL, "model body")
    with pytest.raises(ValueError, match="unknown field kind"):
        check_fields({"x": 1}, {"x": Field("tuple")}, "body")


def test_drop_records_carry_a_known_category():
    record = dropped("n1", "bad", "malformed", round=3)
    assert record.kind == "dropped"
    assert record.fields == {"node": "n1", "round": 3, "reason": "bad", "category": "malformed"}
    assert {"garbage", "malformed", "late", "duplicate"} <= set(CATEGORIES)
    with pytest.raises(ValueError, match="category"):
        dropped("n1", "bad", "odd")
