"""Pre-flight checks: find, before a run, every problem that would make it fail.

The schema (:mod:`fedstrata.scenarios.schema`) checks a scenario's fields and their
cross-field rules; what it cannot see needs the data: a split that would leave a
client without samples, more clusters than samples, a missing dataset file. This
module builds the data exactly as :func:`~fedstrata.scenarios.build.build_federation`
does (it calls :func:`prepare_data` and :func:`wire_topology` from here) and raises
:class:`~fedstrata.errors.ScenarioError` objects whose ``path`` names the field to
change; :func:`fedstrata.scenarios.loader.load_scenario` adds file and line.

A client with no samples is an error (never a silently idle node): every client must
hold at least one sample.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedstrata.errors import FedstrataError, ScenarioError
from fedstrata.errors import ValidationError as FsValidationError
from fedstrata.scenarios import partition as part
from fedstrata.scenarios.datasets import (
    MultiViewDataset,
    dataset_size,
    load_dataset,
    load_files,
)
from fedstrata.plugins.spec import needs_dims
from fedstrata.scenarios.schema import (
    SEED_LIMIT,
    DataFile,
    Scenario,
    ScenarioErrors,
    clip,
    show,
)

__all__ = [
    "PreparedData",
    "Wiring",
    "deadline_warnings",
    "preflight",
    "prepare_data",
    "scenario_dataset",
    "scenario_warnings",
    "split_samples",
    "wire_topology",
]


@dataclass(frozen=True, eq=False)
class PreparedData:
    """The data of a federation: the dataset, each client's samples and views.

    Parameters
    ----------
    dataset
        The loaded or generated dataset.
    indices
        One sorted sample-index array per client (``client-0`` first), each non-empty.
    held
        The view indices each client holds, in the same order.
    """

    dataset: MultiViewDataset
    indices: list[np.ndarray]
    held: list[tuple[int, ...]]


@dataclass(frozen=True, eq=False)
class Wiring:
    """Who reports to whom.

    Parameters
    ----------
    tiers
        ``(tier name, node ids)`` top-down, the cloud first; clients are not included.
    tier_of
        The tier name of every aggregator.
    parents
        The parent of every node but the cloud (aggregators and clients).
    children
        The children of every aggregator, each list non-empty.
    clients
        The client ids, ``client-0`` first.
    """

    tiers: list[tuple[str, list[str]]]
    tier_of: dict[str, str]
    parents: dict[str, str]
    children: dict[str, list[str]]
    clients: list[str]


def _check_seed(seed: object) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT:
        raise ScenarioError(f"must be an integer in [0, 2**32), got {show(seed)}", path="seed")


def _check_counts(sc: Scenario, n_samples: int) -> None:
    errors = []
    n_clients, n_clusters = sc.topology.clients.count, sc.algorithm.n_clusters
    if n_clients > n_samples:
        errors.append(
            ScenarioError(
                f"{n_clients} clients but the dataset has only {n_samples} samples; every "
                "client needs at least one",
                path="topology.clients.count",
            )
        )
    if n_clusters > n_samples:
        errors.append(
            ScenarioError(
                f"{n_clusters} clusters but the dataset has only {n_samples} samples",
                path="algorithm.n_clusters",
            )
        )
    if errors:
        raise ScenarioErrors(errors)


def split_samples(sc: Scenario, ds: MultiViewDataset) -> list[np.ndarray]:
    """Sample indices of each client, by the scenario's partition.

    Parameters
    ----------
    sc
        A validated scenario; ``sc.seed`` seeds the split.
    ds
        Its dataset.

    Returns
    -------
    list of numpy.ndarray
        One non-empty, sorted index array per client.

    Raises
    ------
    ScenarioError
        If there are more clients than samples, the partitioner fails, or a client
        would get no samples; ``path`` names the field to change.

    """
    p, n_clients, seed = sc.data.partition, sc.topology.clients.count, sc.seed
    if n_clients > ds.n_samples:
        raise ScenarioError(
            f"{n_clients} clients but the dataset has only {ds.n_samples} samples; every "
            "client needs at least one",
            path="topology.clients.count",
        )
    rng = np.random.default_rng([seed, 1])
    try:
        if p.kind == "iid":
            indices = part.iid(ds.n_samples, n_clients, random_state=rng)
        elif p.kind == "dirichlet":
            indices = part.dirichlet_label_skew(ds.labels, n_clients, p.alpha, random_state=rng)
        elif p.kind == "quantity":
            indices = part.quantity_skew(
                ds.n_samples, n_clients, alpha=p.alpha or 1.0, random_state=rng
            )
        elif p.kind == "stratified":
            indices = part.stratified_split(ds.labels, p.fractions, random_state=rng)
        else:
            indices = part.paper_split(ds.labels, random_state=rng)
    except FsValidationError as exc:
        if p.kind == "dirichlet" and str(exc).startswith("no Dirichlet"):
            raise ScenarioError(
                f"no Dirichlet(alpha={p.alpha:g}) draw in 100 attempts gave each of the "
                f"{n_clients} clients a sample; raise alpha or use fewer clients",
                path="data.partition.alpha",
            ) from None
        raise ScenarioError(clip(str(exc), 300), path="data.partition") from None
    for k, idx in enumerate(indices):
        if idx.size:
            continue
        if p.kind == "stratified":
            assert p.fractions is not None
            raise ScenarioError(
                f"client-{k} would get no samples: its fraction {p.fractions[k]:g} rounds to 0 "
                "in every class; every client needs at least one sample, so raise it",
                path=f"data.partition.fractions.{k}",
            )
        raise ScenarioError(
            f"client-{k} would get no samples with kind {p.kind!r} on {ds.n_samples} samples; "
            "every client needs at least one, so use more samples",
            path="data.partition.kind",
        )
    return indices


def prepare_data(sc: Scenario, seed: int | None = None) -> PreparedData:
    """Load the dataset, split it over the clients and assign their views.

    This is the data step of :func:`~fedstrata.scenarios.build.build_federation`,
    with the same random streams: the same scenario and seed give the same data.

    Parameters
    ----------
    sc
        A validated scenario.
    seed
        Overrides ``sc.seed`` (an integer in ``[0, 2**32)``).

    Returns
    -------
    PreparedData
        The dataset and, per client, its samples and views.

    Raises
    ------
    ScenarioError
        For every problem, with ``path`` set: a bad seed, a dataset that cannot be
        loaded (``data.dataset``), more clients or clusters than samples, a split
        leaving a client without samples, a view assignment that cannot cover every
        view (``data.views``). Several independent problems come as
        :class:`~fedstrata.scenarios.schema.ScenarioErrors`.

    """
    if seed is not None:
        _check_seed(seed)
        sc = sc.model_copy(update={"seed": seed})
    _check_seed(sc.seed)
    if sc.data.files is not None:
        ds = _files_dataset(sc)
    else:
        name, params = sc.data.dataset, dict(sc.data.params)
        size = dataset_size(name, **params)
        if size is not None:
            _check_counts(sc, size)  # before building anything
        try:
            ds = load_dataset(name, random_state=sc.seed, **params)
        except FsValidationError as exc:  # a loader's own message already says what is wrong
            raise ScenarioError(str(exc), path="data.dataset") from None
        except Exception as exc:  # a dataset error is a scenario error: say where
            raise ScenarioError(
                f"cannot load the dataset: {clip(str(exc), 200)}", path="data.dataset"
            ) from None
    _check_counts(sc, ds.n_samples)
    indices = split_samples(sc, ds)
    if sc.data.views is None:
        held = [tuple(range(ds.n_views))] * len(indices)
    else:
        try:
            held = part.hybrid_views(
                len(indices),
                ds.n_views,
                dict(sc.data.views),
                random_state=np.random.default_rng([sc.seed, 3]),
            )
        except FsValidationError as exc:
            raise ScenarioError(clip(str(exc), 300), path="data.views") from None
    return PreparedData(ds, indices, held)


def scenario_dataset(sc: Scenario) -> MultiViewDataset:
    """The dataset a scenario names: its ``data.files``, or ``data.dataset`` with its params.

    Raises
    ------
    ScenarioError
        For files that no longer read (``data.files...``); a built-in loader raises
        as :func:`~fedstrata.scenarios.datasets.load_dataset`.

    """
    if sc.data.files is not None:
        return _files_dataset(sc)
    return load_dataset(sc.data.dataset, random_state=sc.seed, **dict(sc.data.params))


def _files_dataset(sc: Scenario) -> MultiViewDataset:
    """The dataset of ``data.files`` (paths made absolute when the scenario was validated)."""
    from fedstrata.device.data import DataFileError

    files = sc.data.files
    assert files is not None

    def item(entry: str | DataFile) -> tuple[str, str | None]:
        return (entry, None) if isinstance(entry, str) else (entry.path, entry.key)

    labels = None if files.labels is None else item(files.labels)
    try:
        ds = load_files([item(e) for e in files.views], labels)
    except DataFileError as exc:  # changed on disk since the scenario was validated
        h = getattr(exc, "view", None)
        where = "data.files.labels" if h is None else f"data.files.views.{h}"
        raise ScenarioError(f"{exc.reason} (read again for the run)", path=where) from None
    if not ds.labelled:  # what reads the labels cannot run on data without them
        errors = []
        if sc.data.partition.kind in ("dirichlet", "stratified", "paper"):
            errors.append(
                ScenarioError(
                    f"partition {sc.data.partition.kind!r} splits by label: give "
                    "data.files.labels, or use iid or quantity",
                    path="data.partition.kind",
                )
            )
        if sc.protocol.personalization is not None:
            errors.append(
                ScenarioError(
                    "per-client metrics need labels: give data.files.labels",
                    path="protocol.personalization",
                )
            )
        if errors:
            raise ScenarioErrors(errors)
    return ds


def _parent_index(j: int, n_children: int, n_parents: int) -> int:
    return j * n_parents // n_children  # contiguous, even blocks


def wire_topology(sc: Scenario) -> Wiring:
    """Connect the nodes: every node's parent and every aggregator's children.

    Middle-tier nodes and clients are spread over the tier above in contiguous, even
    blocks; ``topology.clients.attach`` overrides a client's parent.

    Parameters
    ----------
    sc
        A validated scenario.

    Returns
    -------
    Wiring
        Tiers, parents and children.

    Raises
    ------
    ScenarioError
        If an aggregator would have no children (all of its clients attached
        elsewhere).

    """
    ids = sc.node_ids()
    tiers = [("cloud", ids["cloud"])] + [(t.name, ids[t.name]) for t in sc.topology.tiers]
    tier_of = {n: name for name, group in tiers for n in group}
    parents: dict[str, str] = {}
    for (_, up_ids), (_, low_ids) in itertools.pairwise(tiers):
        for j, node in enumerate(low_ids):
            parents[node] = up_ids[_parent_index(j, len(low_ids), len(up_ids))]
    lowest = tiers[-1][1]
    clients = ids["edge"]
    attach = sc.topology.clients.attach
    for j, c in enumerate(clients):
        parents[c] = attach.get(c, lowest[_parent_index(j, len(clients), len(lowest))])
    children: dict[str, list[str]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    for level, (_, group) in enumerate(tiers):
        for node in group:
            if node not in children:
                lowest_tier = level == len(tiers) - 1
                raise ScenarioError(
                    f"{node} has no children: "
                    + (
                        "every client it would serve is attached elsewhere; attach one to it "
                        "or use fewer nodes in its tier"
                        if lowest_tier and attach
                        else "use fewer nodes in its tier"
                    ),
                    path="topology.clients.attach"
                    if lowest_tier and attach
                    else f"topology.tiers.{max(level - 1, 0)}.count",
                )
    return Wiring(tiers, tier_of, parents, children, clients)


def _check_links(sc: Scenario) -> list[ScenarioError]:
    """Build every link as the run does; problems come back located at their field."""
    from fedstrata.scenarios.build import latency_model, link_of

    links = [(f"topology.tiers.{i}.link", t.link) for i, t in enumerate(sc.topology.tiers)]
    links.append(("topology.clients.link", sc.topology.clients.link))
    errors = []
    for path, link in links:
        bad = False
        for key in ("latency", "jitter"):
            spec = getattr(link, key)
            if spec is None:
                continue
            try:
                latency_model(spec)
            except (FedstrataError, ValueError, OSError) as exc:
                bad = True
                where = f"{path}.{key}" + (".file" if spec.dist == "empirical" else "")
                reason = exc.reason if isinstance(exc, ScenarioError) else str(exc)
                errors.append(ScenarioError(clip(reason, 300), path=where))
        if not bad:
            try:
                link_of(link)
            except (FedstrataError, ValueError) as exc:
                errors.append(ScenarioError(clip(str(exc), 300), path=path))
    return errors


def _check_secure(sc: Scenario, wiring: Wiring) -> list[ScenarioError]:
    """Every secure session must be able to run: at least 3 members, a valid threshold."""
    if sc.privacy.secure_aggregation == "none":
        return []
    from fedstrata.nodes.secure import group_config, holders, threshold_count
    from fedstrata.scenarios.build import protocol_config, secure_groups

    protocol = protocol_config(sc, "preflight")
    errors: list[ScenarioError] = []
    for node, (n, below) in sorted(secure_groups(sc, wiring).items()):
        members = "clients" + (" asked per round" if below and sc.protocol.sample < 1 else "")
        if n < 3:
            errors.append(
                ScenarioError(
                    f"{node} aggregates {n} {members if below else 'children'}: a secure "
                    f"sum of fewer than 3 gives a member's input away (one: the sum is it; "
                    f"two: each learns the other's); give it at least 3",
                    path="privacy.secure_aggregation",
                )
            )
            continue
        h, t = holders(protocol, n), threshold_count(protocol, n)
        try:
            group_config(protocol, n, 1).check_group(n)
        except (FedstrataError, ValueError):
            errors.append(
                ScenarioError(
                    f"threshold {t} does not fit {node}'s group of {n}: each member's "
                    f"secrets have {h} share holders and the threshold must satisfy "
                    f"h/2 < t <= h",
                    path="privacy.threshold",
                )
            )
    return errors


def preflight(sc: Scenario, seed: int | None = None) -> PreparedData:
    """Run every check a run makes before it starts, and return the prepared data.

    Besides :func:`prepare_data` this checks the algorithm (its plug-in builds the model
    from the dataset's shape: a rank above a view's size, say, is refused here), the
    wiring (no aggregator without children) and every link model (latency traces are
    read).

    Parameters
    ----------
    sc
        A validated scenario.
    seed
        Overrides ``sc.seed``, as :func:`prepare_data`.

    Returns
    -------
    PreparedData
        What :func:`prepare_data` returns.

    Raises
    ------
    ScenarioError
        One problem, or :class:`~fedstrata.scenarios.schema.ScenarioErrors` with
        several, each with ``path`` set (no file or line: the loader adds them).

    """
    from fedstrata.scenarios.build import model_of

    errors: list[ScenarioError] = []

    def collect(exc: ScenarioError) -> None:
        errors.extend(exc.errors if isinstance(exc, ScenarioErrors) else [exc])

    data = None
    try:
        data = prepare_data(sc, seed)
    except ScenarioError as exc:
        collect(exc)
    try:
        if data is not None or not needs_dims(sc.algorithm.name):
            model_of(
                sc,
                None if data is None else [X.shape[1] for X in data.dataset.views],
                None if data is None else data.dataset.n_samples,
            )
    except ScenarioError as exc:
        collect(exc)
    except (FedstrataError, ValueError) as exc:
        errors.append(ScenarioError(clip(str(exc), 300), path="algorithm"))
    try:
        wiring = wire_topology(sc)
    except ScenarioError as exc:
        collect(exc)
    else:
        errors.extend(_check_secure(sc, wiring))
    errors.extend(_check_links(sc))
    if errors:
        raise ScenarioErrors(errors)
    assert data is not None
    return data


# ------------------------------------------------------------------------------ warnings

#: A bare latency number (seconds) at least this large is likely meant in milliseconds.
MS_LOOKING_LATENCY_S = 1.0

#: The latency keys of a ``LatencySpec`` mapping that hold seconds.
_LATENCY_SECONDS = ("value", "mean", "std", "median", "scale")


def _links(sc: Scenario) -> list[tuple[str, Any]]:
    links = [(f"topology.tiers.{i}.link", t.link) for i, t in enumerate(sc.topology.tiers)]
    links.append(("topology.clients.link", sc.topology.clients.link))
    return links


def _bare_seconds(root: Any, path: str) -> float | None:
    """The number at ``path`` of the YAML tree when it is written without a unit."""
    import yaml

    from fedstrata.scenarios.loader import _node_at

    node = _node_at(root, tuple(int(p) if p.isdigit() else p for p in path.split(".")))
    if not isinstance(node, yaml.ScalarNode) or node.style is not None:
        return None  # a mapping, a quoted string, or absent
    try:
        return float(node.value)  # "40ms" does not parse: it has a unit
    except ValueError:
        return None


def _ms_latency_warnings(sc: Scenario, root: Any) -> list[ScenarioError]:
    """Latencies given as a bare number of seconds >= 1 s: probably meant as milliseconds."""
    warnings = []
    for path, _link in _links(sc):
        for key in ("latency", "jitter"):
            where = [f"{path}.{key}"] + [f"{path}.{key}.{k}" for k in _LATENCY_SECONDS]
            for at in where:
                value = _bare_seconds(root, at)
                if value is not None and value >= MS_LOOKING_LATENCY_S:
                    warnings.append(
                        ScenarioError(
                            f"warning: {key} {value:g} is read as {value:g} s (a bare number is "
                            f"seconds); if you meant milliseconds write {value:g}ms",
                            path=at,
                        )
                    )
    return warnings


def _typical(spec: Any) -> float:
    """A latency model's median, from a fixed sample (0 when it cannot be built)."""
    from fedstrata.scenarios.build import latency_model

    if spec is None:
        return 0.0
    try:
        model = latency_model(spec)
    except Exception:  # a bad trace is an error reported by preflight, not here
        return 0.0
    return float(np.median(model.sample_many(np.random.default_rng(0), 501)))


