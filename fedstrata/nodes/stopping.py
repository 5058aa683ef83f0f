"""The root's stopping rules: when a run ends, and the words that say why.

A run ends when the model converged (the plug-in's own test, or ``tol`` on the
per-sample objective), when its per-sample objective reached a plateau
(``plateau`` rounds without a ``plateau_tol`` gain on its best), when ``patience``
consecutive rounds failed, or at the round limit. :class:`StopRules` keeps the
bookkeeping these tests need over the root's rounds; the aggregator tells it how
each round went and asks it whether to go on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import StrEnum

from fedstrata.nodes.algorithm import Algorithm
from fedstrata.nodes.config import ProtocolConfig

__all__ = ["RunStatus", "StopRules"]


class RunStatus(StrEnum):
    """How a run ended (``interrupted`` is set by the runner, not by a node)."""

    CONVERGED = "converged"
    ROUND_LIMIT = "round_limit"
    STALLED = "stalled"
    DIVERGED = "diverged"
    INTERRUPTED = "interrupted"


class StopRules:
    """The stopping tests of one root, over the rounds it has closed so far."""

    def __init__(self, protocol: ProtocolConfig, algorithm: Algorithm) -> None:
        self.protocol = protocol
        self.algorithm = algorithm
        #: Whether the last successful round met the convergence test.
        self.converged = False
        #: The objective J of the current model (what the plug-in's test compares with).
        self.prev_objective = math.inf
        self._prev_per_sample = math.inf
        self._best_per_sample = math.inf
        self._since_best = 0  # successful rounds without a plateau_tol improvement
        self._plateaued = False
        #: Consecutive rounds (setup rounds included) below quorum.
        self.failed_streak = 0
        #: Rounds that updated the model.
        self.successes = 0

    def failed(self) -> None:
        """A round failed (below quorum, or a model the plug-in could not take)."""
        self.failed_streak += 1

    def succeeded(self) -> None:
        """A round gave the plug-in a combined partial it could step with."""
        self.failed_streak = 0
        self.successes += 1

    def stepped(self, objective: float, n: float, converged: bool, *, settled: bool) -> None:
        """The model moved to one of objective ``objective`` over ``n`` samples.

        ``converged`` is the plug-in's own test; ``settled``: whether the model stands
        for the whole federation yet (the tol and plateau tests wait for it).
        """
        per_sample = objective / n if n > 0 else math.inf
        if self.protocol.tol_mode == "per_sample":
            converged = abs(per_sample - self._prev_per_sample) < self.protocol.tol
        self.converged = converged and settled
        if settled:
            self._track_plateau(per_sample)
        self.prev_objective = objective
        self._prev_per_sample = per_sample

    def _track_plateau(self, per_sample: float) -> None:
        """Count successful rounds since J/n last improved by more than ``plateau_tol``."""
        if self.protocol.plateau is None:
            return
        if per_sample < self._best_per_sample * (1.0 - self.protocol.plateau_tol):
            self._best_per_sample = per_sample
            self._since_best = 0
        else:
            self._since_best += 1
        self._plateaued = self._since_best >= self.protocol.plateau

    def exhausted(self, iterations: int) -> bool:
        """Whether failed rounds ran out of patience, or the rounds ran out."""
        return self.failed_streak >= self.protocol.patience or iterations >= self.protocol.rounds

    def end(self, iterations: int, stall: Callable[[], str]) -> tuple[RunStatus, str] | None:
        """Whether the run ends after ``iterations`` rounds, and why (None: go on).

        ``stall`` words a stall (it knows the last round's replies).
        """
        p = self.protocol
        if self.converged:
            mode = p.tol_mode
            if mode == "per_sample":
                test = "|Δ(J/n)|"
            elif p.rule == "sum":
                test = "|ΔJ|/|J|" if mode == "relative" else "|ΔJ|"
            else:
                test = self.algorithm.parameter_stop_test(relative=mode == "relative")
            return (
                RunStatus.CONVERGED,
                f"{test} fell below tol={p.tol:g} after {iterations} rounds",
            )
        if self._plateaued:
            return (
                RunStatus.CONVERGED,
                f"plateau: the per-sample objective J/n gained no more than "
                f"{p.plateau_tol:g} (relative) on its best in the last "
                f"{p.plateau} rounds",
            )
        if self.failed_streak >= p.patience:
            return RunStatus.STALLED, stall()
        if iterations >= p.rounds:
            return (
                RunStatus.ROUND_LIMIT,
                f"reached the round limit ({p.rounds}) before convergence",
            )
        return None
