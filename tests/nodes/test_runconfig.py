"""The run's configuration (the algorithm's extras) travels once; models name it by id.

Hand-made event sequences: a model that arrives before its configuration is kept and
answered when the configuration comes, at a client and at a HierFAVG middle tier.
"""

import numpy as np
import pytest

from fedstrata import wire
from fedstrata.algorithms.multiview import MultiViewModel
from fedstrata.errors import WireError
from fedstrata.nodes.aggregator import AggregatorNode
from fedstrata.nodes.client import ClientNode
from fedstrata.nodes.config import Address, ProtocolConfig
from fedstrata.nodes.decoding import SharedDecoder
from fedstrata.nodes.events import Compute, Delivered, Publish, Record, Started
from fedstrata.nodes.runconfig import config_id, config_payload, read_config
from fedstrata.plugins.messages import Shape

from .helpers import Loopback

SHAPE = Shape(3, (2, 3))
PROTO = ProtocolConfig(run="t", rule="sum", kernel_scope="global", tol=0.0)
MODEL = MultiViewModel(3)


def views(seed=0, n=12):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    c1 = np.array([[0, 0], [6, 0], [0, 6]], float)
    c2 = np.array([[0, 0, 0], [5, 5, 5], [-5, 5, 0]], float)
    return [c1[y] + rng.normal(0, 0.5, (n, 2)), c2[y] + rng.normal(0, 0.5, (n, 3))]


def extras_of(vs):
    refs = [{"min": X.min(0), "max": X.max(0), "sum": X.sum(0), "count": len(X)} for X in vs]
    return {"refs": refs}


STATE = {
    "centers": [
        np.array([[0.5, 0.5], [5.0, 1.0], [1.0, 5.0]]),
        np.array([[0.0, 0.0, 0.0], [4.0, 4.0, 4.0], [-4.0, -4.0, -4.0]]),
    ],
    "view_weights": np.full(2, 0.5),
}


def model_payload(round_, cid, phase="iter", sender="cloud", tier="cloud", **extra):
    body = {"phase": phase, **STATE, **extra}
    if cid is not None:
        body["config"] = cid
    env = wire.Envelope(kind="model", run="t", round=round_, tier=tier, sender=sender, body=body)
    return wire.encode(env)


def cfg_payload(extras, sender="cloud", tier="cloud"):
    cid = config_id(extras)
    return config_payload(run="t", round_=1, tier=tier, sender=sender, cid=cid, extras=extras)


def client(name="c0", seed=0):
    node = ClientNode(
        name,
        parent=Address("cloud", "cloud"),
        views=views(seed),
        model=MODEL,
        shape=SHAPE,
        protocol=PROTO,
    )
    subs = node.handle(Started(now=0.0))
    assert [s.pattern for s in subs] == ["fs/t/cloud/cloud/config", "fs/t/cloud/cloud/down"]
    return node


DOWN, CONFIG = "fs/t/cloud/cloud/down", "fs/t/cloud/cloud/config"


def test_config_id_is_a_hash_of_the_extras_and_checked_on_receipt():
    ex = extras_of(views())
    cid = config_id(ex)
    assert len(cid) == 16 and cid == config_id(wire.decode(cfg_payload(ex)).body["extras"])
    got_id, got = read_config(wire.decode(cfg_payload(ex)))
    assert got_id == cid and config_id(got) == cid
    forged = wire.Envelope(
        kind="control", run="t", round=1, tier="cloud", sender="cloud",
        body={"config": "0" * 16, "extras": ex},
    )  # fmt: skip
    with pytest.raises(WireError, match="does not match"):
        read_config(forged)


