"""Algorithm plug-ins shipped with fedstrata, registered with the node core on import.

See :mod:`fedstrata.nodes.algorithm` for the interface and ``docs/architecture.md``
for a worked example of adding one.
"""

from fedstrata.algorithms.multiview import MultiViewModel
from fedstrata.nodes.algorithm import register_algorithm
from fedstrata.plugins.multiview import multiview_algorithm

register_algorithm(MultiViewModel, multiview_algorithm)
