"""The ``network`` section and the shared access links of ``topology``: how links become time.

Kept apart from :mod:`fedstrata.scenarios.schema` so that the link model's settings
and their cross-checks live in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, model_validator

from fedstrata.settings import Strict

if TYPE_CHECKING:
    from fedstrata.scenarios.schema import Scenario

__all__ = ["NetworkSpec", "check_access"]


class NetworkSpec(Strict):
    """How the simulator turns links into delivery times (see docs/network.md).

    ``model: tcp`` (default): MQTT over TCP. A lost packet is retransmitted by TCP (a
    tail loss probe or a retransmission timeout of at least ``rto_min_s``, doubling at
    each further loss) and delays its message; large messages also lose throughput
    under loss; a message is lost only when its connection closes (a partition longer
    than 1.5 keep-alives, a crash), and a QoS 1 one is then redelivered on reconnect.
    Each connection sends its messages in order, one after another. ``mss_bytes``
    (``536 .. 65495``), ``initial_window`` (segments, ``1 .. 1000``) and ``rto_min_s``
    (``0.001 .. 10``) are the TCP stack's; the defaults are Linux's.

    A site's access link is shared: with ``topology.tiers[i].access_mbps`` (or
    ``topology.cloud_access_mbps``), every connection of an aggregator's children
    crosses the aggregator's access link too, and simultaneous transfers share it
    max-min fairly in each direction (a fog's uplink congests when its clients
    upload at once). Without it, every link is its own pipe.

    ``model: message-retry``: the model of fedstrata 0.1, for studies that compare with
    it: a lost message is lost whole and resent by its MQTT sender every 5 s, up to 10
    times. The TCP keys do not apply to it and are refused there.
    """

    model: Literal["tcp", "message-retry"] = "tcp"
    mss_bytes: Annotated[int, Field(ge=536, le=65495)] | None = None
    initial_window: Annotated[int, Field(ge=1, le=1000)] | None = None
    rto_min_s: Annotated[float, Field(ge=0.001, le=10.0)] | None = None

    @model_validator(mode="after")
    def _tcp_keys_only_for_tcp(self) -> NetworkSpec:
        if self.model != "tcp":
            for key in ("mss_bytes", "initial_window", "rto_min_s"):
                if getattr(self, key) is not None:
                    raise ValueError(f"{key} is a setting of model: tcp, not of {self.model}")
        return self


def check_access(sc: Scenario, fail: Callable[[str, str], None]) -> None:
    """Refuse a shared access link (``access_mbps``) outside ``network.model: tcp``."""
    if sc.network.model == "tcp":
        return
    why = "a shared access link is part of network.model: tcp"
    if sc.topology.cloud_access_mbps is not None:
        fail("topology.cloud_access_mbps", why)
    for i, tier in enumerate(sc.topology.tiers):
        if tier.access_mbps is not None:
            fail(f"topology.tiers.{i}.access_mbps", why)
