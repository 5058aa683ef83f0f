"""Adaptive, network-aware aggregation (FedHK-MVFC paper §7.3), pure and free of I/O.

Eq. 139 picks the aggregation plan ``P_adaptive^(t) = argmin_P { L_clustering(P) +
λ_net · C_communication(P, N^(t)) }``, where N^(t) is the network state the aggregator
*observes*: when it broadcast a model version to which children, and when and how big
each reply was (:class:`NetworkObserver`); never simulator truth. A :class:`Plan` is a
quorum (the fraction of asked children to wait for) and an uplink compression.

The paper gives no formulas for L and C; the following definitions are **our choice**:

* Per child c, with delay_c and loss_c from its :class:`ChildEstimate` (a child with
  no reply yet uses ``default_delay_s``; an unknown one, None, also uses loss 0),
  the expected reply time is
  ``t_c(P) = delay_c · (1 + ℓ/(1 − ℓ)) + (bytes_of[P.compression] − bytes_of["none"]) /
  bytes_per_s_c``, with ℓ = min(loss_c, 0.95) (QoS-1 retransmissions: 1/(1 − ℓ)
  expected sends). The transmission term needs a known bandwidth, else it is 0; it is
  negative when compressing, and t_c is floored at 0.1 · delay_c. Measured delays
  are taken as those of uncompressed replies.
* ``C_communication(P, N)`` (seconds, :func:`expected_round_time`) is the time the
  quorum is reached: the k-th smallest t_c, k = ⌈quorum · n⌉ (at least 1), n the
  number of children in ``estimates`` (0 s when n = 0).
* ``L_clustering(P)`` (dimensionless) is the share of samples expected to be missing
  from the round, ``(Σ_{c ∉ K} s_c + Σ_{c ∈ K} s_c · loss_c) / Σ_c s_c`` with K the k
  children of smallest t_c (ties: mapping order; loss unclipped), plus ``rel_error[P.compression]``.
  It is a *proxy*, the information lost per round, not a prediction of ARI.

λ_net is in 1/seconds: λ_net = 0.1 makes 10 s of round time cost as much as losing
every sample. :func:`choose_plan` breaks ties by candidate order; all is deterministic.

Eq. 138, ``δ^{h,net} = f(δ^h, G_network, p_latency)``, leaves f open. EXPERIMENTAL:
:func:`network_kernel_scale` gives exp(−latency/τ) ∈ (0, 1], a factor by which a
caller may scale a client's heat-kernel coefficients δ^h; :data:`KERNEL_FS` names it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from fedstrata.errors import ValidationError

__all__ = [
    "COMPRESSIONS",
    "KERNEL_FS",
    "ChildEstimate",
    "NetworkObserver",
    "Plan",
    "PlanCost",
    "choose_plan",
    "default_candidates",
    "expected_round_time",
    "network_kernel_scale",
    "plan_costs",
]

#: Uplink compressions a plan may ask clients for.
COMPRESSIONS = ("none", "float32", "float16")
_MAX_LOSS = 0.95  # loss is clipped here in the retransmission factor 1/(1 − loss)


def _real(name: str, value: Any, *, low: float = -math.inf, strict: bool = False) -> float:
    """``value`` as a finite float > low (strict) or ≥ low, else ValidationError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValidationError(f"{name} must be a real number, got {value!r}")
    out = float(value)
    if not math.isfinite(out) or out < low or (strict and out == low):
        raise ValidationError(f"{name} must be finite and {'>' if strict else '>='} {low}")
    return out


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValidationError(f"{name} must be an integer >= 0, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class Plan:
    """An aggregation plan: how many replies to wait for, and the uplink compression.

    ``quorum`` is the fraction of asked children to wait for, in (0, 1];
    ``compression`` (one of :data:`COMPRESSIONS`) is what clients use on the uplink.
    """

    quorum: float
    compression: str

    def __post_init__(self) -> None:
        q = _real("quorum", self.quorum, low=0.0, strict=True)
        if q > 1.0:
            raise ValidationError(f"quorum must be in (0, 1], got {self.quorum!r}")
        if self.compression not in COMPRESSIONS:
            raise ValidationError(f"compression must be one of {COMPRESSIONS}")

    def as_fields(self) -> dict[str, Any]:
        """The plan as flat record fields ``plan_quorum`` and ``plan_compression``."""
        return {"plan_quorum": self.quorum, "plan_compression": self.compression}


@dataclass(frozen=True)
class ChildEstimate:
    """What the aggregator has observed of one child (EWMAs; see :class:`NetworkObserver`).

    ``delay_s``: reply delay (arrival − broadcast), 0.0 while ``replies == 0``;
    ``loss``: miss rate in [0, 1]; ``bytes_per_s``: reply bytes / delay, None until seen.
    """

    delay_s: float
    loss: float
    bytes_per_s: float | None
    replies: int
    misses: int

    def __post_init__(self) -> None:
        _real("delay_s", self.delay_s, low=0.0)
        if not 0.0 <= _real("loss", self.loss) <= 1.0:
            raise ValidationError(f"loss must be in [0, 1], got {self.loss!r}")
        if self.bytes_per_s is not None:
            _real("bytes_per_s", self.bytes_per_s, low=0.0, strict=True)
        _count("replies", self.replies)
        _count("misses", self.misses)


class NetworkObserver:
    """Per-child delay, loss and bandwidth estimates from message timing alone.

    Each statistic is an EWMA ``x ← α·sample + (1 − α)·x`` with α = ``smoothing`` in
    (0, 1]. Delay and bandwidth are seeded with their first sample; loss starts at 0
    (a network is presumed reliable until a miss is seen) and takes one sample per
    (child, version) at :meth:`closed`: 1 if the child had not replied, else 0. A reply
    from a child not asked at that version counts for delay (timed from the version's
    first send) but never for loss. History is kept for every version sent.
    """

    def __init__(self, *, smoothing: float = 0.3) -> None:
        a = _real("smoothing", smoothing, low=0.0, strict=True)
        if a > 1.0:
            raise ValidationError(f"smoothing must be in (0, 1], got {smoothing!r}")
        self._alpha = a
        self._sent: dict[int, dict[str, float]] = {}  # version -> child -> first send time
        self._first: dict[int, float] = {}  # version -> its first send time
        self._closed: set[int] = set()
        self._replied: set[tuple[str, int]] = set()
        self._delay: dict[str, float] = {}
        self._loss: dict[str, float] = {}
        self._bps: dict[str, float] = {}
        self._replies: dict[str, int] = {}
        self._misses: dict[str, int] = {}

    def _ewma(self, table: dict[str, float], child: str, sample: float, seed: bool) -> None:
        old = table.get(child, None if seed else 0.0)
        table[child] = sample if old is None else self._alpha * sample + (1 - self._alpha) * old

    def sent(self, version: int, now: float, asked: Iterable[str]) -> None:
        """Record that ``version`` was broadcast to ``asked`` at ``now``.

        Sending a version again adds children; those already asked keep their first
        send time. Sending a closed version, a non-integer version or a non-finite
        ``now`` raises :class:`ValidationError`.
        """
        version = _count("version", version)
        now = _real("now", now)
        if version in self._closed:
            raise ValidationError(f"version {version} is already closed")
        times = self._sent.setdefault(version, {})
        self._first.setdefault(version, now)
        for child in asked:
            times.setdefault(child, now)

    def received(self, child: str, version: int, now: float, nbytes: int) -> None:
        """Record ``child``'s reply to ``version``, arrived at ``now``, ``nbytes`` long.

        A reply to a version never sent, or a duplicate (child, version), is ignored.
        Replies to older versions count; after :meth:`closed` they update the delay and
        bandwidth but not the loss. Delay is clamped at 0; a bandwidth sample needs a
        positive delay and ``nbytes``. Non-finite ``now`` or negative ``nbytes``: ValidationError.
        """
        now = _real("now", now)
        nbytes = _count("nbytes", nbytes)
        if isinstance(version, bool) or not isinstance(version, numbers.Integral):
            return
        key = (child, int(version))
        if key[1] not in self._sent or key in self._replied:
            return
        self._replied.add(key)
        delay = max(0.0, now - self._sent[key[1]].get(child, self._first[key[1]]))
        self._ewma(self._delay, child, delay, seed=True)
        rate = nbytes / delay if delay > 0.0 else 0.0
        if 0.0 < rate < math.inf:  # an empty or instantaneous reply says nothing of it
            self._ewma(self._bps, child, rate, seed=True)
        self._replies[child] = self._replies.get(child, 0) + 1

    def closed(self, version: int) -> None:
        """Close ``version``: each child asked at it that has not replied is one miss.

        Every asked child takes a loss sample. Unknown or already closed: ignored.
        """
        if version not in self._sent or version in self._closed:
            return
        self._closed.add(version)
        for child in self._sent[version]:
            missed = (child, version) not in self._replied
            self._ewma(self._loss, child, float(missed), seed=False)
            self._misses[child] = self._misses.get(child, 0) + int(missed)

    def estimate(self, child: str) -> ChildEstimate | None:
        """The child's estimate, or None before its first reply or closed version."""
        if child not in self._replies and child not in self._loss:
            return None
        return ChildEstimate(
            delay_s=self._delay.get(child, 0.0),
            loss=self._loss.get(child, 0.0),
            bytes_per_s=self._bps.get(child),
            replies=self._replies.get(child, 0),
            misses=self._misses.get(child, 0),
        )

    def snapshot(self) -> dict[str, float]:
        """Flat fields for a CSV row, never NaN (0 when nothing is known yet).

        ``net_delay_median_s`` and ``net_delay_p90_s`` (linear interpolation) over the
        children's delays, ``net_loss_mean`` and ``net_children_seen`` over the children
        with an estimate.
        """
        delays = np.array([self._delay[c] for c in sorted(self._delay)], dtype=np.float64)
        seen = sorted(set(self._replies) | set(self._loss))
        losses = [self._loss.get(c, 0.0) for c in seen]
        return {
            "net_delay_median_s": float(np.median(delays)) if delays.size else 0.0,
            "net_delay_p90_s": float(np.percentile(delays, 90)) if delays.size else 0.0,
            "net_loss_mean": float(np.mean(losses)) if losses else 0.0,
            "net_children_seen": len(seen),
        }


@dataclass(frozen=True)
class PlanCost:
    """One plan's terms in Eq. 139: ``total = clustering + λ_net · communication``."""

    plan: Plan
    clustering: float
    communication: float
    total: float


def _quorum(
    plan: Plan,
    estimates: Iterable[ChildEstimate | None],
    bytes_of: Mapping[str, float],
    default_delay_s: float,
) -> tuple[list[float], list[int], int]:
    """t_c(P) per estimate, their indices fastest first (stable) and k = ⌈quorum · n⌉."""
    default = _real("default_delay_s", default_delay_s, low=0.0)
    if "none" not in bytes_of or plan.compression not in bytes_of:
        raise ValidationError(f"bytes_of needs entries for 'none' and {plan.compression!r}")
    extra = _real("bytes_of", bytes_of[plan.compression], low=0.0)
    extra -= _real("bytes_of", bytes_of["none"], low=0.0)
    times = []
    for est in estimates:
        delay = est.delay_s if est is not None and est.replies > 0 else default
        t = delay / (1.0 - min(est.loss, _MAX_LOSS)) if est is not None else delay
        if est is not None and est.bytes_per_s is not None:
            t += extra / est.bytes_per_s
        times.append(max(t, 0.1 * delay))
    n = len(times)
    k = min(n, max(1, math.ceil(round(plan.quorum * n, 9)))) if n else 0  # 0.7·10 ≠ 7.0…1
    return times, sorted(range(n), key=times.__getitem__), k


def expected_round_time(
    plan: Plan,
    estimates: Sequence[ChildEstimate | None],
    bytes_of: Mapping[str, float],
    *,
    default_delay_s: float,
) -> float:
    """C_communication(P, N) in seconds: the ⌈quorum · n⌉-th smallest expected reply time.

    ``bytes_of`` maps each compression to the size of one uplink (needs ``"none"`` and
    the plan's). 0.0 when there are no children.
    """
    times, order, k = _quorum(plan, estimates, bytes_of, default_delay_s)
    return times[order[k - 1]] if k else 0.0


def plan_costs(
    candidates: Sequence[Plan],
    estimates: Mapping[str, ChildEstimate | None],
    *,
    samples: Mapping[str, float],
    bytes_of: Mapping[str, float],
    rel_error: Mapping[str, float],
    lambda_net: float,
    default_delay_s: float,
) -> list[PlanCost]:
    """The Eq. 139 cost of each candidate, in order (definitions: module docstring).

    ``estimates`` names the children (None: unknown); ``samples`` gives each one's
    sample count (extra names are ignored); ``rel_error`` maps a compression to its
    relative error; ``lambda_net`` ≥ 0 in 1/s. Bad input raises ValidationError.
    """
    lam = _real("lambda_net", lambda_net, low=0.0)
    children = list(estimates)
    missing = [c for c in children if c not in samples]
    if missing:
        raise ValidationError(f"samples has no entry for child {missing[0]!r}")
    s = np.array([_real("samples", samples[c], low=0.0) for c in children], dtype=np.float64)
    loss = np.array([e.loss if e is not None else 0.0 for e in estimates.values()])
    out = []
    for plan in candidates:
        if not isinstance(plan, Plan):
            raise ValidationError(f"candidates must be Plans, got {plan!r}")
        if plan.compression not in rel_error:
            raise ValidationError(f"rel_error has no entry for {plan.compression!r}")
        times, order, k = _quorum(plan, estimates.values(), bytes_of, default_delay_s)
        comm = times[order[k - 1]] if k else 0.0
        gone = loss.copy()  # a child in the quorum still misses with probability loss_c
        gone[order[k:]] = 1.0  # one outside it is not waited for
        share = float(np.sum(s * gone) / s.sum()) if s.sum() > 0 else 0.0
        clust = share + _real("rel_error", rel_error[plan.compression], low=0.0)
        out.append(PlanCost(plan, clust, comm, clust + lam * comm))
    return out


def choose_plan(
    candidates: Sequence[Plan],
    estimates: Mapping[str, ChildEstimate | None],
    *,
    samples: Mapping[str, float],
    bytes_of: Mapping[str, float],
    rel_error: Mapping[str, float],
    lambda_net: float,
    default_delay_s: float,
) -> tuple[Plan, list[PlanCost]]:
    """Eq. 139's argmin over ``candidates`` (first wins ties) and every candidate's cost.

    Arguments as :func:`plan_costs`; no candidates raises ValidationError.
    """
    if not candidates:
        raise ValidationError("choose_plan needs at least one candidate plan")
    costs = plan_costs(
        candidates,
        estimates,
        samples=samples,
        bytes_of=bytes_of,
        rel_error=rel_error,
        lambda_net=lambda_net,
        default_delay_s=default_delay_s,
    )
    best = min(range(len(costs)), key=lambda i: (costs[i].total, i))
    return costs[best].plan, costs


def default_candidates(
    quorums: Iterable[float] = (0.5, 0.75, 1.0), compressions: Iterable[str] = COMPRESSIONS
) -> list[Plan]:
    """Every (quorum, compression) plan, quorums outermost, in the given orders."""
    comps = list(compressions)
    return [Plan(q, c) for q in quorums for c in comps]


def network_kernel_scale(latency_s: float, tau_s: float) -> float:
    """EXPERIMENTAL f of Eq. 138: exp(−latency_s / tau_s) ∈ (0, 1] (0.0 on underflow).

    A factor to scale a client's heat-kernel coefficients δ^h by, so slower links weigh
    less. ``latency_s`` ≥ 0 and ``tau_s`` > 0 (seconds), else ValidationError.
    """
    lat = _real("latency_s", latency_s, low=0.0)
    return math.exp(-lat / _real("tau_s", tau_s, low=0.0, strict=True))


def _no_network_scale(latency_s: float, tau_s: float) -> float:
    """EXPERIMENTAL identity f of Eq. 138: always 1.0 (arguments validated as for exp)."""
    network_kernel_scale(latency_s, tau_s)
    return 1.0


#: EXPERIMENTAL: the Eq. 138 scale functions f(latency_s, tau_s) by name.
KERNEL_FS: Mapping[str, Callable[[float, float], float]] = MappingProxyType(
    {"none": _no_network_scale, "exp": network_kernel_scale}
)
