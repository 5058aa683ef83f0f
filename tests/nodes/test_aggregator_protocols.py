"""The sans-IO root under each protocol kind, driven by hand-made event sequences.

A real AggregatorNode root (fixed initial model, local kernel references: no setup
round) and real ClientNode children; the test decides which message is delivered to
whom and when, and when the deadline fires. Expected values are worked out by hand.
"""

import math

import numpy as np
import pytest

from fedstrata import wire
from fedstrata.algorithms.multiview import MultiViewModel, State
from fedstrata.errors import NodeProtocolError
from fedstrata.nodes.aggregator import AggregatorNode
from fedstrata.nodes.client import ClientNode
from fedstrata.nodes.config import Address, ProtocolConfig
from fedstrata.nodes.events import (
    CancelTimer,
    Compute,
    Delivered,
    Publish,
    Record,
    SetTimer,
    Started,
    Subscribe,
    TimerFired,
)
from fedstrata.plugins.messages import Shape
from fedstrata.protocols.asynchronous import AsyncSettings, FedAsync
from fedstrata.protocols.buffered import BufferedSettings

SHAPE = Shape(3, (2, 3))
#: Samples held by client c<i>.
SIZES = (10, 12, 14, 16, 10, 10, 10, 10, 10, 10)


def client_views(i):
    rng = np.random.default_rng(100 + i)
    y = np.arange(SIZES[i]) % 3
    c1 = np.array([[0, 0], [6, 0], [0, 6]], float)
    c2 = np.array([[0, 0, 0], [5, 5, 5], [-5, 5, 0]], float)
    return [c1[y] + rng.normal(0, 0.5, (y.size, 2)), c2[y] + rng.normal(0, 0.5, (y.size, 3))]


INIT = State(
    (
        np.array([[0.5, 0.5], [5.0, 1.0], [1.0, 5.0]]),
        np.array([[0.5, 0.5, 0.5], [4.0, 4.0, 4.0], [-4.0, 4.0, 1.0]]),
    ),
    np.full(2, 0.5),
)


class Federation:
    """A root and its clients; every delivery and timer is the test's choice."""

    def __init__(self, kind, n_clients=3, *, quorum=1.0, deadline_s=10.0, **proto):
        self.proto = ProtocolConfig(
            run="t", kind=kind, rule="sum", kernel_scope="local", tol=0.0, **proto
        )
        model = MultiViewModel(3)
        self.names = [f"c{i}" for i in range(n_clients)]
        self.root = AggregatorNode(
            "cloud",
            tier="cloud",
            children=self.names,
            parent=None,
            model=model,
            shape=SHAPE,
            protocol=self.proto,
            deadline_s=deadline_s,
            quorum=quorum,
            init_state=INIT,
        )
        self.clients = {
            c: ClientNode(
                c,
                parent=Address("cloud", "cloud"),
                views=client_views(i),
                model=model,
                shape=SHAPE,
                protocol=self.proto,
                seed=i,
            )
            for i, c in enumerate(self.names)
        }
        self.models = {}  # version -> Publish of the root's model

    def start(self):
        effects = self.root.handle(Started(now=0.0))
        for c in self.clients.values():
            subs = c.handle(Started(now=0.0))  # the parent's config and down topics
            assert [e.pattern for e in subs] == ["fs/t/cloud/cloud/config", "fs/t/cloud/cloud/down"]
        self._keep_models(effects)
        return effects

    def _keep_models(self, effects):
        for e in effects:
            if isinstance(e, Publish):
                self.models[wire.decode(e.payload).round] = e

    def model_body(self, version):
        return wire.decode(self.models[version].payload).body

    def to_client(self, name, version, now):
        """Deliver model ``version`` to a client; its update (a Publish) or None."""
        pub = self.models[version]
        effects = self.clients[name].handle(
            Delivered(now=now, topic=pub.topic, payload=pub.payload)
        )
        ups = [e for e in effects if isinstance(e, Publish)]
        assert len(ups) <= 1
        if ups:
            env = wire.decode(ups[0].payload)
            assert (env.kind, env.sender, env.round) == ("update", name, version)
            return ups[0]
        assert effects == []
        return None

    def to_root(self, update, now):
        effects = self.root.handle(Delivered(now=now, topic=update.topic, payload=update.payload))
        self._keep_models(effects)
        return effects

    def deadline(self, now):
        effects = self.root.handle(TimerFired(now=now, name="deadline"))
        self._keep_models(effects)
        return effects


