"""The adaptive, network-aware protocol: a plan per round by Eq. 139 (experimental).

:class:`AdaptiveRounds` runs synchronous rounds (:class:`~fedstrata.protocols.sync.SyncRounds`,
with its straggler policy) but, before each round, picks the plan P (quorum and the
clients' uplink compression) minimising L_clustering(P) + λ_net · C_communication(P, N)
(:func:`~fedstrata.protocols.adaptive.choose_plan`) under the network state N it has
*observed* from its own message timing (:class:`~fedstrata.protocols.adaptive.NetworkObserver`):
when it broadcast each version, when and how large each child's reply was. The plan and
the observations it was made from are returned with the round's close and land in
``rounds.csv`` (``plan_*`` and ``net_*`` columns). The plan's quorum travels in the
model message (``quorum``): middle tiers close their own rounds at it as well, so a
plan speeds up the whole tree rather than the root's wait alone.

Experimental, Eq. 138 (``network_kernel``): the root also sends each client whose
observed reply delay gives f(delay) < 1 that factor (``kernel_scale``), by which the
client scales its heat-kernel coefficients δ for the round (f = exp(−delay/τ)).

Compression is a candidate only where the children are clients (an aggregator forwards
float64 sums whatever its clients sent) and only the downcasts the algorithm supports
(``Algorithm.compressions``); candidate quorums never fall below the scenario's quorum.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import Field

from fedstrata.nodes.algorithm import Algorithm
from fedstrata.nodes.strategy import Closing, Contribution, Placement, Strategy
from fedstrata.protocols.adaptive import (
    COMPRESSIONS,
    KERNEL_FS,
    NetworkObserver,
    Plan,
    choose_plan,
    default_candidates,
)
from fedstrata.protocols.kind import Capabilities, KindSettings, ProtocolKind
from fedstrata.protocols.sync import SyncRounds, sync_settings
from fedstrata.settings import Strict

__all__ = ["ADAPTIVE", "AdaptiveRounds", "AdaptiveSettings", "NetworkKernelSettings"]

#: Relative error of a downcast, its unit roundoff (what a plan's L charges for it).
_REL_ERROR = {"none": 0.0, "float32": 2.0**-24, "float16": 2.0**-11}
#: Bytes of a reply under each compression, relative to float64 (arrays dominate).
_BYTES = {"none": 1.0, "float32": 0.5, "float16": 0.25}


class AdaptiveRounds(SyncRounds):
    """Synchronous rounds whose quorum and compression are chosen per round (Eq. 139)."""

    kind = "adaptive"

    def __init__(
        self,
        children: Sequence[str],
        *,
        lambda_net: float = 1.0,
        compressions: Sequence[str] = (),
        network_kernel: str | None = None,
        network_tau_s: float = 1.0,
        **sync: Any,
    ) -> None:
        super().__init__(children, **sync)
        self.lambda_net = lambda_net
        self.kernel_f = None if network_kernel is None else KERNEL_FS[network_kernel]
        self.kernel_tau_s = network_tau_s
        quorums = sorted({self.quorum, *(q for q in (0.5, 0.75, 1.0) if q >= self.quorum)})
        quorums = [q for q in quorums if q > 0]
        self.candidates = default_candidates(
            quorums=tuple(quorums),
            compressions=("none", *(c for c in COMPRESSIONS if c in compressions)),
        )
        self.plan = Plan(quorum=max(self.quorum, 1e-9), compression="none")
        self.observer = NetworkObserver()
        self._open: list[int] = []  # versions sent whose misses are not counted yet
        self._samples: dict[str, float] = {}
        self._reply_bytes: float | None = None
        self._decision: dict[str, Any] = {}

    def _choose(self) -> None:
        estimates = {c: self.observer.estimate(c) for c in self.children}
        known = [e.delay_s for e in estimates.values() if e is not None and e.replies]
        if not known or self._reply_bytes is None:
            self._decision = {**self.plan.as_fields(), **self.observer.snapshot()}
            return  # nothing observed yet: keep the current plan
        mean_n = sum(self._samples.values()) / max(len(self._samples), 1)
        samples = {c: self._samples.get(c, mean_n) for c in self.children}
        bytes_of = {k: v * self._reply_bytes for k, v in _BYTES.items()}
        plan, costs = choose_plan(
            self.candidates,
            estimates,
            samples=samples,
            bytes_of=bytes_of,
            rel_error=_REL_ERROR,
            lambda_net=self.lambda_net,
            default_delay_s=max(known),
        )
        self.plan = plan
        best = next(c for c in costs if c.plan == plan)
        self._decision = {
            **plan.as_fields(),
            "plan_cost": round(best.total, 9),
            **self.observer.snapshot(),
        }

    def open(self, version: int, now: float) -> tuple[list[str] | None, dict[str, Any]]:
        """Close the observer's last version, choose the plan, ask."""
        # a version counts its misses one version late: a round that closed at its
        # quorum has stragglers still on their way, which are delays, not losses
        if len(self._open) >= 2:
            self.observer.closed(self._open.pop(0))
        self._choose()
        # the plan's quorum closes this round (SyncRounds.target), as a parent's plan
        # closes a middle tier's
        self.planned_quorum = self.plan.quorum
        ask, extra = super().open(version, now)
        self.observer.sent(version, now, self.asked)
        self._open.append(version)
        extra = {**extra, "quorum": self.plan.quorum}  # middle tiers close at it too
        scales = self._kernel_scales()
        if scales:
            extra["kernel_scale"] = scales
        if self.plan.compression != "none":
            extra = {**extra, "compression": self.plan.compression}
        return ask, extra

    def _kernel_scales(self) -> dict[str, float]:
        """Eq. 138 (experimental): f(observed delay) per client, where it is below 1."""
        if self.kernel_f is None:
            return {}
        out = {}
        for c in self.children:
            est = self.observer.estimate(c)
            if est is not None and est.replies:
                f = float(self.kernel_f(est.delay_s, self.kernel_tau_s))
                if f < 1.0:
                    out[c] = round(max(f, 1e-6), 9)
        self._decision["kernel_scale_min"] = min(out.values(), default=1.0)
        return out

    def observe_late(self, sender: str, version: int, now: float, nbytes: int) -> None:
        """A straggler's reply: its delay still counts."""
        self.observer.received(sender, version, now, nbytes)

    def offer(self, c: Contribution) -> bool:
        """Observe the reply's timing and size, then collect it."""
        self.observer.received(c.sender, c.version, c.now, c.nbytes)
        n = c.body.get("n")
        if isinstance(n, int | float):
            self._samples[c.sender] = float(n)
        if self.plan.compression == "none":  # the float64 size the byte model scales
            self._reply_bytes = float(c.nbytes)
        return super().offer(c)

    def close(self, algorithm: Algorithm, *, deadline: bool) -> Closing:
        """Close as synchronous rounds do, with the plan's fields for the record."""
        closing = super().close(algorithm, deadline=deadline)
        closing.fields.update(self._decision)
        return closing

    def describe(self) -> dict[str, Any]:
        """As :class:`SyncRounds`, plus λ_net and the candidate plans."""
        return {
            **super().describe(),
            "kind": self.kind,
            "lambda_net": self.lambda_net,
            "candidates": [p.as_fields() for p in self.candidates],
        }