def test_client_answers_a_model_that_came_before_its_config_once_the_config_arrives():
    ex = extras_of(views(1))
    cid = config_id(ex)
    early = client()
    assert early.handle(Delivered(now=1.0, topic=DOWN, payload=model_payload(1, cid))) == []
    effects = early.handle(Delivered(now=2.0, topic=CONFIG, payload=cfg_payload(ex)))
    assert [type(e) for e in effects] == [Compute, Publish]
    up = wire.decode(effects[1].payload)
    assert (up.kind, up.round, up.sender) == ("update", 1, "c0")
    # the same partial as a client that had the configuration first
    timely = client()
    assert timely.handle(Delivered(now=0.5, topic=CONFIG, payload=cfg_payload(ex))) == []
    again = timely.handle(Delivered(now=1.0, topic=DOWN, payload=model_payload(1, cid)))
    assert again[1].payload == effects[1].payload
    # the retained configuration again (a relay restarted): a duplicate, nothing sent
    dup = timely.handle(Delivered(now=3.0, topic=CONFIG, payload=cfg_payload(ex)))
    assert [e.kind for e in dup] == ["duplicate"]


def test_a_waiting_client_keeps_only_the_newest_model_and_finishes_on_a_final_one():
    ex = extras_of(views(2))
    cid = config_id(ex)
    c = client()
    assert c.handle(Delivered(now=1.0, topic=DOWN, payload=model_payload(1, cid))) == []
    final = model_payload(2, cid, phase="final")
    assert c.handle(Delivered(now=2.0, topic=DOWN, payload=final)) == []
    effects = c.handle(Delivered(now=3.0, topic=CONFIG, payload=cfg_payload(ex)))
    assert [type(e).__name__ for e in effects] == ["Compute", "Record", "Finished"]
    assert c.result is not None and c.result["labels"].shape == (12,)


def test_setup_models_need_no_config_and_unasked_models_are_not_kept():
    ex = extras_of(views(3))
    cid = config_id(ex)
    c = client()
    env = wire.Envelope(
        kind="model", run="t", round=0, tier="cloud", sender="cloud", body={"phase": "setup"}
    )
    out = c.handle(Delivered(now=0.0, topic=DOWN, payload=wire.encode(env)))
    assert [type(e) for e in out] == [Compute, Publish]
    other = model_payload(1, cid, ask=["c9"])
    assert c.handle(Delivered(now=1.0, topic=DOWN, payload=other)) == []
    assert c.handle(Delivered(now=2.0, topic=CONFIG, payload=cfg_payload(ex))) == []


def test_malformed_config_is_dropped_and_the_model_keeps_waiting():
    ex = extras_of(views(4))
    c = client()
    assert c.handle(Delivered(now=1.0, topic=DOWN, payload=model_payload(1, config_id(ex)))) == []
    bad = {"refs": [None, None]}  # no reference for the views the client holds
    out = c.handle(Delivered(now=2.0, topic=CONFIG, payload=cfg_payload(bad)))
    assert [e.kind for e in out if isinstance(e, Record)] == ["dropped"]
    assert c.config_id is None
    out = c.handle(Delivered(now=3.0, topic=CONFIG, payload=cfg_payload(ex)))
    assert [type(e) for e in out] == [Compute, Publish]


def test_hierfavg_middle_tier_waits_for_the_config_then_relays_it_and_runs_its_periods():
    ex = extras_of(views(5))
    cid = config_id(ex)
    fog = AggregatorNode(
        "f0",
        tier="fog",
        children=["c0"],
        parent=Address("cloud", "cloud"),
        model=MODEL,
        shape=SHAPE,
        protocol=PROTO,
        deadline_s=10.0,
        period=2,
    )
    subs = fog.handle(Started(now=0.0))
    assert [s.pattern for s in subs] == ["fs/t/fog/f0/up/+", CONFIG, DOWN]
    assert fog.handle(Delivered(now=1.0, topic=DOWN, payload=model_payload(1, cid))) == []
    effects = fog.handle(Delivered(now=2.0, topic=CONFIG, payload=cfg_payload(ex)))
    pubs = [e for e in effects if isinstance(e, Publish)]
    assert [p.topic for p in pubs] == ["fs/t/fog/f0/config", "fs/t/fog/f0/down"]
    assert pubs[0].retain and read_config(wire.decode(pubs[0].payload))[0] == cid
    down = wire.decode(pubs[1].payload).body
    assert (down["phase"], down["sub"], down["config"]) == ("iter", 1, cid)
    assert "refs" not in down


