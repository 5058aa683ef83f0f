"""The ``privacy`` section of a scenario: secure aggregation, differential privacy, signing.

Split from :mod:`fedstrata.scenarios.schema` (which re-exports these models): the
typed settings of :class:`PrivacySpec` and its DP block, :class:`DPSpec`.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from fedstrata.settings import Strict as _Strict

__all__ = ["DPBlockClips", "DPSpec", "PrivacySpec", "ViewBounds"]


_Bound = Annotated[float, Field(gt=0.0, le=1e12, description="(0, 1e12]")]


class DPBlockClips(_Strict):
    """Per-block L2 bounds of a client's statistics (``privacy.dp.clip`` as a mapping)."""

    num: _Bound
    den: _Bound
    costs: _Bound
    mass: _Bound

    def bounds(self) -> tuple[float, float, float, float]:
        """The four bounds in the order the statistics are sent."""
        return (self.num, self.den, self.costs, self.mass)


class ViewBounds(_Strict):
    """Public per-feature bounds of one view: ``lo`` and ``hi`` lists (one per feature)."""

    lo: list[float]
    hi: list[float]

    @model_validator(mode="after")
    def _ordered(self) -> ViewBounds:
        if len(self.lo) != len(self.hi) or not all(
            math.isfinite(a) and math.isfinite(b) and a <= b
            for a, b in zip(self.lo, self.hi, strict=False)
        ):
            raise ValueError("lo and hi must be finite lists of one length with lo <= hi")
        return self


class DPSpec(_Strict):
    """Differential privacy: one budget for the whole run, per sample by default.

    ``unit: sample`` (the default): the unit of privacy is one sample. ``bounds`` (one
    entry per view: ``[lo, hi]`` for all its features, or ``{lo: [...], hi: [...]}``
    per feature) are declared public bounds: each client clips its features into them,
    so a sample's contribution to every released sum is bounded and the noise does not
    grow with the data. The run releases the private setup's two stages and
    ``protocol.rounds`` noisy rounds, all accounted together (RDP) within ``epsilon``
    at ``delta``; each sample's standardized view is clipped to radius ``radius·√d``
    (``radius`` in (0, 10]) and the seeding sums over ``cells·n_clusters`` public
    directions (``cells`` in 1..64). ``clip`` and ``schedule`` belong to the client
    unit and are refused here.

    ``unit: client``: the older client-level mechanism on the rounds (below); the
    setup is still private and sample-level (``bounds`` still needed).

    Every round each client clips its whole statistics partial to L2 norm ``clip``
    (``> 0``, in the units of the statistics: sums over its samples) and adds Gaussian
    noise of std z·clip, with the noise multiplier z chosen so that ``protocol.rounds``
    releases spend at most ``epsilon`` (``(0, 1000]``) at ``delta`` (``(0, 0.1]``) under
    the RDP accountant. Without secure aggregation every release is seen by the
    aggregator, so this is local (per-client, per-release) DP. Needs ``rule: sum``.

    ``clip`` is one bound on the whole statistics vector, or a mapping of one bound per
    block (``num``: the centre numerators, ``den``: the denominators, ``costs``: the
    view costs, ``mass``: the cluster mass): each block is then clipped to its bound
    and noised with std z·2·bound (2 = √4 blocks), which is the same privacy, and
    keeps the small denominators from drowning in noise sized for the numerators.

    ``schedule``: ``constant`` (the same noise every round, from the accountant);
    ``eq93``, the adaptive budget of the FedHK-MVFC paper (Eq. 93),
    ε_t = ε/√T · 1/√(t+1), each round noised by the paper's Eq. 89 with its ε_t (no
    composition theorem backs it: the summary reports what the accountant says was
    spent, and a schedule that the setup's two releases would push past ``epsilon``
    is refused by ``validate``); ``eq93-normalised``: the same shape, rescaled so that
    the accountant's total for the whole run, setup included, is ``epsilon``.

    With secure aggregation on, the noise is distributed: each client adds a share
    (variance σ²/t, t the smallest unmasking threshold of the client groups), so
    every sum an aggregator can unmask carries at least σ².
    """

    epsilon: Annotated[float, Field(gt=0.0, le=1000.0, description="(0, 1000]")]
    delta: Annotated[float, Field(gt=0.0, le=0.1, description="(0, 0.1]")] = 1e-5
    unit: Literal["sample", "client"] = "sample"
    bounds: list[Annotated[list[float], Field(min_length=2, max_length=2)] | ViewBounds] | None = (
        None
    )
    radius: Annotated[float, Field(gt=0.0, le=10.0, description="(0, 10]")] = 1.0
    cells: Annotated[int, Field(ge=1, le=64, description="1 .. 64")] = 4
    clip: _Bound | DPBlockClips | None = None
    schedule: Literal["constant", "eq93", "eq93-normalised"] = "constant"

    @model_validator(mode="after")
    def _unit_fields(self) -> DPSpec:
        if self.bounds is None:
            raise ValueError(
                "privacy.dp needs public feature bounds (bounds: one [lo, hi] or "
                "{lo: [...], hi: [...]} per view): without them one sample's share of "
                "the setup's sums is unbounded"
            )
        for lo, hi in (b if isinstance(b, list) else (0.0, 0.0) for b in self.bounds):
            if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
                raise ValueError(f"bounds [{lo}, {hi}] must be finite with lo <= hi")
        if self.unit == "sample" and (self.clip is not None or self.schedule != "constant"):
            raise ValueError(
                "clip and schedule belong to unit: client; sample-level DP bounds each "
                "sample by the public bounds and radius instead"
            )
        if self.unit == "client" and self.clip is None:
            raise ValueError("unit: client needs clip (the L2 bound of a client's statistics)")
        return self


