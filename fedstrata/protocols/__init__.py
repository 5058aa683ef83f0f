"""Aggregation protocols: the strategies an aggregator runs its rounds with.

``protocol.kind`` picks one. Each kind is declared once, in its own module, as a
:class:`~fedstrata.protocols.kind.ProtocolKind` (its settings, capabilities and strategy
factory): ``sync`` (:mod:`.sync`), ``async`` (:mod:`.asynchronous`), ``buffered``
(:mod:`.buffered`) and ``adaptive`` (:mod:`.network_aware`). The composition root
(:mod:`fedstrata.registry`) registers them; the strategy interface is
:class:`~fedstrata.nodes.strategy.Strategy`.
"""

from __future__ import annotations
