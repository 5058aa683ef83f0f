"""The base of every settings model a scenario file is validated with, and located errors.

Scenario sections (:mod:`fedstrata.scenarios.schema`) and the settings that algorithm
plug-ins declare (:mod:`fedstrata.plugins.spec`) share one strictness: unknown keys are
errors, ``true`` is not a number, ``"5"`` is not an integer, no number is infinite or NaN,
and a validated model is frozen. This module sits below both (it imports neither), so
that a plug-in can declare its settings without importing the application layer.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from fedstrata.errors import ScenarioError

__all__ = ["MAX_CLUSTERS", "ScenarioErrors", "Strict", "and_list"]

MAX_CLUSTERS = 1000
"""Largest ``algorithm.n_clusters``."""


class Strict(BaseModel):
    """A frozen pydantic model that refuses unknown keys, coercions and non-finite numbers."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class ScenarioErrors(ScenarioError):  # noqa: N818 - a ScenarioError holding several
    """Several located problems in one file; ``errors`` lists them, the message joins them.

    Parameters
    ----------
    errors
        The problems, each a :class:`~fedstrata.errors.ScenarioError`.
    """

    def __init__(self, errors: list[ScenarioError]) -> None:
        self.errors = errors
        super().__init__("; ".join(e.located() for e in errors))

    def located(self) -> str:
        """All problems, one per line."""
        return "\n".join(e.located() for e in self.errors)


def and_list(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``: names joined for a message."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
