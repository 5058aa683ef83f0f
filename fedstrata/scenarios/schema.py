"""The scenario schema: pydantic models for one federation study.

A scenario file (YAML) has the top-level sections ``data``, ``topology``,
``algorithm``, ``protocol``, ``faults``, ``privacy`` and ``output``; every section
has defaults, unknown keys are errors. Cross-field rules (a client attached to a fog
node that does not exist, a median where a sum is required, ...) are checked in
:meth:`Scenario._cross_checks`. See ``scenarios/*.yaml`` for complete examples.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fedstrata.algorithms.combine import ADDITIVE_RULES
from fedstrata.errors import ScenarioError

__all__ = [
    "AlgorithmSpec",
    "AvailabilitySpec",
    "CrashSpec",
    "DataSpec",
    "DegradationSpec",
    "FaultsSpec",
    "LatencySpec",
    "LinkSpec",
    "OutputSpec",
    "PartitionFaultSpec",
    "PartitionSpec",
    "PrivacySpec",
    "ProtocolSpec",
    "Scenario",
    "TierSpec",
    "TopologySpec",
]

Probability = Annotated[float, Field(ge=0.0, le=1.0)]
NonNegative = Annotated[float, Field(ge=0.0)]
Positive = Annotated[float, Field(gt=0.0)]


def _fail(path: str, reason: str) -> None:
    """Cross-field errors carry their own path (pydantic would report them at the root)."""
    raise ScenarioError(reason, path=path)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LatencySpec(_Strict):
    """A latency distribution in seconds.

    ``constant`` (value), ``normal`` (mean, std; truncated at 0), ``lognormal``
    (median, sigma of the log), ``pareto`` (scale, shape), ``empirical`` (file: a CSV
    trace of seconds, one per line or first column).
    """

    dist: Literal["constant", "normal", "lognormal", "pareto", "empirical"] = "constant"
    value: NonNegative | None = None
    mean: NonNegative | None = None
    std: NonNegative | None = None
    median: Positive | None = None
    sigma: NonNegative | None = None
    scale: Positive | None = None
    shape: Positive | None = None
    file: str | None = None

    @model_validator(mode="after")
    def _needs(self) -> LatencySpec:
        need = {
            "constant": ("value",),
            "normal": ("mean", "std"),
            "lognormal": ("median", "sigma"),
            "pareto": ("scale", "shape"),
            "empirical": ("file",),
        }[self.dist]
        missing = [k for k in need if getattr(self, k) is None]
        if missing:
            raise ValueError(f"latency dist {self.dist!r} needs {', '.join(missing)}")
        return self


class LinkSpec(_Strict):
    """A link between a node and its parent's broker."""

    latency: LatencySpec = LatencySpec(value=0.0)
    jitter: LatencySpec | None = None
    bandwidth_mbps: Positive | None = None
    loss: Probability = 0.0

    @field_validator("latency", "jitter", mode="before")
    @classmethod
    def _number_is_constant(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if value < 0:
                raise ValueError(f"latency must be >= 0 seconds, got {value}")
            return {"dist": "constant", "value": value}
        return value


class TierSpec(_Strict):
    """One middle tier (fog, regional...), listed top-down under ``topology.tiers``."""

    name: str = "fog"
    count: Annotated[int, Field(ge=1)] = 1
    period: Annotated[int, Field(ge=1)] = 1
    deadline_s: Positive | None = None
    link: LinkSpec = LinkSpec()
    speed_gflops: Positive = 10.0


class ClientsSpec(_Strict):
    """The edge clients, spread evenly over the lowest tier unless ``attach`` says otherwise."""

    count: Annotated[int, Field(ge=1)] = 2
    link: LinkSpec = LinkSpec()
    speed_gflops: Positive = 1.0
    attach: dict[str, str] = Field(default_factory=dict)


class TopologySpec(_Strict):
    """Cloud, middle tiers top-down, clients."""

    cloud_id: str = "cloud"
    tiers: list[TierSpec] = Field(default_factory=list)
    clients: ClientsSpec = ClientsSpec()


class PartitionSpec(_Strict):
    """How samples are split over clients."""

    kind: Literal["iid", "dirichlet", "quantity", "stratified", "paper"] = "iid"
    alpha: Positive | None = None
    fractions: list[Probability] | None = None


class DataSpec(_Strict):
    """Dataset, its parameters, the partition and the hybrid view assignment."""

    dataset: str = "heat-kernel-synthetic"
    params: dict[str, Any] = Field(default_factory=dict)
    partition: PartitionSpec = PartitionSpec()
    views: dict[Literal["all", "some", "single"], Probability] | None = None


class AlgorithmSpec(_Strict):
    """Clustering algorithm and its hyper-parameters."""

    name: Literal["hk-mvfc", "mvfcm", "mvkm-ed"] = "hk-mvfc"
    n_clusters: Annotated[int, Field(ge=2)] = 4
    m: Annotated[float, Field(gt=1.0)] = 2.0
    alpha: Annotated[float, Field(gt=1.0)] = 5.0
    kernel: Literal["type1", "type2", "none"] = "type1"
    center_update: Literal["paper", "exact", "derivation"] = "paper"


class ProtocolSpec(_Strict):
    """Aggregation protocol."""

    mode: Literal["sync"] = "sync"
    rule: Literal["sum", "weighted", "mean", "median"] = "sum"
    rounds: Annotated[int, Field(ge=1)] = 50
    local_iters: Annotated[int, Field(ge=1)] = 1
    tol: NonNegative = 1e-6
    deadline_s: Positive = 60.0
    quorum: Probability = 1.0
    qos: Literal[0, 1] = 1
    kernel_scope: Literal["global", "local"] | None = None
    gamma: Probability = 0.7
    rho: Probability = 0.7
    #: Consecutive root rounds (setup included) below quorum after which the run stops
    #: with status ``stalled`` instead of waiting out ``rounds``.
    patience: Annotated[int, Field(ge=1, le=100_000)] = 10


class CrashSpec(_Strict):
    """A node crash at ``at`` seconds, restarting after ``restart_after`` if given."""

    node: str
    at: NonNegative
    restart_after: Positive | None = None


class PartitionFaultSpec(_Strict):
    """A network partition: the listed nodes' links are down in [start, end)."""

    nodes: list[str]
    start: NonNegative
    end: Positive

    @model_validator(mode="after")
    def _order(self) -> PartitionFaultSpec:
        if self.end <= self.start:
            raise ValueError(f"end ({self.end}) must be after start ({self.start})")
        return self


class DegradationSpec(_Strict):
    """A window in which the listed nodes' links are slower or lossier."""

    nodes: list[str]
    start: NonNegative
    end: Positive
    latency_factor: Positive = 1.0
    extra_latency_s: NonNegative = 0.0
    bandwidth_factor: Positive = 1.0
    loss: Probability | None = None

    @model_validator(mode="after")
    def _order(self) -> DegradationSpec:
        if self.end <= self.start:
            raise ValueError(f"end ({self.end}) must be after start ({self.start})")
        return self


class AvailabilitySpec(_Strict):
    """Client availability: an on/off Markov chain stepped every ``step_s``, or a CSV trace."""

    kind: Literal["markov", "trace"] = "markov"
    p_off: Probability = 0.0
    p_on: Probability = 1.0
    step_s: Positive = 1.0
    file: str | None = None


class FaultsSpec(_Strict):
    """Faults injected by the simulator."""

    dropout: Probability = 0.0
    crashes: list[CrashSpec] = Field(default_factory=list)
    partitions: list[PartitionFaultSpec] = Field(default_factory=list)
    degradations: list[DegradationSpec] = Field(default_factory=list)
    availability: AvailabilitySpec | None = None


class PrivacySpec(_Strict):
    """Privacy settings (secure aggregation and DP arrive with the privacy issue)."""

    secure_aggregation: bool = False


class OutputSpec(_Strict):
    """What a run writes besides summary.json and rounds.csv."""

    events: bool = False
    plots: bool = True


class Scenario(_Strict):
    """A complete federation study."""

    name: str = "scenario"
    seed: int = 0
    data: DataSpec = DataSpec()
    topology: TopologySpec = TopologySpec()
    algorithm: AlgorithmSpec = AlgorithmSpec()
    protocol: ProtocolSpec = ProtocolSpec()
    faults: FaultsSpec = FaultsSpec()
    privacy: PrivacySpec = PrivacySpec()
    output: OutputSpec = OutputSpec()

    def node_ids(self) -> dict[str, list[str]]:
        """Node ids by tier name: cloud, each middle tier, and ``edge``."""
        ids: dict[str, list[str]] = {"cloud": [self.topology.cloud_id]}
        for tier in self.topology.tiers:
            ids[tier.name] = [f"{tier.name}-{i}" for i in range(tier.count)]
        ids["edge"] = [f"client-{i}" for i in range(self.topology.clients.count)]
        return ids

    @model_validator(mode="after")
    def _cross_checks(self) -> Scenario:
        p, topo = self.protocol, self.topology
        names = [t.name for t in topo.tiers]
        if len(set(names)) != len(names) or {"cloud", "edge"} & set(names):
            _fail("topology.tiers", "tier names must be unique and not 'cloud' or 'edge'")
        if p.rule == "sum" and p.local_iters != 1:
            _fail(
                "protocol.local_iters", "must be 1 with rule 'sum' (it aggregates every iteration)"
            )
        if self.privacy.secure_aggregation and p.rule not in ADDITIVE_RULES:
            _fail(
                "protocol.rule",
                f"{p.rule!r} is not a sum; secure aggregation needs sum, weighted or mean",
            )
        if any(t.period > 1 for t in topo.tiers) and p.rule == "median":
            _fail(
                "protocol.rule",
                "a tier period > 1 forwards weighted sums; rule 'median' is not a sum",
            )
        if len(topo.tiers) > 1 and any(t.period > 1 for t in topo.tiers):
            _fail("topology.tiers", "tier periods > 1 are supported with a single middle tier only")
        ids = self.node_ids()
        lowest = ids[names[-1]] if names else ids["cloud"]
        clients = set(ids["edge"])
        for client, target in topo.clients.attach.items():
            if client not in clients:
                _fail(
                    f"topology.clients.attach.{client}",
                    f"no client {client!r} (ids are client-0 ...)",
                )
            if target not in lowest:
                _fail(
                    f"topology.clients.attach.{client}",
                    f"{client} attached to {target!r}, which does not exist",
                )
        everything = {n for group in ids.values() for n in group}
        for kind, items in (
            ("crashes", self.faults.crashes),
            ("partitions", self.faults.partitions),
            ("degradations", self.faults.degradations),
        ):
            for item in items:
                nodes = [item.node] if isinstance(item, CrashSpec) else item.nodes
                for node in nodes:
                    if node not in everything:
                        _fail(f"faults.{kind}", f"no node {node!r}")
        for tier, below in zip(names, [*names[1:], "edge"][: len(names)], strict=True):
            if len(ids[below]) < len(ids[tier]):
                _fail(
                    "topology.tiers",
                    f"tier {tier!r} has more nodes than the tier below it ({below})",
                )
        if not names and topo.clients.count < 1:
            _fail("topology.clients", "a federation needs at least one client")
        views = self.data.views
        if views is not None:
            if abs(sum(views.values()) - 1.0) > 1e-9:
                _fail("data.views", "the ratios of all/some/single must sum to 1")
            if views.get("all", 0.0) <= 0.0:
                _fail("data.views", "some clients must hold all views (they seed aligned centres)")
        if self.data.partition.kind == "dirichlet" and self.data.partition.alpha is None:
            _fail("data.partition", "kind 'dirichlet' needs alpha")
        if self.data.partition.kind == "stratified":
            fr = self.data.partition.fractions
            if fr is None or len(fr) != topo.clients.count or abs(sum(fr) - 1.0) > 1e-9:
                _fail(
                    "data.partition.fractions",
                    "'stratified' needs one fraction per client, summing to 1",
                )
        if self.data.partition.kind == "paper" and topo.clients.count != 2:
            _fail(
                "data.partition.kind",
                "'paper' is the 85/15 split of two clients; topology.clients.count must be 2",
            )
        return self
