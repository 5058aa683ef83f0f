"""Emulate a scenario's links over a real broker, in userspace (``--emulate-links``).

On a real broker every node is one TCP hop from the broker, on loopback or a LAN;
the scenario's links (latency, bandwidth, loss) and its partitions and degradations
exist only in the simulator. :class:`LinkEmulator` puts them back: each node's
runner asks it, for every message on the node's link to its parent (its PUBLISHes
to the parent's ``up`` topic and the deliveries from the parent's ``down`` and
``config`` topics),
how long the message takes or whether it is lost, with the simulator's own link
model, the one the scenario's ``network.model`` selects:

* ``tcp`` (default): :class:`~fedstrata.sim.tcp.TcpConnection`, exactly as the
  simulator computes it: latency, serialisation with TCP/IP headers, slow start,
  segment loss as retransmission delay, in-order delivery, a partition delaying
  messages to TCP's back-off instants and closing the session past 1.5 keep-alives
  (QoS 0 lost, QoS 1 redelivered);
* ``message-retry``: delay ``(latency + jitter) * latency_factor + extra_latency +
  nbytes * 8 / bandwidth``; a lost QoS 1 message is sent again after
  ``retry_interval`` seconds, up to ``max_retries`` times, then given up; a lost
  QoS 0 message is gone; an outage window loses everything sent inside it.

What is not emulated: messages between an aggregator and its own group (the
simulator co-locates an aggregator with its broker, so those hops have no link
either), crashes, dropouts and availability (the run's summary warns about them),
and the real network's own delay, which comes on top.

This module belongs to neither transport: it maps the scenario's link models
(:mod:`fedstrata.sim.links`) onto the runner's link hook
(:class:`~fedstrata.broker.runner.LinkShaper`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedstrata.mqtt import config_topic, down_topic, up_topic
from fedstrata.scenarios.build import Federation, link_of
from fedstrata.sim.links import Degradation, Link, Outage
from fedstrata.sim.tcp import TcpConnection, TcpModel

__all__ = ["LinkEmulator", "link_emulators"]


@dataclass
class LinkEmulator:
    """One node's link to its parent, as a delay-or-loss oracle for its runner.

    Parameters
    ----------
    link
        The simulator's link model, with the node's fault windows.
    up, down
        The topics that cross the link: the parent's ``up`` (published by the node)
        and ``down`` (delivered to it).
    rng
        The node's own random stream.
    retry_interval, max_retries
        QoS 1 retransmission, as in the simulator.
    config
        The parent's ``config`` topic (the run's configuration, delivered to the node
        once): it crosses the link too.
    tcp
        The TCP model (``network.model: tcp``); ``None``: the message-retry model.

    Attributes
    ----------
    lost
        Transmissions lost on the emulated link (each retry counts).
    gave_up
        Messages dropped for good (QoS 0 lost, or QoS 1 out of retries).

    """

    link: Link
    up: str
    down: str
    rng: np.random.Generator
    retry_interval: float = 5.0
    max_retries: int = 10
    config: str = ""
    tcp: TcpModel | None = None
    lost: int = field(default=0, init=False)
    gave_up: int = field(default=0, init=False)
    _conn: TcpConnection | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.tcp is not None:
            self._conn = TcpConnection(self.tcp)

    def _draw(self) -> float:
        return float(self.rng.random())

    def _fate(self, nbytes: int, qos: int, now: float, up: bool) -> float | None:
        if self._conn is not None:
            latency = self.link.latency.sample(self.rng)  # type: ignore[union-attr]
            if self.link.jitter is not None:
                latency += self.link.jitter.sample(self.rng)
            d = self._conn.delay(self.link, nbytes, now, up, qos, latency, self._draw)
            if d < 0:  # the session closed under a QoS 0 message
                self.gave_up += 1
                return None
            return d
        waited = 0.0
        for _ in range(self.max_retries + 1 if qos else 1):
            t = now + waited
            if not self.link.is_lost(self.rng, t):
                return waited + self.link.transmit_delay(nbytes, self.rng, t)
            self.lost += 1
            waited += self.retry_interval
        self.gave_up += 1
        return None

    def outbound(self, topic: str, nbytes: int, qos: int, now: float) -> float | None:
        """Delay in seconds before a PUBLISH of the node leaves, or ``None``: lost."""
        return self._fate(nbytes, qos, now, True) if topic == self.up else 0.0

    def inbound(self, topic: str, nbytes: int, qos: int, now: float) -> float | None:
        """Delay before a delivered message reaches the node, or ``None``: lost."""
        return self._fate(nbytes, qos, now, False) if topic in (self.down, self.config) else 0.0


def link_emulators(fed: Federation) -> dict[str, LinkEmulator]:
    """A :class:`LinkEmulator` for every node of ``fed`` that has a parent.

    Each uses the link of its tier (clients: ``topology.clients.link``; an
    aggregator: its tier's ``link``), the scenario's partitions (outage windows) and
    degradations of that node, and a random stream derived from the seed and the node.
    """
    sc = fed.scenario
    run = fed.protocol.run
    spec_of = {t.name: t for t in sc.topology.tiers}
    windows: dict[str, list[Outage | Degradation]] = {}
    for p in sc.faults.partitions:
        for node in p.nodes:
            windows.setdefault(node, []).append(Outage(p.start, p.end))
    for d in sc.faults.degradations:
        for node in d.nodes:
            windows.setdefault(node, []).append(
                Degradation(
                    d.start,
                    d.end,
                    d.latency_factor,
                    d.extra_latency_s,
                    d.bandwidth_factor,
                    d.loss,
                )
            )
    transport = fed.sim.engine.transport
    tcp = None if transport is None else transport.model
    out: dict[str, LinkEmulator] = {}
    for k, (node, parent) in enumerate(sorted(fed.parents.items())):
        tier = fed.tiers[node]
        spec = sc.topology.clients.link if tier == "edge" else spec_of[tier].link
        ptier = fed.tiers[parent]
        out[node] = LinkEmulator(
            link_of(spec).with_windows(*windows.get(node, ())),
            up=up_topic(run, ptier, parent, node),
            down=down_topic(run, ptier, parent),
            config=config_topic(run, ptier, parent),
            rng=np.random.default_rng([sc.seed, 7, k]),
            retry_interval=fed.sim.engine.retry_interval,
            max_retries=fed.sim.engine.max_retries,
            tcp=tcp,
        )
    return out
