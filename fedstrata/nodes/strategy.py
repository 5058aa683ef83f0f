"""The protocol strategy interface: when an aggregator closes a round, and with what.

An :class:`~fedstrata.nodes.aggregator.AggregatorNode` moves messages and keeps the
global model; its :class:`Strategy` makes the protocol's decisions, in the spirit of
Flower's ``Strategy`` (configure a round, aggregate its results) but event-driven:

1. :meth:`Strategy.open`: a model version is about to be broadcast: which children
   are asked to answer it (``None``: all) and which extra body fields it carries;
2. :meth:`Strategy.accepts`: whether a reply computed on version ``r`` is still
   wanted now (synchronous rounds: only the current version; asynchronous: any
   version no more than ``max_staleness`` behind);
3. :meth:`Strategy.offer`: a valid reply arrived; whether the round closes now;
4. :meth:`Strategy.close`: the round closes (all wanted replies, or the deadline):
   the combined partial to step the model with, how many fresh replies it holds,
   and fields for the round's record.

Strategies are plain objects holding per-child bookkeeping; they never see time
except through the ``now`` the node passes on, and never do I/O.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedstrata.errors import NodeProtocolError
from fedstrata.nodes.algorithm import Algorithm

__all__ = [
    "Closing",
    "Contribution",
    "Ledger",
    "Placement",
    "Strategy",
    "StrategyFactory",
    "register_strategy",
    "strategy_for",
    "unregister_strategy",
]


@dataclass(frozen=True)
class Contribution:
    """A child's valid reply: its partial, the version it was computed on, when it came."""

    sender: str
    body: dict[str, Any]
    version: int
    staleness: int
    now: float
    nbytes: int


