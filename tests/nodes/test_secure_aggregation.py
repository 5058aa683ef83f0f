"""Secure aggregation through real nodes: sums, dropouts after the masked input, failures.

Real AggregatorNode/ClientNode objects on the in-memory Loopback. The expected sums
are computed independently: each client's plaintext partial from a twin learner fed
the same model body, summed with numpy; the nodes never see them.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats

from fedstrata import wire
from fedstrata.algorithms.multiview import MultiViewModel, State
from fedstrata.nodes.aggregator import AggregatorNode
from fedstrata.nodes.client import ClientNode
from fedstrata.nodes.config import Address, ProtocolConfig
from fedstrata.nodes.events import Publish
from fedstrata.plugins.messages import Shape
from fedstrata.privacy import secagg

from .helpers import Loopback

SHAPE = Shape(3, (2, 3))
INIT = State(
    (
        np.array([[0.5, 0.5], [5.0, 1.0], [1.0, 5.0]]),
        np.array([[0.5, 0.5, 0.5], [4.0, 4.0, 4.0], [-4.0, 4.0, 1.0]]),
    ),
    np.full(2, 0.5),
)


def views(i: int) -> list[np.ndarray]:
    rng = np.random.default_rng(500 + i)
    n = 8 + i
    y = np.arange(n) % 3
    c1 = np.array([[0, 0], [6, 0], [0, 6]], float)
    c2 = np.array([[0, 0, 0], [5, 5, 5], [-5, 5, 0]], float)
    return [c1[y] + rng.normal(0, 0.5, (n, 2)), c2[y] + rng.normal(0, 0.5, (n, 3))]


class Recording(AggregatorNode):
    """An aggregator that keeps every round's closing (the test's window on the sum)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.closings = []

    def _closed(self, closing):
        self.closings.append(closing)
        return super()._closed(closing)


class Crashing:
    """A node that goes silent for good right after it published a given secagg message."""

    def __init__(self, node, after: str = secagg.MASKED):
        self.node, self.after, self.dead = node, after, False

    def handle(self, event):
        if self.dead:
            return []
        effects = self.node.handle(event)
        for e in effects:
            if isinstance(e, Publish):
                env = wire.decode(e.payload)
                if env.kind == "secagg" and env.body.get("type") == self.after:
                    self.dead = True
        return effects


def protocol(mode: str = "secagg", rounds: int = 1, **kw) -> ProtocolConfig:
    return ProtocolConfig(
        run="t", rule="sum", kernel_scope="local", tol=0.0, secure=mode, rounds=rounds, **kw
    )


def build(groups: list[int], proto: ProtocolConfig, crash: set[str] = frozenset()):
    """A root over ``len(groups)`` fogs with that many clients each (one group: flat)."""
    model = MultiViewModel(3)
    nodes, clients, fogs = {}, [], []
    flat = len(groups) == 1
    i = 0
    for g, size in enumerate(groups):
        parent = "cloud" if flat else f"fog-{g}"
        kids = []
        for _ in range(size):
            cid = f"client-{i}"
            node = ClientNode(
                cid,
                parent=Address("cloud" if flat else "fog", parent),
                views=views(i),
                model=model,
                shape=SHAPE,
                protocol=proto,
                seed=i,
            )
            clients.append(node)
            nodes[cid] = Crashing(node) if cid in crash else node
            kids.append(cid)
            i += 1
        if not flat:
            fog = Recording(
                parent,
                tier="fog",
                children=kids,
                parent=Address("cloud", "cloud"),
                model=model,
                shape=SHAPE,
                protocol=proto,
                deadline_s=5.0,
                quorum=0.5,
            )
            fogs.append(fog)
            nodes[parent] = Crashing(fog) if parent in crash else fog
    root = Recording(
        "cloud",
        tier="cloud",
        children=[c.node_id for c in clients] if flat else [f.node_id for f in fogs],
        parent=None,
        model=model,
        shape=SHAPE,
        protocol=proto,
        deadline_s=20.0,
        quorum=0.5,
        init_state=INIT,
    )
    nodes["cloud"] = root
    return root, fogs, clients, nodes


