"""One orchestrator: a Run drives any Transport and one summary builder writes the keys.

A transport contributes only its own counters; the keys every transport shares
(status, rounds, bytes, metrics, per_tier, dropped, ...) come from
:func:`fedstrata.scenarios.summary.summarize`, and warnings raised while the nodes
run are counted into the record whatever the transport.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from fedstrata.scenarios.build import Federation
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.node_builder import NodeBuilder, client_seed
from fedstrata.scenarios.orchestrate import Run
from fedstrata.scenarios.run import SimTransport, simulate
from fedstrata.scenarios.summary import RunResult

SCENARIO = """
name: orchestrated
seed: 3
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 30}, partition: {kind: iid}}
topology:
  tiers: [{name: fog, count: 2, link: {latency: 0.005}}]
  clients: {count: 4, link: {latency: 0.01}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 3, tol: 0.0, deadline_s: 5}
"""

#: The summary keys every transport has (docs/records.md), computed in one place.
COMMON = {
    "status",
    "reason",
    "converged",
    "scenario",
    "seed",
    "transport",
    "rounds",
    "bytes_up",
    "bytes_down",
    "bytes_total",
    "bytes_per_round",
    "payload_bytes",
    "ack_bytes",
    "messages",
    "wall_time_s",
    "metrics",
    "metrics_reason",
    "clients",
    "per_tier",
    "warnings",
    "failed_rounds",
    "crashed",
    "dropped",
}


class CountingTransport(SimTransport):
    """The simulator, plus one counter of its own and a warning while the nodes run."""

    def drive(self, fed: Federation) -> bool:
        warnings.warn("a node's numerical warning", RuntimeWarning, stacklevel=1)
        return super().drive(fed)

    def result(self, fed: Federation, driven: bool, caught: dict[str, int]) -> RunResult:
        out = super().result(fed, driven, caught)
        out.counters["my_counter"] = 7
        return out


def test_a_transport_adds_only_its_counters_to_the_common_summary():
    sc = parse_scenario(SCENARIO)
    _, plain, rows = simulate(sc)
    _, mine, my_rows = Run(sc, CountingTransport()).execute()
    assert set(plain) >= COMMON
    assert set(mine) == set(plain) | {"my_counter"}
    assert mine["my_counter"] == 7
    assert "RuntimeWarning: a node's numerical warning" in mine["warnings"]
    assert "RuntimeWarning: a node's numerical warning" not in plain["warnings"]
    same = {k for k in plain if k not in ("wall_time_s", "warnings")}
    assert {k: mine[k] for k in same} == {k: plain[k] for k in same}
    assert my_rows == rows


def test_the_seed_of_a_run_reaches_the_nodes_and_the_summary():
    sc = parse_scenario(SCENARIO)
    _, summary, _ = Run(sc, SimTransport(), seed=11).execute()
    assert summary["seed"] == 11
    seeded = sc.model_copy(update={"seed": 11})
    fed = SimTransport().build(seeded)  # built, not run: every client's generator is fresh
    nodes = NodeBuilder.of(seeded, fed.model, fed.shape.dims, fed.protocol)
    client: Any = fed.sim.node("client-2")
    again = nodes.client("client-2", client.views, client.view_ids)
    state = client.rng.bit_generator.state
    assert again.rng.bit_generator.state == state
    other = NodeBuilder.of(sc, fed.model, fed.shape.dims, fed.protocol)
    assert other.client("client-2", client.views, client.view_ids).rng.bit_generator.state != state
    assert client_seed(11, 2) == int(np.random.default_rng([11, 2, 2]).integers(2**31))


def test_every_node_of_a_federation_comes_from_the_node_builder():
    sc = parse_scenario(SCENARIO)
    fed, _, _ = simulate(sc)
    nodes = NodeBuilder.of(sc, fed.model, fed.shape.dims, fed.protocol)
    for nid in ("cloud", "fog-0", "fog-1"):
        built: Any = fed.sim.node(nid)
        again = nodes.aggregator(nid)
        assert (again.tier, again.parent, again.deadline_s, again.period) == (
            built.tier,
            built.parent,
            built.deadline_s,
            built.period,
        )
        assert again.clients_below == built.clients_below
        assert sorted(again.children) == sorted(built.children)
    client: Any = fed.sim.node("client-1")
    again = nodes.client("client-1", client.views, client.view_ids)
    assert again.parent == client.parent
    assert again.view_ids == client.view_ids