@dataclass
class Closing:
    """What a round's close yields: the combined partial (None: nothing to step with)."""

    total: dict[str, Any] | None
    fresh: int
    need: int
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether the round counts: a partial and at least ``need`` fresh replies."""
        return self.total is not None and self.fresh >= self.need


class Ledger:
    """Each child's current share of an additive aggregate.

    ``put`` replaces a child's share by its newest partial moved towards it by
    ``weight`` (``weight = 1``: replaced; FedAsync's ``x ← (1 − α_t) x + α_t x_new``
    applied to that child's share); a child's first partial is taken whole.
    """

    def __init__(self, algorithm: Algorithm) -> None:
        self.algorithm = algorithm
        self.shares: dict[str, dict[str, Any]] = {}

    def put(self, child: str, partial: dict[str, Any], weight: float = 1.0) -> None:
        """Move ``child``'s share towards ``partial`` by ``weight``."""
        old = self.shares.get(child)
        if old is None or weight >= 1.0:
            self.shares[child] = partial
        else:
            self.shares[child] = self.algorithm.mix(old, partial, weight)

    def total(self, children: Sequence[str] | None = None) -> dict[str, Any] | None:
        """The combined shares of ``children`` (default all), in sorted order; None if none."""
        keys = sorted(self.shares if children is None else set(children) & set(self.shares))
        if not keys:
            return None
        return self.algorithm.combine([self.shares[k] for k in keys])


class Strategy(ABC):
    """How an aggregator runs its rounds (see the module docstring)."""

    #: ``protocol.kind`` this strategy implements.
    kind: str
    #: Whether it mixes partials (:meth:`~fedstrata.nodes.algorithm.Algorithm.mix`):
    #: an aggregator refuses it with a non-additive algorithm.
    needs_additive: bool = False

    def __init__(self, children: Sequence[str], *, quorum: float, seed: int) -> None:
        self.children = tuple(sorted(children))
        self.quorum = quorum
        self.rng = np.random.default_rng(seed)
        self.asked: tuple[str, ...] = self.children

    def need_of(self, asked: int) -> int:
        """Fresh replies a round over ``asked`` children needs to count."""
        return max(1, math.ceil(self.quorum * asked))

    @abstractmethod
    def open(self, version: int, now: float) -> tuple[list[str] | None, dict[str, Any]]:
        """Start collecting ``version``: (children asked or None for all, extra body fields)."""

    def accepts(self, staleness: int) -> bool:
        """Whether a reply ``staleness`` versions old is wanted (default: current only)."""
        return staleness == 0

    @abstractmethod
    def offer(self, c: Contribution) -> bool:
        """Take a valid reply; True when the round should close now."""

    def settled(self) -> bool:
        """Whether the model stands for the whole federation yet (default: always).

        The root's stopping tests (tol, plateau) wait for it: an asynchronous model
        built from a few children's shares may look still while the rest are on their
        way.
        """
        return True

    def observe_late(  # noqa: B027 - an optional hook: most strategies ignore stragglers
        self, sender: str, version: int, now: float, nbytes: int
    ) -> None:
        """A child's reply came too late to be used (default: ignored).

        Its timing is still information about the network (the adaptive protocol
        learns its slow children's delays from it).
        """

    @abstractmethod
    def close(self, algorithm: Algorithm, *, deadline: bool) -> Closing:
        """Close the round (``deadline``: its timer fired) and reset for the next."""

    @property
    def received(self) -> frozenset[str]:
        """Children whose reply the round being collected holds (default: none tracked).

        Only strategies that collect one round at a time know it (synchronous rounds).
        """
        return frozenset()

    def round_need(self) -> int | None:
        """Fresh replies the round being collected needs, if the strategy decides it.

        None (the default): the aggregator's quorum of all its children applies.
        """
        return None

    def plan_quorum(self, quorum: float | None) -> None:  # noqa: B027 - an optional hook
        """Close rounds at a quorum planned upstream (an adaptive root's model message).

        ``None`` withdraws the plan. The default ignores it: only strategies that close
        a round at a share of its replies (synchronous rounds) can follow one.
        """

    def describe(self) -> dict[str, Any]:
        """The strategy's settings, for the run's records."""
        return {"kind": self.kind}


@dataclass(frozen=True)
class Placement:
    """Where an aggregator sits: what its protocol kind's strategy factory is given.

    ``children``: the aggregator's children; ``quorum``: the fraction of them a round
    needs; ``seed``: the aggregator's own seed (client sampling); ``root``: whether it is
    the root (most kinds run synchronous rounds in middle tiers); ``deadline_s``: its
    collection deadline; ``clients_below``: whether its children are clients (client
    sampling and per-client plans apply there); ``compressions``: the algorithm's uplink
    compressions, for kinds that choose among them.
    """

    children: tuple[str, ...]
    quorum: float
    seed: int
    root: bool
    deadline_s: float
    clients_below: bool = True
    compressions: tuple[str, ...] = ()


StrategyFactory = Callable[[Any, Placement], Strategy]
"""``factory(protocol, placement)``: the strategy of one aggregator under ``protocol``."""


_KINDS: dict[str, StrategyFactory] = {}


def register_strategy(kind: str, factory: StrategyFactory) -> None:
    """Make :func:`strategy_for` build ``factory(protocol, placement)`` for a kind.

    Called by the composition root (:mod:`fedstrata.registry`) for every protocol kind;
    the nodes themselves know none.
    """
    _KINDS[kind] = factory


def unregister_strategy(kind: str) -> None:
    """Forget the factory of ``kind`` (a kind a test registered for itself)."""
    _KINDS.pop(kind, None)


def strategy_for(protocol: Any, placement: Placement) -> Strategy:
    """The strategy of an aggregator under ``protocol`` (its ``kind`` picks the factory).

    The core registers no kind itself: whatever builds nodes imports the composition
    root (:mod:`fedstrata.registry`) first, which registers the built-in kinds.
    """
    try:
        factory = _KINDS[protocol.kind]
    except KeyError:
        raise NodeProtocolError(
            f"no protocol kind {protocol.kind!r} is registered (known: {sorted(_KINDS)}): "
            "import fedstrata.registry, the composition root, first (it registers the "
            "built-in kinds), or register one with register_strategy"
        ) from None
    return factory(protocol, placement)
