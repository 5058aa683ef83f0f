"""summary.json counts what was dropped, by reason and tier (the ``dropped`` block).

An outsider (a node outside the federation, on the root's broker) publishes garbage
and a well-formed envelope with a malformed body on the root's ``up`` topic; the
root refuses both and the summary counts them in the root's tier.
"""

from __future__ import annotations

from typing import Any

import pytest

from fedstrata.mqtt import up_topic
from fedstrata.nodes.events import Event, Finished, Publish, Started
from fedstrata.scenarios import run as run_module
from fedstrata.scenarios.build import build_federation
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import dropped_report, simulate
from fedstrata.sim.kernel import Connection
from fedstrata.wire import Envelope, encode

SCENARIO = """
name: outsider
seed: 4
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 40}, partition: {kind: iid}}
topology: {clients: {count: 3, link: {latency: 0.01}}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 5, tol: 0.0, deadline_s: 5}
"""

GARBAGE = b"\x00\xffnot msgpack at all\xc1"


def malformed(run: str) -> bytes:
    """A genuine envelope from a real client id whose body fields have the wrong types."""
    body = {"phase": ["iter"], "sub": [0], "partial": "not a partial"}
    return encode(
        Envelope(kind="update", run=run, round=1, tier="edge", sender="client-0", body=body)
    )


class Outsider:
    """Publishes ``payloads`` on ``topic`` once started, then finishes."""

    def __init__(self, topic: str, payloads: list[bytes]) -> None:
        self.node_id = "outsider"
        self.topic = topic
        self.payloads = payloads

    def handle(self, event: Event) -> list[Any]:
        """Publish everything on Started."""
        if isinstance(event, Started):
            return [
                *(Publish(topic=self.topic, payload=p, qos=1) for p in self.payloads),
                Finished(result=None),
            ]
        return []


def test_a_simulated_run_counts_garbage_and_malformed_bodies_at_the_root(monkeypatch):
    sc = parse_scenario(SCENARIO)
    # client-0's own up topic: the malformed body claims to be client-0's (in the
    # simulator nothing binds topics to publishers; a real broker's ACL would)
    topic = up_topic(sc.name, "cloud", "cloud", "client-0")

    def build(*args: Any, **kwargs: Any) -> Any:
        fed = build_federation(*args, **kwargs)
        fed.sim.add_node(
            Outsider(topic, [GARBAGE, malformed(sc.name)]),
            connections=[Connection("cloud", None)],
            tier="outsider",
            start_at=0.05,  # mid-run: the root is subscribed
        )
        return fed

    monkeypatch.setattr(run_module, "build_federation", build)
    _, summary, _ = simulate(sc)
    assert summary["status"] == "round_limit", summary["reason"]
    assert summary["crashed"] == []  # nothing escaped the root's handle
    cloud = summary["dropped"]["per_tier"]["cloud"]
    assert cloud.get("garbage") == 1, summary["dropped"]
    assert cloud.get("malformed") == 1, summary["dropped"]
    assert summary["dropped"]["refused_by_nodes"] >= 2
    assert summary["dropped"]["by_reason"]["garbage"] == 1


def test_the_network_drops_of_the_simulator_are_counted_by_tier():
    # Under the tcp model loss only delays a message: message-retry loses whole messages.
    text = SCENARIO.replace("latency: 0.01}", "latency: 0.01, loss: 0.2}")
    text += "network: {model: message-retry}\n"
    _, summary, _ = simulate(parse_scenario(text))
    block = summary["dropped"]
    assert block["per_tier"]["edge"]["loss"] > 0
    assert block["lost_in_network"] == sum(summary["dropped_by_reason"].values())
    assert block["total"] == block["lost_in_network"] + block["refused_by_nodes"]


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"node": "a", "reason": "bad body: x", "category": "malformed"}, "malformed"),
        ({"node": "a", "reason": "forged", "sender": "b"}, "forged"),
        ({"node": "a", "round": 3}, "duplicate"),
        ({"node": "a", "reason": "x" * 200}, "x" * 77 + "..."),
    ],
)
def test_a_record_counts_under_its_category_else_its_reason(fields, key):
    kind = "duplicate" if "round" in fields else "dropped"
    if fields.get("sender"):
        kind = "rejected"
    records = [{"t": 0.0, "node": "a", "kind": kind, "fields": fields}]
    block = dropped_report(records, {"a": "fog"})
    assert block["per_tier"] == {"fog": {key: 1}}
    assert block["by_reason"] == {key: 1} and block["total"] == 1