def records(effects, kind):
    return [e.fields for e in effects if isinstance(e, Record) and e.kind == kind]


def published_versions(effects):
    return [wire.decode(e.payload).round for e in effects if isinstance(e, Publish)]


def one(effects, kind):
    got = records(effects, kind)
    assert len(got) == 1, effects
    return got[0]


# ------------------------------------------------------------------ async


def test_async_merges_every_reply_accepts_stale_ones_and_drops_too_stale_ones():
    fed = Federation("async", settings=AsyncSettings(mixing=0.5, max_staleness=1))
    effects = fed.start()
    assert [type(e) for e in effects] == [Subscribe, Publish, SetTimer]
    assert "ask" not in fed.model_body(1)  # the first version asks everyone
    ups = {c: fed.to_client(c, 1, now=0.0) for c in fed.names}
    assert all(u is not None for u in ups.values())

    # c0's fresh reply: merged at once, version 2 asks c0 only
    effects = fed.to_root(ups["c0"], now=1.0)
    assert isinstance(effects[0], CancelTimer)
    agg = one(effects, "aggregate")
    assert (agg["round"], agg["participants"], agg["expected"], agg["ok"]) == (1, 1, 3, True)
    assert agg["staleness_max"] == 0
    assert agg["mix_weight_min"] == 0.5  # α · s(0)
    assert agg["shares"] == 1
    rnd = one(effects, "round")
    assert (rnd["ok"], rnd["n"], rnd["participants"]) == (True, 10, 1)
    assert published_versions(effects) == [2]
    assert isinstance(effects[-1], SetTimer)
    assert fed.model_body(2)["ask"] == ["c0"]

    # c1's reply computed on version 1 while the root is at 2: staleness 1, accepted
    effects = fed.to_root(ups["c1"], now=2.0)
    agg = one(effects, "aggregate")
    assert (agg["round"], agg["participants"], agg["ok"]) == (2, 1, True)
    assert agg["staleness_max"] == 1
    assert agg["staleness_mean"] == 1.0
    # c1's first share is taken whole; the weight recorded is α · 2^-0.5
    assert agg["mix_weight_min"] == pytest.approx(0.5 / math.sqrt(2), rel=1e-12)
    assert agg["shares"] == 2
    rnd = one(effects, "round")
    assert (rnd["n"], rnd["participants"]) == (10 + 12, 2)  # c0's share still counts
    assert published_versions(effects) == [3]
    assert fed.model_body(3)["ask"] == ["c1"]

    # version 2 reaches the clients: only c0 is asked, the others publish nothing
    assert fed.to_client("c1", 2, now=2.5) is None
    assert fed.to_client("c2", 2, now=2.5) is None
    up_c0_v2 = fed.to_client("c0", 2, now=2.5)
    assert up_c0_v2 is not None

    # c2's reply to version 1 arrives at version 3: staleness 2 > max_staleness 1
    effects = fed.to_root(ups["c2"], now=3.0)
    assert effects == [Record(kind="late", fields={"node": "cloud", "sender": "c2", "round": 1})]

    # c0's reply to version 2 at version 3: staleness 1, mixed into c0's share
    effects = fed.to_root(up_c0_v2, now=4.0)
    agg = one(effects, "aggregate")
    assert (agg["round"], agg["staleness_max"], agg["shares"]) == (3, 1, 2)
    assert agg["mix_weight_min"] == pytest.approx(0.5 / math.sqrt(2), rel=1e-12)
    assert one(effects, "round")["n"] == 10 + 12  # counts are the newest partial's
    assert fed.model_body(4)["ask"] == ["c0"]

    # the same reply again, now two versions behind (root at 4): late, not merged again
    effects = fed.to_root(up_c0_v2, now=4.5)
    assert effects == [Record(kind="late", fields={"node": "cloud", "sender": "c0", "round": 2})]


