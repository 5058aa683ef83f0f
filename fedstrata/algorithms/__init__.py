"""Pure numpy multi-view clustering: client steps, statistics, server rules, estimators.

The estimators follow scikit-learn conventions (``fit(views)`` with a list of
(n, d_h) arrays). The federated building blocks are pure functions:
:func:`local_statistics` (client), :func:`combine` (server) and the paper's
parameter rules in :mod:`fedstrata.algorithms.combine`.
"""

from fedstrata.algorithms.baselines import MVFCM as MVFCM
from fedstrata.algorithms.baselines import ConcatKMeans as ConcatKMeans
from fedstrata.algorithms.combine import ParamUpdate as ParamUpdate
from fedstrata.algorithms.combine import aggregate_params as aggregate_params
from fedstrata.algorithms.combine import coordinate_median as coordinate_median
from fedstrata.algorithms.combine import has_converged as has_converged
from fedstrata.algorithms.combine import personalize as personalize
from fedstrata.algorithms.combine import plain_mean as plain_mean
from fedstrata.algorithms.combine import weighted_average as weighted_average
from fedstrata.algorithms.federated import FederatedResult as FederatedResult
from fedstrata.algorithms.federated import federated_fit as federated_fit
from fedstrata.algorithms.hk_mvfc import HKMVFC as HKMVFC
from fedstrata.algorithms.multiview import MultiViewModel as MultiViewModel
from fedstrata.algorithms.multiview import State as State
from fedstrata.algorithms.multiview import Stats as Stats
from fedstrata.algorithms.multiview import combine as combine
from fedstrata.algorithms.multiview import local_statistics as local_statistics
from fedstrata.algorithms.multiview import prepare_views as prepare_views
from fedstrata.algorithms.mvkm_ed import MVKMED as MVKMED

__all__ = [
    "HKMVFC",
    "MVFCM",
    "MVKMED",
    "ConcatKMeans",
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
    "weighted_average",
]
