"""The ``sync`` protocol kind: synchronous rounds with over-selection and stragglers.

The round bookkeeping itself (:class:`~fedstrata.nodes.rounds.SyncRounds`) lives in
the node core, which runs its setup rounds with it whatever the protocol kind; this
module is where the protocol layer names it.
"""

from __future__ import annotations

from fedstrata.nodes.rounds import STRAGGLER_POLICIES, SyncRounds

__all__ = ["STRAGGLER_POLICIES", "SyncRounds"]
