"""External clustering metrics computed from the contingency table.

All metrics compare a reference labelling ``y_true`` with a clustering
``y_pred`` of the same samples. Label values are arbitrary (integers of any
sign, strings, ...): only which samples share a label matters. Every metric
is computed from the contingency table ``N[i, j] = #{samples in class i and
cluster j}``, built with ``np.unique`` (one call per labelling and one over
the cell codes), so no Python loop runs over the samples. The table is kept
sparse (non-zero cells and margins), so memory stays ``O(n)`` even for
all-singleton clusterings; only the Hungarian matching of the accuracy needs
it dense.

These are the indices the FedHK-MVFC paper reports (§6.2: AR, RI,
NMI) plus the clustering accuracy and purity that most multi-view clustering
papers (FMCSC and EFD-MVC) report. ``nmi``, ``ari`` and ``rand_index`` agree
with scikit-learn's ``normalized_mutual_info_score`` (arithmetic mean),
``adjusted_rand_score`` and ``rand_score``, including their conventions for
degenerate labellings.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import linear_sum_assignment

from fedstrata.errors import ValidationError

__all__ = [
    "ari",
    "clustering_accuracy",
    "contingency_matrix",
    "evaluate",
    "matched_disagreement",
    "nmi",
    "purity",
    "rand_index",
]

_MAX_MATCHING_CELLS = 1 << 24
"""Largest contingency table (classes x clusters) the Hungarian matching of ACC accepts."""


def _check_labels(labels: ArrayLike, name: str) -> NDArray[Any]:
    """Return ``labels`` as a 1-D array, or raise ValidationError.

    Parameters
    ----------
    labels
        Label vector of any hashable, sortable values.
    name
        Argument name used in error messages.

    Returns
    -------
    numpy.ndarray
        The labels as a 1-D array.

    """
    try:
        arr = np.asarray(labels)
    except (TypeError, ValueError) as exc:  # ragged input
        raise ValidationError(f"{name} cannot be read as a 1-D label array: {exc}") from exc
    if arr.ndim != 1:
        raise ValidationError(f"{name} must be 1-D, got an array of shape {arr.shape}")
    if arr.size == 0:
        raise ValidationError(f"{name} is empty; at least one sample is needed")
    if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
        raise ValidationError(f"{name} contains NaN or infinite labels")
    if arr.dtype.kind == "O" and np.any(arr != arr):  # NaN is the only value != itself
        raise ValidationError(f"{name} contains NaN labels")
    return arr


def _codes(labels: NDArray[Any], name: str) -> tuple[NDArray[np.intp], int]:
    """Map labels to dense codes ``0..k-1``; return the codes and ``k``."""
    try:
        uniques, codes = np.unique(labels, return_inverse=True)
    except TypeError as exc:  # object array with mutually unorderable values (None, mixed types)
        raise ValidationError(f"{name} mixes label types that cannot be compared: {exc}") from exc
    return codes.reshape(-1), int(uniques.shape[0])


class _Table(NamedTuple):
    """Sparse contingency table: the non-zero cells and the margins."""

    rows: NDArray[np.intp]  # class index of each non-zero cell
    cols: NDArray[np.intp]  # cluster index of each non-zero cell
    counts: NDArray[np.int64]  # N[rows, cols] > 0
    a: NDArray[np.int64]  # class sizes (row sums)
    b: NDArray[np.int64]  # cluster sizes (column sums)
    n: int


def _table(y_true: ArrayLike, y_pred: ArrayLike) -> _Table:
    """Validate both labellings and build their sparse contingency table.

    Only the non-zero cells are stored, so the memory is ``O(n)`` even when
    both labellings have thousands of groups (e.g. all singletons).
    """
    a = _check_labels(y_true, "y_true")
    b = _check_labels(y_pred, "y_pred")
    if a.shape[0] != b.shape[0]:
        raise ValidationError(
            f"y_true and y_pred must have the same length, got {a.shape[0]} and {b.shape[0]}"
        )
    ca, ka = _codes(a, "y_true")
    cb, kb = _codes(b, "y_pred")
    cells, counts = np.unique(ca.astype(np.int64) * kb + cb, return_counts=True)
    return _Table(
        rows=(cells // kb).astype(np.intp),
        cols=(cells % kb).astype(np.intp),
        counts=counts.astype(np.int64),
        a=np.bincount(ca, minlength=ka).astype(np.int64),
        b=np.bincount(cb, minlength=kb).astype(np.int64),
        n=int(a.shape[0]),
    )


def _dense(t: _Table) -> NDArray[np.int64]:
    N = np.zeros((t.a.shape[0], t.b.shape[0]), dtype=np.int64)
    N[t.rows, t.cols] = t.counts
    return N


def contingency_matrix(y_true: ArrayLike, y_pred: ArrayLike) -> NDArray[np.int64]:
    """Count the samples in each (class, cluster) pair.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Reference labels (any values).
    y_pred : array-like of shape (n_samples,)
        Cluster labels (any values); their number may differ from the number
        of classes.

    Returns
    -------
    numpy.ndarray of shape (n_classes, n_clusters), int64
        ``N[i, j]`` is the number of samples whose class is the ``i``-th
        smallest value of ``y_true`` and whose cluster is the ``j``-th
        smallest value of ``y_pred``.

    Raises
    ------
    ValidationError
        If a vector is not 1-D, is empty or contains NaN, or if the lengths
        differ.

    """
    return _dense(_table(y_true, y_pred))


def _accuracy(t: _Table) -> float:
    return _matched(t) / t.n


def _matched(t: _Table) -> int:
    """Samples on the diagonal of the best one-to-one matching of classes and clusters."""
    size = t.a.shape[0] * t.b.shape[0]
    if size > _MAX_MATCHING_CELLS:
        raise ValidationError(
            f"clustering accuracy needs a {t.a.shape[0]} x {t.b.shape[0]} matching, more than "
            f"{_MAX_MATCHING_CELLS} cells; use nmi, ari, rand_index or purity instead"
        )
    N = _dense(t)
    rows, cols = linear_sum_assignment(N, maximize=True)
    return int(N[rows, cols].sum())


def _entropy(counts: NDArray[np.int64], n: int) -> float:
    p = counts[counts > 0] / n
    return float(-np.sum(p * np.log(p)))


def _mutual_information(t: _Table) -> float:
    nij = t.counts.astype(np.float64)
    # log(n * n_ij / (a_i b_j)) written as a sum of logs: no int64 overflow in a_i * b_j.
    log_ratio = (
        np.log(nij)
        + np.log(t.n)
        - np.log(t.a[t.rows].astype(np.float64))
        - np.log(t.b[t.cols].astype(np.float64))
    )
    return max(float(np.sum(nij / t.n * log_ratio)), 0.0)


def _nmi(t: _Table) -> float:
    n_classes, n_clusters = t.a.shape[0], t.b.shape[0]
    if n_classes == n_clusters == 1:
        return 1.0  # both labellings put everything together: a perfect match
    if n_classes == 1 or n_clusters == 1:
        return 0.0  # one side has zero entropy, so the mutual information is 0
    if n_classes == n_clusters == t.counts.shape[0]:
        return 1.0  # a renaming of the classes: MI = H(Y) = H(C) exactly, avoid rounding
    mi = _mutual_information(t)
    if mi <= 0.0:
        return 0.0
    normalizer = 0.5 * (_entropy(t.a, t.n) + _entropy(t.b, t.n))
    return float(min(mi / normalizer, 1.0))


def _pair_counts(t: _Table) -> tuple[int, int, int, int]:
    """Return ordered-pair counts ``(tn, fp, fn, tp)`` as exact Python integers.

    ``tp`` counts ordered pairs of distinct samples together in both
    labellings, ``fp`` pairs together in ``y_pred`` only, ``fn`` together in
    ``y_true`` only, ``tn`` apart in both (the convention of scikit-learn's
    ``pair_confusion_matrix``).
    """
    n = t.n
    sum_sq = int(np.sum(t.counts**2))
    sum_a2 = int(np.sum(t.a**2))
    sum_b2 = int(np.sum(t.b**2))
    tp = sum_sq - n
    fp = sum_b2 - sum_sq
    fn = sum_a2 - sum_sq
    tn = n * n - sum_a2 - sum_b2 + sum_sq
    return tn, fp, fn, tp


def _ari(t: _Table) -> float:
    tn, fp, fn, tp = _pair_counts(t)
    if fn == 0 and fp == 0:
        return 1.0
    return 2.0 * (tp * tn - fn * fp) / ((tp + fn) * (fn + tn) + (tp + fp) * (fp + tn))


def _rand(t: _Table) -> float:
    tn, fp, fn, tp = _pair_counts(t)
    agree, total = tp + tn, tn + fp + fn + tp
    if total == 0 or agree == total:
        return 1.0
    return agree / total


def _purity(t: _Table) -> float:
    majority = np.zeros(t.b.shape[0], dtype=np.int64)
    np.maximum.at(majority, t.cols, t.counts)
    return float(majority.sum() / t.n)


def clustering_accuracy(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Clustering accuracy (ACC) under the best one-to-one label matching.

    ``ACC = max_π Σ_i 1[y_true_i = π(y_pred_i)] / n`` where ``π`` is a
    one-to-one map from clusters to classes, found by the Hungarian method
    (``scipy.optimize.linear_sum_assignment``) on the contingency table. When
    the numbers of clusters and classes differ, the surplus clusters (or
    classes) stay unmatched and their samples count as errors.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Reference labels (any values).
    y_pred : array-like of shape (n_samples,)
        Cluster labels (any values).

    Returns
    -------
    float
        Accuracy in ``[0, 1]``.

    Raises
    ------
    ValidationError
        On empty, non-1-D or NaN-containing input or different lengths, and
        when ``n_classes * n_clusters`` exceeds ``2**24`` (the dense matching
        would need too much memory).

    """
    return _accuracy(_table(y_true, y_pred))