def test_async_asks_overdue_children_again_with_the_next_version():
    fed = Federation("async", deadline_s=10.0)
    fed.start()
    ups = {c: fed.to_client(c, 1, now=0.0) for c in fed.names}
    fed.to_root(ups["c0"], now=1.0)
    assert fed.model_body(2)["ask"] == ["c0"]
    up = fed.to_client("c0", 2, now=1.0)
    # t = 10.5: c1, c2 asked at 0 are overdue (retry_s = deadline_s = 10): everyone
    fed.to_root(up, now=10.5)
    assert "ask" not in fed.model_body(3)
    up = fed.to_client("c2", 3, now=11.0)
    fed.to_root(up, now=12.0)
    assert fed.model_body(4)["ask"] == ["c2"]  # c0, c1 asked at 10.5
    effects = fed.to_root(up, now=12.5)  # the same reply again (staleness 1): a duplicate
    assert effects == [
        Record(kind="duplicate", fields={"node": "cloud", "sender": "c2", "round": 3})
    ]


def test_async_deadline_with_no_reply_fails_the_round_and_asks_everyone():
    fed = Federation("async", deadline_s=10.0)
    fed.start()
    up = fed.to_client("c1", 1, now=0.0)
    fed.to_root(up, now=1.0)
    assert fed.model_body(2)["ask"] == ["c1"]
    effects = fed.deadline(now=11.0)  # nobody answered version 2
    agg = one(effects, "aggregate")
    assert (agg["round"], agg["participants"], agg["expected"], agg["ok"]) == (2, 0, 1, False)
    assert one(effects, "round")["ok"] is False
    assert published_versions(effects) == [3]
    assert "ask" not in fed.model_body(3)
    # a reply to version 2 (staleness 1) is still merged
    up = fed.to_client("c1", 2, now=11.5)
    agg = one(fed.to_root(up, now=12.0), "aggregate")
    assert (agg["round"], agg["ok"], agg["staleness_max"]) == (3, True, 1)


@pytest.mark.parametrize("kind", ["async", "buffered"])
def test_an_asynchronous_kind_with_the_median_rule_is_refused_by_the_root(kind):
    # the kind mixes each child's share of a sum; the median is not additive
    proto = ProtocolConfig(run="t", kind=kind, rule="median", kernel_scope="local")
    with pytest.raises(NodeProtocolError, match=f"kind {kind!r} mixes additive partials"):
        AggregatorNode(
            "cloud",
            tier="cloud",
            children=["c0", "c1"],
            parent=None,
            model=MultiViewModel(3),
            shape=SHAPE,
            protocol=proto,
            deadline_s=10.0,
        )
    ProtocolConfig(kind="sync", rule="median")  # fine synchronously


def test_root_refuses_an_async_strategy_over_non_additive_partials():
    proto = ProtocolConfig(run="t", kind="sync", rule="median", kernel_scope="local")
    with pytest.raises(NodeProtocolError, match="not additive"):
        AggregatorNode(
            "cloud",
            tier="cloud",
            children=["c0", "c1"],
            parent=None,
            model=MultiViewModel(3),
            shape=SHAPE,
            protocol=proto,
            deadline_s=10.0,
            strategy=FedAsync(["c0", "c1"]),
        )


# ------------------------------------------------------------------ buffered