class NetworkKernelSettings(Strict):
    """Network-aware heat-kernel coefficients (FedHK-MVFC Eq. 138), experimental.

    The adaptive root scales each client's coefficients δ by f(delay) = exp(−delay /
    ``tau_s``) (``tau_s`` in ``(0, 1e6]`` s), with ``delay`` the client's reply delay as
    the root observed it: slow clients' distances count less.
    """

    f: Literal["exp"] = "exp"
    tau_s: Annotated[float, Field(gt=0.0, le=1e6, description="(0, 1e6] s")] = 1.0


class AdaptiveSettings(KindSettings):
    """Keys of protocol kind ``adaptive`` (FedHK-MVFC §7.3), flat under ``protocol:``.

    ``lambda_net`` (``[0, 1e6]``, per second of expected round time): λ_net of Eq. 139,
    the weight of the expected round time against the samples a plan loses;
    ``network_kernel`` (experimental, rule ``sum``): Eq. 138's network-aware
    heat-kernel coefficients (:class:`NetworkKernelSettings`), ``null`` for off.
    """

    lambda_net: Annotated[float, Field(ge=0.0, le=1e6, description="[0, 1e6]")] = 1.0
    network_kernel: NetworkKernelSettings | None = None

    def conflicts(self, rule: str) -> list[tuple[str, str]]:
        """Eq. 138 scales the coefficients of summed statistics: it needs rule ``sum``."""
        if self.network_kernel is not None and rule != "sum":
            return [
                (
                    "network_kernel",
                    "scales the clients' heat-kernel coefficients of summed statistics: it "
                    f"needs rule: sum (rule is {rule!r})",
                )
            ]
        return []


def _adaptive_strategy(
    protocol: Any,
    settings: AdaptiveSettings,
    at: Placement,
) -> Strategy:
    """The network-aware plan per round at the root; synchronous rounds below it."""
    sync = sync_settings(protocol, at)
    if not at.root:
        return SyncRounds(at.children, **sync)
    kernel = settings.network_kernel
    return AdaptiveRounds(
        at.children,
        lambda_net=settings.lambda_net,
        compressions=at.compressions if at.clients_below else (),
        network_kernel=kernel.f if kernel is not None and at.clients_below else None,
        network_tau_s=1.0 if kernel is None else kernel.tau_s,
        **sync,
    )


ADAPTIVE = ProtocolKind(
    name="adaptive",
    summary="a network-aware plan (quorum, compression) per round, Eq. 139, experimental",
    settings=AdaptiveSettings,
    capabilities=Capabilities(),
    factory=_adaptive_strategy,
)
"""The ``adaptive`` kind's declaration, registered by :mod:`fedstrata.registry`."""