def plaintext_sum(clients: list[ClientNode], model_body: dict) -> dict:
    """Each client's partial by a twin learner on the same body, summed by hand."""
    parts = []
    for c in clients:
        twin = ClientNode(
            c.node_id + "-twin",
            parent=c.parent,
            views=c.views,
            model=c.model,
            shape=c.shape,
            protocol=protocol("none"),
            seed=0,
        )
        parts.append(twin.learner.update(dict(model_body))[0])
    return {
        "num": [sum(p["num"][h] for p in parts) for h in range(2)],
        "den": [sum(p["den"][h] for p in parts) for h in range(2)],
        "costs": sum(p["costs"] for p in parts),
        "mass": sum(p["mass"] for p in parts),
        "counts": sum(p["counts"] for p in parts),
        "n": sum(p["n"] for p in parts),
        "contributors": len(parts),
    }


def first_model(lb: Loopback) -> dict:
    for name, pub in lb.published:
        if name == "cloud":
            env = wire.decode(pub.payload)
            if env.kind == "model":
                return env.body
    raise AssertionError("no model")


def assert_same_sum(total: dict, expected: dict, n_summands: int) -> None:
    tol = n_summands * 2.0**-24  # fixed-point resolution, per summand
    for key in ("num", "den"):
        for a, b in zip(total[key], expected[key], strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=tol)
    for key in ("costs", "mass"):
        np.testing.assert_allclose(total[key], expected[key], rtol=0, atol=tol)
    np.testing.assert_array_equal(total["counts"], expected["counts"])
    assert total["n"] == expected["n"]
    assert total["contributors"] == expected["contributors"]


@pytest.mark.parametrize("mode", ["secagg", "secagg+"])
def test_flat_sum_survives_30_percent_crashing_after_their_masked_input(mode):
    proto = protocol(mode, secure_neighbours=4 if mode == "secagg+" else None)
    crash = {"client-1", "client-4", "client-7"}  # 3 of 10
    root, _, clients, nodes = build([10], proto, crash)
    lb = Loopback(nodes)
    lb.start()
    lb.run()
    [closing] = root.closings
    assert closing.ok
    assert closing.fields["recovered"] == 0  # they sent y_u: no mask key to rebuild
    assert closing.fields["secure_failure"] == ""
    assert_same_sum(closing.total, plaintext_sum(clients, first_model(lb)), 10)
    assert all(nodes[c].dead for c in crash)


def test_flat_sum_recovers_members_that_vanish_before_their_masked_input():
    proto = protocol("secagg")
    root, _, clients, nodes = build([10], proto)
    for cid in ("client-2", "client-5", "client-8"):  # they share keys, then vanish
        nodes[cid] = Crashing(nodes[cid], after=secagg.SHARES)
    lb = Loopback(nodes)
    lb.start()
    lb.run()
    [closing] = root.closings
    assert closing.ok and closing.fields["recovered"] == 3
    survivors = [c for c in clients if c.node_id not in {"client-2", "client-5", "client-8"}]
    assert_same_sum(closing.total, plaintext_sum(survivors, first_model(lb)), 7)


def test_three_tier_every_tier_recovers_the_exact_sum():
    proto = protocol("secagg")
    crash = {"client-0", "client-5", "client-9", "fog-2"}  # clients and a fog, after masking
    root, fogs, clients, nodes = build([4, 4, 4], proto, crash)
    lb = Loopback(nodes)
    lb.start()
    lb.run()
    body = first_model(lb)
    for g, fog in enumerate(fogs):
        [closing] = fog.closings
        assert closing.ok, closing.fields
        assert_same_sum(closing.total, plaintext_sum(clients[4 * g : 4 * g + 4], body), 4)
    [closing] = root.closings
    assert closing.ok
    assert_same_sum(closing.total, plaintext_sum(clients, body), 12)


def test_below_threshold_the_round_fails_cleanly_and_the_next_one_runs():
    proto = ProtocolConfig(
        run="t", rule="sum", kernel_scope="local", tol=0.0, secure="secagg", rounds=2
    )
    crash = {f"client-{i}" for i in range(5)}  # 5 of 9 vanish after masking; t = 5
    root, _, _clients, nodes = build([9], proto, crash)
    lb = Loopback(nodes)
    lb.start()
    lb.run()
    first, second = root.closings
    assert not first.ok and first.total is None
    assert "threshold" in first.fields["secure_failure"]
    # the next round opens a fresh session; 4 members left of 9 (t = 5): fails again,
    # never a wrong sum
    assert not second.ok and second.total is None
    rounds = lb.kinds("round")
    assert [r["ok"] for r in rounds] == [False, False]


