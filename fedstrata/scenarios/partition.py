"""Partitioners: which samples, and which views, each client of a federation holds.

Sample partitioners return one sorted index array per client; the arrays
are disjoint and together cover ``range(n_samples)`` (horizontal federated
learning: same feature spaces, different samples; FedHK-MVFC paper, §4). All
are deterministic given ``random_state`` and vectorized over samples.

* :func:`iid` - uniform random split into near-equal parts;
* :func:`dirichlet_label_skew` - per-class Dirichlet(α) label skew;
* :func:`quantity_skew` - client sizes from Dirichlet(α) or given proportions;
* :func:`stratified_split` / :func:`paper_split` - per-class fractions, e.g.
  the 85 %/15 % two-client split of FedHK-MVFC §6.1.4 (Eq. 126-127);
* :func:`hybrid_views` - which views each client holds in hybrid-view
  federations (full-view, partial-view and single-view clients, as in the FMCSC and EFD-MVC
  papers).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedstrata.errors import ValidationError
from fedstrata.scenarios.datasets import RandomStateLike, as_generator

__all__ = [
    "HYBRID_CATEGORIES",
    "dirichlet_label_skew",
    "hybrid_views",
    "iid",
    "largest_remainder",
    "paper_split",
    "quantity_skew",
    "stratified_split",
]

IndexArray = NDArray[np.intp]

HYBRID_CATEGORIES: tuple[str, ...] = ("all", "some", "single")
"""Client categories of :func:`hybrid_views`: full-view, partial-view, single-view."""

_SUM_TOL = 1e-9


# --------------------------------------------------------------------------------------------
# Validation and small helpers
# --------------------------------------------------------------------------------------------


def _check_int(value: object, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValidationError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValidationError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_clients(n_clients: object, n_samples: int) -> int:
    m = _check_int(n_clients, "n_clients", 1)
    if m > n_samples:
        raise ValidationError(
            f"n_clients={m} is more than n_samples={n_samples}; every client needs a sample"
        )
    return m


def _check_alpha(alpha: object) -> float:
    try:
        a = float(alpha)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValidationError(f"alpha must be a positive number, got {alpha!r}") from None
    if not (math.isfinite(a) and a > 0):
        raise ValidationError(f"alpha must be a positive finite number, got {alpha!r}")
    return a


def _check_weights(
    values: ArrayLike, name: str, *, length: int | None = None
) -> NDArray[np.float64]:
    """Validate non-negative finite weights summing to 1 (within 1e-9)."""
    try:
        w = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValidationError(f"{name} must be a 1-D sequence of numbers") from None
    if w.ndim != 1 or w.size == 0:
        raise ValidationError(f"{name} must be a non-empty 1-D sequence, got shape {w.shape}")
    if length is not None and w.size != length:
        raise ValidationError(f"{name} must have {length} entries (one per client), got {w.size}")
    if not np.all(np.isfinite(w)):
        raise ValidationError(f"{name} must be finite, got {w.tolist()}")
    if np.any(w < 0):
        raise ValidationError(f"{name} must be non-negative, got {w.tolist()}")
    if abs(w.sum() - 1.0) > _SUM_TOL:
        raise ValidationError(f"{name} must sum to 1, got sum {w.sum()!r}")
    return w


def _check_labels(labels: ArrayLike) -> tuple[NDArray[np.intp], int]:
    """Return dense class codes ``0..C-1`` for ``labels`` and ``C``."""
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.size == 0:
        raise ValidationError(f"labels must be a non-empty 1-D array, got shape {arr.shape}")
    if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
        raise ValidationError("labels contain NaN or infinite values")
    try:
        uniques, codes = np.unique(arr, return_inverse=True)
    except TypeError as exc:
        raise ValidationError(f"labels mix values that cannot be compared: {exc}") from exc
    return codes.reshape(-1).astype(np.intp), int(uniques.size)


def largest_remainder(weights: ArrayLike, total: int) -> NDArray[np.int64]:
    """Apportion ``total`` items in proportion to ``weights`` (Hamilton's method).

    Each entry gets the floor of its quota ``total * w_i / Σw``; the items
    left over go, one each, to the largest fractional parts (ties to the
    lower index). The result sums exactly to ``total`` and each entry is the
    floor or the ceiling of its quota.

    Parameters
    ----------
    weights : array-like of shape (k,)
        Non-negative weights, not all zero (need not sum to 1).
    total : int
        Non-negative number of items to share.

    Returns
    -------
    numpy.ndarray of shape (k,), int64
        The counts.

    Raises
    ------
    ValidationError
        For negative or non-finite weights, all-zero weights or a negative
        total.

    """
    w = np.asarray(weights, dtype=np.float64)
    t = _check_int(total, "total", 0)
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValidationError(f"weights must be non-negative, finite and not all zero, got {w}")
    quotas = w / w.sum() * t
    counts = np.floor(quotas).astype(np.int64)
    missing = t - int(counts.sum())
    if missing > 0:
        order = np.argsort(-(quotas - counts), kind="stable")
        counts[order[:missing]] += 1
    return counts


def _split_by_client(client_of: NDArray[np.intp], n_clients: int) -> list[IndexArray]:
    """Turn a client id per sample into one sorted index array per client."""
    order = np.argsort(client_of, kind="stable").astype(np.intp)
    sizes = np.bincount(client_of, minlength=n_clients)
    return list(np.split(order, np.cumsum(sizes)[:-1]))


def _assign_class_counts(
    codes: NDArray[np.intp], counts: NDArray[np.int64], rng: np.random.Generator
) -> NDArray[np.intp]:
    """Deal each class's samples to clients at random, ``counts[c, j]`` to client ``j``.

    Samples are put in class blocks with a random order inside each block;
    block ``c`` is then cut into consecutive runs of ``counts[c, 0]``,
    ``counts[c, 1]``, ... samples.
    """
    n_classes, n_clients = counts.shape
    order = np.lexsort((rng.random(codes.shape[0]), codes))  # by class, random within class
    client_in_order = np.repeat(np.tile(np.arange(n_clients), n_classes), counts.ravel())
    client_of = np.empty(codes.shape[0], dtype=np.intp)
    client_of[order] = client_in_order
    return client_of


# --------------------------------------------------------------------------------------------
# Sample partitioners
# --------------------------------------------------------------------------------------------


def iid(
    n_samples: int, n_clients: int, *, random_state: RandomStateLike = None
) -> list[IndexArray]:
    """Split ``range(n_samples)`` uniformly at random into near-equal parts.

    Parameters
    ----------
    n_samples : int
        Number of samples, ``>= 1``.
    n_clients : int
        Number of clients, ``1 <= n_clients <= n_samples``.
    random_state : int, numpy.random.Generator or None
        Seed or generator.

    Returns
    -------
    list of numpy.ndarray
        ``n_clients`` sorted index arrays; sizes differ by at most one (the
        first ``n_samples % n_clients`` clients get the extra sample).

    Raises
    ------
    ValidationError
        For non-integer or out-of-range ``n_samples`` or ``n_clients``.

    """
    n = _check_int(n_samples, "n_samples", 1)
    m = _check_clients(n_clients, n)
    rng = as_generator(random_state)
    return [np.sort(part) for part in np.array_split(rng.permutation(n).astype(np.intp), m)]


def dirichlet_label_skew(
    labels: ArrayLike,
    n_clients: int,
    alpha: float,
    *,
    min_size: int = 1,
    max_attempts: int = 100,
    random_state: RandomStateLike = None,
) -> list[IndexArray]:
    """Label-skewed split: each class is shared among clients by Dirichlet(α) proportions.

    For every class ``c`` draw ``p_c ~ Dir(α, ..., α)`` over the clients and
    give client ``j`` the samples of class ``c`` between the cumulative cut
    points ``floor(n_c Σ_{i<j} p_ci)`` and ``floor(n_c Σ_{i<=j} p_ci)`` of a
    random order (the usual non-IID benchmark construction). Small ``α``
    gives each client few classes; ``α -> ∞`` tends to a stratified IID
    split. The whole draw is repeated until every client holds at least
    ``min_size`` samples.

    Parameters
    ----------
    labels : array-like of shape (n_samples,)
        Class of each sample (any values).
    n_clients : int
        Number of clients, ``>= 1``.
    alpha : float
        Dirichlet concentration, ``> 0``.
    min_size : int, default 1
        Smallest acceptable client size, ``>= 0``.
    max_attempts : int, default 100
        How many draws to try before giving up.
    random_state : int, numpy.random.Generator or None
        Seed or generator.

    Returns
    -------
    list of numpy.ndarray
        ``n_clients`` sorted index arrays.

    Raises
    ------
    ValidationError
        For bad parameters, if ``n_clients * min_size > n_samples``, or if no
        draw within ``max_attempts`` met ``min_size`` (raise ``alpha`` or
        lower ``min_size``).

    """
    codes, n_classes = _check_labels(labels)
    n = codes.shape[0]
    m = _check_int(n_clients, "n_clients", 1)
    a = _check_alpha(alpha)
    min_size = _check_int(min_size, "min_size", 0)
    attempts = _check_int(max_attempts, "max_attempts", 1)
    if m * min_size > n:
        raise ValidationError(
            f"n_clients * min_size = {m * min_size} exceeds n_samples = {n}; "
            "lower min_size or n_clients"
        )
    rng = as_generator(random_state)
    class_sizes = np.bincount(codes, minlength=n_classes)
    for _ in range(attempts):
        p = rng.dirichlet(np.full(m, a), size=n_classes)
        cuts = np.floor(np.cumsum(p, axis=1) * class_sizes[:, None]).astype(np.int64)
        cuts[:, -1] = class_sizes  # guard against the cumulative sum ending at 0.999...
        cuts = np.minimum(cuts, class_sizes[:, None])
        counts = np.diff(cuts, axis=1, prepend=0)
        if counts.sum(axis=0).min() >= min_size:
            return _split_by_client(_assign_class_counts(codes, counts, rng), m)
    raise ValidationError(
        f"no Dirichlet(alpha={a}) draw in {attempts} attempts gave every one of the {m} "
        f"clients at least min_size={min_size} samples; raise alpha or lower min_size"
    )


def quantity_skew(
    n_samples: int,
    n_clients: int,
    *,
    alpha: float = 1.0,
    proportions: ArrayLike | None = None,
    min_size: int = 1,
    random_state: RandomStateLike = None,
) -> list[IndexArray]:
    """Split samples at random into clients of skewed sizes.

    With ``proportions=None`` the sizes are ``min_size`` plus a share of the
    remaining ``n_samples - n_clients * min_size`` samples in proportions
    ``p ~ Dir(α, ..., α)``, rounded by :func:`largest_remainder`. With explicit
    ``proportions`` the sizes are ``largest_remainder(proportions,
    n_samples)`` exactly, and every size must reach ``min_size``. The samples
    themselves are assigned uniformly at random.

    Parameters
    ----------
    n_samples : int
        Number of samples, ``>= 1``.
    n_clients : int
        Number of clients, ``1 <= n_clients <= n_samples``.
    alpha : float, default 1.0
        Dirichlet concentration, ``> 0`` (ignored with ``proportions``).
    proportions : array-like of shape (n_clients,), optional
        Client shares: non-negative, summing to 1.
    min_size : int, default 1
        Smallest client size, ``>= 0``.
    random_state : int, numpy.random.Generator or None
        Seed or generator.

    Returns
    -------
    list of numpy.ndarray
        ``n_clients`` sorted index arrays.

    Raises
    ------
    ValidationError
        For bad parameters, proportions of the wrong length or not summing to
        1, ``n_clients * min_size > n_samples``, or explicit proportions that
        leave a client below ``min_size``.

    """
    n = _check_int(n_samples, "n_samples", 1)
    m = _check_clients(n_clients, n)
    min_size = _check_int(min_size, "min_size", 0)
    if m * min_size > n:
        raise ValidationError(
            f"n_clients * min_size = {m * min_size} exceeds n_samples = {n}; "
            "lower min_size or n_clients"
        )
    rng = as_generator(random_state)
    if proportions is None:
        p = rng.dirichlet(np.full(m, _check_alpha(alpha)))
        sizes = min_size + largest_remainder(p, n - m * min_size)
    else:
        p = _check_weights(proportions, "proportions", length=m)
        sizes = largest_remainder(p, n)
        if sizes.min() < min_size:
            raise ValidationError(
                f"proportions give client sizes {sizes.tolist()}, below min_size={min_size}"
            )
    client_of = np.repeat(np.arange(m, dtype=np.intp), sizes)[rng.permutation(n)]
    return _split_by_client(client_of, m)


def stratified_split(
    labels: ArrayLike,
    fractions: Sequence[float] | ArrayLike,
    *,
    random_state: RandomStateLike = None,
) -> list[IndexArray]:
    """Split each class among clients in fixed fractions (stratified sampling).

    Client ``j`` receives ``largest_remainder(fractions, n_c)[j]`` samples of
    class ``c`` (``round(fraction_j * n_c)``, with the per-class counts
    summing exactly to ``n_c``), drawn at random within the class. A client's
    total is the sum of its per-class counts, so it can differ from
    ``fraction_j * n_samples`` by less than the number of classes; with
    class sizes whose fractions are whole numbers it is exact. A client can
    be empty when its fraction is tiny.

    Parameters
    ----------
    labels : array-like of shape (n_samples,)
        Class of each sample (any values).
    fractions : sequence of float
        One fraction per client, each ``>= 0``, summing to 1.
    random_state : int, numpy.random.Generator or None
        Seed or generator.

    Returns
    -------
    list of numpy.ndarray
        ``len(fractions)`` sorted index arrays.

    Raises
    ------
    ValidationError
        For bad labels or fractions that are negative, non-finite or do not
        sum to 1.

    """
    codes, n_classes = _check_labels(labels)
    f = _check_weights(fractions, "fractions")
    rng = as_generator(random_state)
    class_sizes = np.bincount(codes, minlength=n_classes)
    counts = np.stack([largest_remainder(f, int(size)) for size in class_sizes])
    return _split_by_client(_assign_class_counts(codes, counts, rng), f.size)


def paper_split(labels: ArrayLike, random_state: RandomStateLike = None) -> list[IndexArray]:
    """Split in two, 85 %/15 % per cluster, as in FedHK-MVFC §6.1.4.

    Eq. 126-127 give client 1 samples ``1..8500`` and client 2 samples
    ``8501..10000``; taken literally on cluster-ordered rows, client 2 would
    see only cluster 4, contradicting "both clients are equipped with four
    distinct cluster types" (FedHK-MVFC paper, §6.1). Following the text's
    "stratified sampling" (and the authors' ``federated_data_partition.m``),
    each cluster is split 85/15 at random: on the default synthetic data
    (2500 per cluster) that is exactly 2125/375 per cluster and 8500/1500 in
    all (spec §5.2).

    Parameters
    ----------
    labels : array-like of shape (n_samples,)
        Class of each sample.
    random_state : int, numpy.random.Generator or None
        Seed or generator.

    Returns
    -------
    list of numpy.ndarray
        Two sorted index arrays (client 1, client 2).

    Raises
    ------
    ValidationError
        For bad labels.

    """
    return stratified_split(labels, [0.85, 0.15], random_state=random_state)


# --------------------------------------------------------------------------------------------
# Hybrid views
# --------------------------------------------------------------------------------------------


def _check_ratios(ratios: Mapping[str, float]) -> NDArray[np.float64]:
    if not isinstance(ratios, Mapping):
        raise ValidationError(
            f"ratios must be a mapping like {{'all': 0.5, 'some': 0.3, 'single': 0.2}}, "
            f"got {type(ratios).__name__}"
        )
    unknown = sorted(set(ratios) - set(HYBRID_CATEGORIES))
    if unknown:
        raise ValidationError(
            f"unknown ratios keys {unknown}; expected some of {list(HYBRID_CATEGORIES)}"
        )
    return _check_weights([ratios.get(k, 0.0) for k in HYBRID_CATEGORIES], "ratios")


def _some_sizes(rng: np.random.Generator, k: int, n_views: int) -> NDArray[np.int64]:
    """Random subset sizes of partial-view clients: 2..V-1 views, or 1 view when V == 2."""
    low, high = (2, n_views - 1) if n_views >= 3 else (1, 1)
    return rng.integers(low, high, size=k, endpoint=True).astype(np.int64)


def hybrid_views(
    n_clients: int,
    n_views: int,
    ratios: Mapping[str, float],
    *,
    random_state: RandomStateLike = None,
) -> list[tuple[int, ...]]:
    """Choose which views each client of a hybrid-view federation holds.

    Clients fall into three categories, as in heterogeneous hybrid-view
    federated multi-view clustering: full-view clients (``"all"``, every
    view), partial-view clients (``"some"``, a random proper subset of at
    least two views) and single-view clients (``"single"``, one view). FMCSC
    ("Bridging Gaps: Federated Multi-View Clustering in Heterogeneous
    Hybrid Views") mixes full-view and single-view clients at ratios M/S = 2:1, 1:1 and
    1:2; EFD-MVC ("Enhanced Federated Deep Multi-View Clustering under Uncertainty
    Scenario", §3) adds partial-view clients.

    The category counts are ``largest_remainder(ratios, n_clients)`` in the
    order all, some, single. Single-view clients take the views in
    round-robin order of a random permutation, so they cover as many views as
    possible. Views still held by nobody are then dealt round-robin to the
    partial-view clients, whose subsets are completed at random up to a
    random size. Finally the clients are listed in random order.

    Parameters
    ----------
    n_clients : int
        Number of clients, ``>= 1``.
    n_views : int
        Number of views ``V``, ``>= 1``.
    ratios : mapping of str to float
        Shares of the categories ``"all"``, ``"some"`` and ``"single"``
        (missing keys count as 0); non-negative, summing to 1.
    random_state : int, numpy.random.Generator or None
        Seed or generator.

    Returns
    -------
    list of tuple of int
        For each client, its sorted view indices.

    Raises
    ------
    ValidationError
        For bad ``n_clients``, ``n_views`` or ``ratios``; for partial-view
        clients when ``n_views == 1`` (no proper non-empty subset exists); or
        when the counts make it impossible for every view to be held by some
        client.

    Notes
    -----
    With ``n_views == 2`` no proper subset has two views; partial-view
    clients then hold a single random view, like single-view clients, but
    still take the views nobody else holds first.

    """
    m = _check_int(n_clients, "n_clients", 1)
    v = _check_int(n_views, "n_views", 1)
    counts = largest_remainder(_check_ratios(ratios), m)
    n_all, n_some, n_single = (int(c) for c in counts)
    if n_some and v == 1:
        raise ValidationError(
            "ratios['some'] > 0 needs n_views >= 2: with one view there is no partial view set"
        )
    rng = as_generator(random_state)

    singles = rng.permutation(v)[np.arange(n_single) % v] if n_single else np.empty(0, np.int64)
    held = np.zeros(v, dtype=bool)
    held[singles] = True
    missing = np.flatnonzero(~held) if n_all == 0 else np.empty(0, np.int64)
    missing = rng.permutation(missing)
    max_some = max(v - 1, 1)
    if missing.size and (n_some == 0 or missing.size > n_some * max_some):
        raise ValidationError(
            f"with {n_all} full-view, {n_some} partial-view and {n_single} single-view clients "
            f"the {v} views cannot all be held by some client; raise ratios['all'], "
            "ratios['some'] or n_clients"
        )

    some_sets: list[tuple[int, ...]] = []
    sizes = _some_sizes(rng, n_some, v)
    for i in range(n_some):  # loop over clients (not samples)
        required = missing[i::n_some]
        size = max(int(sizes[i]), required.size)
        others = np.setdiff1d(np.arange(v), required)
        extra = rng.choice(others, size=size - required.size, replace=False)
        some_sets.append(tuple(sorted(int(x) for x in np.concatenate([required, extra]))))

    everything = tuple(range(v))
    assignment = [everything] * n_all + some_sets + [(int(s),) for s in singles]
    return [assignment[i] for i in rng.permutation(m)]