def test_buffered_broadcasts_a_new_version_only_after_two_distinct_replies():
    fed = Federation("buffered", settings=BufferedSettings(buffer_size=2))
    fed.start()
    ups = {c: fed.to_client(c, 1, now=0.0) for c in fed.names}
    assert fed.to_root(ups["c2"], now=1.0) == []  # one in the buffer: nothing yet
    effects = fed.to_root(ups["c2"], now=1.5)  # the same reply again: a duplicate
    assert [e.kind for e in effects if isinstance(e, Record)] == ["duplicate"]
    assert not published_versions(effects)
    effects = fed.to_root(ups["c0"], now=2.0)
    assert isinstance(effects[0], CancelTimer)
    agg = one(effects, "aggregate")
    assert (agg["round"], agg["participants"], agg["ok"], agg["shares"]) == (1, 2, True, 2)
    assert one(effects, "round")["n"] == 14 + 10
    assert published_versions(effects) == [2]
    assert fed.model_body(2)["ask"] == ["c0", "c2"]
    # c1's late answer to version 1 and c0's to version 2 make the next buffer
    up = fed.to_client("c0", 2, now=2.5)
    assert fed.to_client("c1", 2, now=2.5) is None
    assert fed.to_root(ups["c1"], now=3.0) == []
    effects = fed.to_root(up, now=3.5)
    agg = one(effects, "aggregate")
    assert (agg["round"], agg["participants"], agg["staleness_max"], agg["shares"]) == (
        2,
        2,
        1,
        3,
    )
    assert one(effects, "round")["n"] == 10 + 12 + 14
    assert fed.model_body(3)["ask"] == ["c0", "c1"]


def test_buffered_two_versions_of_one_child_count_once():
    fed = Federation("buffered", settings=BufferedSettings(buffer_size=2), deadline_s=10.0)
    fed.start()
    up0 = fed.to_client("c0", 1, now=0.0)
    up2_v1 = fed.to_client("c2", 1, now=0.0)
    assert fed.to_root(up0, now=1.0) == []
    effects = fed.deadline(now=10.0)  # a partial buffer is merged at the deadline
    agg = one(effects, "aggregate")
    assert (agg["round"], agg["participants"], agg["ok"]) == (1, 1, True)
    assert "ask" not in fed.model_body(2)  # c0 merged, c1 and c2 overdue
    up2_v2 = fed.to_client("c2", 2, now=10.0)
    assert fed.to_root(up2_v1, now=11.0) == []  # staleness 1
    assert fed.to_root(up2_v2, now=12.0) == []  # c2 again: still one distinct child
    up1 = fed.to_client("c1", 2, now=10.0)
    effects = fed.to_root(up1, now=13.0)
    agg = one(effects, "aggregate")
    assert agg["round"] == 2 and agg["ok"] is True
    assert agg["shares"] == 3
    assert one(effects, "round")["n"] == 10 + 12 + 14
    assert fed.model_body(3)["ask"] == ["c1", "c2"]


# ------------------------------------------------------------------ sync


def test_sync_drop_closes_at_the_quorum_and_a_third_reply_is_late():
    fed = Federation("sync", 4, quorum=0.5, stragglers="drop")
    fed.start()
    assert "ask" not in fed.model_body(1)
    ups = {c: fed.to_client(c, 1, now=0.0) for c in fed.names}
    assert fed.to_root(ups["c3"], now=1.0) == []
    effects = fed.to_root(ups["c1"], now=2.0)  # ceil(0.5 · 4) = 2
    assert isinstance(effects[0], CancelTimer)
    agg = one(effects, "aggregate")
    assert (agg["round"], agg["participants"], agg["expected"], agg["ok"]) == (1, 2, 4, True)
    assert "staleness_max" not in agg and "stale_used" not in agg
    assert one(effects, "round")["n"] == 16 + 12
    assert published_versions(effects) == [2]
    assert "ask" not in fed.model_body(2)
    effects = fed.to_root(ups["c0"], now=3.0)
    assert effects == [Record(kind="late", fields={"node": "cloud", "sender": "c0", "round": 1})]


