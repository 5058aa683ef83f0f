"""How the root ends a run: status and reason for convergence, round limit, stall, divergence."""

from dataclasses import replace

import numpy as np

from fedstrata import wire
from fedstrata.algorithms.multiview import MultiViewModel, State
from fedstrata.nodes.aggregator import AggregatorNode, RunStatus
from fedstrata.nodes.config import ProtocolConfig
from fedstrata.nodes.events import Delivered, Finished, Publish, Record, Started, TimerFired
from fedstrata.plugins.messages import Shape

from .helpers import Loopback
from .test_protocol import blobs, build


def with_patience(nodes, patience, rounds=None):
    for node in nodes.values():
        changes = {"patience": patience}
        if rounds is not None:
            changes["rounds"] = rounds
        node.protocol = replace(node.protocol, **changes)
    return nodes


def test_converged_run_says_so_with_the_test_that_held():
    views, y = blobs()
    parts = np.array_split(np.arange(len(y)), 3)
    lb = Loopback(build(parts, views, rounds=100))
    lb.start()
    lb.run()
    res = lb.results["cloud"]
    assert res["status"] == RunStatus.CONVERGED == "converged"
    assert res["converged"] is True
    assert res["reason"] == f"|ΔJ| fell below tol=1e-06 after {res['iterations']} rounds"


def test_round_limit():
    views, y = blobs()
    parts = np.array_split(np.arange(len(y)), 3)
    nodes = build(parts, views, rounds=2)
    for n in nodes.values():
        n.protocol = replace(n.protocol, tol=0.0)
    lb = Loopback(nodes)
    lb.start()
    lb.run()
    res = lb.results["cloud"]
    assert (res["status"], res["iterations"]) == ("round_limit", 2)
    assert res["reason"] == "reached the round limit (2) before convergence"
    assert res["state"] is not None


def test_setup_that_never_reaches_quorum_stalls_after_patience():
    views, y = blobs()
    parts = np.array_split(np.arange(len(y)), 4)
    nodes = with_patience(build(parts, views, quorum=1.0, rounds=50), 3)
    lb = Loopback(nodes, drop=lambda src, dst, topic: dst == "c3")
    lb.start()
    lb.run()
    res = lb.results["cloud"]
    assert res["status"] == "stalled"
    assert res["iterations"] == 3  # patience, not the 50-round limit
    assert res["state"] is None
    assert res["reason"] == (
        "3 consecutive setup rounds below quorum: the last heard from 3 of 4 children "
        "within its 10 s deadline, 4 needed"
    )
    assert [r["iteration"] for r in lb.kinds("setup_failed")] == [1, 2, 3]
    # no model, so no final broadcast either
    assert not any(b"final" in p.payload for _, p in lb.published)


def test_rounds_failing_after_setup_stall_and_keep_the_last_model():
    views, y = blobs()
    parts = np.array_split(np.arange(len(y)), 4)
    nodes = with_patience(build(parts, views, quorum=1.0, rounds=50), 2)
    for n in nodes.values():
        n.protocol = replace(n.protocol, tol=0.0)
    lost = {"on": False}

    def drop(src, dst, topic):
        return lost["on"] and dst == "c3"

    lb = Loopback(nodes, drop=drop)
    lb.start()
    # three good rounds, then c3 goes silent
    while len(lb.kinds("round")) < 3:
        lb.run(max_steps=1, until_quiet=False)
    lost["on"] = True
    lb.run()
    res = lb.results["cloud"]
    assert res["status"] == "stalled"
    rounds = lb.kinds("round")
    assert [r["ok"] for r in rounds[-2:]] == [False, False]
    good = [r for r in rounds if r["ok"]]
    assert res["state"] is good[-1]["state"]  # the last model that was computed
    assert res["iterations"] == len(rounds)


def _root_with_two_children():
    model = MultiViewModel(2)
    shape = Shape(2, (1,))
    init = State((np.array([[0.0], [1.0]]),), np.array([1.0]))
    proto = ProtocolConfig(run="t", rule="sum", rounds=10, kernel_scope="local")
    root = AggregatorNode(
        "cloud",
        tier="cloud",
        children=["a", "b"],
        parent=None,
        model=model,
        shape=shape,
        protocol=proto,
        deadline_s=1.0,
        init_state=init,
    )
    return root, init


