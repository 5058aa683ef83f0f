"""Pure numpy multi-view clustering: client steps, statistics, server rules, estimators.

The estimators follow scikit-learn conventions (``fit(views)`` with a list of
(n, d_h) arrays). The federated building blocks are pure functions:
:func:`local_statistics` (client), :func:`combine` (server) and the paper's
parameter rules in :mod:`fedstrata.algorithms.combine`.
"""

from typing import Any

from fedstrata.algorithms.combine import ParamUpdate as ParamUpdate
from fedstrata.algorithms.combine import aggregate_params as aggregate_params
from fedstrata.algorithms.combine import coordinate_median as coordinate_median
from fedstrata.algorithms.combine import has_converged as has_converged
from fedstrata.algorithms.combine import personalize as personalize
from fedstrata.algorithms.combine import plain_mean as plain_mean
from fedstrata.algorithms.combine import weighted_average as weighted_average
from fedstrata.algorithms.multiview import MultiViewModel as MultiViewModel
from fedstrata.algorithms.multiview import State as State
from fedstrata.algorithms.multiview import Stats as Stats
from fedstrata.algorithms.multiview import combine as combine
from fedstrata.algorithms.multiview import local_statistics as local_statistics
from fedstrata.algorithms.multiview import prepare_views as prepare_views

# The estimators and federated_fit import scikit-learn, which takes a second or more:
# they load on first use, so node code and ``fedstrata run`` start fast.
_LAZY = {
    "HKMVFC": "fedstrata.algorithms.hk_mvfc",
    "MVFCM": "fedstrata.algorithms.baselines",
    "MVKMED": "fedstrata.algorithms.mvkm_ed",
    "ConcatKMeans": "fedstrata.algorithms.baselines",
    "FederatedResult": "fedstrata.algorithms.federated",
    "federated_fit": "fedstrata.algorithms.federated",
    "EFKMVC": "fedstrata.algorithms.tensor",
    "FedHKPARAFAC2": "fedstrata.algorithms.tensor",
    "FedHKTucker": "fedstrata.algorithms.tensor",
    "FedHKMVCPerson": "fedstrata.algorithms.tensor",
    "tensor_federated_fit": "fedstrata.algorithms.tensor",
}


def __getattr__(name: str) -> Any:
    """Import the estimators and ``federated_fit`` on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fedstrata.algorithms' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "EFKMVC",
    "HKMVFC",
    "MVFCM",
    "MVKMED",
    "ConcatKMeans",
    "FedHKMVCPerson",
    "FedHKPARAFAC2",
    "FedHKTucker",
    "FederatedResult",
    "MultiViewModel",
    "ParamUpdate",
    "State",
    "Stats",
    "aggregate_params",
    "combine",
    "coordinate_median",
    "federated_fit",
    "has_converged",
    "local_statistics",
    "personalize",
    "plain_mean",
    "prepare_views",
    "tensor_federated_fit",
    "weighted_average",
]
