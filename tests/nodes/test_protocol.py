"""Node state machines driven by the in-memory Loopback: protocol behaviour without SimPy."""

import numpy as np
import pytest

from fedstrata import wire
from fedstrata.algorithms import federated_fit
from fedstrata.algorithms.multiview import MultiViewModel, State
from fedstrata.errors import NodeProtocolError
from fedstrata.nodes.aggregator import AggregatorNode
from fedstrata.nodes.client import ClientNode
from fedstrata.nodes.config import Address, ProtocolConfig
from fedstrata.nodes.events import Delivered, Publish, Started, TimerFired
from fedstrata.nodes.runconfig import config_id, config_payload
from fedstrata.plugins.messages import Shape

from .helpers import Loopback


def blobs(n_per=60, seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(3), n_per)
    c1 = np.array([[0, 0], [6, 0], [0, 6]], float)
    c2 = np.array([[0, 0, 0], [5, 5, 5], [-5, 5, 0]], float)
    return [c1[y] + rng.normal(0, 0.5, (y.size, 2)), c2[y] + rng.normal(0, 0.5, (y.size, 3))], y


def build(
    parts,
    views,
    *,
    rule="sum",
    fogs=None,
    period=1,
    local_iters=1,
    quorum=1.0,
    init=None,
    rounds=30,
    scope=None,
):
    model = MultiViewModel(3)
    shape = Shape(3, (2, 3))
    proto = ProtocolConfig(
        run="t",
        rule=rule,
        rounds=rounds,
        local_iters=local_iters,
        kernel_scope=scope or ("global" if rule == "sum" else "local"),
    )
    nodes = {}
    clients = [f"c{i}" for i in range(len(parts))]
    if fogs is None:
        groups = {"cloud": clients}
    else:
        groups = {f"f{g}": [c for i, c in enumerate(clients) if i % fogs == g] for g in range(fogs)}
    for g, members in groups.items():
        parent = Address("cloud", "cloud") if g == "cloud" else Address("fog", g)
        for c in members:
            idx = parts[int(c[1:])]
            nodes[c] = ClientNode(
                c,
                parent=parent,
                views=[X[idx] for X in views],
                model=model,
                shape=shape,
                protocol=proto,
                seed=int(c[1:]),
            )
    if fogs is None:
        nodes["cloud"] = AggregatorNode(
            "cloud",
            tier="cloud",
            children=clients,
            parent=None,
            model=model,
            shape=shape,
            protocol=proto,
            deadline_s=10.0,
            quorum=quorum,
            init_state=init,
        )
    else:
        nodes["cloud"] = AggregatorNode(
            "cloud",
            tier="cloud",
            children=list(groups),
            parent=None,
            model=model,
            shape=shape,
            protocol=proto,
            deadline_s=10.0,
            quorum=quorum,
            init_state=init,
        )
        for g, members in groups.items():
            nodes[g] = AggregatorNode(
                g,
                tier="fog",
                children=members,
                parent=Address("cloud", "cloud"),
                model=model,
                shape=shape,
                protocol=proto,
                deadline_s=5.0,
                quorum=quorum,
                period=period,
            )
    return nodes


def labels_of(lb, parts, n):
    out = np.full(n, -1)
    for i, p in enumerate(parts):
        out[p] = lb.results[f"c{i}"]["labels"]
    return out