def _huge_partial(sender):
    body = {
        "mode": "stats",
        "num": [np.full((2, 1), 1e308)],
        "den": [np.full((2, 1), 1.0)],
        "costs": np.array([1.0]),
        "mass": np.array([1.0, 1.0]),
        "counts": np.array([2], dtype=np.int64),
        "n": 2,
        "contributors": 1,
        "objective": 1.0,
    }
    env = wire.Envelope(kind="update", run="t", round=1, tier="edge", sender=sender, body=body)
    return Delivered(now=0.1, topic=f"fs/t/cloud/cloud/up/{sender}", payload=wire.encode(env))


def test_a_non_finite_model_stops_the_run_at_once_as_diverged():
    root, init = _root_with_two_children()
    effects = root.handle(Started(now=0.0))
    assert any(isinstance(e, Publish) for e in effects)  # round 1 broadcast from the init
    assert root.handle(_huge_partial("a")) == []
    # each partial is finite; their sum overflows to inf
    effects = root.handle(_huge_partial("b"))
    result = next(e.result for e in effects if isinstance(e, Finished))
    assert result["status"] == "diverged"
    assert result["converged"] is False
    assert result["reason"] == (
        "round 1 produced a non-finite model; stopped with the model of round 0"
    )
    assert result["state"] is init  # never the non-finite one
    rec = next(e.fields for e in effects if isinstance(e, Record) and e.kind == "round")
    assert rec["diverged"] is True
    # the final broadcast carries the last finite model
    final = next(e for e in effects if isinstance(e, Publish))
    body = wire.decode(final.payload).body
    assert body["phase"] == "final"
    np.testing.assert_array_equal(body["centers"][0], init.centers[0])


def test_a_partial_with_a_non_finite_objective_is_dropped_not_summed():
    root, _ = _root_with_two_children()
    root.handle(Started(now=0.0))
    bad = _huge_partial("a")
    env = wire.decode(bad.payload)
    env = replace(env, body={**env.body, "objective": float("nan")})
    out = root.handle(Delivered(now=0.1, topic=bad.topic, payload=wire.encode(env)))
    assert [e.kind for e in out] == ["dropped"]
    assert "finite" in out[0].fields["reason"]
    # the round still closes at its deadline, below quorum
    out = root.handle(TimerFired(now=1.0, name="deadline"))
    assert next(e for e in out if isinstance(e, Record)).fields["ok"] is False


def test_a_fog_whose_children_sum_to_infinity_forwards_nothing():
    from fedstrata.nodes.config import Address

    model = MultiViewModel(2)
    fog = AggregatorNode(
        "fog-0",
        tier="fog",
        children=["a", "b"],
        parent=Address("cloud", "cloud"),
        model=model,
        shape=Shape(2, (1,)),
        protocol=ProtocolConfig(run="t", rule="sum", rounds=10, kernel_scope="local"),
        deadline_s=1.0,
    )
    fog.handle(Started(now=0.0))
    init = State((np.array([[0.0], [1.0]]),), np.array([1.0]))
    from fedstrata.plugins.messages import state_body

    model_env = wire.Envelope(
        kind="model",
        run="t",
        round=1,
        tier="cloud",
        sender="cloud",
        body={"phase": "iter", **state_body(init)},
    )
    fog.handle(Delivered(now=0.0, topic="fs/t/cloud/cloud/down", payload=wire.encode(model_env)))
    up = "fs/t/fog/fog-0/up"
    for child in ("a", "b"):
        d = _huge_partial(child)
        out = fog.handle(Delivered(now=0.1, topic=f"{up}/{child}", payload=d.payload))
    assert not any(isinstance(e, Publish) for e in out)
    dropped = [e.fields["reason"] for e in out if isinstance(e, Record) and e.kind == "dropped"]
    assert dropped == ["the children's partials sum to a non-finite value; nothing forwarded"]
