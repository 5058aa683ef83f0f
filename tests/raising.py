"""A real node that raises on a chosen delivery: the test double of a node's bug.

Used by the crash tests of every runner (simulator, MQTT runner, ``fedstrata node``).
"""

from __future__ import annotations

from typing import Any

from fedstrata.nodes.events import Delivered, Event


class RaisingNode:
    """A real node that raises ``exc`` on its ``after``-th delivered message."""

    def __init__(self, node: Any, after: int, exc: Exception) -> None:
        self.inner = node
        self.node_id = node.node_id
        self.after = after
        self.exc = exc
        self.seen = 0

    def handle(self, event: Event) -> list[Any]:
        """Pass ``event`` on, or raise on the chosen delivery."""
        if isinstance(event, Delivered):
            self.seen += 1
            if self.seen == self.after:
                raise self.exc
        return self.inner.handle(event)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
