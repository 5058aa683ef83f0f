"""What nodes accept off the wire: the run, the topic and the sender, signed or not.

Signed envelopes through real nodes (forged, replayed, unsigned, unknown, another
run's, re-published on another topic, a sender rewritten), and the seal on its own.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fedstrata import wire
from fedstrata.algorithms.multiview import MultiViewModel
from fedstrata.nodes.aggregator import AggregatorNode
from fedstrata.nodes.client import ClientNode
from fedstrata.nodes.config import Address
from fedstrata.nodes.events import Delivered, Publish, Started
from fedstrata.nodes.sealing import (
    PLAIN,
    Route,
    RunKeys,
    Seal,
    aggregator_routes,
    client_routes,
    presence_routes,
)
from fedstrata.privacy.signing import (
    REASONS,
    SIGNATURE_BYTES,
    AuthenticationError,
    KeyFileError,
    NodeKeys,
)
from fedstrata.wire_unpacked import encode_unpacked

from .helpers import Loopback
from .test_secure_aggregation import INIT, SHAPE, protocol, views

NAMES = ["cloud", *(f"client-{i}" for i in range(4))]
# client-0's and client-1's up topics: each child publishes its updates on its own
UP, UP1 = "fs/t/cloud/cloud/up/client-0", "fs/t/cloud/cloud/up/client-1"
DOWN = "fs/t/cloud/cloud/down"


def federation(
    sign: bool, rounds: int = 3, mode: str = "none", run: str = "t", in_process: bool = False
):
    keys = {n: NodeKeys.derived(7, n) for n in NAMES}
    public = {n: k.public_key for n, k in keys.items()}
    if sign:
        seal = lambda n: Seal(keys[n], public, in_process=in_process)  # noqa: E731
    else:
        seal = lambda n: Seal(in_process=True) if in_process else None  # noqa: E731
    proto = dataclasses.replace(protocol(mode, rounds=rounds), run=run)
    model = MultiViewModel(3)
    nodes = {
        f"client-{i}": ClientNode(
            f"client-{i}",
            parent=Address("cloud", "cloud"),
            views=views(i),
            model=model,
            shape=SHAPE,
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


def finished(sign: bool, run: str, mode: str = "none", in_process: bool = False) -> Loopback:
    nodes, _ = federation(sign, run=run, mode=mode, in_process=in_process)
    lb = Loopback(nodes)
    lb.start()
    lb.run()
    assert lb.results["cloud"]["iterations"] == 3
    return lb


def test_signed_run_gives_the_unsigned_result_with_64_bytes_per_message():
    plain, signed = finished(False, "t"), finished(True, "t")
    np.testing.assert_array_equal(
        plain.results["cloud"]["state"].centers[0], signed.results["cloud"]["state"].centers[0]
    )
    assert [len(p.payload) + SIGNATURE_BYTES for _, p in plain.published] == [
        len(p.payload) for _, p in signed.published
    ]
    assert signed.kinds("rejected") == [] and plain.kinds("rejected") == []


@pytest.mark.parametrize("mode", ["none", "secagg"])
def test_in_process_seals_send_unpacked_messages_of_the_same_sizes_and_result(mode):
    packed, unpacked = finished(False, "t", mode), finished(False, "t", mode, in_process=True)
    assert packed.results["cloud"]["state"].centers[0].tobytes() == (
        unpacked.results["cloud"]["state"].centers[0].tobytes()
    )
    sent = [p.payload for _, p in unpacked.published]
    assert any(type(p) is wire.Unpacked for p in sent)
    assert [len(p.payload) for _, p in packed.published] == [len(p) for p in sent]
    if mode == "none":  # secure aggregation's keys are fresh in each run
        assert [p.payload for _, p in packed.published] == [
            p if type(p) is bytes else bytes(p) for p in sent
        ]


def test_a_signing_seal_packs_even_in_process_and_refuses_an_unpacked_message():
    nodes, _ = federation(True, in_process=True)
    lb = Loopback(nodes)
    lb.start()
    lb.run()
    assert lb.results["cloud"]["iterations"] == 3
    assert {type(p.payload) for _, p in lb.published} == {bytes}
    seal = Seal(NodeKeys.derived(7, "cloud"), {n: NodeKeys.derived(7, n).public_key for n in NAMES})
    env = wire.Envelope(kind="update", run="t", round=1, tier="edge", sender="client-0")
    with pytest.raises(AuthenticationError) as caught:
        seal.decode(encode_unpacked(env), UP)
    assert caught.value.reason == "unsigned"
    plain = Seal(in_process=True)
    assert plain.bind("t", {}).in_process and plain.bind("t", {}).fresh().in_process


def _inject(lb: Loopback, sender: str, topic: str, payload: bytes) -> None:
    lb._apply(sender, [Publish(topic=topic, payload=payload)])


def test_forged_unsigned_unknown_and_replayed_messages_are_refused_by_reason():
    nodes, keys = federation(True, rounds=3)
    lb = Loopback(nodes)
    lb.start()  # round 1 is open at the root
    update = wire.Envelope(
        kind="update", run="t", round=1, tier="edge", sender="client-0", body={"mode": "stats"}
    )
    # unsigned: a bare envelope
    _inject(lb, "client-0", UP, wire.encode(update))
    # forged: client-1 signs a message claiming to be client-0
    _inject(lb, "client-1", UP, keys["client-1"].sign(wire.encode(update), UP))
    # forged: one byte of a genuine signed message changed
    genuine = bytearray(keys["client-0"].sign(wire.encode(update), UP))
    genuine[-1] ^= 1
    _inject(lb, "client-0", UP, bytes(genuine))
    # unknown sender: a key nobody registered
    stranger = wire.Envelope(
        kind="update", run="t", round=1, tier="edge", sender="intruder", body={}
    )
    _inject(lb, "client-0", UP, NodeKeys.derived(1, "intruder").sign(wire.encode(stranger), UP))
    injected = len(lb.published)
    while nodes["cloud"].round < 3:  # deliver until round 3 is open
        lb.run(max_steps=1, until_quiet=False)
    # replay: client-0's genuine round-1 update, sent again in round 3 (the same message
    # within its own round would be a transport duplicate, which the node counts)
    old = next(p.payload for n, p in lb.published[injected:] if n == "client-0" and p.topic == UP)
    _inject(lb, "client-0", UP, old)
    lb.run()
    reasons = sorted(r["reason"] for r in lb.kinds("rejected"))
    assert reasons == ["forged", "forged", "replay", "unknown_sender", "unsigned"]
    # ... and a redelivery within its round passes the seal: the node sees a duplicate
    latest = [p.payload for n, p in lb.published if n == "client-1" and p.topic == UP1][-1]
    assert nodes["cloud"]._seal.decode(latest, UP1).sender == "client-1"
    assert lb.results["cloud"]["iterations"] == 3  # the run went on undisturbed
    assert all(r["participants"] == 4 for r in lb.kinds("aggregate"))


@pytest.mark.parametrize("sign", [False, True])
def test_another_runs_final_model_is_rejected_as_wrong_run_and_the_run_goes_on(sign):
    # run "a" with the very same keys (the seed-derived keys of a simulation)
    earlier = finished(sign, "a")
    final = [p for n, p in earlier.published if n == "cloud" and p.topic.endswith("/down")][-1]
    assert wire.decode(final.payload[SIGNATURE_BYTES if sign else 0 :]).body["phase"] == "final"
    nodes, _ = federation(sign, run="b")
    lb = Loopback(nodes)
    lb.start()
    # the attacker re-publishes run a's final model on run b's model topic
    _inject(lb, "cloud", "fs/b/cloud/cloud/down", final.payload)
    lb.run()
    rejected = lb.kinds("rejected")
    assert sorted(r["node"] for r in rejected) == [f"client-{i}" for i in range(4)]
    assert {r["reason"] for r in rejected} == {"wrong_run"}
    assert {r["sender"] for r in rejected} == {"cloud"}
    assert lb.results["cloud"]["iterations"] == 3  # no client quit on the stale final model
    assert all(r["participants"] == 4 for r in lb.kinds("aggregate"))


def test_another_runs_message_is_refused_even_on_its_own_topic():
    # the same bytes on run a's own topic reach no node of run b: nodes only listen to
    # their run's topics, so the check that matters is the envelope's run (above); a
    # message published for run b by someone who writes "a" in it is refused too
    nodes, keys = federation(True, run="b")
    env = wire.Envelope(kind="update", run="a", round=1, tier="edge", sender="client-0", body={})
    topic = "fs/b/cloud/cloud/up/client-0"
    seal = nodes["cloud"]._seal
    with pytest.raises(AuthenticationError) as info:
        seal.decode(keys["client-0"].sign(wire.encode(env), topic), topic)
    assert info.value.reason == "wrong_run"


def test_a_message_republished_on_another_topic_is_refused():
    nodes, _ = federation(True, mode="secagg")
    lb = Loopback(nodes)
    lb.start()
    lb.run(max_steps=40, until_quiet=False)  # the round's secure session is under way
    client0 = nodes["client-0"]._seal.fresh()
    cloud = nodes["cloud"]._seal.fresh()
    to0 = [p for _, p in lb.published if p.topic == "fs/t/cloud/cloud/to/client-0"]
    assert to0, "the secure session sent client-0 a message of its own"
    # the root's message for client-0 re-published on client-1's member topic: the root
    # may speak there and the kind fits, but the signature is for client-0's topic
    client1 = nodes["client-1"]._seal.fresh()
    with pytest.raises(AuthenticationError) as info:
        client1.decode(to0[0].payload, "fs/t/cloud/cloud/to/client-1")
    assert info.value.reason == "forged"
    assert client0.decode(to0[0].payload, "fs/t/cloud/cloud/to/client-0").sender == "cloud"
    # the root's model re-published on its config topic: a model is not a configuration
    model = next(p for n, p in lb.published if n == "cloud" and p.topic == DOWN)
    with pytest.raises(AuthenticationError) as info:
        client0.decode(model.payload, "fs/t/cloud/cloud/config")
    assert info.value.reason == "wrong_topic"
    # a client's update re-published on the model topic, to the other clients
    update = next(p for n, p in lb.published if n == "client-0" and p.topic == UP)
    with pytest.raises(AuthenticationError) as info:
        client1.decode(update.payload, DOWN)
    assert info.value.reason == "wrong_topic"
    # a topic the node does not listen to at all
    with pytest.raises(AuthenticationError) as info:
        cloud.decode(update.payload, "fs/t/fog/fog-0/up/client-0")
    assert info.value.reason == "wrong_topic"
    # client-0's update re-published on client-1's up topic: only client-1 speaks there
    with pytest.raises(AuthenticationError) as info:
        cloud.decode(update.payload, UP1)
    assert info.value.reason == "wrong_sender"
    assert cloud.decode(update.payload, UP).sender == "client-0"


def test_a_rewritten_sender_is_refused():
    nodes, keys = federation(True)
    env = wire.Envelope(kind="update", run="t", round=1, tier="edge", sender="client-0", body={})
    genuine = keys["client-0"].sign(wire.encode(env), UP)
    as_client1 = genuine[:SIGNATURE_BYTES] + wire.encode(
        dataclasses.replace(env, sender="client-1")
    )
    seal = nodes["cloud"]._seal
    # published on client-1's own up topic, where its sender fits the topic: the
    # signature (client-0's, for client-0's topic) does not verify as client-1's
    with pytest.raises(AuthenticationError) as info:
        seal.decode(as_client1, UP1)
    assert info.value.reason == "forged"
    # the root speaking as a child: signed by the root, but the root is no child of its own
    as_root = dataclasses.replace(env, sender="cloud")
    with pytest.raises(AuthenticationError) as info:
        seal.decode(keys["cloud"].sign(wire.encode(as_root), UP), UP)
    assert info.value.reason == "wrong_sender"
    # a client speaking as the root on the model topic
    model = wire.Envelope(kind="model", run="t", round=9, tier="cloud", sender="cloud", body={})
    client = nodes["client-1"]._seal
    with pytest.raises(AuthenticationError) as info:
        client.decode(keys["client-0"].sign(wire.encode(model), DOWN), DOWN)
    assert info.value.reason == "forged"
    assert seal.counts == {"forged": 1, "wrong_sender": 1}


def test_unsigned_nodes_check_the_run_the_topic_and_the_sender_too():
    nodes, _ = federation(False)
    seal = nodes["cloud"]._seal
    env = wire.Envelope(kind="update", run="t", round=1, tier="edge", sender="client-0", body={})
    assert seal.decode(wire.encode(env), UP) == env
    cases = {
        "wrong_run": (dataclasses.replace(env, run="t2"), UP),
        "wrong_sender": (dataclasses.replace(env, sender="mallory"), UP),
        "wrong_topic": (dataclasses.replace(env, kind="model"), UP),
    }
    for reason, (bad, topic) in cases.items():
        with pytest.raises(AuthenticationError) as info:
            seal.decode(wire.encode(bad), topic)
        assert info.value.reason == reason
    # a child's genuine-looking update on a sibling's up topic: the topic names its sender
    with pytest.raises(AuthenticationError) as info:
        seal.decode(wire.encode(env), UP1)
    assert info.value.reason == "wrong_sender"
    assert seal.decode(wire.encode(dataclasses.replace(env, sender="client-1")), UP1).sender == (
        "client-1"
    )
    # through handle: recorded as rejected, with the reason, never raised
    nodes["client-2"].handle(Started(now=0.0))
    out = nodes["client-2"].handle(
        Delivered(now=0.0, topic=DOWN, payload=wire.encode(dataclasses.replace(env, run="x")))
    )
    assert [(r.kind, r.fields["reason"]) for r in out] == [("rejected", "wrong_run")]


def test_routes_of_a_middle_tier_and_presence_topics():
    routes = aggregator_routes(
        "r", "fog", "fog-0", ["client-0", "client-1"], Address("cloud", "cloud")
    )
    assert routes == {
        "fs/r/fog/fog-0/up/client-0": Route(
            frozenset({"client-0"}), frozenset({"update", "secagg"})
        ),
        "fs/r/fog/fog-0/up/client-1": Route(
            frozenset({"client-1"}), frozenset({"update", "secagg"})
        ),
        "fs/r/cloud/cloud/down": Route(frozenset({"cloud"}), frozenset({"model"})),
        "fs/r/cloud/cloud/config": Route(frozenset({"cloud"}), frozenset({"control"})),
        "fs/r/cloud/cloud/to/fog-0": Route(frozenset({"cloud"}), frozenset({"secagg"})),
    }
    assert client_routes("r", Address("fog", "fog-0"), "client-0") == {
        "fs/r/fog/fog-0/down": Route(frozenset({"fog-0"}), frozenset({"model"})),
        "fs/r/fog/fog-0/config": Route(frozenset({"fog-0"}), frozenset({"control"})),
        "fs/r/fog/fog-0/to/client-0": Route(frozenset({"fog-0"}), frozenset({"secagg"})),
    }
    watcher = PLAIN.bind("r", presence_routes("r", ["a", "b"]))
    notice = wire.Envelope(kind="presence", run="r", round=0, tier="edge", sender="a", body={})
    assert watcher.decode(wire.encode(notice), "fs/r/presence/a") == notice
    with pytest.raises(AuthenticationError) as info:
        watcher.decode(wire.encode(notice), "fs/r/presence/b")  # a speaking for b
    assert info.value.reason == "wrong_sender"


def test_a_seal_needs_both_its_keys_and_the_roster():
    with pytest.raises(ValueError, match="both"):
        Seal(NodeKeys.derived(0, "a"), None)
    with pytest.raises(ValueError, match="run"):
        Seal(run="r")
    with pytest.raises(TypeError, match="topic"):
        PLAIN.decode(b"", wire.decode)  # type: ignore[arg-type]
    seal = Seal(NodeKeys.derived(0, "a"), {"a": NodeKeys.derived(0, "a").public_key})
    env = wire.Envelope(kind="update", run="t", round=1, tier="edge", sender="a", body={})
    data = seal.encode(env, UP)
    assert seal.decode(data, UP) == env
    assert seal.decode(data, UP) == env  # the same message again: a duplicate, the node's
    later = wire.Envelope(kind="update", run="t", round=2, tier="edge", sender="a", body={})
    assert seal.decode(seal.encode(later, UP), UP) == later
    with pytest.raises(AuthenticationError) as info:
        seal.decode(data, UP)  # round 1 again, after round 2
    assert info.value.reason == "replay"
    other = wire.Envelope(kind="update", run="t", round=2, tier="edge", sender="a", body={"x": 1})
    with pytest.raises(AuthenticationError) as info:
        seal.decode(seal.encode(other, UP), UP)  # another message for the same slot
    assert info.value.reason == "replay"
    assert all(r.isidentifier() and r == r.lower() for r in REASONS)  # short stable strings


def test_run_keys_generated_derived_and_from_key_files(tmp_path):
    nodes = ["cloud", "client-0"]
    a, b = RunKeys.generate(nodes), RunKeys.generate(nodes)
    assert a.source == "per-run random" and a.seeds["cloud"] != b.seeds["cloud"]
    assert "seeds" not in repr(a)  # the secret seeds are never shown
    d = RunKeys.derived(5, nodes)
    assert d.seeds["cloud"] == NodeKeys.derived(5, "cloud").seed
    assert d.source == "derived from the scenario seed (simulation only)"
    seals = a.seals()
    env = wire.Envelope(kind="update", run="t", round=1, tier="edge", sender="client-0", body={})
    data = seals["client-0"].encode(env, UP)
    assert seals["cloud"].decode(data, UP) == env
    with pytest.raises(AuthenticationError) as info:  # another run's keys: forged
        b.seals()["cloud"].decode(data, UP)
    assert info.value.reason == "forged"
    # key files as `fedstrata keys` writes them
    public = {}
    for n in nodes:
        k = NodeKeys.generate()
        k.save(tmp_path / f"{n}.key")
        public[n] = k.public_key.hex()
    (tmp_path / "public-keys.json").write_text(__import__("json").dumps(public))
    files = RunKeys.load(tmp_path, nodes)
    assert files.source == "key files"
    assert NodeKeys(files.seeds["cloud"]).public_key.hex() == public["cloud"]
    (tmp_path / "client-0.key").chmod(0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        RunKeys.load(tmp_path, nodes)
    (tmp_path / "client-0.key").chmod(0o600)
    public["cloud"] = public["client-0"]
    (tmp_path / "public-keys.json").write_text(__import__("json").dumps(public))
    with pytest.raises(ValueError, match=r"cloud\.key is not"):
        RunKeys.load(tmp_path, nodes)
