"""Configuration shared by the protocol's nodes (plain frozen dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass

from fedstrata.algorithms.combine import RULES
from fedstrata.errors import ValidationError

__all__ = ["Address", "ProtocolConfig"]


@dataclass(frozen=True)
class Address:
    """Where an aggregator listens: its tier name and group (its node id)."""

    tier: str
    group: str


@dataclass(frozen=True)
class ProtocolConfig:
    """How a synchronous (hierarchical) FedHK-MVFC federation runs.

    Parameters
    ----------
    run
        Run id, the second level of every topic.
    rule
        ``"sum"`` (exact sufficient statistics), ``"weighted"``, ``"mean"``, ``"median"``.
    rounds
        Maximum root rounds T (setup and final broadcasts not counted).
    local_iters
        Local iterations E per round (1 for ``"sum"``).
    tol
        Root stopping threshold: |ΔJ| (statistics) or Eq. 86 (parameters).
    gamma, rho
        Personalization weights (Eq. 78/79), parameter rules only.
    kernel_scope
        ``"global"``: heat-kernel coefficients against the pooled min/max/mean gathered
        in a setup round (required for exactness with ``"sum"``); ``"local"``: each
        client's own data (Eq. 37/38).
    qos
        MQTT QoS for every publish (0 or 1).
    flops_per_element
        Cost model for :class:`~fedstrata.nodes.events.Compute`: flops per
        (sample, cluster, feature) per local iteration.
    patience
        Root only: consecutive rounds below quorum (setup rounds included) after
        which the run stops as ``stalled`` rather than waiting out ``rounds``.
    """

    run: str = "run"
    rule: str = "sum"
    rounds: int = 50
    local_iters: int = 1
    tol: float = 1e-6
    gamma: float = 0.7
    rho: float = 0.7
    kernel_scope: str = "global"
    qos: int = 1
    flops_per_element: float = 30.0
    patience: int = 10

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValidationError(f"rule must be one of {RULES}, got {self.rule!r}")
        if self.rule == "sum" and self.local_iters != 1:
            raise ValidationError("rule 'sum' aggregates every iteration: local_iters must be 1")
        if self.rounds < 1 or self.local_iters < 1 or self.patience < 1:
            raise ValidationError("rounds, local_iters and patience must be >= 1")
        if self.kernel_scope not in ("global", "local"):
            raise ValidationError(
                f"kernel_scope must be 'global' or 'local', got {self.kernel_scope!r}"
            )
        if self.qos not in (0, 1):
            raise ValidationError(f"qos must be 0 or 1, got {self.qos!r}")
