"""Synchronous rounds: ask, wait for the first replies, handle the stragglers.

This bookkeeping lives in the node core because an aggregator's setup rounds use it
whatever the run's protocol kind; :mod:`fedstrata.protocols.sync` registers it as
the ``sync`` kind.

Each round asks ``k'`` children and closes once it has ``target`` replies or its
deadline fires:

* ``sample`` (a fraction C, default 1) sets how many replies a round wants,
  k = ceil(C · children);
  ``over_select`` asks ``k' = ceil(k · (1 + over_select))`` of them (a seeded random
  subset when that is fewer than all) and uses the first k to answer;
* the straggler policy says what a round does about the children still missing:

  - ``wait``: close at k replies or the deadline (the classic synchronous round);
  - ``drop``: close as soon as the quorum ``ceil(quorum · k)`` replied; later
    replies are late and dropped;
  - ``use_last``: close at the quorum like ``drop``, and count every other child by
    its last partial, stale by one round or more (for sufficient statistics this is
    incremental EM: every sample keeps counting, some with older memberships).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from fedstrata.errors import ValidationError
from fedstrata.nodes.algorithm import Algorithm
from fedstrata.nodes.strategy import Closing, Contribution, Ledger, Strategy

__all__ = ["STRAGGLER_POLICIES", "SyncRounds"]

#: What a synchronous round does about children that have not replied.
STRAGGLER_POLICIES = ("wait", "drop", "use_last")


class SyncRounds(Strategy):
    """Synchronous rounds with over-selection and a straggler policy (module docstring)."""

    kind = "sync"

    def __init__(
        self,
        children: Sequence[str],
        *,
        quorum: float = 1.0,
        seed: int = 0,
        stragglers: str = "wait",
        sample: float = 1.0,
        over_select: float = 0.0,
    ) -> None:
        super().__init__(children, quorum=quorum, seed=seed)
        if stragglers not in STRAGGLER_POLICIES:
            raise ValidationError(
                f"stragglers must be one of {STRAGGLER_POLICIES}, got {stragglers!r}"
            )
        if not 0.0 < sample <= 1.0:
            raise ValidationError(f"sample must lie in (0, 1], got {sample!r}")
        if not 0.0 <= over_select <= 100.0:
            raise ValidationError(f"over_select must lie in [0, 100], got {over_select!r}")
        self.stragglers = stragglers
        self.sample = sample
        self.over_select = over_select
        self.want = len(self.children)
        self._received: dict[str, dict[str, Any]] = {}
        self._ledger: Ledger | None = None
        #: Set per round by a middle tier from its parent's model (``quorum`` field).
        self.planned_quorum: float | None = None

    def wanted(self) -> int:
        """Replies a round wants (k)."""
        return max(1, math.ceil(self.sample * len(self.children) - 1e-9))

    def target(self) -> int:
        """Replies at which the round closes before its deadline.

        A quorum planned upstream (:attr:`planned_quorum`, from an adaptive root's
        model message) closes the round like ``drop`` at that share of the wanted
        replies (never below the round's own quorum).
        """
        if self.planned_quorum is not None:
            planned = math.ceil(self.planned_quorum * self.want - 1e-9)
            return max(self.need_of(self.want), min(planned, self.want))
        if self.stragglers == "wait":
            return self.want
        return self.need_of(self.want)

    def open(self, version: int, now: float) -> tuple[list[str] | None, dict[str, Any]]:
        """Ask all children, or a seeded subset of ``k'`` when that is fewer."""
        n = len(self.children)
        self.want = self.wanted()
        asked = min(n, math.ceil(self.want * (1.0 + self.over_select) - 1e-9))
        self._received = {}
        if asked >= n:
            self.asked = self.children
            return None, {}
        picked = self.rng.choice(n, size=asked, replace=False)
        self.asked = tuple(sorted(self.children[i] for i in picked))
        return list(self.asked), {}

    @property
    def received(self) -> frozenset[str]:
        """Children that replied in the round being collected."""
        return frozenset(self._received)

    def round_need(self) -> int:
        """Fresh replies the round being collected needs: the quorum of those wanted."""
        return self.need_of(self.want)

    def plan_quorum(self, quorum: float | None) -> None:
        """Close rounds at ``quorum`` of the wanted replies (see :meth:`target`)."""
        self.planned_quorum = quorum

    def take(self) -> dict[str, dict[str, Any]]:
        """The replies collected so far, by sender; the round starts empty again."""
        got, self._received = self._received, {}
        return got

    def offer(self, c: Contribution) -> bool:
        """Keep the reply (of an asked child); close at :meth:`target` replies."""
        if c.sender not in self.asked:  # it ignored the ask list: not part of this round
            return False
        self._received[c.sender] = c.body
        return len(self._received) >= self.target()

    def close(self, algorithm: Algorithm, *, deadline: bool) -> Closing:
        """The sum of this round's replies (plus, ``use_last``, everyone else's last)."""
        got = self.take()
        need = self.need_of(self.want)
        if not got:
            return Closing(None, 0, need)
        if self.stragglers != "use_last":
            return Closing(algorithm.combine([got[k] for k in sorted(got)]), len(got), need)
        if self._ledger is None:
            self._ledger = Ledger(algorithm)
        for child, body in got.items():
            self._ledger.put(child, body)
        stale = len(self._ledger.shares) - len(got)
        return Closing(self._ledger.total(), len(got), need, {"stale_used": stale})

    def describe(self) -> dict[str, Any]:
        """Kind, straggler policy, k and over-selection."""
        return {
            "kind": self.kind,
            "stragglers": self.stragglers,
            "sample": self.sample,
            "over_select": self.over_select,
        }
