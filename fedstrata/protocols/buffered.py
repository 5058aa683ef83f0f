"""The ``buffered`` protocol kind: FedBuff, a model step every ``buffer_size`` arrivals.

The strategy is :class:`~fedstrata.protocols.asynchronous.FedBuff`; its keys are those
of ``async`` plus K (:class:`BufferedSettings`).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from fedstrata.nodes.strategy import Placement, Strategy
from fedstrata.protocols.asynchronous import AsyncSettings, FedBuff
from fedstrata.protocols.kind import Capabilities, ProtocolKind
from fedstrata.protocols.sync import sync_rounds

__all__ = ["BUFFERED", "BufferedSettings"]


class BufferedSettings(AsyncSettings):
    """Keys of protocol kind ``buffered`` (FedBuff), flat under ``protocol:``.

    Those of ``async`` (``mixing``, ``staleness``, ``max_staleness``) and
    ``buffer_size``: K in ``1 .. 100000``, the arrivals (from distinct children) per
    model step; a K above the number of children is that number.
    """

    buffer_size: Annotated[int, Field(ge=1, le=100_000, description="1 .. 100000")] = 2


def _buffered_strategy(protocol: Any, settings: BufferedSettings, at: Placement) -> Strategy:
    if not at.root:
        return sync_rounds(protocol, at)
    return FedBuff(
        at.children,
        buffer_size=settings.buffer_size,
        **settings.strategy_args(at.seed, at.deadline_s),
    )


BUFFERED = ProtocolKind(
    name="buffered",
    summary="FedBuff: the model steps every buffer_size arrivals, staleness-weighted",
    settings=BufferedSettings,
    capabilities=Capabilities(own_partials=True),
    factory=_buffered_strategy,
)
"""The ``buffered`` kind's declaration, registered by :mod:`fedstrata.registry`."""
