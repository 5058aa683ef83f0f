"""The tensor-decomposition family of federated heat-kernel multi-view fuzzy clustering.

Implements E-FKMVC, FedHK-PARAFAC2, FedHK-Tucker and FedHK-MVC-Person from
"Personalized Federated Heat-Kernel Enhanced Multi-View Clustering via Advanced Tensor
Decomposition" (Sinaga). The maths is split into:

* :mod:`~fedstrata.algorithms.tensor.model`: :class:`TensorModel` (hyper-parameters,
  validated), the message and model layouts (:func:`message_shapes`,
  :func:`model_shapes`), the first global model (:func:`initial_global`) and the server
  rule on summed messages (:func:`aggregate`, :func:`has_converged`);
* :mod:`~fedstrata.algorithms.tensor.client`: :class:`TensorClient`, the local epochs;
* :mod:`~fedstrata.algorithms.tensor.decompositions`: the tensorly Tucker / PARAFAC2 /
  CP factor models of the centre tensor, the exact weighted least-squares reduction and
  the factor alignment;
* :mod:`~fedstrata.algorithms.tensor.federated`: :func:`tensor_federated_fit`, an
  in-process federation;
* :mod:`~fedstrata.algorithms.tensor.estimators`: scikit-learn style estimators (a
  centralized fit is the federated algorithm with one client).
"""

from typing import Any

from fedstrata.algorithms.tensor.model import (
    METHODS,
    TensorModel,
    aggregate,
    has_converged,
    initial_global,
    message_shapes,
    model_shapes,
)

# The client (tensorly) and the estimators (scikit-learn) load on first use: the model,
# its layouts and the server rule are numpy only, so aggregators and `fedstrata run` of
# other algorithms start without them.
_LAZY = {
    "TensorClient": "fedstrata.algorithms.tensor.client",
    "EFKMVC": "fedstrata.algorithms.tensor.estimators",
    "FedHKMVCPerson": "fedstrata.algorithms.tensor.estimators",
    "FedHKPARAFAC2": "fedstrata.algorithms.tensor.estimators",
    "FedHKTucker": "fedstrata.algorithms.tensor.estimators",
    "TensorFitResult": "fedstrata.algorithms.tensor.federated",
    "tensor_federated_fit": "fedstrata.algorithms.tensor.federated",
}


def __getattr__(name: str) -> Any:
    """Import the client, the estimators and ``tensor_federated_fit`` on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fedstrata.algorithms.tensor' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "EFKMVC",
    "METHODS",
    "FedHKMVCPerson",
    "FedHKPARAFAC2",
    "FedHKTucker",
    "TensorClient",
    "TensorFitResult",
    "TensorModel",
    "aggregate",
    "has_converged",
    "initial_global",
    "message_shapes",
    "model_shapes",
    "tensor_federated_fit",
]
