"""Aggregation protocols: the strategies an aggregator runs its rounds with.

``protocol.kind`` picks one (:data:`KINDS`): ``sync`` (:mod:`.sync`), ``async`` and
``buffered`` (:mod:`.asynchronous`), ``adaptive`` (:mod:`.network_aware`). The
interface is :class:`~fedstrata.protocols.strategy.Strategy`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fedstrata.protocols.strategy import Strategy

__all__ = ["KINDS", "strategy_for"]

#: The protocol kinds of ``protocol.kind``.
KINDS = ("sync", "async", "buffered", "adaptive")


def strategy_for(
    protocol: Any,
    children: Sequence[str],
    *,
    quorum: float,
    seed: int,
    root: bool,
    deadline_s: float,
    clients_below: bool = True,
    compressions: Sequence[str] = (),
) -> Strategy:
    """The strategy of an aggregator under ``protocol`` (a ProtocolConfig).

    Asynchronous and adaptive kinds run at the root; a middle tier always runs
    synchronous rounds for the parent's requests, with the protocol's straggler
    policy and client selection (a fog group under an asynchronous cloud is the usual
    hierarchical asynchronous design). Client sampling (``protocol.sample``) applies
    where the children are clients (``clients_below``); the adaptive kind chooses among
    the algorithm's ``compressions`` there.
    """
    from fedstrata.protocols.asynchronous import FedAsync, FedBuff
    from fedstrata.protocols.sync import SyncRounds

    kind = protocol.kind
    if kind in ("async", "buffered") and root:
        common: dict[str, Any] = {
            "seed": seed,
            "alpha": protocol.mixing,
            "staleness": protocol.staleness,
            "a": protocol.staleness_a,
            "b": protocol.staleness_b,
            "max_staleness": protocol.max_staleness,
            "retry_s": deadline_s,
        }
        if kind == "async":
            return FedAsync(children, **common)
        return FedBuff(children, buffer_size=protocol.buffer_size, **common)
    sync: dict[str, Any] = {
        "quorum": quorum,
        "seed": seed,
        "stragglers": protocol.stragglers,
        "sample": protocol.sample if clients_below else 1.0,
        "over_select": protocol.over_select,
    }
    if kind == "adaptive" and root:
        from fedstrata.protocols.network_aware import AdaptiveRounds

        return AdaptiveRounds(
            children,
            lambda_net=protocol.lambda_net,
            compressions=tuple(compressions) if clients_below else (),
            network_kernel=protocol.network_kernel if clients_below else None,
            network_tau_s=protocol.network_tau_s,
            **sync,
        )
    return SyncRounds(children, **sync)
