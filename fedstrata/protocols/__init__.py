"""Aggregation protocols: the strategies an aggregator runs its rounds with.

``protocol.kind`` picks one (:data:`KINDS`): ``sync`` (:mod:`.sync`), ``async`` and
``buffered`` (:mod:`.asynchronous`), ``adaptive`` (:mod:`.network_aware`). The
interface is :class:`~fedstrata.nodes.strategy.Strategy`; each kind's factory is
registered with the nodes by the composition root (:mod:`fedstrata.registry`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fedstrata.nodes.strategy import Strategy

__all__ = ["FACTORIES", "KINDS"]

#: The protocol kinds of ``protocol.kind``.
KINDS = ("sync", "async", "buffered", "adaptive")


def _sync_settings(
    protocol: Any, *, quorum: float, seed: int, clients_below: bool
) -> dict[str, Any]:
    return {
        "quorum": quorum,
        "seed": seed,
        "stragglers": protocol.stragglers,
        "sample": protocol.sample if clients_below else 1.0,
        "over_select": protocol.over_select,
    }


def sync_strategy(
    protocol: Any,
    children: Sequence[str],
    *,
    quorum: float,
    seed: int,
    root: bool,
    deadline_s: float,
    clients_below: bool,
    compressions: Sequence[str],
) -> Strategy:
    """Synchronous rounds, with the protocol's straggler policy and client sampling.

    Every kind runs these in a middle tier, for the parent's requests (a fog group under
    an asynchronous cloud is the usual hierarchical asynchronous design).
    """
    from fedstrata.protocols.sync import SyncRounds

    return SyncRounds(
        children, **_sync_settings(protocol, quorum=quorum, seed=seed, clients_below=clients_below)
    )


def _asynchronous(buffered: bool) -> Any:
    def factory(
        protocol: Any,
        children: Sequence[str],
        *,
        quorum: float,
        seed: int,
        root: bool,
        deadline_s: float,
        clients_below: bool,
        compressions: Sequence[str],
    ) -> Strategy:
        if not root:
            return sync_strategy(
                protocol,
                children,
                quorum=quorum,
                seed=seed,
                root=root,
                deadline_s=deadline_s,
                clients_below=clients_below,
                compressions=compressions,
            )
        from fedstrata.protocols.asynchronous import FedAsync, FedBuff

        common: dict[str, Any] = {
            "seed": seed,
            "alpha": protocol.mixing,
            "staleness": protocol.staleness,
            "a": protocol.staleness_a,
            "b": protocol.staleness_b,
            "max_staleness": protocol.max_staleness,
            "retry_s": deadline_s,
        }
        if buffered:
            return FedBuff(children, buffer_size=protocol.buffer_size, **common)
        return FedAsync(children, **common)

    return factory


def adaptive_strategy(
    protocol: Any,
    children: Sequence[str],
    *,
    quorum: float,
    seed: int,
    root: bool,
    deadline_s: float,
    clients_below: bool,
    compressions: Sequence[str],
) -> Strategy:
    """The network-aware plan per round at the root; synchronous rounds below it."""
    sync = _sync_settings(protocol, quorum=quorum, seed=seed, clients_below=clients_below)
    if not root:
        from fedstrata.protocols.sync import SyncRounds

        return SyncRounds(children, **sync)
    from fedstrata.protocols.network_aware import AdaptiveRounds

    return AdaptiveRounds(
        children,
        lambda_net=protocol.lambda_net,
        compressions=tuple(compressions) if clients_below else (),
        network_kernel=protocol.network_kernel if clients_below else None,
        network_tau_s=protocol.network_tau_s,
        **sync,
    )


#: Each kind's strategy factory, registered by :mod:`fedstrata.registry`.
FACTORIES = {
    "sync": sync_strategy,
    "async": _asynchronous(buffered=False),
    "buffered": _asynchronous(buffered=True),
    "adaptive": adaptive_strategy,
}
