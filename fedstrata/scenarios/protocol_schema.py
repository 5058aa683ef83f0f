"""The ``protocol`` section of a scenario: the keys every kind shares, and the kind's own.

:class:`ProtocolSpec` declares the common keys (rule, rounds, deadlines, stopping,
compression, straggler policy, personalization). The keys that only some kinds use
(``mixing``, ``buffer_size``, ``lambda_net``, ...) are not declared here: each protocol
kind declares them in its own settings model
(:class:`~fedstrata.protocols.kind.ProtocolKind`), and a scenario gives them flat under
``protocol:`` next to the common ones. At validation time the kind named by
``protocol.kind`` is looked up in the registry (so a kind a test registers works), its
model validates its keys, and a key of another kind is refused with the kinds that take
it. The reference docs and the JSON schema list every registered kind's keys
(:meth:`ProtocolSpec.known_fields`).
"""

from __future__ import annotations

import copy
import typing
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    GetJsonSchemaHandler,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic import ValidationError as PydanticValidationError
from pydantic.fields import FieldInfo
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, InitErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ErrorType

from fedstrata.errors import ScenarioError
from fedstrata.protocols.kind import Capabilities, KindSettings, ProtocolKind, protocol_kinds
from fedstrata.scenarios.fields import MAX_LOCAL_ITERS, MAX_ROUNDS, PositiveSeconds, Probability
from fedstrata.settings import ScenarioErrors, Strict

__all__ = [
    "CompressionSpec",
    "MixingSpec",
    "PersonalizationSpec",
    "ProtocolSpec",
    "registered_kinds",
]

_ERROR_TYPES = frozenset(typing.get_args(ErrorType))


def registered_kinds() -> dict[str, ProtocolKind]:
    """The protocol kinds a scenario may name: the built-ins and any registered since."""
    import fedstrata.registry  # noqa: F401  (the composition root registers the built-ins)

    return protocol_kinds()


def _choices(names: list[str]) -> str:
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def _registered(kind: str) -> str:
    kinds = list(registered_kinds())
    if kind not in kinds:
        raise PydanticCustomError(
            "literal_error", "Input should be {expected}", {"expected": _choices(kinds)}
        )
    return kind


class CompressionSpec(Strict):
    """Uplink compression of the clients' partials (:mod:`fedstrata.algorithms.compression`).

    ``scheme``: ``none`` (float64, exact), ``float32``, ``float16`` (an array beyond
    float16's range goes as float32) or ``qsgd`` (unbiased stochastic quantisation with
    a per-array scale); ``bits`` (``2 .. 8``, default 8) is for ``qsgd`` only.
    """

    scheme: Literal["none", "float32", "float16", "qsgd"] = "none"
    bits: Annotated[int, Field(ge=2, le=8, description="2 .. 8")] | None = None

    @model_validator(mode="after")
    def _bits_for_qsgd(self) -> CompressionSpec:
        if self.bits is not None and self.scheme != "qsgd":
            raise ScenarioErrors(
                [
                    ScenarioError(
                        f"bits is for scheme qsgd only (scheme is {self.scheme!r}); remove it",
                        path="protocol.compression.bits",
                    )
                ]
            )
        return self


class MixingSpec(Strict):
    """A client's personalization weights: γ_ℓ (centres, Eq. 78), ρ_ℓ (view weights, Eq. 79)."""

    gamma: Probability | None = None
    rho: Probability | None = None


class PersonalizationSpec(Strict):
    """Personalized models next to the global one (FedHK-MVFC Eq. 78/79).

    On the final model every client fits ``local_iters`` (``1 .. 10000``) local
    iterations from the global model (rule ``sum``; the parameter rules already hold a
    local model), blends it with the global one, A_ℓ = γ_ℓ A_global + (1 − γ_ℓ) A_ℓ and
    V_ℓ = ρ_ℓ V_global + (1 − ρ_ℓ) V_ℓ, and labels its samples under the blend.
    γ_ℓ and ρ_ℓ are ``protocol.gamma``/``rho`` unless ``clients`` overrides them for a
    client id. The run reports per-client metrics of both models (``clients.csv``).
    """

    local_iters: Annotated[int, Field(ge=1, le=MAX_LOCAL_ITERS, description="1 .. 10000")] = 5
    clients: dict[str, MixingSpec] = Field(default_factory=dict)


