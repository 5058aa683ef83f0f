import yaml

from fedstrata.netlab.measure import shaped, sim_wire_bytes
from fedstrata.netlab.simrun import with_model

TEXT = """
name: s
topology:
  tiers: [{name: fog, count: 1, link: {latency: 0.0, bandwidth_mbps: 3}}]
  clients: {count: 2}
"""


def test_shaped_sets_every_link_and_keeps_the_rest():
    doc = yaml.safe_load(shaped(TEXT, 0.05, 10))
    assert doc["topology"]["tiers"][0]["link"] == {
        "latency": 0.0,
        "bandwidth_mbps": 10,
        "loss": 0.05,
    }
    assert doc["topology"]["clients"] == {"count": 2, "link": {"loss": 0.05, "bandwidth_mbps": 10}}
    free = yaml.safe_load(shaped(TEXT, 0.0, None))
    assert "bandwidth_mbps" not in free["topology"]["tiers"][0]["link"]


def test_sim_wire_bytes_prefers_the_ip_estimate():
    base = {"bytes_total": 1000, "ack_bytes": {"up": 20, "down": 30}}
    assert sim_wire_bytes(base) == (1050, "mqtt")
    assert sim_wire_bytes({**base, "network": {"ip_bytes": None}}) == (1050, "mqtt")
    ip = {"network": {"ip_bytes": {"up": 900, "down": 700, "total": 1600}}}
    assert sim_wire_bytes({**base, **ip}) == (1600, "ip")


def test_with_model_adds_the_network_key():
    assert yaml.safe_load(with_model(TEXT, "tcp"))["network"] == {"model": "tcp"}
    assert with_model(TEXT, None) == TEXT
