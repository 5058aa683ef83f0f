"""Configuration shared by the protocol's nodes (plain frozen dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedstrata.errors import ValidationError
from fedstrata.nodes.rounds import STRAGGLER_POLICIES
from fedstrata.privacy.sample_dp import PrivateConfig

__all__ = ["TOL_MODES", "Address", "ProtocolConfig"]

#: How ``tol`` is read (see :class:`ProtocolConfig`).
TOL_MODES = ("absolute", "relative", "per_sample")

#: Secure-aggregation modes (:mod:`fedstrata.nodes.secure`).
SECURE_MODES = ("none", "secagg", "secagg+")


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
    tol_mode
        How ``tol`` is read. ``"absolute"``: |ΔJ| < tol (statistics) or Eq. 86's
        ||ΔA||, ||ΔV|| < tol (parameters); ``"relative"``: |ΔJ| / |J_prev| < tol, or
        ||ΔA|| / ||A_prev|| < tol and ||ΔV|| < tol; ``"per_sample"`` (rule ``"sum"``):
        |J/n − J_prev/n_prev| < tol, with n the samples that contributed, so that a
        round with other participants is not mistaken for a moving model.
    plateau
        Root only, ``None`` for off: the run also ends ``converged`` once the
        per-sample objective J/n has not improved on its best by more than
        ``plateau_tol`` (relative) for this many successful rounds in a row: under
        partial participation J jitters with who took part and |ΔJ| rarely falls
        below ``tol``, but the model has stopped moving.
    plateau_tol
        The relative improvement that counts for ``plateau``.
    compression, compression_bits
        Clients only: how they compress their partials on the uplink, a scheme of the
        algorithm's codec (``"none"``: float64, the bytes of an uncompressed run), and
        the bits per element of ``"qsgd"``. Aggregators decode whatever they receive. A
        model message may ask for another scheme (the adaptive protocol does). The
        codec checks the names (the node core knows none).
    kind
        The root's protocol kind, a name registered with
        :func:`~fedstrata.nodes.strategy.register_strategy` (the built-ins: ``"sync"``,
        ``"async"`` (FedAsync), ``"buffered"`` (FedBuff), ``"adaptive"``). Middle tiers
        run synchronous rounds.
    settings
        The kind's own settings (its declared, frozen settings model, e.g. FedAsync's
        mixing weight and staleness function), read only by the kind's strategy
        factory; ``None``: the kind's defaults.
    stragglers, sample, over_select
        Synchronous rounds (:class:`~fedstrata.nodes.rounds.SyncRounds`, which every
        kind runs in its middle tiers): the straggler policy (``wait``, ``drop``,
        ``use_last``), the fraction of an aggregator's clients a round wants, and the
        extra fraction asked.
    personal_iters
        Personalization (FedHK-MVFC Eq. 78/79), ``None`` for off: on the final model,
        each client fits this many local iterations from the global model (or keeps
        its local model, parameter rules), blends it with the global one by γ_ℓ/ρ_ℓ and
        labels its samples with the blend as well.
    personal
        Per-client ``(node id, γ_ℓ, ρ_ℓ)`` overriding ``gamma``/``rho``.
    dp_clip, dp_noise
        Differential privacy of the clients' statistics (rule ``sum``), ``None`` for
        off: each partial is clipped to L2 norm ``dp_clip`` and gets Gaussian noise
        of std ``dp_noise · dp_clip`` (the noise multiplier z).
    dp_block_clips
        Per-block clipping: the L2 bounds of the numerators, denominators, view costs
        and cluster mass (four numbers); empty: ``dp_clip`` bounds the whole vector.
    dp_schedule
        Per-release noise multipliers z_0, z_1, ... (an adaptive budget, FedHK-MVFC
        Eq. 93); empty: ``dp_noise`` for every release; past its end, the last one.
    dp_shares
        Distributed noise under secure aggregation: each client adds noise of std
        ``dp_noise · dp_clip / sqrt(dp_shares)``, so that a sum of at least
        ``dp_shares`` members (the smallest threshold of the edge groups) carries the
        full variance. 1: every release carries it (local DP).
    private
        The private pipeline (:class:`~fedstrata.privacy.sample_dp.PrivateConfig`):
        with secure aggregation or DP on, a setup of sums only and, under
        ``dp.unit: sample``, sample-level DP rounds; None: the plain setup.
    secure
        Secure aggregation (:mod:`fedstrata.nodes.secure`): ``"none"``, ``"secagg"``
        (Bonawitz et al. 2017) or ``"secagg+"`` (Bell et al. 2020) at every tier.
    secure_threshold
        Shares needed to unmask: an int (absolute), a float in (0.5, 1] (a fraction
        of the share holders) or None (the smallest safe, h // 2 + 1).
    secure_neighbours
        SecAgg+: neighbours per member (even); None: 2⌈log2 n⌉.
    secure_scale_bits
        Fixed-point precision of masked values: resolution 2**-bits.
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
    tol_mode: str = "absolute"
    plateau: int | None = None
    plateau_tol: float = 1e-3
    compression: str = "none"
    compression_bits: int = 8
    kind: str = "sync"
    settings: Any = None
    stragglers: str = "wait"
    sample: float = 1.0
    over_select: float = 0.0
    personal_iters: int | None = None
    personal: tuple[tuple[str, float, float], ...] = ()
    dp_clip: float | None = None
    dp_noise: float = 0.0
    dp_shares: int = 1
    dp_block_clips: tuple[float, ...] = ()
    dp_schedule: tuple[float, ...] = ()
    secure: str = "none"
    secure_threshold: int | float | None = None
    secure_neighbours: int | None = None
    secure_scale_bits: int = 24
    private: PrivateConfig | None = None

    def noise_multiplier(self, release: int) -> float:
        """The noise multiplier z of a client's ``release``-th noisy partial (0-based)."""
        if not self.dp_schedule:
            return self.dp_noise
        return self.dp_schedule[min(release, len(self.dp_schedule) - 1)]

    def mixing_of(self, node_id: str) -> tuple[float, float]:
        """(γ_ℓ, ρ_ℓ) of a client: its override, else ``gamma``/``rho``."""
        for nid, gamma, rho in self.personal:
            if nid == node_id:
                return gamma, rho
        return self.gamma, self.rho

    def _check_secure(self) -> None:
        if self.secure not in SECURE_MODES:
            raise ValidationError(f"secure must be one of {SECURE_MODES}, got {self.secure!r}")
        t = self.secure_threshold
        if t is not None and (
            isinstance(t, bool)
            or (isinstance(t, int) and t < 2)
            or (isinstance(t, float) and not 0.5 < t <= 1.0)
        ):
            raise ValidationError(
                f"secure_threshold must be an int >= 2 or a fraction in (0.5, 1], got {t!r}"
            )
        k = self.secure_neighbours
        if k is not None and (k < 2 or k % 2):
            raise ValidationError(f"secure_neighbours must be even and >= 2, got {k!r}")
        if not 8 <= self.secure_scale_bits <= 40:
            raise ValidationError(
                f"secure_scale_bits must be in 8 .. 40, got {self.secure_scale_bits!r}"
            )
        if self.secure == "none":
            return
        clash = [
            what
            for what, bad in (
                (f"stragglers {self.stragglers!r} (needs 'wait')", self.stragglers != "wait"),
                ("over_select > 0", self.over_select > 0),
                (f"compression {self.compression!r}", self.compression != "none"),
                ("rule 'median' (not a sum)", self.rule == "median"),
            )
            if bad
        ]
        if clash:
            raise ValidationError(
                "secure aggregation sums each round's masked partials; it does not "
                "combine with " + ", ".join(clash)
            )

    def __post_init__(self) -> None:
        # The rule, compression and kind names belong to the algorithm plug-in, its
        # codec and the protocol kinds, which check them where they are used; a kind
        # checks its own settings and whether it runs with secure aggregation.
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
        if self.tol_mode not in TOL_MODES:
            raise ValidationError(f"tol_mode must be one of {TOL_MODES}, got {self.tol_mode!r}")
        if self.tol_mode == "per_sample" and self.rule != "sum":
            raise ValidationError("tol_mode 'per_sample' tests the objective: it needs rule 'sum'")
        if self.plateau is not None and self.plateau < 1:
            raise ValidationError(f"plateau must be >= 1 rounds or None, got {self.plateau!r}")
        if not 0 <= self.plateau_tol < 1:
            raise ValidationError(f"plateau_tol must be in [0, 1), got {self.plateau_tol!r}")
        if self.stragglers not in STRAGGLER_POLICIES:
            raise ValidationError(
                f"stragglers must be one of {STRAGGLER_POLICIES}, got {self.stragglers!r}"
            )
        if not 0.0 < self.sample <= 1.0 or not 0.0 <= self.over_select <= 100.0:
            raise ValidationError("sample must lie in (0, 1] and over_select in [0, 100]")
        if self.dp_clip is not None and (self.rule != "sum" or not self.dp_clip > 0):
            raise ValidationError("dp_clip must be > 0, with rule 'sum'")
        if not self.dp_noise >= 0:
            raise ValidationError(f"dp_noise must be >= 0, got {self.dp_noise!r}")
        if self.dp_block_clips and (
            len(self.dp_block_clips) != 4 or not all(c > 0 for c in self.dp_block_clips)
        ):
            raise ValidationError("dp_block_clips must be four bounds > 0")
        if any(not z >= 0 for z in self.dp_schedule):
            raise ValidationError("dp_schedule must hold noise multipliers >= 0")
        if self.dp_shares < 1:
            raise ValidationError(f"dp_shares must be >= 1, got {self.dp_shares!r}")
        self._check_secure()
        if self.personal_iters is not None and self.personal_iters < 1:
            raise ValidationError(f"personal_iters must be >= 1, got {self.personal_iters!r}")
        for nid, gamma, rho in self.personal:
            if not (0.0 <= gamma <= 1.0 and 0.0 <= rho <= 1.0):
                raise ValidationError(f"gamma and rho of {nid} must lie in [0, 1]")
