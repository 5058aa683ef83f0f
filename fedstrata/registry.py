"""The composition root: registers the built-in algorithm plug-ins and protocol kinds.

The node core (:mod:`fedstrata.nodes`) knows no algorithm family and no protocol kind:
it looks both up in registries that this module fills. Whatever builds nodes (the
simulator's and the MQTT runner's builders, ``fedstrata node``) imports it first.
"""

from __future__ import annotations

from fedstrata.plugins.deep_spec import DEEP
from fedstrata.plugins.multiview_spec import MULTIVIEW
from fedstrata.plugins.spec import register_algorithm_plugin
from fedstrata.plugins.tensor_spec import TENSOR
from fedstrata.protocols.asynchronous import ASYNC
from fedstrata.protocols.buffered import BUFFERED
from fedstrata.protocols.kind import register_kind
from fedstrata.protocols.network_aware import ADAPTIVE
from fedstrata.protocols.sync import SYNC

register_kind(SYNC)
register_kind(ASYNC)
register_kind(BUFFERED)
register_kind(ADAPTIVE)

# algorithm plug-ins (declaration and node-side factory); the first is the default
register_algorithm_plugin(MULTIVIEW)
register_algorithm_plugin(TENSOR)
register_algorithm_plugin(DEEP)