class PrivacySpec(_Strict):
    """Privacy settings: secure aggregation at every tier, differential privacy, signing.

    ``secure_aggregation`` masks every partial so each aggregator learns only the sum
    of its children's: ``secagg`` (Bonawitz et al., CCS 2017) or ``secagg+`` (Bell et
    al., CCS 2020, each member paired with ``neighbours`` others on a random regular
    graph). ``threshold`` is how many share holders must answer to unmask: an integer,
    or a fraction in (0.5, 1] of the holders; by default the smallest safe value,
    h // 2 + 1. ``precision_bits`` is the fixed-point resolution of masked values
    (2**-bits). ``true``/``false`` are read as ``secagg``/``none``.

    ``sign`` signs every message with the sender's Ed25519 key (64 bytes each) and
    makes every node refuse unsigned, forged and replayed messages (counted by
    reason). It is for the simulator, whose keys are derived from the seed (they
    protect nothing). Runs over a real broker sign whatever it says: ``fedstrata run
    --transport mqtt`` with fresh per-run keys (``--insecure`` to send unsigned, which
    ``sign: true`` refuses), devices with the key files of ``fedstrata keys``.
    """

    secure_aggregation: Literal["none", "secagg", "secagg+"] = "none"
    threshold: int | Annotated[float, Field(gt=0.5, le=1.0)] | None = None
    neighbours: Annotated[int, Field(ge=2, le=1_000_000)] | None = None
    precision_bits: Annotated[int, Field(ge=8, le=40, description="8 .. 40")] = 24
    #: Ed25519 signatures on every message; forged, replayed and unsigned ones are refused.
    sign: bool = False
    #: Gaussian-mechanism noise on the clients' statistics, with accounting.
    dp: DPSpec | None = None

    @field_validator("secure_aggregation", mode="before")
    @classmethod
    def _booleans(cls, value: Any) -> Any:
        if value is True:
            return "secagg"
        if value is False or value is None:
            return "none"
        return value

    @field_validator("threshold")
    @classmethod
    def _threshold(cls, value: int | float | None) -> int | float | None:
        if isinstance(value, int) and not isinstance(value, bool) and value < 2:
            raise ValueError("an absolute threshold must be >= 2 (one share reveals a secret)")
        return value

    @field_validator("neighbours")
    @classmethod
    def _even(cls, value: int | None) -> int | None:
        if value is not None and value % 2:
            raise ValueError(f"must be even (a regular ring graph), got {value}")
        return value
