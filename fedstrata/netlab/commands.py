"""The ``ip``, ``tc`` and ``nft`` commands of a lab, built as argument lists (nothing runs here).

Every command names the namespace it acts in (``ip -n NS``, ``tc -n NS``, ``ip netns
exec NS nft``): a lab never configures the root namespace. A veth pair is created
with both ends directly inside their namespaces, so not even for a moment does an
interface of the lab sit in the root namespace.

Loss is dropped on *input* (``iifname DEV``), i.e. on the receiving end of each
direction: a packet dropped on output would be refused to the sender's own TCP
(``EPERM``), which keeps the segment queued instead of losing it on the wire.
Bandwidth is a token bucket on the *egress* of each end.
"""

from __future__ import annotations

import math

from fedstrata.errors import ValidationError

__all__ = [
    "LOSS_SCALE",
    "NFT_TABLE",
    "addr_add",
    "exec_in",
    "gso_off",
    "link_set",
    "link_stats",
    "loss_rules",
    "netns_add",
    "netns_delete",
    "netns_list",
    "netns_pids",
    "nft_counters",
    "nft_device",
    "nft_table",
    "qdisc_stats",
    "tbf",
    "tbf_sizes",
    "veth_add",
]

NFT_TABLE = "fsl"
"""The nftables table (family ``inet``) a lab creates in each of its namespaces."""

LOSS_SCALE = 1_000_000
"""``numgen random mod LOSS_SCALE < K`` drops with probability ``K / LOSS_SCALE``."""


def netns_add(ns: str) -> list[str]:
    """Create namespace ``ns``."""
    return ["ip", "netns", "add", ns]


def netns_delete(ns: str) -> list[str]:
    """Delete namespace ``ns`` (its veth ends and nft tables go with it)."""
    return ["ip", "netns", "delete", ns]


def netns_list() -> list[str]:
    """List the namespaces as JSON."""
    return ["ip", "-j", "netns", "list"]


def netns_pids(ns: str) -> list[str]:
    """The pids of the processes running in ``ns``, one a line."""
    return ["ip", "netns", "pids", ns]


def exec_in(ns: str, argv: list[str]) -> list[str]:
    """Run ``argv`` inside namespace ``ns``."""
    return ["ip", "netns", "exec", ns, *argv]


def veth_add(a: str, ns_a: str, b: str, ns_b: str) -> list[str]:
    """A veth pair ``a`` (in ``ns_a``) -- ``b`` (in ``ns_b``), created inside them."""
    return ["ip", "link", "add", a, "netns", ns_a, "type", "veth", "peer", "name", b, "netns", ns_b]


def addr_add(ns: str, dev: str, cidr: str) -> list[str]:
    """Give ``dev`` in ``ns`` the address ``cidr``."""
    return ["ip", "-n", ns, "addr", "add", cidr, "dev", dev]


def link_set(ns: str, dev: str, up: bool) -> list[str]:
    """Bring ``dev`` in ``ns`` up or down."""
    return ["ip", "-n", ns, "link", "set", "dev", dev, "up" if up else "down"]


def gso_off(ns: str, dev: str) -> list[str]:
    """One segment per packet on ``dev``, as on a real wire.

    A veth otherwise carries TCP super-packets of up to 64 KiB: one random drop would
    lose dozens of segments at once, and a token bucket would see bursts no NIC sends.
    """
    return ["ip", "-n", ns, "link", "set", "dev", dev, "gso_max_segs", "1", "gso_max_size", "1500"]


def tbf_sizes(mbps: float) -> tuple[int, int]:
    """The bucket (``burst``) and queue (``limit``) in bytes of a ``mbps`` token bucket.

    The bucket holds 1 ms of traffic (at least two full frames), so the rate holds at
    millisecond scale; the queue holds 1 s (at least 256 KiB), so that TCP rather than
    tail drop at the queue sets the pace, as on a link whose buffer is not the bottleneck.
    """
    if not (math.isfinite(mbps) and mbps > 0):
        raise ValidationError(f"bandwidth must be a positive number of Mbit/s, got {mbps!r}")
    rate = mbps * 1e6 / 8
    return max(3028, math.ceil(rate / 1000)), max(256 * 1024, math.ceil(rate))


