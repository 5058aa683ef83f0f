"""An aggregator's setup rounds: the plug-in's initialisation, collected before any model.

Whatever the protocol kind, a setup round is a synchronous round over all children
(:class:`~fedstrata.nodes.rounds.SyncRounds` at the aggregator's quorum) whose replies
the plug-in merges (:meth:`~fedstrata.nodes.algorithm.Algorithm.merge_setup`).
:class:`SetupRounds` keeps them apart from the protocol's own rounds: which model
versions were setup rounds (a late setup reply to a later round is late, not a
partial), and how a setup round closes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedstrata.nodes.algorithm import Algorithm
from fedstrata.nodes.rounds import SyncRounds
from fedstrata.nodes.strategy import Closing

__all__ = ["SetupRounds"]


class SetupRounds:
    """The setup rounds of one aggregator (module docstring)."""

    def __init__(self, children: Sequence[str], *, quorum: float, seed: int) -> None:
        #: The round bookkeeping (asked, received) of the setup round being collected.
        self.rounds = SyncRounds(sorted(children), quorum=quorum, seed=seed)
        self._versions: set[int] = set()

    def opened(self, version: int) -> None:
        """Model version ``version`` is a setup round."""
        self._versions.add(version)

    def was_setup(self, version: int) -> bool:
        """Whether model version ``version`` was a setup round."""
        return version in self._versions

    def close(self, algorithm: Algorithm, rng: np.random.Generator, need: int) -> Closing:
        """The merged replies of the setup round being collected (``need``: to count)."""
        bodies = self.rounds.take()
        got = [bodies[k] for k in sorted(bodies)]
        if not got:
            return Closing(None, 0, need)
        return Closing(algorithm.merge_setup(got, rng), len(got), need)
