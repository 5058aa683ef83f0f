"""The ``sync`` protocol kind: synchronous rounds with over-selection and stragglers.

The round bookkeeping itself (:class:`~fedstrata.nodes.rounds.SyncRounds`) lives in
the node core, which runs its setup rounds with it whatever the protocol kind; this
module declares the kind (:data:`SYNC`) and builds the rounds every kind runs in its
middle tiers (:func:`sync_rounds`). The straggler policy, client sampling and
over-selection are common protocol keys (every kind's middle tiers use them), so the
kind has no keys of its own.
"""

from __future__ import annotations

from typing import Any

from fedstrata.nodes.rounds import STRAGGLER_POLICIES, SyncRounds
from fedstrata.nodes.strategy import Placement, Strategy
from fedstrata.protocols.kind import Capabilities, KindSettings, ProtocolKind

__all__ = ["STRAGGLER_POLICIES", "SYNC", "SyncRounds", "SyncSettings", "sync_rounds"]


class SyncSettings(KindSettings):
    """Protocol kind ``sync`` has no keys of its own.

    ``stragglers``, ``sample`` and ``over_select`` are common keys: every kind's middle
    tiers run synchronous rounds.
    """


def sync_settings(protocol: Any, at: Placement) -> dict[str, Any]:
    """The keyword arguments of :class:`SyncRounds` under ``protocol``'s common keys."""
    return {
        "quorum": at.quorum,
        "seed": at.seed,
        "stragglers": protocol.stragglers,
        "sample": protocol.sample if at.clients_below else 1.0,
        "over_select": protocol.over_select,
    }


def sync_rounds(protocol: Any, at: Placement) -> SyncRounds:
    """Synchronous rounds with the protocol's straggler policy and client sampling.

    Every kind runs these in a middle tier, for the parent's requests (a fog group under
    an asynchronous cloud is the usual hierarchical asynchronous design).
    """
    return SyncRounds(at.children, **sync_settings(protocol, at))


def _sync_strategy(
    protocol: Any,
    settings: SyncSettings,
    at: Placement,
) -> Strategy:
    return sync_rounds(protocol, at)


SYNC = ProtocolKind(
    name="sync",
    summary="synchronous rounds (stragglers, client sampling, over-selection)",
    settings=SyncSettings,
    capabilities=Capabilities(secure_aggregation=True),
    factory=_sync_strategy,
)
"""The ``sync`` kind's declaration, registered by :mod:`fedstrata.registry`."""
