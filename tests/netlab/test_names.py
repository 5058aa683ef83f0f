import ipaddress

import pytest

from fedstrata.errors import ValidationError
from fedstrata.netlab.names import (
    link_addresses,
    namespace_name,
    owner_pid,
    prefix_for,
    veth_names,
)


def test_prefix_and_namespace_names_carry_the_pid():
    assert prefix_for(4321) == "fsl-4321-"
    ns = namespace_name("fsl-4321-", "client-12")
    assert ns == "fsl-4321-client-12"
    assert owner_pid(ns) == 4321
    assert owner_pid("fsl-x-cloud") is None and owner_pid("other-1-cloud") is None


def test_namespace_names_refuse_what_ip_netns_cannot_hold():
    for bad in ("", "a/b", "a b", "x" * 65):
        with pytest.raises(ValidationError):
            namespace_name("fsl-1-", bad)


def test_veth_names_fit_ifnamsiz_for_the_largest_pid():
    a, b = veth_names("fsl-4194304-", 99)
    assert (a, b) == ("fsl4194304-99a", "fsl4194304-99b")
    assert max(len(a), len(b)) <= 15
    with pytest.raises(ValidationError):
        veth_names("fsl-4194304-", 1000)  # 16 characters
    with pytest.raises(ValidationError):
        veth_names("lab-", 0)


def test_link_addresses_are_distinct_private_slash30_pairs():
    seen = set()
    for k in (0, 1, 63, 64, 65, 4000, 64 * 256 - 1):
        up, low = link_addresses(k)
        a, b = ipaddress.ip_interface(up), ipaddress.ip_interface(low)
        assert a.network == b.network and a.network.prefixlen == 30
        assert a.ip.is_private and a.ip in ipaddress.ip_network("10.203.0.0/16")
        assert a.network not in seen
        seen.add(a.network)
    assert link_addresses(0) == ("10.203.0.1/30", "10.203.0.2/30")
    assert link_addresses(65) == ("10.203.1.5/30", "10.203.1.6/30")
    with pytest.raises(ValidationError):
        link_addresses(64 * 256)
