"""A scenario's faults as a per-node schedule, drawn from the scenario and its seed.

The simulator applies ``faults`` through :class:`~fedstrata.sim.faults.Faults`
(wired by :func:`~fedstrata.scenarios.build.build_federation`). A run over a real
broker (``fedstrata run --transport mqtt``, ``fedstrata node``) takes the same
schedule from :func:`fault_plan` and injects it
(:mod:`fedstrata.scenarios.fault_inject`):

* **crashes**: each ``(node, at, restart_after)`` as given, ``at`` in seconds since
  the run started (the simulator's virtual seconds);
* **dropout** (clients): one uniform draw per ``/down`` delivery from the node's
  stream ``dropout/{node}`` (:func:`~fedstrata.sim.faults.fault_stream` under the
  run's seed, :func:`~fedstrata.sim.state.stream`), in delivery order: the draws the
  simulator's :meth:`~fedstrata.sim.faults.Faults.round_dropout` makes;
* **availability** (clients, ``kind: markov``): the simulator's own
  :class:`~fedstrata.sim.faults.MarkovAvailability` on the stream
  ``availability/{node}``, with the same parameters and ``start_online``. The chain
  is sampled lazily, at the times it is asked about (see that class): two runs that
  ask at times in the same grid cells (``step_s``) get the same on/off answers.
  :meth:`NodeFaults.offline_windows` samples it at every grid step instead: the
  chain's full path, which a lazy sampler follows as long as it is asked at least
  once in every step.

Partitions and degradations are link faults: they are not part of this plan (the
userspace link emulator applies them, ``--emulate-links``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from fedstrata.scenarios.schema import Scenario
from fedstrata.scenarios.wiring import wire_topology
from fedstrata.sim.faults import MarkovAvailability, fault_stream
from fedstrata.sim.links import Sampler
from fedstrata.sim.state import Availability, stream

__all__ = [
    "DROPOUT_SUFFIX",
    "LINK_FAULTS",
    "Crash",
    "FaultPlan",
    "Markov",
    "NodeFaults",
    "fault_plan",
]

#: The topic ending of the round broadcasts a dropout suppresses (the simulator's default).
DROPOUT_SUFFIX = "/down"
#: Fault kinds of a scenario that act on links, not nodes: not in a :class:`FaultPlan`.
LINK_FAULTS = ("partitions", "degradations")


@dataclass(frozen=True)
class Crash:
    """A crash at ``at`` seconds, restarted ``restart_after`` later (``None``: never)."""

    at: float
    restart_after: float | None = None


@dataclass(frozen=True)
class Markov:
    """A two-state availability chain (:class:`~fedstrata.sim.faults.MarkovAvailability`)."""

    p_on_to_off: float
    p_off_to_on: float
    step_s: float
    start_online: bool = True


@dataclass(frozen=True)
class NodeFaults:
    """The faults of one node under one seed.

    Each call of :meth:`dropout_draws` or :meth:`availability` starts its stream
    afresh: make one per node and run, and keep it across the node's restarts (the
    simulator keeps a node's streams across its incarnations).
    """

    node_id: str
    seed: int
    crashes: tuple[Crash, ...] = ()
    dropout: float = 0.0
    markov: Markov | None = None

    @property
    def empty(self) -> bool:
        """Whether nothing is injected into this node."""
        return not self.crashes and not self.dropout and self.markov is None

    def dropout_draws(self) -> Callable[[], float] | None:
        """The node's dropout uniforms in the simulator's order (``None`` without dropout).

        A ``/down`` delivery is suppressed when the next value is below :attr:`dropout`.
        """
        if not self.dropout:
            return None
        return Sampler(stream(self.seed, fault_stream("dropout", self.node_id)).random)

    def dropout_sequence(self, n: int) -> list[bool]:
        """Whether each of the node's first ``n`` ``/down`` deliveries is dropped."""
        draw = self.dropout_draws()
        return [False] * n if draw is None else [draw() < self.dropout for _ in range(n)]

    def availability(self) -> Availability | None:
        """A fresh availability model of the node, as the simulator makes it, or ``None``."""
        m = self.markov
        if m is None:
            return None
        rng = stream(self.seed, fault_stream("availability", self.node_id))
        return MarkovAvailability(
            m.p_on_to_off, m.p_off_to_on, m.step_s, rng, start_online=m.start_online
        )

    def offline_windows(self, horizon_s: float) -> list[tuple[float, float]]:
        """The ``[start, end)`` offline windows of the chain's full path up to ``horizon_s``.

        The chain is asked at each of its changes (``next_online`` and the grid
        steps while online), so no step is skipped; ``end`` is ``inf`` for a node
        offline for good.
        """
        avail = self.availability()
        if avail is None or self.markov is None:
            return []
        step = self.markov.step_s
        out: list[tuple[float, float]] = []
        k = 0
        while k * step < horizon_s:
            t = k * step
            if avail.is_online(t):
                k += 1
                continue
            back = avail.next_online(t)
            out.append((t, math.inf if back is None else back))
            if back is None:
                break
            k = max(k + 1, round(back / step))
        return out


@dataclass(frozen=True)
class FaultPlan:
    """Every node's faults of a scenario under one seed (see :func:`fault_plan`)."""

    seed: int
    nodes: dict[str, NodeFaults] = field(default_factory=dict)
    #: Fault kinds of the scenario this plan leaves out (the link faults).
    link_faults: tuple[str, ...] = ()
    #: ``network.model``: what becomes of a QoS 1 message sent to an offline node.
    #: ``tcp``: its persistent session keeps it until the node is back;
    #: ``message-retry``: it is lost and resent every 5 s, 10 times at most.
    network_model: str = "tcp"

    def of(self, node_id: str) -> NodeFaults:
        """The faults of ``node_id`` (an empty :class:`NodeFaults` for a node without)."""
        return self.nodes.get(node_id) or NodeFaults(node_id, self.seed)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The node fault kinds in this plan, in the scenario's order."""
        found = []
        if any(n.dropout for n in self.nodes.values()):
            found.append("dropout")
        if any(n.crashes for n in self.nodes.values()):
            found.append("crashes")
        if any(n.markov is not None for n in self.nodes.values()):
            found.append("availability")
        return tuple(found)


def fault_plan(sc: Scenario, seed: int | None = None) -> FaultPlan:
    """The node faults of ``sc`` under ``seed`` (default: the scenario's).

    Dropout and availability apply to every client, crashes to the nodes they
    name, exactly as :func:`~fedstrata.scenarios.build.build_federation` wires
    them into the simulator.
    """
    seed = sc.seed if seed is None else int(seed)
    f = sc.faults
    clients = list(wire_topology(sc).clients) if f.dropout > 0 or f.availability else []
    crashes: dict[str, list[Crash]] = {}
    for c in f.crashes:
        crashes.setdefault(c.node, []).append(Crash(float(c.at), c.restart_after))
    a = f.availability
    markov = None if a is None else Markov(a.p_off, a.p_on, a.step_s)
    nodes: dict[str, NodeFaults] = {}
    for nid in dict.fromkeys([*clients, *crashes]):
        client = nid in clients
        nodes[nid] = NodeFaults(
            nid,
            seed,
            tuple(sorted(crashes.get(nid, ()), key=lambda c: c.at)),
            float(f.dropout) if client else 0.0,
            markov if client else None,
        )
    links = tuple(k for k in f.kinds() if k in LINK_FAULTS)
    return FaultPlan(seed, nodes, links, sc.network.model)