def test_sync_wait_closes_at_the_deadline_with_the_quorum():
    fed = Federation("sync", 4, quorum=0.5, stragglers="wait")
    fed.start()
    ups = {c: fed.to_client(c, 1, now=0.0) for c in fed.names}
    assert fed.to_root(ups["c0"], now=1.0) == []
    assert fed.to_root(ups["c2"], now=2.0) == []
    assert fed.to_root(ups["c3"], now=3.0) == []  # 3 of 4: wait wants all
    effects = fed.deadline(now=10.0)
    agg = one(effects, "aggregate")
    assert (agg["round"], agg["participants"], agg["expected"], agg["ok"]) == (1, 3, 4, True)
    assert one(effects, "round")["n"] == 10 + 14 + 16
    assert published_versions(effects) == [2]
    late = fed.to_root(ups["c1"], now=11.0)
    assert late == [Record(kind="late", fields={"node": "cloud", "sender": "c1", "round": 1})]


def test_sync_wait_deadline_below_quorum_fails_the_round():
    fed = Federation("sync", 4, quorum=0.75, stragglers="wait")
    fed.start()
    ups = {c: fed.to_client(c, 1, now=0.0) for c in fed.names}
    fed.to_root(ups["c0"], now=1.0)
    fed.to_root(ups["c1"], now=1.0)
    effects = fed.deadline(now=10.0)
    agg = one(effects, "aggregate")
    assert (agg["participants"], agg["ok"]) == (2, False)  # need ceil(0.75 · 4) = 3
    assert one(effects, "round")["ok"] is False
    assert published_versions(effects) == [2]


def test_sync_use_last_counts_the_missing_client_by_its_last_partial():
    fed = Federation("sync", 3, quorum=0.5, stragglers="use_last")
    fed.start()
    ups = {c: fed.to_client(c, 1, now=0.0) for c in fed.names}
    fed.to_root(ups["c0"], now=1.0)
    effects = fed.to_root(ups["c1"], now=1.0)  # ceil(1.5) = 2
    agg = one(effects, "aggregate")
    assert (agg["participants"], agg["stale_used"]) == (2, 0)
    assert one(effects, "round")["n"] == 10 + 12
    ups = {c: fed.to_client(c, 2, now=2.0) for c in fed.names}
    fed.to_root(ups["c2"], now=3.0)
    effects = fed.to_root(ups["c1"], now=3.0)
    agg = one(effects, "aggregate")
    assert (agg["participants"], agg["stale_used"]) == (2, 1)
    assert one(effects, "round")["n"] == 10 + 12 + 14  # c0 by its round-1 partial


def test_sync_sampled_round_asks_a_subset_and_the_others_stay_silent():
    fed = Federation("sync", 4, sample=0.5)
    fed.start()
    asked = fed.model_body(1)["ask"]
    assert len(asked) == 2 and set(asked) <= set(fed.names) and asked == sorted(asked)
    ups = {c: fed.to_client(c, 1, now=0.0) for c in fed.names}
    assert {c for c, u in ups.items() if u is not None} == set(asked)
    assert fed.to_root(ups[asked[0]], now=1.0) == []
    agg = one(fed.to_root(ups[asked[1]], now=2.0), "aggregate")
    assert (agg["participants"], agg["expected"], agg["ok"]) == (2, 2, True)


def test_sync_over_selected_round_closes_at_the_wanted_k():
    # 10 clients, sample 0.5: k = 5 wanted, over_select 0.4 asks ceil(5 · 1.4) = 7
    fed = Federation("sync", 10, sample=0.5, over_select=0.4)
    fed.start()
    asked = fed.model_body(1)["ask"]
    assert len(asked) == 7 and set(asked) <= set(fed.names) and asked == sorted(asked)
    ups = {c: fed.to_client(c, 1, now=0.0) for c in fed.names}
    assert {c for c, u in ups.items() if u is not None} == set(asked)
    for c in asked[:4]:
        assert fed.to_root(ups[c], now=1.0) == []
    effects = fed.to_root(ups[asked[4]], now=2.0)
    agg = one(effects, "aggregate")
    assert (agg["participants"], agg["expected"], agg["ok"]) == (5, 7, True)
    assert one(effects, "round")["n"] == sum(SIZES[int(c[1:])] for c in asked[:5])
    assert records(fed.to_root(ups[asked[5]], now=3.0), "late")


