"""The composition root: registers the built-in algorithm plug-ins and protocol kinds.

The node core (:mod:`fedstrata.nodes`) knows no algorithm family and no protocol kind:
it looks both up in registries that this module fills. Whatever builds nodes (the
simulator's and the MQTT runner's builders, ``fedstrata node``) imports it first.
"""

from __future__ import annotations

import fedstrata.plugins  # noqa: F401  (registers the built-in algorithm families)
from fedstrata.nodes.strategy import register_strategy
from fedstrata.protocols import FACTORIES

for _kind, _factory in FACTORIES.items():
    register_strategy(_kind, _factory)
