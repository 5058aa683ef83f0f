import pytest

from fedstrata.errors import ValidationError
from fedstrata.netlab.layout import plan_layout
from fedstrata.scenarios.loader import parse_scenario

FOG = """
name: lay
seed: 1
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 20}, partition: {kind: iid}}
topology:
  tiers: [{name: fog, count: 2, link: {bandwidth_mbps: 100, loss: 0.01}}]
  clients: {count: 4, link: {bandwidth_mbps: 5, loss: 0.02}}
algorithm: {name: hk-mvfc, n_clusters: 4}
"""


def test_aggregators_host_brokers_and_every_other_node_has_its_tier_link():
    lay = plan_layout(parse_scenario(FOG))
    assert lay.root == "cloud" and lay.brokers == ["cloud", "fog-0", "fog-1"]
    assert [p.node for p in lay.places][:3] == ["cloud", "fog-0", "fog-1"]
    fog = lay.place("fog-1")
    assert (fog.parent, fog.mbps, fog.loss, fog.hosts_broker) == ("cloud", 100, 0.01, True)
    clients = [p for p in lay.places if p.tier == "edge"]
    assert len(clients) == 4 and {p.parent for p in clients} == {"fog-0", "fog-1"}
    assert all((p.mbps, p.loss, p.hosts_broker) == (5, 0.02, False) for p in clients)
    assert lay.place("cloud").parent is None


def test_a_link_with_latency_is_refused():
    text = FOG.replace("{bandwidth_mbps: 5, loss: 0.02}", "{latency: 0.05}")
    with pytest.raises(ValidationError, match="no netem"):
        plan_layout(parse_scenario(text))
