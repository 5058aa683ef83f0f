"""Signed envelopes through real nodes: forged, replayed, unsigned and unknown messages."""

from __future__ import annotations

import numpy as np
import pytest

from fedstrata import wire
from fedstrata.algorithms.multiview import MultiViewModel
from fedstrata.nodes.aggregator import AggregatorNode
from fedstrata.nodes.client import ClientNode
from fedstrata.nodes.config import Address
from fedstrata.nodes.events import Publish
from fedstrata.nodes.sealing import Seal
from fedstrata.privacy.signing import SIGNATURE_BYTES, AuthenticationError, NodeKeys

from .helpers import Loopback
from .test_secure_aggregation import INIT, SHAPE, protocol, views

NAMES = ["cloud", *(f"client-{i}" for i in range(4))]


def federation(sign: bool, rounds: int = 3):
    keys = {n: NodeKeys.derived(7, n) for n in NAMES}
    public = {n: k.public_key for n, k in keys.items()}
    seal = (lambda n: Seal(keys[n], public)) if sign else (lambda n: None)
    proto = protocol("none", rounds=rounds)
    model = MultiViewModel(3)
    nodes = {
        f"client-{i}": ClientNode(
            f"client-{i}",
            parent=Address("cloud", "cloud"),
            views=views(i),
            model=model,
            protocol=proto,
            seed=i,
            seal=seal(f"client-{i}"),
        )
        for i in range(4)
    }
    nodes["cloud"] = AggregatorNode(
        "cloud",
        tier="cloud",
        children=sorted(n for n in nodes),
        parent=None,
        model=model,
        shape=SHAPE,
        protocol=proto,
        deadline_s=5.0,
        init_state=INIT,
        seal=seal("cloud"),
    )
    return nodes, keys


def test_signed_run_gives_the_unsigned_result_with_64_bytes_per_message():
    runs = {}
    for sign in (False, True):
        nodes, _ = federation(sign)
        lb = Loopback(nodes)
        lb.start()
        lb.run()
        runs[sign] = lb
    plain, signed = runs[False], runs[True]
    np.testing.assert_array_equal(
        plain.results["cloud"]["state"].centers[0], signed.results["cloud"]["state"].centers[0]
    )
    assert [len(p.payload) + SIGNATURE_BYTES for _, p in plain.published] == [
        len(p.payload) for _, p in signed.published
    ]
    assert signed.kinds("rejected") == []


def _inject(lb: Loopback, sender: str, topic: str, payload: bytes) -> None:
    lb._apply(sender, [Publish(topic=topic, payload=payload)])


def test_forged_unsigned_unknown_and_replayed_messages_are_refused_by_reason():
    nodes, keys = federation(True, rounds=3)
    lb = Loopback(nodes)
    lb.start()  # round 1 is open at the root
    up = "fs/t/cloud/cloud/up"
    update = wire.Envelope(
        kind="update", run="t", round=1, tier="edge", sender="client-0", body={"mode": "stats"}
    )
    # unsigned: a bare envelope
    _inject(lb, "client-0", up, wire.encode(update))
    # forged: client-1 signs a message claiming to be client-0
    _inject(lb, "client-1", up, keys["client-1"].sign(wire.encode(update)))
    # forged: one byte of a genuine signed message changed
    genuine = bytearray(keys["client-0"].sign(wire.encode(update)))
    genuine[-1] ^= 1
    _inject(lb, "client-0", up, bytes(genuine))
    # unknown sender: a key nobody registered
    stranger = wire.Envelope(
        kind="update", run="t", round=1, tier="edge", sender="intruder", body={}
    )
    _inject(lb, "client-0", up, NodeKeys.derived(1, "intruder").sign(wire.encode(stranger)))
    injected = len(lb.published)
    while nodes["cloud"].round < 3:  # deliver until round 3 is open
        lb.run(max_steps=1, until_quiet=False)
    # replay: client-0's genuine round-1 update, sent again in round 3 (the same message
    # within its own round would be a transport duplicate, which the node counts)
    old = next(p.payload for n, p in lb.published[injected:] if n == "client-0" and p.topic == up)
    _inject(lb, "client-0", up, old)
    lb.run()
    reasons = sorted(r["reason"] for r in lb.kinds("rejected"))
    assert reasons == ["forged", "forged", "replay", "unknown_sender", "unsigned"]
    # ... and a redelivery within its round passes the seal: the node sees a duplicate
    latest = [p.payload for n, p in lb.published if n == "client-1" and p.topic == up][-1]
    assert nodes["cloud"]._seal.decode(latest).sender == "client-1"
    assert lb.results["cloud"]["iterations"] == 3  # the run went on undisturbed
    assert all(r["participants"] == 4 for r in lb.kinds("aggregate"))


def test_a_seal_needs_both_its_keys_and_the_roster():
    with pytest.raises(ValueError, match="both"):
        Seal(NodeKeys.derived(0, "a"), None)
    seal = Seal(NodeKeys.derived(0, "a"), {"a": NodeKeys.derived(0, "a").public_key})
    env = wire.Envelope(kind="update", run="t", round=1, tier="edge", sender="a", body={})
    data = seal.encode(env)
    assert seal.decode(data) == env
    assert seal.decode(data) == env  # the same message again: a duplicate, the node's to count
    later = wire.Envelope(kind="update", run="t", round=2, tier="edge", sender="a", body={})
    assert seal.decode(seal.encode(later)) == later
    with pytest.raises(AuthenticationError) as info:
        seal.decode(data)  # round 1 again, after round 2
    assert info.value.reason == "replay"
    other = wire.Envelope(kind="update", run="t", round=2, tier="edge", sender="a", body={"x": 1})
    with pytest.raises(AuthenticationError) as info:
        seal.decode(seal.encode(other))  # another message for the same slot
    assert info.value.reason == "replay"
