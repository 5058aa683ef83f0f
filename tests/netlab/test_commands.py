import pytest

from fedstrata.errors import ValidationError
from fedstrata.netlab import commands as cmd


def test_every_ip_and_tc_command_names_its_namespace():
    ns, dev = "fsl-1-client-0", "fsl1-0b"
    namespaced = [
        cmd.addr_add(ns, dev, "10.203.0.2/30"),
        cmd.link_set(ns, dev, True),
        cmd.gso_off(ns, dev),
        cmd.tbf(ns, dev, 10),
        cmd.tbf(ns, dev, None),
        cmd.qdisc_stats(ns),
        cmd.link_stats(ns),
    ]
    for argv in namespaced:
        assert argv[0] in ("ip", "tc") and argv[1:3] == ["-n", ns], argv
    assert cmd.nft_counters(ns)[:5] == ["ip", "netns", "exec", ns, "nft"]
    # both veth ends are created inside their namespaces, none in the root namespace
    assert cmd.veth_add("a", "ns-a", "b", "ns-b") == [
        *("ip", "link", "add", "a", "netns", "ns-a", "type", "veth"),
        *("peer", "name", "b", "netns", "ns-b"),
    ]


def test_tbf_rate_bucket_and_queue():
    argv = cmd.tbf("n", "d", 10)
    assert argv[argv.index("rate") + 1] == "10000kbit"
    # 10 Mbit/s = 1.25 MB/s: a 1 ms bucket is 1250 B, below two frames (3028 B); 1 s of queue
    assert argv[argv.index("burst") + 1] == "3028"
    assert argv[argv.index("limit") + 1] == "1250000"
    assert cmd.tbf_sizes(100) == (12500, 12500000)
    assert cmd.tbf_sizes(1) == (3028, 262144)
    assert cmd.tbf("n", "d", 0.5)[cmd.tbf("n", "d", 0.5).index("rate") + 1] == "500kbit"
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValidationError):
            cmd.tbf_sizes(bad)


def test_loss_rules_drop_on_input_with_the_right_threshold():
    assert cmd.loss_rules("fsl1-0a", 0.0) == "flush chain inet fsl loss_fsl1_0a\n"
    two = cmd.loss_rules("fsl1-0a", 0.02)
    assert "numgen random mod 1000000 < 20000 counter name drop_fsl1_0a drop" in two
    everything = cmd.loss_rules("fsl1-0a", 1.0)
    assert "numgen" not in everything and "counter name drop_fsl1_0a drop" in everything
    for bad in (-0.1, 1.5, "0.1"):
        with pytest.raises(ValidationError):
            cmd.loss_rules("d", bad)


def test_device_rules_count_tcp_both_ways_and_jump_to_the_loss_chain():
    text = cmd.nft_device("fsl7-3b")
    assert 'input iifname "fsl7-3b" meta l4proto tcp counter name rx_fsl7_3b' in text
    assert 'output oifname "fsl7-3b" meta l4proto tcp counter name tx_fsl7_3b' in text
    assert 'input iifname "fsl7-3b" jump loss_fsl7_3b' in text
    # the counter rule comes first: a dropped packet crossed the wire and is counted
    assert text.index("counter name rx_") < text.index("jump loss_")
    assert "hook input" in cmd.nft_table() and "hook output" in cmd.nft_table()
