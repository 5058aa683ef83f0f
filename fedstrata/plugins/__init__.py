"""Algorithm plug-ins shipped with fedstrata, registered with the node core on import.

See :mod:`fedstrata.nodes.algorithm` for the interface and ``docs/architecture.md``
for a worked example of adding one.
"""

from typing import Any

from fedstrata.algorithms.deep.config import DeepModel
from fedstrata.algorithms.multiview import MultiViewModel
from fedstrata.algorithms.tensor.model import TensorModel
from fedstrata.nodes.algorithm import Algorithm, register_algorithm
from fedstrata.plugins.deep import deep_algorithm
from fedstrata.plugins.multiview import multiview_algorithm


def _tensor_algorithm(model: Any, protocol: Any, shape: Any) -> Algorithm:
    from fedstrata.plugins.tensor import tensor_algorithm  # loads the family on first use

    return tensor_algorithm(model, protocol, shape)


register_algorithm(MultiViewModel, multiview_algorithm)
register_algorithm(TensorModel, _tensor_algorithm)
register_algorithm(DeepModel, deep_algorithm)