def test_stall_reason_states_the_need_of_the_wanted_k_not_of_the_over_selected():
    # quorum 1, k = 5 wanted of 7 asked: 4 replies fail the round, 5 were needed
    fed = Federation("sync", 10, sample=0.5, over_select=0.4, patience=1)
    fed.start()
    asked = fed.model_body(1)["ask"]
    ups = {c: fed.to_client(c, 1, now=0.0) for c in asked}
    for c in asked[:4]:
        fed.to_root(ups[c], now=1.0)
    effects = fed.deadline(now=10.0)
    agg = one(effects, "aggregate")
    assert (agg["participants"], agg["expected"], agg["ok"]) == (4, 7, False)
    assert one(effects, "finished")["reason"] == (
        "1 consecutive rounds below quorum: the last heard from 4 of 7 children "
        "within its 10 s deadline, 5 needed"
    )


@pytest.mark.parametrize("kind", ["async", "buffered"])
def test_a_setup_reply_after_setup_closed_is_late(kind):
    proto = ProtocolConfig(run="t", kind=kind, rule="sum", kernel_scope="global", tol=0.0)
    model = MultiViewModel(3)
    names = ["c0", "c1", "c2"]
    root = AggregatorNode(
        "cloud",
        tier="cloud",
        children=names,
        parent=None,
        model=model,
        shape=SHAPE,
        protocol=proto,
        deadline_s=10.0,
        quorum=0.5,
    )
    setup = next(e for e in root.handle(Started(now=0.0)) if isinstance(e, Publish))
    assert wire.decode(setup.payload).body["phase"] == "setup"
    ups = {}
    for i, c in enumerate(names):
        node = ClientNode(
            c,
            parent=Address("cloud", "cloud"),
            views=client_views(i),
            model=model,
            shape=SHAPE,
            protocol=proto,
        )
        node.handle(Started(now=0.0))
        effects = node.handle(Delivered(now=0.0, topic=setup.topic, payload=setup.payload))
        ups[c] = next(e for e in effects if isinstance(e, Publish))
    for c in ("c0", "c1"):
        root.handle(Delivered(now=1.0, topic=ups[c].topic, payload=ups[c].payload))
    effects = root.handle(TimerFired(now=10.0, name="deadline"))  # 2 of 3: quorum 0.5 met
    assert records(effects, "init") and published_versions(effects) == [1, 1]
    pubs = [e.topic for e in effects if isinstance(e, Publish)]
    assert pubs == ["fs/t/cloud/cloud/config", "fs/t/cloud/cloud/down"]  # references once
    effects = root.handle(Delivered(now=11.0, topic=ups["c2"].topic, payload=ups["c2"].payload))
    assert effects == [Record(kind="late", fields={"node": "cloud", "sender": "c2", "round": 0})]


# ------------------------------------------------------------------ clients


def test_client_not_in_the_ask_list_publishes_nothing():
    fed = Federation("async")
    fed.start()
    body = {**fed.model_body(1), "ask": ["c1"]}
    env = wire.Envelope(kind="model", run="t", round=7, tier="cloud", sender="cloud", body=body)
    payload = wire.encode(env)
    topic = fed.models[1].topic
    assert fed.clients["c0"].handle(Delivered(now=1.0, topic=topic, payload=payload)) == []
    effects = fed.clients["c1"].handle(Delivered(now=1.0, topic=topic, payload=payload))
    assert [type(e) for e in effects] == [Compute, Publish]
    assert wire.decode(effects[1].payload).round == 7
    empty = wire.encode(
        wire.Envelope(
            kind="model",
            run="t",
            round=8,
            tier="cloud",
            sender="cloud",
            body={**body, "ask": []},
        )
    )
    for c in fed.names:
        assert fed.clients[c].handle(Delivered(now=2.0, topic=topic, payload=empty)) == []
