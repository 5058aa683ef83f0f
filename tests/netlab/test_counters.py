import json

import pytest

from fedstrata.errors import TransportError
from fedstrata.netlab.counters import device_counters, link_bytes, qdisc_drops

# the shape of `nft -j list counters table inet fsl` (nftables 1.0.6)
NFT = {
    "nftables": [
        {"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
        {
            "counter": {
                "family": "inet",
                "name": "rx_fsl9_0a",
                "table": "fsl",
                "handle": 1,
                "packets": 59,
                "bytes": 9863,
            }
        },
        {
            "counter": {
                "family": "inet",
                "name": "tx_fsl9_0a",
                "table": "fsl",
                "handle": 2,
                "packets": 62,
                "bytes": 8002,
            }
        },
        {
            "counter": {
                "family": "inet",
                "name": "drop_fsl9_0a",
                "table": "fsl",
                "handle": 3,
                "packets": 1,
                "bytes": 52,
            }
        },
    ]
}


def test_nft_counters_by_device():
    got = device_counters(json.dumps(NFT), ["fsl9-0a"])["fsl9-0a"]
    assert (got.rx_packets, got.rx_bytes, got.tx_packets, got.tx_bytes) == (59, 9863, 62, 8002)
    assert (got.dropped_packets, got.dropped_bytes) == (1, 52)


def test_missing_counter_or_garbage_is_an_error():
    with pytest.raises(TransportError, match="rx_fsl9_1a"):
        device_counters(json.dumps(NFT), ["fsl9-1a"])
    with pytest.raises(TransportError):
        device_counters("Error: No such file or directory", ["fsl9-0a"])


def test_ip_link_stats_and_qdisc_drops():
    links = [
        {
            "ifname": "lo",
            "stats64": {"rx": {"bytes": 0, "packets": 0}, "tx": {"bytes": 0, "packets": 0}},
        },
        {
            "ifname": "fsl9-0a",
            "stats64": {"rx": {"bytes": 1200, "packets": 10}, "tx": {"bytes": 900, "packets": 8}},
        },
    ]
    assert link_bytes(json.dumps(links))["fsl9-0a"] == {
        "rx_bytes": 1200,
        "tx_bytes": 900,
        "rx_packets": 10,
        "tx_packets": 8,
    }
    qdiscs = [
        {"kind": "noqueue", "handle": "0:", "dev": "lo", "root": True, "drops": 0},
        {"kind": "tbf", "handle": "8002:", "dev": "fsl9-0a", "root": True, "drops": 3},
    ]
    assert qdisc_drops(json.dumps(qdiscs)) == {"lo": 0, "fsl9-0a": 3}