def tbf(ns: str, dev: str, mbps: float | None) -> list[str]:
    """Shape the egress of ``dev`` to ``mbps`` (None: remove the shaping)."""
    if mbps is None:
        return ["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "pfifo_fast"]
    burst, limit = tbf_sizes(mbps)
    rate = f"{round(mbps * 1000)}kbit"
    return [
        *("tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf"),
        *("rate", rate, "burst", str(burst), "limit", str(limit)),
    ]


def qdisc_stats(ns: str) -> list[str]:
    """The qdiscs of ``ns`` with their statistics, as JSON."""
    return ["tc", "-n", ns, "-s", "-j", "qdisc", "show"]


def link_stats(ns: str) -> list[str]:
    """The interfaces of ``ns`` with their byte and packet counters, as JSON."""
    return ["ip", "-n", ns, "-s", "-j", "link", "show"]


def _tag(dev: str) -> str:
    """``dev`` as an nft object name (letters, digits, ``_``)."""
    return dev.replace("-", "_").replace(".", "_")


def nft_table() -> str:
    """The lab's table in one namespace: an input and an output chain, nothing else yet."""
    return (
        f"table inet {NFT_TABLE} {{\n"
        "  chain input { type filter hook input priority 0; policy accept; }\n"
        "  chain output { type filter hook output priority 0; policy accept; }\n"
        "}\n"
    )


def nft_device(dev: str) -> str:
    """Counters and the (empty) loss chain of ``dev``, to add after :func:`nft_table`.

    ``rx_DEV`` counts every TCP/IP packet arriving on ``dev`` (dropped ones included:
    they crossed the wire), ``tx_DEV`` every one leaving, ``drop_DEV`` the packets (of
    any protocol) the loss chain ``loss_DEV`` (see :func:`loss_rules`) dropped. Only
    TCP is counted: the lab's traffic is MQTT over TCP, and the IPv6 neighbour and
    router messages a fresh interface sends are not part of it.
    """
    t = _tag(dev)
    return (
        f"add counter inet {NFT_TABLE} rx_{t}\n"
        f"add counter inet {NFT_TABLE} tx_{t}\n"
        f"add counter inet {NFT_TABLE} drop_{t}\n"
        f"add chain inet {NFT_TABLE} loss_{t}\n"
        f'add rule inet {NFT_TABLE} input iifname "{dev}" meta l4proto tcp counter name rx_{t}\n'
        f'add rule inet {NFT_TABLE} input iifname "{dev}" jump loss_{t}\n'
        f'add rule inet {NFT_TABLE} output oifname "{dev}" meta l4proto tcp counter name tx_{t}\n'
    )


def loss_rules(dev: str, loss: float) -> str:
    """Replace the loss chain of ``dev``: drop arriving packets with probability ``loss``.

    ``loss == 1`` drops everything (a partition); ``0`` leaves the chain empty.
    """
    if not (isinstance(loss, int | float) and 0.0 <= loss <= 1.0):
        raise ValidationError(f"loss must be a probability in [0, 1], got {loss!r}")
    t = _tag(dev)
    text = f"flush chain inet {NFT_TABLE} loss_{t}\n"
    k = round(loss * LOSS_SCALE)
    if k >= LOSS_SCALE:
        text += f"add rule inet {NFT_TABLE} loss_{t} counter name drop_{t} drop\n"
    elif k > 0:
        text += (
            f"add rule inet {NFT_TABLE} loss_{t} numgen random mod {LOSS_SCALE} < {k} "
            f"counter name drop_{t} drop\n"
        )
    return text


def nft_counters(ns: str) -> list[str]:
    """The lab's named counters in ``ns``, as JSON."""
    return exec_in(ns, ["nft", "-j", "list", "counters", "table", "inet", NFT_TABLE])


def counter_name(kind: str, dev: str) -> str:
    """The name of counter ``kind`` (``rx``, ``tx``, ``drop``) of ``dev``."""
    return f"{kind}_{_tag(dev)}"
