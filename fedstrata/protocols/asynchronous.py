"""Asynchronous aggregation: FedAsync (mix every arrival) and FedBuff (every K arrivals).

Both keep, for every child, its current *share* of an additive aggregate
(:class:`~fedstrata.nodes.strategy.Ledger`) and step the global model from the
sum of all shares, so a child that has not answered lately still counts by its last
contribution. An arriving partial computed on version τ while the model is at
version t (staleness t − τ) moves its child's share by the weight
``α · s(t − τ)`` (:func:`~fedstrata.protocols.staleness.staleness_weight`: constant,
polynomial or hinge):

* :class:`FedAsync` ("Asynchronous Federated Optimization", Xie, Koyejo and Gupta,
  2019) steps the model at every arrival and asks only that child again;
* :class:`FedBuff` ("Federated Learning with Buffered Asynchronous Aggregation",
  Nguyen et al., 2022) buffers K arrivals, applies them together and asks those K.

FedAsync mixes the whole model, ``x ← (1 − α_t) x + α_t x_new``. Here the mixing acts
on the arriving child's share of a sum instead: with sufficient statistics a single
client's partial is not a model, and replacing its share (α_t = 1) is exactly
incremental EM, whose fixed point is the centralised one. FedBuff's server step
divides by K; mixing shares needs no such normalisation. Both are our reading, for
additive partials; the ``median`` rule is not additive and is refused.

A child whose ask is older than the deadline is asked again with the next version,
so a lost message or a crashed client is retried rather than forgotten.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from fedstrata.errors import ValidationError
from fedstrata.nodes.algorithm import Algorithm
from fedstrata.nodes.strategy import Closing, Contribution, Ledger, Placement, Strategy
from fedstrata.protocols.kind import Capabilities, KindSettings, ProtocolKind
from fedstrata.protocols.staleness import staleness_weight
from fedstrata.protocols.sync import sync_rounds
from fedstrata.settings import Strict

__all__ = ["ASYNC", "AsyncSettings", "FedAsync", "FedBuff", "StalenessSettings"]

#: The parameters each staleness function takes.
_TAKES = {"constant": (), "polynomial": ("a",), "hinge": ("a", "b")}


class FedAsync(Strategy):
    """Step the model at every arriving partial, staleness-weighted (module docstring).

    Parameters
    ----------
    children, seed
        The aggregator's children; seed (unused: nothing is sampled).
    alpha
        Mixing weight α in (0, 1] of a fresh partial.
    staleness, a, b
        The staleness function (``constant``, ``polynomial``, ``hinge``) and its
        parameters (defaults: the paper's a = 0.5; a = 10, b = 4).
    max_staleness
        Replies more versions behind are dropped as late.
    retry_s
        A child asked this long ago without answering is asked again.
    """

    kind = "async"
    needs_additive = True

    def __init__(
        self,
        children: Sequence[str],
        *,
        seed: int = 0,
        alpha: float = 1.0,
        staleness: str = "polynomial",
        a: float | None = None,
        b: float | None = None,
        max_staleness: int = 1000,
        retry_s: float = 60.0,
    ) -> None:
        super().__init__(children, quorum=0.0, seed=seed)
        if not 0.0 < alpha <= 1.0:
            raise ValidationError(f"alpha must lie in (0, 1], got {alpha!r}")
        if max_staleness < 0:
            raise ValidationError(f"max_staleness must be >= 0, got {max_staleness!r}")
        staleness_weight(staleness, 0, a=a, b=b)  # validates kind and parameters
        self.alpha = alpha
        self.staleness = staleness
        self.a, self.b = a, b
        self.max_staleness = max_staleness
        self.retry_s = retry_s
        self._ledger: Ledger | None = None
        self._pending: list[Contribution] = []
        self._asked_at: dict[str, float] = {}
        self._next: set[str] | None = None  # None: everyone
        self._merged: dict[str, int] = {}  # the newest version merged per child
        self._versions = 0  # closes that merged something
        self._last_join = 0  # the close at which the newest child got its first share
        self._superseded = 0

    def settled(self) -> bool:
        """Every child has a share, or none has joined for a whole epoch of versions.

        A child silent for as many versions as there are children (crashed,
        partitioned) no longer holds the stopping tests back.
        """
        if self._ledger is None:
            return False
        if len(self._ledger.shares) >= len(self.children):
            return True
        return self._versions - self._last_join >= len(self.children)

    def weight(self, staleness: int) -> float:
        """α · s(staleness)."""
        return self.alpha * float(staleness_weight(self.staleness, staleness, a=self.a, b=self.b))

    def accepts(self, staleness: int) -> bool:
        """Replies up to ``max_staleness`` versions old."""
        return 0 <= staleness <= self.max_staleness

    def open(self, version: int, now: float) -> tuple[list[str] | None, dict[str, Any]]:
        """Ask the children just merged, and those whose ask has timed out."""
        if self._next is None:
            asked = set(self.children)
        else:
            overdue = {c for c, t in self._asked_at.items() if now - t >= self.retry_s}
            asked = self._next | overdue
        self._next = set()
        for c in asked:
            self._asked_at[c] = now
        self.asked = tuple(sorted(asked))
        if len(asked) == len(self.children):
            return None, {}
        return list(self.asked), {}

    def offer(self, c: Contribution) -> bool:
        """Take the reply unless the child's share already holds a newer one; close at once."""
        if c.version < self._merged.get(c.sender, -1):
            self._superseded += 1  # mixing it would move the share back to older data
            return False
        self._pending.append(c)
        return self._ready()

    def _ready(self) -> bool:
        return True

    def close(self, algorithm: Algorithm, *, deadline: bool) -> Closing:
        """Mix the pending partials into their children's shares; the sum of all shares."""
        if self._ledger is None:
            if not algorithm.additive:
                raise ValidationError(f"{self.kind} needs additive partials ({algorithm.name})")
            self._ledger = Ledger(algorithm)
        pending, self._pending = self._pending, []
        if not pending:
            self._next = None if deadline else self._next  # nothing came: ask everyone again
            return Closing(None, 0, 1)
        weights = []
        self._versions += 1
        for c in pending:
            if c.sender not in self._ledger.shares:
                self._last_join = self._versions
            w = self.weight(c.staleness)
            weights.append(w)
            self._ledger.put(c.sender, c.body, w)
            self._merged[c.sender] = max(c.version, self._merged.get(c.sender, -1))
            self._asked_at.pop(c.sender, None)
            assert self._next is not None
            self._next.add(c.sender)
        fields: dict[str, Any] = {
            "staleness_max": max(c.staleness for c in pending),
            "staleness_mean": sum(c.staleness for c in pending) / len(pending),
            "mix_weight_min": min(weights),
            "shares": len(self._ledger.shares),
            "superseded": self._superseded,
        }
        senders = len({c.sender for c in pending})
        return Closing(self._ledger.total(), senders, 1, fields)

    def describe(self) -> dict[str, Any]:
        """Kind, α, staleness function and limits."""
        return {
            "kind": self.kind,
            "alpha": self.alpha,
            "staleness": self.staleness,
            "max_staleness": self.max_staleness,
        }


class FedBuff(FedAsync):
    """Step the model every ``buffer_size`` arrivals (FedBuff), staleness-weighted."""

    kind = "buffered"

    def __init__(self, children: Sequence[str], *, buffer_size: int = 2, **kwargs: Any) -> None:
        super().__init__(children, **kwargs)
        if buffer_size < 1:
            raise ValidationError(f"buffer_size must be >= 1, got {buffer_size!r}")
        self.buffer_size = min(buffer_size, len(self.children))

    def _ready(self) -> bool:
        return len({c.sender for c in self._pending}) >= self.buffer_size

    def describe(self) -> dict[str, Any]:
        """As :class:`FedAsync`, plus K."""
        return {**super().describe(), "buffer_size": self.buffer_size}


class StalenessSettings(Strict):
    """Staleness function of the asynchronous kinds ("Asynchronous Federated Optimization").

    ``function``: ``constant`` s = 1, ``polynomial`` s = (τ + 1)^(−a), ``hinge`` s = 1
    for τ ≤ b else 1 / (a (τ − b) + 1); ``a`` > 0 (``polynomial`` and ``hinge``), ``b``
    >= 0 (``hinge``). Unset parameters take the paper's values (a = 0.5; a = 10, b = 4).
    """

    function: Literal["constant", "polynomial", "hinge"] = "polynomial"
    a: Annotated[float, Field(gt=0.0, le=1e6, description="(0, 1e6]")] | None = None
    b: Annotated[float, Field(ge=0.0, le=1e6, description="[0, 1e6]")] | None = None

    @field_validator("a", "b")
    @classmethod
    def _taken(cls, value: float | None, info: ValidationInfo) -> float | None:
        function = info.data.get("function")
        if value is not None and function in _TAKES and info.field_name not in _TAKES[function]:
            raise ValueError(
                f"the {function} staleness function takes no {info.field_name}; remove it"
            )
        return value


class AsyncSettings(KindSettings):
    """Keys of protocol kind ``async`` (FedAsync), flat under ``protocol:``.

    ``mixing``: the weight α in ``(0, 1]`` of a fresh contribution; ``staleness``: the
    :class:`StalenessSettings` function that discounts a late one; ``max_staleness``
    (``0 .. 100000`` model versions): replies further behind are dropped as late.
    """

    mixing: Annotated[float, Field(gt=0.0, le=1.0, description="(0, 1]")] = 1.0
    staleness: StalenessSettings = StalenessSettings()
    max_staleness: Annotated[int, Field(ge=0, le=100_000, description="0 .. 100000")] = 1000

    def strategy_args(self, seed: int, retry_s: float) -> dict[str, Any]:
        """The keyword arguments of :class:`FedAsync` under these settings."""
        return {
            "seed": seed,
            "alpha": self.mixing,
            "staleness": self.staleness.function,
            "a": self.staleness.a,
            "b": self.staleness.b,
            "max_staleness": self.max_staleness,
            "retry_s": retry_s,
        }


def _async_strategy(
    protocol: Any,
    settings: AsyncSettings,
    at: Placement,
) -> Strategy:
    if not at.root:
        return sync_rounds(protocol, at)
    return FedAsync(at.children, **settings.strategy_args(at.seed, at.deadline_s))


ASYNC = ProtocolKind(
    name="async",
    summary="FedAsync: every arriving contribution is mixed at once, staleness-weighted",
    settings=AsyncSettings,
    capabilities=Capabilities(own_partials=True),
    factory=_async_strategy,
)
"""The ``async`` kind's declaration, registered by :mod:`fedstrata.registry`."""