@pytest.mark.parametrize("fogs", [None, 2])
def test_sum_protocol_equals_in_process_federated_fit(fogs):
    views, y = blobs()
    parts = np.array_split(np.random.default_rng(1).permutation(len(y)), 6)
    init = State((views[0][[0, 60, 120]], views[1][[0, 60, 120]]), np.full(2, 0.5))
    lb = Loopback(build(parts, views, fogs=fogs, init=init))
    lb.start()
    lb.run()
    ref = federated_fit(
        [[X[p] for X in views] for p in parts], n_clusters=3, rule="sum", rounds=30, init=init
    )
    res = lb.results["cloud"]
    assert res["iterations"] == ref.rounds
    for a, b in zip(res["state"].centers, ref.state.centers, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(
        labels_of(lb, parts, len(y)), np.concatenate(ref.labels)[np.argsort(np.concatenate(parts))]
    )


@pytest.mark.parametrize("rule", ["weighted", "mean", "median"])
def test_paper_rules_cluster_well(rule):
    from sklearn.metrics import adjusted_rand_score

    views, y = blobs()
    parts = [np.arange(0, len(y), 2), np.arange(1, len(y), 2)]
    lb = Loopback(build(parts, views, rule=rule, local_iters=5))
    lb.start()
    lb.run()
    assert lb.results["cloud"]["converged"]
    assert adjusted_rand_score(y, labels_of(lb, parts, len(y))) > 0.95


def test_hierarchical_period_two_runs_fog_rounds():
    views, y = blobs()
    parts = np.array_split(np.arange(len(y)), 4)
    lb = Loopback(build(parts, views, rule="weighted", fogs=2, period=2, local_iters=2))
    lb.start()
    lb.run()
    fog_aggs = [r for r in lb.kinds("aggregate") if r["tier"] == "fog" and r["phase"] == "iter"]
    cloud_rounds = lb.kinds("round")
    assert len(fog_aggs) == 2 * 2 * len(cloud_rounds)  # 2 fogs x period 2 per cloud round
    assert {r["sub"] for r in fog_aggs} == {1, 2}


def test_lost_client_does_not_hang_and_quorum_counts():
    views, y = blobs()
    parts = np.array_split(np.arange(len(y)), 4)
    # c3 never hears anything: every round closes at the deadline with 3 of 4
    lb = Loopback(build(parts, views, quorum=0.5), drop=lambda src, dst, topic: dst == "c3")
    lb.start()
    lb.run()
    assert "cloud" in lb.results
    aggs = lb.kinds("aggregate")
    assert all(a["participants"] == 3 and a["ok"] for a in aggs)
    assert lb.now > 0  # the deadline timers really fired


def test_below_quorum_rounds_fail_but_terminate():
    views, y = blobs()
    parts = np.array_split(np.arange(len(y)), 4)
    lb = Loopback(
        build(parts, views, quorum=1.0, rounds=5), drop=lambda src, dst, topic: dst == "c3"
    )
    lb.start()
    lb.run()
    assert lb.results["cloud"] is None or lb.results["cloud"]["iterations"] <= 5
    assert not any(a["ok"] for a in lb.kinds("aggregate"))


def test_duplicates_and_garbage_are_counted_not_fatal():
    views, y = blobs()
    parts = np.array_split(np.arange(len(y)), 2)
    nodes = build(parts, views)
    lb = Loopback(nodes)
    lb.start()
    lb.run(max_steps=3, until_quiet=False)  # setup model delivered, first replies in flight
    cloud = nodes["cloud"]
    eff = cloud.handle(Delivered(now=0.0, topic="fs/t/cloud/cloud/up/c0", payload=b"\x00garbage"))
    assert eff[0].kind == "dropped"
    # replay every update published so far: the second copy is a duplicate
    ups = [p for name, p in lb.published if p.topic.startswith("fs/t/cloud/cloud/up/")]
    for p in ups:
        cloud.handle(Delivered(now=0.0, topic=p.topic, payload=p.payload))
    out = cloud.handle(Delivered(now=0.0, topic=ups[0].topic, payload=ups[0].payload))
    assert any(e.kind in ("duplicate", "late") for e in out)


def test_update_from_stranger_is_foreign():
    views, y = blobs()
    parts = np.array_split(np.arange(len(y)), 2)
    nodes = build(parts, views)
    cloud = nodes["cloud"]
    cloud.handle(Started(now=0.0))
    env = wire.Envelope(
        kind="update", run="t", round=0, tier="edge", sender="mallory", body={"mode": "setup"}
    )
    # the seal refuses a sender that is not a child, signed or not: on a child's up
    # topic the sender does not match the topic's; on its own, the topic is no route
    for topic, reason in (
        ("fs/t/cloud/cloud/up/c0", "wrong_sender"),
        ("fs/t/cloud/cloud/up/mallory", "wrong_topic"),
    ):
        out = cloud.handle(Delivered(now=1.0, topic=topic, payload=wire.encode(env)))
        assert out[0].kind == "rejected"
        assert out[0].fields == {"node": "cloud", "reason": reason, "sender": "mallory"}


def test_events_before_start_are_refused():
    views, y = blobs()
    nodes = build([np.arange(len(y))], views)
    with pytest.raises(NodeProtocolError, match="before Started"):
        nodes["cloud"].handle(TimerFired(now=0.0, name="deadline"))


def test_client_publishes_bytes_and_compute():
    views, y = blobs()
    nodes = build([np.arange(len(y))], views)
    c = nodes["c0"]
    c.handle(Started(now=0.0))
    env = wire.Envelope(
        kind="model", run="t", round=0, tier="cloud", sender="cloud", body={"phase": "setup"}
    )
    out = c.handle(Delivered(now=0.0, topic="fs/t/cloud/cloud/down", payload=wire.encode(env)))
    kinds = [type(e).__name__ for e in out]
    assert kinds == ["Compute", "Publish"]
    pub = out[1]
    assert isinstance(pub, Publish) and pub.topic == "fs/t/cloud/cloud/up/c0"
    assert wire.decode(pub.payload).body["n"] == len(y)


def test_client_refuses_malformed_refs_after_good_ones():
    views, y = blobs()
    nodes = build([np.arange(len(y))], views)
    c = nodes["c0"]
    c.handle(Started(now=0.0))
    state = {"centers": [X[:3] for X in views], "view_weights": np.full(2, 0.5)}
    refs = {
        "refs": [
            {"min": X.min(0), "max": X.max(0), "sum": X.sum(0), "count": len(X)} for X in views
        ]
    }

    def config(extras):
        payload = config_payload(
            run="t", round_=1, tier="cloud", sender="cloud", cid=config_id(extras), extras=extras
        )
        return c.handle(Delivered(now=0.0, topic="fs/t/cloud/cloud/config", payload=payload))

    def model(rnd, cid):
        env = wire.Envelope(
            kind="model",
            run="t",
            round=rnd,
            tier="cloud",
            sender="cloud",
            body={"phase": "iter", **state, "config": cid},
        )
        return c.handle(Delivered(now=0.0, topic="fs/t/cloud/cloud/down", payload=wire.encode(env)))

    good = config_id(refs)
    assert config(refs) == []
    assert isinstance(model(1, good)[-1], Publish)
    assert isinstance(model(2, good)[-1], Publish)  # unchanged reference: cached preparation
    bad = {"refs": [{"min": views[0].min(0), "max": "x", "sum": views[0].sum(0), "count": 1}, None]}
    assert config(bad)[0].kind == "dropped"
    assert c.config_id == good  # the good references stay
    assert isinstance(model(3, good)[-1], Publish)
    assert model(4, config_id(bad)) == []  # waits for a configuration that never came
