"""What a protocol kind declares about itself, and the registry of declarations.

A protocol kind is one :class:`ProtocolKind`: its name (``protocol.kind``), a typed
settings model for the keys only it uses (a subclass of :class:`KindSettings`, with
bounds and docs; the keys sit flat under ``protocol:`` in a scenario file), its
:class:`Capabilities` (what ``fedstrata validate`` lets it run with) and the factory
that builds an aggregator's :class:`~fedstrata.nodes.strategy.Strategy` from those
settings. The scenario schema, the reference docs and the JSON schema read the
declarations from here; the node core only sees the strategy factory, which
:func:`register_kind` hands to :func:`fedstrata.nodes.strategy.register_strategy`.

Declarations are registered at the composition root (:mod:`fedstrata.registry`, one
line per kind); this module imports no kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fedstrata.errors import ValidationError
from fedstrata.nodes.strategy import Placement, Strategy, register_strategy, unregister_strategy
from fedstrata.settings import Strict

__all__ = [
    "Capabilities",
    "KindFactory",
    "KindSettings",
    "ProtocolKind",
    "protocol_kind",
    "protocol_kinds",
    "register_kind",
    "unregister_kind",
]


class KindSettings(Strict):
    """The base of a protocol kind's own settings (frozen, strict, no unknown keys).

    A subclass declares the keys only its kind uses, each with its bounds (pydantic
    ``Field``) and a description; a scenario gives them flat under ``protocol:``.
    """

    def conflicts(self, rule: str) -> list[tuple[str, str]]:
        """Problems of these settings with the protocol's ``rule``: (key, reason) pairs.

        The default finds none; a kind whose setting needs a particular rule overrides it.
        """
        return []


S = TypeVar("S", bound=KindSettings)


@dataclass(frozen=True)
class Capabilities:
    """What a protocol kind can run with; ``fedstrata validate`` refuses the rest.

    Parameters
    ----------
    secure_aggregation
        Secure aggregation's masked sums can run under it (every round sums the masked
        partials of the children it asked, no more, no less).
    own_partials
        It keeps each child's own partial and mixes it into the model as it arrives:
        it needs an additive rule (not ``median``).

    Which kinds an algorithm runs on is the algorithm's to say (its plug-in's
    ``protocol_kinds``, :class:`fedstrata.plugins.spec.Capabilities`): the deep
    family's lock-step phases name ``sync`` and ``adaptive``.
    """

    secure_aggregation: bool = False
    own_partials: bool = False

    def secure_refusal(self, kind: str) -> str:
        """Why secure aggregation cannot run with this kind (for a located message)."""
        if self.own_partials:
            return f"kind {kind!r} needs each child's own partial"
        return f"kind {kind!r} does not sum exactly the children a round asked"


KindFactory = Callable[[Any, Any, Placement], Strategy]
"""``factory(protocol, settings, placement)``: one aggregator's strategy, given the kind's
own settings (a :class:`KindSettings`) and where the aggregator sits
(:class:`~fedstrata.nodes.strategy.Placement`)."""


@dataclass(frozen=True)
class ProtocolKind:
    """One protocol kind's declaration (see the module docstring).

    Parameters
    ----------
    name
        The value of ``protocol.kind``.
    summary
        One line for the reference docs.
    settings
        The model of its own keys; ``settings()`` are its defaults.
    capabilities
        What it runs with.
    factory
        Builds one aggregator's strategy (:data:`KindFactory`).
    """

    name: str
    summary: str
    settings: type[KindSettings]
    capabilities: Capabilities
    factory: KindFactory

    def settings_of(self, protocol: Any) -> KindSettings:
        """``protocol.settings`` if they are this kind's, its defaults if None."""
        given = getattr(protocol, "settings", None)
        if given is None:
            return self.settings()
        if type(given) is not self.settings:
            raise ValidationError(
                f"protocol kind {self.name!r} takes {self.settings.__name__}, "
                f"got {type(given).__name__}"
            )
        return given

    def strategy(self, protocol: Any, placement: Placement) -> Strategy:
        """The strategy of one aggregator (a :class:`~fedstrata.nodes.strategy.StrategyFactory`).

        Refuses settings of another kind and a secure-aggregation protocol the kind
        cannot run, then calls :attr:`factory`.
        """
        settings = self.settings_of(protocol)
        if (
            getattr(protocol, "secure", "none") != "none"
            and not self.capabilities.secure_aggregation
        ):
            raise ValidationError(
                "secure aggregation sums each round's masked partials: "
                + self.capabilities.secure_refusal(self.name)
            )
        problems = settings.conflicts(getattr(protocol, "rule", ""))
        if problems:
            raise ValidationError("; ".join(f"{key}: {reason}" for key, reason in problems))
        return self.factory(protocol, settings, placement)


_KINDS: dict[str, ProtocolKind] = {}


def register_kind(kind: ProtocolKind) -> None:
    """Declare ``kind``: the schema accepts it and aggregators build its strategy.

    Called by the composition root (:mod:`fedstrata.registry`) for every built-in kind;
    a test or an extension may register its own (and :func:`unregister_kind` it).
    """
    _KINDS[kind.name] = kind
    register_strategy(kind.name, kind.strategy)


def unregister_kind(name: str) -> None:
    """Forget the kind ``name`` (its declaration and its strategy factory)."""
    _KINDS.pop(name, None)
    unregister_strategy(name)


def protocol_kinds() -> dict[str, ProtocolKind]:
    """Every registered kind by name, in registration order (built-ins first).

    The built-ins are there once the composition root (:mod:`fedstrata.registry`) has
    been imported; the application layer imports it before asking.
    """
    return dict(_KINDS)


def protocol_kind(name: str) -> ProtocolKind | None:
    """The declaration of kind ``name``, or None if no such kind is registered."""
    return _KINDS.get(name)
