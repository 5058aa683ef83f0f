"""One node built on a device is the node the simulator builds, attribute for attribute."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from fedstrata.device.build import build_node, client_seed
from fedstrata.errors import ValidationError
from fedstrata.nodes.client import ClientNode
from fedstrata.scenarios.build import build_federation, node_timing
from fedstrata.scenarios.loader import load_scenario, parse_scenario

EXAMPLES = sorted((Path(__file__).parents[2] / "scenarios").glob("*.yaml"))

TIERS = """
name: two-tiers
seed: 11
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 30}, views: {all: 0.6, single: 0.4}}
topology:
  tiers:
    - {name: region, count: 2, deadline_s: 7}
    - {name: fog, count: 4}
  clients: {count: 9, attach: {client-0: fog-3}}
algorithm: {name: mvfcm, n_clusters: 3}
protocol: {rule: weighted, local_iters: 3, rounds: 5, deadline_s: 20, quorum: 0.5, qos: 0}
"""

PERIOD = """
name: hierfavg
seed: 2
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 20}}
topology:
  tiers: [{name: fog, count: 2, period: 3, periods: {fog-1: 2}}]
  clients: {count: 4}
protocol: {rule: weighted, local_iters: 2, deadline_s: 9}
"""


def scenarios():
    yield from ((p.stem, load_scenario(p, preflight=False)) for p in EXAMPLES)
    yield "two-tiers", parse_scenario(TIERS)
    yield "hierfavg", parse_scenario(PERIOD)


@pytest.mark.parametrize(
    ("name", "sc"), list(scenarios()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_node_is_the_simulators(name, sc):
    fed = build_federation(sc)
    dims = fed.shape.dims
    run = "deploy-1"
    protocol = dataclasses.replace(fed.protocol, run=run)
    for nid, state in fed.sim.engine.nodes.items():
        sim_node = state.node
        if isinstance(sim_node, ClientNode):
            idx = fed.client_indices[nid]
            held = fed.client_views[nid]
            dev = build_node(
                sc,
                nid,
                run=run,
                dims=dims,
                views=[fed.dataset.views[g][idx] for g in held],
                view_ids=held,
            )
            node = dev.node
            assert dev.role == "client" and dev.tier == "edge" and dev.parent == fed.parents[nid]
            assert (node.parent, node.view_ids, node.shape) == (
                sim_node.parent,
                sim_node.view_ids,
                sim_node.shape,
            )
            # the same random stream: the same local initialisation
            assert node.rng.bit_generator.state == sim_node.rng.bit_generator.state
        else:
            dev = build_node(sc, nid, run=run, dims=dims)
            node = dev.node
            assert dev.role == ("root" if sim_node.parent is None else "aggregator")
            assert dev.tier == fed.tiers[nid] and dev.parent == fed.parents.get(nid)
            for attr in ("tier", "children", "parent", "shape", "deadline_s", "need", "period"):
                assert getattr(node, attr) == getattr(sim_node, attr), (nid, attr)
            assert dev.children == tuple(sorted(sim_node.children))
        assert node.model == sim_node.model and node.protocol == protocol, nid


def test_node_timing_by_hand():
    sc = parse_scenario(TIERS)
    # cloud 20 s; regions their own 7 s; fogs 0.8 * 7 / 1
    fog = (0.8 * 7.0, 1)
    assert node_timing(sc) == {
        "cloud": (20.0, 1),
        "region-0": (7.0, 1),
        "region-1": (7.0, 1),
        **{f"fog-{i}": fog for i in range(4)},
    }
    # fog-0 takes the tier's period 3, fog-1 its own 2 (HierFAVG per fog group)
    assert node_timing(parse_scenario(PERIOD)) == {
        "cloud": (9.0, 1),
        "fog-0": (0.8 * 9 / 3, 3),
        "fog-1": (0.8 * 9 / 2, 2),
    }


def test_client_seed_is_the_simulators_formula():
    assert client_seed(5, 2) == int(np.random.default_rng([5, 2, 2]).integers(2**31))


def test_misuse_is_refused():
    sc = parse_scenario(PERIOD)
    with pytest.raises(ValidationError, match="no node 'fog-9'"):
        build_node(sc, "fog-9", run="r", dims=(2, 2))
    with pytest.raises(ValidationError, match="holds no data"):
        build_node(sc, "cloud", run="r", dims=(2, 2), views=[], view_ids=[])
    with pytest.raises(ValidationError, match="needs its views"):
        build_node(sc, "client-0", run="r", dims=(2, 2))

    with pytest.raises(ValidationError, match="view 1 does not match dims"):
        build_node(sc, "client-0", run="r", dims=(2, 2), views=[np.zeros((3, 3))], view_ids=[1])


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_scenario_digest_is_the_records_scenario_hash(path):
    from fedstrata.device.build import scenario_digest
    from fedstrata.scenarios.run import scenario_hash

    sc = load_scenario(path, preflight=False)
    assert scenario_digest(sc) == scenario_hash(sc)