def test_a_member_refuses_parameters_other_than_its_own():
    """Members derive the parameters themselves: an aggregator cannot weaken them."""
    strict = protocol("secagg", secure_threshold=1.0)  # the members want t = n
    root, _, _clients, nodes = build([5], strict)
    root.protocol = protocol("secagg")  # the root announces the default t = 3
    lb = Loopback(nodes)
    lb.start()
    lb.run()
    refused = lb.kinds("secure_refused")
    assert len(refused) == 5 and all("threshold" in r["reason"] for r in refused)
    [closing] = root.closings
    assert not closing.ok and "threshold" in closing.fields["secure_failure"]


def test_what_the_aggregator_sees_is_uniform_and_fresh_every_round():
    proto = ProtocolConfig(
        run="t", rule="sum", kernel_scope="local", tol=0.0, secure="secagg", rounds=2
    )
    _, _, _, nodes = build([5], proto)
    lb = Loopback(nodes)
    lb.start()
    lb.run()
    seen = [
        wire.decode(p.payload).body["masked"]
        for name, p in lb.published
        if name == "client-0" and wire.decode(p.payload).body.get("type") == secagg.MASKED
    ]
    assert len(seen) == 2
    a, b = seen
    assert not np.array_equal(a, b)
    # the partial is small numbers; masked, every byte value is equally likely
    raw = np.concatenate([a, b]).view(np.uint8)
    counts = np.bincount(raw, minlength=256)
    assert stats.chisquare(counts).pvalue > 1e-4
    # and the top bit (the sign of a small value) is a fair coin
    top = (np.concatenate([a, b]) >> np.uint64(63)).astype(int)
    assert stats.binomtest(int(top.sum()), top.size).pvalue > 1e-4


def test_a_plaintext_update_never_enters_a_secure_round():
    proto = protocol("secagg")
    root, _, _clients, nodes = build([5], proto)
    lb = Loopback(nodes)
    lb.start()
    plain = wire.Envelope(
        kind="update", run="t", round=1, tier="edge", sender="client-0", body={"mode": "stats"}
    )
    lb._apply(
        "client-0", [Publish(topic="fs/t/cloud/cloud/up/client-0", payload=wire.encode(plain))]
    )
    lb.run()
    assert any("plaintext" in r["reason"] for r in lb.kinds("dropped"))
    [closing] = root.closings
    assert closing.ok and closing.total["contributors"] == 5


class RandomMasked:
    """A member that replaces its masked input by uniformly random words (same length)."""

    def __init__(self, node, seed: int):
        self.node, self.node_id, self.rng = node, node.node_id, np.random.default_rng(seed)

    def handle(self, event):
        out = []
        for e in self.node.handle(event):
            if isinstance(e, Publish):
                env = wire.decode(e.payload)
                if env.kind == "secagg" and env.body.get("type") == secagg.MASKED:
                    y = env.body["masked"]
                    garbage = self.rng.integers(0, 2**64, size=y.shape, dtype=np.uint64)
                    body = {**env.body, "masked": garbage}
                    forged = dataclasses.replace(env, body=body)
                    e = Publish(topic=e.topic, payload=wire.encode(forged))
            out.append(e)
        return out


@pytest.mark.parametrize("seed", range(10))
def test_a_member_with_random_masked_input_fails_the_round_never_a_garbage_sum(seed):
    """Detected at unmasking by the check tag (a miss has probability 2**-64 per round)."""
    root, _, _clients, nodes = build([5], protocol("secagg"))
    nodes["client-2"] = RandomMasked(nodes["client-2"], seed)
    lb = Loopback(nodes)
    lb.start()
    lb.run()
    [closing] = root.closings
    assert not closing.ok and closing.total is None
    assert "check tag" in closing.fields["secure_failure"]
    [rnd] = lb.kinds("round")
    assert rnd["ok"] is False
