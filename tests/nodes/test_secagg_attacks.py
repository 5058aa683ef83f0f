"""A malicious aggregator against honest members (real ClientNode objects).

The aggregator is scripted here: it runs :class:`~fedstrata.privacy.secagg.SecAggServer`
itself and routes its messages to the real members, which must refuse the attack.
"""

from __future__ import annotations

import numpy as np

from fedstrata import wire
from fedstrata.errors import PrivacyError
from fedstrata.mqtt import down_topic, member_topic
from fedstrata.nodes.events import Delivered, Publish, Started
from fedstrata.nodes.secure import SecureCollection

from .test_secure_aggregation import build, protocol

RUN = "t"


def deliver(node, topic: str, kind: str, round_: int, body: dict) -> list:
    env = wire.Envelope(kind=kind, run=RUN, round=round_, tier="cloud", sender="cloud", body=body)
    return node.handle(Delivered(topic=topic, payload=wire.encode(env), now=0.0))


def replies(effects: list) -> list[dict]:
    out = []
    for e in effects:
        if isinstance(e, Publish):
            env = wire.decode(e.payload)
            if env.kind == "secagg":
                out.append(dict(env.body))
    return out


def session(clients, roster, round_, sub, body, layout, proto):
    """Run one session over ``roster`` as an aggregator would; its sum, or the error."""
    coll = SecureCollection(roster, proto, layout, run=RUN, node="cloud", round_=round_, sub=sub)
    setup = coll.setup()
    by_id = {c.node_id: c for c in clients}
    refused = []
    for who in roster:
        node = by_id[who]
        effects = deliver(
            node,
            down_topic(RUN, "cloud", "cloud"),
            "model",
            round_,
            {**body, "secagg": setup, "sub": sub},
        )
        refused += [e for e in effects if getattr(e, "kind", "") == "secure_refused"]
        for reply in replies(effects):
            reply.pop("sub")
            coll.receive(who, reply, 0)
    try:
        while True:
            out = coll.advance()
            if not isinstance(out, dict) or "num" in out:
                return out, refused
            for who, message in out.items():
                topic = member_topic(RUN, "cloud", "cloud", who)
                for reply in replies(
                    deliver(by_id[who], topic, "secagg", round_, {**message, "sub": sub})
                ):
                    reply.pop("sub")
                    coll.receive(who, reply, 0)
    except PrivacyError as exc:
        return exc, refused


def setup_clients(n=6):
    proto = protocol("secagg")
    root, _, clients, _ = build([n], proto)
    for c in clients:
        c.handle(Started(now=0.0))
    body = root._model_body("iter", root.global_state)
    return proto, clients, body, clients[0]._layout


def test_reopened_round_with_a_smaller_roster_is_refused_by_every_member():
    proto, clients, body, layout = setup_clients()
    roster = [c.node_id for c in clients]
    first, refused = session(clients, roster, 1, 0, body, layout, proto)
    assert isinstance(first, dict) and not refused
    smaller = roster[1:]  # client-0 left out: the difference would be its partial
    second, refused = session(clients, smaller, 1, 1, body, layout, proto)
    assert isinstance(second, PrivacyError)  # nobody answered: no sum, no difference
    assert sorted(r.fields["node"] for r in refused) == smaller
    assert all("second secure session for round 1" in r.fields["reason"] for r in refused)


def test_new_round_and_rising_sub_rounds_still_join():
    proto, clients, body, layout = setup_clients()
    roster = [c.node_id for c in clients]
    for round_, sub in ((1, 1), (1, 2), (2, 0)):  # a period-2 tier's local rounds, next round
        total, refused = session(clients, roster, round_, sub, body, layout, proto)
        assert isinstance(total, dict) and not refused
    back, refused = session(clients, roster, 2, 1, body, layout, proto)  # after sub 0: refused
    assert isinstance(back, PrivacyError) and len(refused) == len(roster)


def test_redelivered_setup_is_a_duplicate_not_a_second_session():
    proto, clients, body, layout = setup_clients()
    coll = SecureCollection(
        [c.node_id for c in clients], proto, layout, run=RUN, node="cloud", round_=1, sub=0
    )
    model = {**body, "secagg": coll.setup()}
    node = clients[0]
    first = deliver(node, down_topic(RUN, "cloud", "cloud"), "model", 1, model)
    again = deliver(node, down_topic(RUN, "cloud", "cloud"), "model", 1, model)
    assert len(replies(first)) == 1 and replies(again) == []
    assert [e.kind for e in again] == ["duplicate"]
    assert node._member is not None  # the session it joined goes on
    assert np.isfinite(node.n_samples)
