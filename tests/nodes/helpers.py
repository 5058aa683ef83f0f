"""A synchronous in-memory router for sans-IO nodes (no SimPy, no asyncio)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from fedstrata.mqtt import topic_matches
from fedstrata.nodes.events import (
    CancelTimer,
    Compute,
    Delivered,
    Finished,
    Publish,
    Record,
    SetTimer,
    Started,
    Subscribe,
    TimerFired,
)


@dataclass
class Loopback:
    """Turns Publish effects into Delivered events; timers fire only when asked.

    ``drop`` is a predicate (publisher, subscriber, topic) -> bool to lose messages.
    """

    nodes: dict[str, Any]
    now: float = 0.0
    subs: dict[str, list[str]] = field(default_factory=dict)
    retained: dict[str, bytes] = field(default_factory=dict)
    timers: dict[str, dict[str, float]] = field(default_factory=dict)
    queue: deque = field(default_factory=deque)
    records: list[Record] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    published: list[tuple[str, Publish]] = field(default_factory=list)
    drop: Any = None

    def start(self) -> None:
        for name in self.nodes:
            self._apply(name, self.nodes[name].handle(Started(now=self.now)))

    def _apply(self, name: str, effects: list) -> None:
        for eff in effects:
            if isinstance(eff, Subscribe):
                self.subs.setdefault(name, []).append(eff.pattern)
                for topic, payload in self.retained.items():
                    if topic_matches(eff.pattern, topic):
                        self.queue.append((name, topic, payload, name))
            elif isinstance(eff, Publish):
                self.published.append((name, eff))
                if eff.retain:
                    self.retained[eff.topic] = eff.payload
                for other, patterns in self.subs.items():
                    if other in self.results:
                        continue
                    wanted = any(topic_matches(p, eff.topic) for p in patterns)
                    if wanted and (self.drop is None or not self.drop(name, other, eff.topic)):
                        self.queue.append((other, eff.topic, eff.payload, name))
            elif isinstance(eff, SetTimer):
                self.timers.setdefault(name, {})[eff.name] = self.now + eff.delay_s
            elif isinstance(eff, CancelTimer):
                self.timers.get(name, {}).pop(eff.name, None)
            elif isinstance(eff, Record):
                self.records.append(eff)
            elif isinstance(eff, Finished):
                self.results[name] = eff.result
            elif isinstance(eff, Compute):
                pass

    def run(self, max_steps: int = 100_000, *, until_quiet: bool = True) -> None:
        """Deliver until quiet; then fire the earliest timer; repeat until nothing is left."""
        for _ in range(max_steps):
            if self.queue:
                dst, topic, payload, _src = self.queue.popleft()
                if dst in self.results:
                    continue
                self._apply(
                    dst,
                    self.nodes[dst].handle(Delivered(now=self.now, topic=topic, payload=payload)),
                )
                continue
            pending = [
                (t, n, k)
                for n, ts in self.timers.items()
                for k, t in ts.items()
                if n not in self.results
            ]
            if not pending:
                return
            t, n, k = min(pending)
            self.now = max(self.now, t)
            del self.timers[n][k]
            self._apply(n, self.nodes[n].handle(TimerFired(now=self.now, name=k)))
        if until_quiet:
            raise AssertionError("loopback did not go quiet")

    def kinds(self, kind: str) -> list[dict]:
        return [r.fields for r in self.records if r.kind == kind]