def matched_disagreement(labels_a: ArrayLike, labels_b: ArrayLike) -> int:
    """How many samples two labellings put in different clusters, up to renaming.

    The clusters of ``labels_b`` are matched one-to-one to those of ``labels_a`` by
    the Hungarian method on their contingency table (as :func:`clustering_accuracy`);
    the result is the number of samples whose matched labels differ. Two runs whose
    cluster ids are a permutation of each other give 0; a surplus cluster on either
    side stays unmatched and its samples count.

    Raises
    ------
    ValidationError
        As :func:`clustering_accuracy`.

    """
    t = _table(labels_a, labels_b)
    return t.n - _matched(t)


def nmi(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Compute the normalized mutual information (arithmetic-mean normalisation).

    ``NMI = I(Y; C) / ((H(Y) + H(C)) / 2)`` with natural logarithms. As in
    scikit-learn, two labellings that each have a single group score 1, and a
    labelling with zero mutual information scores 0.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Reference labels (any values).
    y_pred : array-like of shape (n_samples,)
        Cluster labels (any values).

    Returns
    -------
    float
        NMI in ``[0, 1]``.

    Raises
    ------
    ValidationError
        On empty, non-1-D or NaN-containing input or different lengths.

    """
    return _nmi(_table(y_true, y_pred))


def ari(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Compute the adjusted Rand index (Hubert and Arabie), the paper's "AR".

    Computed from the pair-confusion counts derived from the contingency
    table with exact integer arithmetic. Identical labellings (up to
    renaming), including the one-group and all-singletons cases, score 1.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Reference labels (any values).
    y_pred : array-like of shape (n_samples,)
        Cluster labels (any values).

    Returns
    -------
    float
        ARI in ``[-0.5, 1]``; about 0 for a random labelling.

    Raises
    ------
    ValidationError
        On empty, non-1-D or NaN-containing input or different lengths.

    """
    return _ari(_table(y_true, y_pred))


def rand_index(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Rand index: the fraction of sample pairs on which both labellings agree.

    A pair agrees when both labellings put it together or both keep it apart.
    A single sample (no pairs) scores 1, as in scikit-learn.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Reference labels (any values).
    y_pred : array-like of shape (n_samples,)
        Cluster labels (any values).

    Returns
    -------
    float
        RI in ``[0, 1]``.

    Raises
    ------
    ValidationError
        On empty, non-1-D or NaN-containing input or different lengths.

    """
    return _rand(_table(y_true, y_pred))


def purity(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Purity: each cluster votes for its majority class.

    ``purity = Σ_j max_i N[i, j] / n``. Not symmetric, and it reaches 1 for
    all-singleton clusterings, so report it next to NMI/ARI, not alone.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Reference labels (any values).
    y_pred : array-like of shape (n_samples,)
        Cluster labels (any values).

    Returns
    -------
    float
        Purity in ``(0, 1]``.

    Raises
    ------
    ValidationError
        On empty, non-1-D or NaN-containing input or different lengths.

    """
    return _purity(_table(y_true, y_pred))


def evaluate(y_true: ArrayLike, y_pred: ArrayLike) -> dict[str, float]:
    """Compute every metric of this module from one contingency table.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        Reference labels (any values).
    y_pred : array-like of shape (n_samples,)
        Cluster labels (any values).

    Returns
    -------
    dict of str to float
        Keys ``acc``, ``nmi``, ``ari``, ``ri`` and ``purity``.

    Raises
    ------
    ValidationError
        On empty, non-1-D or NaN-containing input or different lengths, and
        when the accuracy's matching would exceed ``2**24`` table cells.

    """
    t = _table(y_true, y_pred)
    return {
        "acc": _accuracy(t),
        "nmi": _nmi(t),
        "ari": _ari(t),
        "ri": _rand(t),
        "purity": _purity(t),
    }
