"""What the plug-ins whose clients min-max scale their views share (tensor, deep).

Their clients report per-view ranges in the shared setup round
(:mod:`fedstrata.plugins._setup`), receive the pooled ranges as the run's
configuration and scale their views with them, so every client works in one space.
:class:`ScaledViewsLearner` holds that part of a learner; the algorithm supplies
``client(views, view_ids, refs)``, which builds the family's own client state over
the scaled views.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedstrata.algorithms.tensor._common import scale_with_ranges
from fedstrata.errors import NodeProtocolError, WireError
from fedstrata.nodes.algorithm import Learner
from fedstrata.plugins.messages import read_references

__all__ = ["ScaledViewsLearner", "scale_with_ranges"]


class ScaledViewsLearner(Learner):
    """A client's views, checked against the federation, and its state once configured.

    ``algorithm`` has ``shape`` and ``client(views, view_ids, refs)``; the state that
    ``client`` returns is :attr:`client_state` after :meth:`configure`.
    """

    def __init__(
        self,
        algorithm: Any,
        views: Sequence[np.ndarray],
        view_ids: Sequence[int],
        rng: np.random.Generator,
        node_id: str,
    ) -> None:
        shape = algorithm.shape
        self.algorithm = algorithm
        self.views = [np.asarray(v, dtype=np.float64) for v in views]
        self.view_ids = tuple(view_ids)
        if (
            not self.views
            or len(self.view_ids) != len(self.views)
            or any(
                not 0 <= g < shape.n_views or shape.dims[g] != v.shape[1]
                for g, v in zip(self.view_ids, self.views, strict=True)
            )
        ):
            raise NodeProtocolError(f"client {node_id}: views do not match view_ids/dims")
        self.rng = rng
        self.node_id = node_id
        self.n_samples = self.views[0].shape[0]
        self._client: Any = None

    def configure(self, extras: dict[str, Any]) -> None:
        """Scale the views with the pooled ranges (``refs``) and build the client state."""
        a = self.algorithm
        refs = read_references(extras, a.shape) if "refs" in extras else None
        if refs is None or any(refs[g] is None for g in self.view_ids):
            raise WireError("the configuration has no range for a view this client holds")
        self._client = a.client(self.views, self.view_ids, [refs[g] for g in self.view_ids])

    @property
    def client_state(self) -> Any:
        """The configured client state (WireError before the configuration arrived)."""
        if self._client is None:
            raise WireError("a model arrived before the run's configuration")
        return self._client
