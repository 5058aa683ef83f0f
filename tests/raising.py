"""A real node that raises on a chosen delivery: the test double of a node's bug.

Used by the crash tests of every runner (simulator, MQTT runner, ``fedstrata node``).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

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


def raise_in_run(
    monkeypatch: pytest.MonkeyPatch, runner: ModuleType, node_id: str, after: int, exc: Exception
) -> None:
    """Make ``node_id`` of the federations ``runner`` builds a :class:`RaisingNode`.

    ``runner`` is the module whose ``build_federation`` a run calls
    (``fedstrata.scenarios.run`` or ``fedstrata.scenarios.run_mqtt``).
    """
    build_federation = runner.build_federation

    def build(*args: Any, **kwargs: Any) -> Any:
        fed = build_federation(*args, **kwargs)
        ns = fed.sim.engine.nodes[node_id]
        ns.node = RaisingNode(ns.node, after, exc)
        return fed

    monkeypatch.setattr(runner, "build_federation", build)
