"""Events a node consumes and effects it returns (the sans-IO boundary).

A node is a plain object with one method, ``handle(event) -> list[Effect]``.
Runners (``fedstrata.sim`` in virtual time, ``fedstrata.broker`` over real MQTT)
turn the world into events and carry out the effects; nothing in here knows
about sockets, SimPy or asyncio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from fedstrata.errors import NodeProtocolError
from fedstrata.wire import Unpacked

__all__ = [
    "CancelTimer",
    "Compute",
    "Delivered",
    "Effect",
    "Event",
    "Finished",
    "PeerLost",
    "Publish",
    "Record",
    "SetTimer",
    "Started",
    "Subscribe",
    "TimerFired",
]


def _check_now(now: float) -> None:
    if not (isinstance(now, int | float) and math.isfinite(now) and now >= 0):
        raise NodeProtocolError(f"event time must be a finite number >= 0, got {now!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of everything a runner hands to a node; ``now`` is the node's clock in seconds."""

    now: float

    def __post_init__(self) -> None:
        _check_now(self.now)


@dataclass(frozen=True, slots=True, kw_only=True)
class Started(Event):
    """The node is connected and may subscribe and publish."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivered(Event):
    """A message arrived on ``topic`` (already matched against the node's subscriptions).

    ``payload``: its bytes, or in the simulator a :class:`~fedstrata.wire.Unpacked`
    message of the same size (nothing there reads the bytes).
    """

    topic: str
    payload: bytes | Unpacked

    def __post_init__(self) -> None:
        _check_now(self.now)
        if not isinstance(self.payload, bytes | Unpacked):
            raise NodeProtocolError(f"payload must be bytes, got {type(self.payload).__name__}")


@dataclass(frozen=True, slots=True, kw_only=True)
class TimerFired(Event):
    """A timer set earlier with :class:`SetTimer` expired."""

    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerLost(Event):
    """A peer disappeared (its last-will message was published)."""

    node_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Effect:
    """Base of everything a node asks its runner to do."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Publish(Effect):
    """Publish ``payload`` on ``topic`` with MQTT ``qos`` (0 or 1) and ``retain``.

    ``payload``: bytes, or an :class:`~fedstrata.wire.Unpacked` message from a node
    built for the simulator (its seal made with ``in_process=True``).
    """

    topic: str
    payload: bytes | Unpacked
    qos: int = 1
    retain: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.payload, bytes | Unpacked):
            raise NodeProtocolError(f"payload must be bytes, got {type(self.payload).__name__}")
        if self.qos not in (0, 1):
            raise NodeProtocolError(f"qos must be 0 or 1, got {self.qos!r}")
        if not self.topic or any(ch in self.topic for ch in "+#"):
            raise NodeProtocolError(f"cannot publish to topic {self.topic!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscribe(Effect):
    """Subscribe to an MQTT topic filter (``+`` and ``#`` wildcards allowed)."""

    pattern: str
    qos: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class SetTimer(Effect):
    """Fire ``TimerFired(name)`` after ``delay_s``; setting a live name re-arms it."""

    name: str
    delay_s: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.delay_s) and self.delay_s >= 0):
            raise NodeProtocolError(f"timer delay must be finite and >= 0, got {self.delay_s!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelTimer(Effect):
    """Cancel a pending timer; cancelling an unknown name is a no-op."""

    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Compute(Effect):
    """Local work of ``flops`` floating-point operations; a runner may charge virtual time."""

    flops: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.flops) and self.flops >= 0):
            raise NodeProtocolError(f"flops must be finite and >= 0, got {self.flops!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Record(Effect):
    """A fact for the run record (``kind`` names the row type)."""

    kind: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Finished(Effect):
    """The node is done; ``result`` is what it leaves behind (final state, labels...)."""

    result: Any = None