def test_a_period_one_middle_tier_relays_models_at_once_and_the_config_once():
    ex = extras_of(views(6))
    cid = config_id(ex)
    fog = AggregatorNode(
        "f0",
        tier="fog",
        children=["c0"],
        parent=Address("cloud", "cloud"),
        model=MODEL,
        shape=SHAPE,
        protocol=PROTO,
        deadline_s=10.0,
    )
    fog.handle(Started(now=0.0))
    out = fog.handle(Delivered(now=1.0, topic=DOWN, payload=model_payload(1, cid)))
    assert [p.topic for p in out if isinstance(p, Publish)] == ["fs/t/fog/f0/down"]
    out = fog.handle(Delivered(now=2.0, topic=CONFIG, payload=cfg_payload(ex)))
    assert [p.topic for p in out if isinstance(p, Publish)] == ["fs/t/fog/f0/config"]
    again = fog.handle(Delivered(now=3.0, topic=CONFIG, payload=cfg_payload(ex)))
    assert [e.kind for e in again] == ["duplicate"]


def test_three_tiers_send_the_references_once_per_group_and_never_in_a_model():
    rng = np.random.default_rng(0)
    vs = views(7, n=60)
    parts = np.array_split(rng.permutation(60), 4)
    nodes = {}
    for i, idx in enumerate(parts):
        parent = Address("fog", f"f{i % 2}")
        nodes[f"c{i}"] = ClientNode(
            f"c{i}",
            parent=parent,
            views=[X[idx] for X in vs],
            model=MODEL,
            shape=SHAPE,
            protocol=PROTO,
            seed=i,
        )
    for g in range(2):
        nodes[f"f{g}"] = AggregatorNode(
            f"f{g}",
            tier="fog",
            children=[f"c{i}" for i in range(4) if i % 2 == g],
            parent=Address("cloud", "cloud"),
            model=MODEL,
            shape=SHAPE,
            protocol=PROTO,
            deadline_s=10.0,
        )
    nodes["cloud"] = AggregatorNode(
        "cloud",
        tier="cloud",
        children=["f0", "f1"],
        parent=None,
        model=MODEL,
        shape=SHAPE,
        protocol=ProtocolConfig(run="t", rule="sum", kernel_scope="global", tol=0.0, rounds=3),
        deadline_s=10.0,
        clients_below=False,
    )
    net = Loopback(nodes)
    net.start()
    net.run()
    assert set(net.results) == set(nodes)
    configs = [(who, p.topic) for who, p in net.published if p.topic.endswith("/config")]
    assert sorted(configs) == [
        ("cloud", "fs/t/cloud/cloud/config"),
        ("f0", "fs/t/fog/f0/config"),
        ("f1", "fs/t/fog/f1/config"),
    ]
    cid = nodes["cloud"].config_id
    assert cid is not None and all(nodes[f"c{i}"].config_id == cid for i in range(4))
    for _, p in net.published:
        env = wire.decode(p.payload)
        if env.kind == "model":
            assert "refs" not in env.body
            assert env.body.get("config") == (None if env.body["phase"] == "setup" else cid)


def test_shared_decoding_gives_every_caller_its_own_body():
    payload = model_payload(1, "abc", tier="cloud")
    decoder = SharedDecoder()
    decode_shared = decoder.decode
    a = decode_shared(payload)
    a.body["centers"][0][0, 0] = 99.0  # one client scribbles on its copy
    a.body["centers"].append("x")
    a.body["phase"] = "final"
    b = decode_shared(payload)
    assert b.body["phase"] == "iter" and len(b.body["centers"]) == 2
    assert b.body["centers"][0][0, 0] == 0.5 and b.body["centers"][0].flags.writeable
    assert b.round == 1 and b.body["config"] == "abc"
    with pytest.raises(WireError):
        decode_shared(payload[:-3])
    with pytest.raises(WireError):
        decode_shared(payload[:-3])  # a bad payload is not cached
    assert list(decoder._envelopes) == [payload]


def test_decoders_share_nothing_with_each_other():
    payload = model_payload(1, "abc", tier="cloud")
    one, other = SharedDecoder(), SharedDecoder()
    one.decode(payload)
    assert payload in one._envelopes and not other._envelopes
    other.decode(payload)
    assert one._envelopes[payload] is not other._envelopes[payload]