@dataclass(frozen=True)
class _Hop:
    """The time one child needs to answer its parent: latency, transfer and compute."""

    latency: float
    transfer: float
    compute: float
    below: float = 0.0  # a middle node: the time its own collection takes

    @property
    def total(self) -> float:
        return self.latency + self.transfer + self.compute + self.below

    def parts(self) -> str:
        shown = [
            ("latency", self.latency),
            ("collection below", self.below),
            ("transfer", self.transfer),
            ("compute", self.compute),
        ]
        return " + ".join(f"{name} {_secs(v)}" for name, v in shown if v > 0)


def _secs(value: float) -> str:
    return f"{value:.3g} s" if value >= 0.01 else f"{value * 1e3:.3g} ms"


def deadline_warnings(sc: Scenario, data: PreparedData | None = None) -> list[ScenarioError]:
    """Aggregators whose rounds cannot collect their quorum within their deadline.

    A lower estimate of each child's answer time at the scenario's links and speeds:
    the link's typical latency both ways (the median of its distribution), the
    model down and the partial up at its bandwidth (each at least the centres,
    ``8 x clusters x features`` bytes), the client's local work
    (``n_i x clusters x features x local_iters x flops_per_element`` at its
    ``speed_gflops``) and, for a middle-tier node, its own collection. An aggregator
    whose quorum-th fastest child needs longer than its deadline gets one warning,
    at the deadline's key, per tier (the slowest node of the tier).
    """
    from fedstrata.scenarios.build import node_timing, protocol_config

    if data is None:
        data = prepare_data(sc)
    wiring = wire_topology(sc)
    timing = node_timing(sc, wiring)
    protocol = protocol_config(sc, "preflight")
    c = sc.algorithm.n_clusters
    dims = [int(X.shape[1]) for X in data.dataset.views]
    model_bytes = 8 * c * sum(dims)
    spec_of = {t.name: (i, t) for i, t in enumerate(sc.topology.tiers)}

    def transfer(link: Any, nbytes: float) -> float:
        return 0.0 if link.bandwidth_mbps is None else 8 * nbytes / (link.bandwidth_mbps * 1e6)

    hop: dict[str, _Hop] = {}
    client_link = sc.topology.clients.link
    lat = 2 * _typical(client_link.latency)
    for j, client in enumerate(wiring.clients):
        held = sum(dims[v] for v in data.held[j])
        work = len(data.indices[j]) * c * held * sc.protocol.local_iters
        hop[client] = _Hop(
            latency=lat,
            transfer=transfer(client_link, 2 * model_bytes),
            compute=work * protocol.flops_per_element / (sc.topology.clients.speed_gflops * 1e9),
        )
    children: dict[str, list[str]] = {}
    for child, parent in wiring.parents.items():
        children.setdefault(parent, []).append(child)
    warnings: list[ScenarioError] = []
    for level in range(len(wiring.tiers) - 1, -1, -1):  # bottom-up: children first
        name, group = wiring.tiers[level]
        worst: tuple[float, str, _Hop, float] | None = None
        for node in group:
            answers = sorted((hop[ch] for ch in children.get(node, ())), key=lambda h: h.total)
            if not answers:
                continue
            deadline = timing[node][0]
            need = max(1, math.ceil(sc.protocol.quorum * len(answers) - 1e-9))
            slowest_needed = answers[need - 1]
            if slowest_needed.total > deadline and (
                worst is None or slowest_needed.total / deadline > worst[0] / worst[3]
            ):
                worst = (slowest_needed.total, node, slowest_needed, deadline)
            if level > 0:
                _, spec = spec_of[name]
                hop[node] = _Hop(
                    latency=2 * _typical(spec.link.latency),
                    transfer=transfer(spec.link, 2 * model_bytes),
                    compute=0.0,
                    below=min(slowest_needed.total, deadline),
                )
        if worst is None:
            continue
        total, node, h, deadline = worst
        if level == 0:
            path = "protocol.deadline_s"
        else:
            i, spec = spec_of[name]
            path = (
                f"topology.tiers.{i}.deadline_s"
                if spec.deadline_s is not None
                else ("protocol.deadline_s")
            )
        kind = "its quorum of children needs" if need > 1 else "a child needs"
        warnings.append(
            ScenarioError(
                f"warning: every round of {node} ({name}) misses its {_secs(deadline)} "
                f"deadline: {kind} at least about {_secs(total)} to answer ({h.parts()}), "
                "so rounds fail and the run stalls; raise the deadline or check the links "
                "and speeds",
                path=path,
            )
        )
    return warnings


def scenario_warnings(path: str | Path, sc: Scenario) -> list[ScenarioError]:
    """The warnings of a valid scenario file, each located (``file:line: path: warning: ...``).

    Latencies that look like milliseconds written as seconds (a bare number >= 1 s)
    and aggregators whose rounds cannot fit their deadline
    (:func:`deadline_warnings`). Warnings never make a scenario invalid.
    """
    from fedstrata.scenarios.loader import _compose_extending, _read, _where

    file = str(path)
    p = Path(path)
    try:
        _, root, _, _ = _compose_extending(_read(p, file), file, p.absolute().parent)
    except Exception:  # the file validated a moment ago: if it no longer reads, no warnings
        return []
    found = _ms_latency_warnings(sc, root)
    with contextlib.suppress(ScenarioError):  # an invalid scenario is the loader's to report
        found += deadline_warnings(sc)
    located = []
    for w in found:
        parts = tuple(int(x) if x.isdigit() else x for x in (w.path or "").split("."))
        where, line = _where(root, parts, file)
        located.append(ScenarioError(w.reason, path=w.path, file=where, line=line))
    return located
