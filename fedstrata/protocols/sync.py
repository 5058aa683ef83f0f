"""The ``sync`` protocol kind: synchronous rounds with over-selection and stragglers.

The round bookkeeping itself (:class:`~fedstrata.nodes.rounds.SyncRounds`) lives in
the node core, which runs its setup rounds with it whatever the protocol kind; this
module declares the kind (:data:`SYNC`) and builds the rounds every kind runs in its
middle tiers (:func:`sync_rounds`). The straggler policy, client sampling and
over-selection are common protocol keys (every kind's middle tiers use them), so the
kind has no keys of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fedstrata.nodes.rounds import STRAGGLER_POLICIES, SyncRounds
from fedstrata.nodes.strategy import Strategy
from fedstrata.protocols.kind import Capabilities, KindSettings, ProtocolKind

__all__ = ["STRAGGLER_POLICIES", "SYNC", "SyncRounds", "SyncSettings", "sync_rounds"]


class SyncSettings(KindSettings):
    """Protocol kind ``sync`` has no keys of its own.

    ``stragglers``, ``sample`` and ``over_select`` are common keys: every kind's middle
    tiers run synchronous rounds.
    """


def sync_settings(
    protocol: Any, *, quorum: float, seed: int, clients_below: bool
) -> dict[str, Any]:
    """The keyword arguments of :class:`SyncRounds` under ``protocol``'s common keys."""
    return {
        "quorum": quorum,
        "seed": seed,
        "stragglers": protocol.stragglers,
        "sample": protocol.sample if clients_below else 1.0,
        "over_select": protocol.over_select,
    }


def sync_rounds(
    protocol: Any, children: Sequence[str], *, quorum: float, seed: int, clients_below: bool
) -> SyncRounds:
    """Synchronous rounds with the protocol's straggler policy and client sampling.

    Every kind runs these in a middle tier, for the parent's requests (a fog group under
    an asynchronous cloud is the usual hierarchical asynchronous design).
    """
    return SyncRounds(
        children, **sync_settings(protocol, quorum=quorum, seed=seed, clients_below=clients_below)
    )


def _sync_strategy(
    protocol: Any,
    settings: SyncSettings,
    children: Sequence[str],
    *,
    quorum: float,
    seed: int,
    root: bool,
    deadline_s: float,
    clients_below: bool,
    compressions: Sequence[str],
) -> Strategy:
    return sync_rounds(protocol, children, quorum=quorum, seed=seed, clients_below=clients_below)


SYNC = ProtocolKind(
    name="sync",
    summary="synchronous rounds (stragglers, client sampling, over-selection)",
    settings=SyncSettings,
    capabilities=Capabilities(secure_aggregation=True),
    factory=_sync_strategy,
)
"""The ``sync`` kind's declaration, registered by :mod:`fedstrata.registry`."""