def _line_error(err: Any) -> InitErrorDetails:
    """One pydantic error, as given again to :meth:`ValidationError.from_exception_data`."""
    ctx = err.get("ctx")
    if err["type"] in _ERROR_TYPES:
        kind: Any = err["type"]
    else:  # a custom error: its message is already rendered
        kind, ctx = PydanticCustomError(err["type"], err["msg"]), None
    out = InitErrorDetails(type=kind, loc=tuple(err["loc"]), input=err["input"])
    if ctx is not None:
        out["ctx"] = ctx
    return out


class ProtocolSpec(Strict):
    """Aggregation protocol.

    ``kind`` picks the root's protocol: ``sync`` (rounds), ``async`` (FedAsync: every
    arriving contribution is mixed at once, staleness-weighted), ``buffered`` (FedBuff:
    every ``buffer_size`` arrivals) or ``adaptive`` (a network-aware plan per round,
    FedHK-MVFC §7.3, experimental); middle tiers always run synchronous rounds. The
    keys only some kinds use (``mixing``, ``staleness``, ``max_staleness``,
    ``buffer_size``, ``lambda_net``, ``network_kernel``) are declared by the kind
    (the table says which kinds take each) and refused under another kind.
    ``rounds`` lies in ``1 .. 100000`` (model versions for the asynchronous kinds),
    ``local_iters`` in ``1 .. 10000`` (1 with rule ``sum``), ``deadline_s`` in
    ``(0, 1e9]``, ``tol`` in ``[0, 1e9]``; ``quorum``, ``gamma`` and ``rho`` are
    probabilities; ``qos`` is 0 or 1; ``patience`` lies in ``1 .. 100000``;
    ``compression`` is a :class:`CompressionSpec`.
    """

    kind: Annotated[str, AfterValidator(_registered)] = "sync"
    rule: Literal["sum", "weighted", "mean", "median"] = "sum"
    rounds: Annotated[int, Field(ge=1, le=MAX_ROUNDS, description="1 .. 100000")] = 50
    local_iters: Annotated[int, Field(ge=1, le=MAX_LOCAL_ITERS, description="1 .. 10000")] = 1
    tol: Annotated[float, Field(ge=0.0, le=1e9, description="0 .. 1e9")] = 1e-6
    deadline_s: PositiveSeconds = 60.0
    quorum: Probability = 1.0
    qos: Annotated[int, Field(ge=0, le=1, description="MQTT QoS, 0 or 1")] = 1
    kernel_scope: Literal["global", "local"] | None = None
    gamma: Probability = 0.7
    rho: Probability = 0.7
    #: Consecutive root rounds (setup included) below quorum after which the run stops
    #: with status ``stalled`` instead of waiting out ``rounds``.
    patience: Annotated[int, Field(ge=1, le=MAX_ROUNDS, description="1 .. 100000")] = 10
    #: How ``tol`` is read: ``absolute`` |ΔJ| (or Eq. 86), ``relative`` to the previous
    #: value, ``per_sample`` |Δ(J/n)| with n the contributing samples (rule ``sum``).
    tol_mode: Literal["absolute", "relative", "per_sample"] = "absolute"
    #: Also end ``converged`` once J/n has not improved on its best by more than
    #: ``plateau_tol`` (relative) for this many successful rounds; ``null``: off.
    plateau: Annotated[int, Field(ge=1, le=MAX_ROUNDS, description="1 .. 100000")] | None = None
    plateau_tol: Annotated[float, Field(ge=0.0, lt=1.0, description="0 <= tol < 1")] = 1e-3
    #: How clients compress their partials on the uplink (aggregators send float64).
    compression: CompressionSpec = CompressionSpec()
    #: Synchronous rounds: ``wait`` for the wanted replies (or the deadline), ``drop``
    #: the rest once the quorum replied, or ``use_last`` partials of those missing.
    stragglers: Literal["wait", "drop", "use_last"] = "wait"
    #: Fraction of an aggregator's clients a round wants (client sampling).
    sample: Annotated[float, Field(gt=0.0, le=1.0, description="(0, 1]")] = 1.0
    #: Over-selection: ask ceil(k · (1 + over_select)) clients, use the first k.
    over_select: Annotated[float, Field(ge=0.0, le=100.0, description="[0, 100]")] = 0.0
    #: Per-client personalized models next to the global one; ``null``: off.
    personalization: PersonalizationSpec | None = None

    #: The kind's own settings, validated by the kind's model (None: its defaults).
    _settings: KindSettings | None = PrivateAttr(default=None)

    @property
    def settings(self) -> KindSettings:
        """The kind's own settings (its declared model; the defaults if none were given)."""
        if self._settings is not None:
            return self._settings
        return self.declaration.settings()

    @property
    def declaration(self) -> ProtocolKind:
        """The declaration of this protocol's kind (from the registry)."""
        found = registered_kinds().get(self.kind)
        if found is None:
            raise ScenarioError(
                f"no protocol kind {self.kind!r} is registered", path="protocol.kind"
            )
        return found

    @property
    def capabilities(self) -> Capabilities:
        """What this protocol's kind runs with (its declaration's capabilities)."""
        return self.declaration.capabilities

    @classmethod
    def known_fields(cls) -> dict[str, FieldInfo]:
        """Every key ``protocol:`` may hold: the common ones, then each registered kind's.

        A kind's key is described with the kinds that take it; ``kind`` lists the
        registered kinds; ``personalization`` stays last. The reference docs and the
        loader's "known keys" read this rather than :attr:`model_fields`.
        """
        kinds = registered_kinds()
        fields = dict(cls.model_fields)
        last = fields.pop("personalization")
        kind = copy.copy(fields["kind"])
        kind.annotation = Literal[tuple(kinds)]  # type: ignore[assignment]
        kind.metadata = []
        fields["kind"] = kind
        for declared in kinds.values():
            for key, field in declared.settings.model_fields.items():
                if key in fields:
                    continue
                takers = [k for k, d in kinds.items() if key in d.settings.model_fields]
                own = copy.copy(field)
                note = f"kind {' or '.join(takers)} only"
                own.description = f"{note}; {field.description}" if field.description else note
                fields[key] = own
        fields["personalization"] = last
        return fields

    @model_validator(mode="wrap")
    @classmethod
    def _with_kind_settings(
        cls, data: Any, handler: ModelWrapValidatorHandler[ProtocolSpec]
    ) -> ProtocolSpec:
        """Validate the common keys, and the kind's own with the kind's declared model."""
        if not isinstance(data, dict):
            return handler(data)
        kind = data.get("kind", "sync")
        declared = registered_kinds().get(kind) if isinstance(kind, str) else None
        common, own, wrong = _split_keys(data, declared)
        problems: list[Any] = []
        spec: ProtocolSpec | None = None
        settings: KindSettings | None = None
        try:
            spec = handler(common)
        except PydanticValidationError as exc:
            problems += exc.errors()
        if declared is not None:
            try:
                settings = declared.settings.model_validate(own)
            except PydanticValidationError as exc:
                problems += exc.errors()
        if problems:
            raise _all_errors(cls.__name__, problems, wrong, data)
        # no problems: the common keys validated, and the kind is a registered one
        assert spec is not None
        assert declared is not None
        assert settings is not None
        wrong += _kind_conflicts(declared, settings, spec.rule)
        if wrong:
            raise ScenarioErrors(wrong)
        spec._settings = settings
        return spec

    @model_validator(mode="after")
    def _per_sample_needs_sum(self) -> ProtocolSpec:
        if self.tol_mode == "per_sample" and self.rule != "sum":
            raise ScenarioErrors(
                [
                    ScenarioError(
                        "per_sample tests the objective of summed statistics: it needs "
                        f"rule: sum (rule is {self.rule!r}); use relative",
                        path="protocol.tol_mode",
                    )
                ]
            )
        return self

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        """The kind's own keys flat among the common ones (before ``personalization``)."""
        out = handler(self)
        if not isinstance(out, dict) or self._settings is None:
            return out
        own = self._settings.model_dump(
            mode=info.mode,
            exclude_none=info.exclude_none,
            exclude_defaults=info.exclude_defaults,
            exclude_unset=info.exclude_unset,
        )
        items = list(out.items())
        at = next((i for i, (k, _) in enumerate(items) if k == "personalization"), len(items))
        return dict(items[:at] + list(own.items()) + items[at:])

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The common keys' schema plus every registered kind's keys (flat)."""
        schema = handler(core_schema)
        target = handler.resolve_ref_schema(schema)
        props = target.get("properties", {})
        kinds = registered_kinds()
        if "kind" in props:
            props["kind"] = {**props["kind"], "enum": list(kinds)}
        last = props.pop("personalization", None)
        for declared in kinds.values():
            sub = handler.resolve_ref_schema(handler(declared.settings.__pydantic_core_schema__))
            for key, prop in sub.get("properties", {}).items():
                props.setdefault(key, prop)
        if last is not None:
            props["personalization"] = last
        return schema


def _split_keys(
    data: dict[str, Any], declared: ProtocolKind | None
) -> tuple[dict[str, Any], dict[str, Any], list[ScenarioError]]:
    """(common keys, the kind's own keys, located errors for keys of other kinds).

    A key no kind declares stays with the common ones (pydantic's "unknown key" names
    it); under an unknown kind another kind's key is dropped (the kind's error says it).
    """
    kinds = registered_kinds()
    common: dict[str, Any] = {}
    own: dict[str, Any] = {}
    wrong: list[ScenarioError] = []
    for key, value in data.items():
        takers = [n for n, d in kinds.items() if key in d.settings.model_fields]
        if key in ProtocolSpec.model_fields or not takers:
            common[key] = value
        elif declared is not None and declared.name in takers:
            own[key] = value
        elif declared is not None:
            wrong.append(
                ScenarioError(
                    f"is for protocol kind {' or '.join(takers)} (kind is "
                    f"{declared.name!r}); remove it",
                    path=f"protocol.{key}",
                )
            )
    return common, own, wrong


def _all_errors(
    title: str, problems: list[Any], wrong: list[ScenarioError], data: Any
) -> PydanticValidationError:
    """One validation error holding pydantic's ``problems`` and the located ``wrong``."""
    lines = [_line_error(e) for e in problems]
    if wrong:
        error = ScenarioErrors(wrong)
        lines.append(InitErrorDetails(type="value_error", loc=(), input=data, ctx={"error": error}))
    return PydanticValidationError.from_exception_data(title, lines)


def _kind_conflicts(
    declared: ProtocolKind, settings: KindSettings, rule: str
) -> list[ScenarioError]:
    """What the kind (its capabilities, its settings) refuses of the protocol's rule."""
    errors = [
        ScenarioError(reason, path=f"protocol.{key}") for key, reason in settings.conflicts(rule)
    ]
    if declared.capabilities.own_partials and rule == "median":
        errors.append(
            ScenarioError(
                f"protocol kind {declared.name!r} mixes each child's share of a sum; rule "
                "'median' is not a sum (use sum, weighted or mean)",
                path="protocol.rule",
            )
        )
    return errors
