"""Toy nodes for kernel tests: no clustering, just the sans-IO contract."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from fedstrata.nodes.events import (
    Delivered,
    Effect,
    Event,
    Publish,
    SetTimer,
    Started,
    Subscribe,
    TimerFired,
)

React = Callable[["Toy", Event], Iterable[Effect]]


class Toy:
    """A node that logs every event and reacts through an optional callback.

    ``start`` are the effects returned on ``Started``; ``react(node, event)``
    answers every other event. ``got`` lists ``(kind, now, detail)`` tuples.
    """

    def __init__(
        self, node_id: str, *, start: Iterable[Effect] = (), react: React | None = None
    ) -> None:
        self.node_id = node_id
        self.start = list(start)
        self.react = react
        self.got: list[tuple[str, float, Any]] = []

    def handle(self, ev: Event) -> list[Effect]:
        if isinstance(ev, Started):
            self.got.append(("start", ev.now, None))
            return list(self.start)
        if isinstance(ev, Delivered):
            self.got.append(("deliver", ev.now, (ev.topic, ev.payload)))
        elif isinstance(ev, TimerFired):
            self.got.append(("timer", ev.now, ev.name))
        return list(self.react(self, ev)) if self.react else []

    def deliveries(self) -> list[tuple[float, str, bytes]]:
        return [(t, d[0], d[1]) for kind, t, d in self.got if kind == "deliver"]


def sink(node_id: str, *patterns: str, qos: int = 1) -> Toy:
    """Subscribes to ``patterns`` and only listens."""
    return Toy(node_id, start=[Subscribe(pattern=p, qos=qos) for p in patterns])


def source(
    node_id: str, topic: str, payloads: Iterable[bytes], *, qos: int = 1, retain: bool = False
) -> Toy:
    """Publishes every payload on ``topic`` when started."""
    return Toy(
        node_id,
        start=[Publish(topic=topic, payload=p, qos=qos, retain=retain) for p in payloads],
    )


def publish_at(node_id: str, schedule: list[tuple[float, str, bytes, int]]) -> Toy:
    """Publishes ``(time, topic, payload, qos)`` items at their times, using timers."""
    by_name = {f"p{i}": item for i, item in enumerate(schedule)}

    def react(node: Toy, ev: Event) -> list[Effect]:
        if isinstance(ev, TimerFired) and ev.name in by_name:
            _, topic, payload, qos = by_name[ev.name]
            return [Publish(topic=topic, payload=payload, qos=qos)]
        return []

    return Toy(
        node_id,
        start=[SetTimer(name=name, delay_s=item[0]) for name, item in by_name.items()],
        react=react,
    )
