"""The data and wiring of a federation, built one way for pre-flight checks and runs.

:func:`prepare_data` loads or generates the dataset and splits it among the clients by
the scenario's partition; :func:`wire_topology` says who reports to whom. The runs
(:mod:`fedstrata.scenarios.build`, the node builder, ``fedstrata node``) and the
pre-flight checks (:mod:`fedstrata.scenarios.preflight`) call the same functions, so a
scenario that passes the checks builds the federation they checked.

A client with no samples is an error (never a silently idle node): every client must
hold at least one sample.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from fedstrata.errors import ScenarioError
from fedstrata.errors import ValidationError as FsValidationError
from fedstrata.scenarios import partition as part
from fedstrata.scenarios.data_schema import DataFile
from fedstrata.scenarios.datasets import (
    MultiViewDataset,
    dataset_size,
    load_dataset,
    load_files,
)
from fedstrata.scenarios.schema import SEED_LIMIT, Scenario, ScenarioErrors, clip, show

__all__ = [
    "PreparedData",
    "Wiring",
    "prepare_data",
    "scenario_dataset",
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
