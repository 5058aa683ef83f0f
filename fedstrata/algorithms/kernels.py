"""Heat-kernel coefficients (H-KC) and the kernel Euclidean distance (KED).

References are to the FedHK-MVFC paper ("FedHK-MVFC: Federated Heat Kernel
Multi-View Clustering"): Eq. 8/37 (Type 1, min-max), Eq. 9/38 (Type 2, absolute
deviation from the mean) and Eq. 11/12 (KED).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedstrata.errors import ValidationError

__all__ = [
    "KERNELS",
    "KernelReference",
    "feature_variance",
    "heat_kernel_coefficients",
    "ked_distance",
    "kernel_reference",
    "merge_kernel_references",
]

#: Heat-kernel coefficient types: "type1" (Eq. 8/37), "type2" (Eq. 9/38), "none" (δ ≡ 1).
KERNELS = ("type1", "type2", "none")


@dataclass(frozen=True)
class KernelReference:
    """Per-feature statistics a heat-kernel coefficient is measured against.

    ``minimum``/``maximum`` serve Type 1, ``total``/``count`` (so the mean) Type 2.
    ``sq_dev`` (optional) is Σ_i (x_ij - mean_j)^2, the per-feature sum of squared
    deviations from the reference's own mean: it gives the per-feature variance that
    the kernel bandwidth of :class:`~fedstrata.algorithms.multiview.MultiViewModel`
    (``bandwidth``) is measured in. A client computes its own (the paper's local
    FedH-KC, Eq. 37/38); merging the clients' references gives the pooled one (min of
    mins, sum of sums, and Chan et al.'s pairwise update for ``sq_dev``), which is what
    makes the federated fit equal the centralized one. ``sq_dev`` is ``None`` in
    references built without it (older peers); such references serve the paper's
    kernels but not a bandwidth.
    """

    minimum: np.ndarray
    maximum: np.ndarray
    total: np.ndarray
    count: int
    sq_dev: np.ndarray | None = None

    @property
    def mean(self) -> np.ndarray:
        """Per-feature mean."""
        return self.total / self.count

    @property
    def variance(self) -> np.ndarray:
        """Per-feature (population) variance; needs ``sq_dev``."""
        if self.sq_dev is None:
            raise ValidationError(
                "this kernel reference carries no sum of squared deviations (sq_dev): "
                "a kernel bandwidth needs it (exchange it in the setup round)"
            )
        return self.sq_dev / self.count


def kernel_reference(X: np.ndarray) -> KernelReference:
    """Per-feature min, max, sum, count and sum of squared deviations of one view ``X`` (n, d)."""
    total = X.sum(axis=0)
    n = X.shape[0]
    dev = X - total / n
    return KernelReference(X.min(axis=0), X.max(axis=0), total, n, np.einsum("ij,ij->j", dev, dev))


def merge_kernel_references(refs: list[KernelReference]) -> KernelReference:
    """Pool references from several clients (exact: min, max and sums compose).

    ``sq_dev`` merges by the pairwise update of Chan, Golub and LeVeque ("Updating
    formulae and a pairwise algorithm for computing sample variances", 1979):
    M2 = M2_a + M2_b + (mean_b - mean_a)^2 n_a n_b / (n_a + n_b), so the pooled
    variance equals the centralized one up to rounding. It is ``None`` as soon as
    one reference lacks it.
    """
    if not refs:
        raise ValidationError("cannot merge an empty list of kernel references")
    sq_dev: np.ndarray | None = None
    devs = [r.sq_dev for r in refs if r.sq_dev is not None]
    if len(devs) == len(refs):
        n_a, total_a, m2 = refs[0].count, refs[0].total, devs[0]
        for r, dev in zip(refs[1:], devs[1:], strict=True):
            n_b = r.count
            diff = r.total / n_b - total_a / n_a
            m2 = m2 + dev + diff * diff * (n_a * n_b / (n_a + n_b))
            n_a, total_a = n_a + n_b, total_a + r.total
        sq_dev = m2
    return KernelReference(
        np.minimum.reduce([r.minimum for r in refs]),
        np.maximum.reduce([r.maximum for r in refs]),
        np.sum([r.total for r in refs], axis=0),
        sum(r.count for r in refs),
        sq_dev,
    )


def feature_variance(reference: KernelReference) -> np.ndarray:
    """Per-feature variance of a reference, constant features set to 1 (never 0).

    A feature counts as constant when its variance is below 1e-12 of its squared mean
    (rounding in merged sums can leave such a feature at 1e-30 instead of 0).
    """
    var = np.array(reference.variance, dtype=np.float64)
    mean = reference.mean
    var[~(var > 1e-12 * mean * mean + 1e-300)] = 1.0
    return var


def heat_kernel_coefficients(
    X: np.ndarray,
    kind: str = "type1",
    *,
    reference: KernelReference | None = None,
    eps: float = 1e-8,
) -> np.ndarray:
    """Heat-kernel coefficients δ_ij for one view, shape (n, d), all >= 0.

    Parameters
    ----------
    X
        Data of one view, (n, d).
    kind
        ``"type1"``: δ_ij = (x_ij - min_j) / (max_j - min_j + eps) (Eq. 8, with the
        ε of the note after it and of Eq. 37); a constant feature gets δ = 0, never a
        division by zero. ``"type2"``: δ_ij = |x_ij - mean_j| (Eq. 9/38).
        ``"none"``: δ ≡ 1 (plain Gaussian kernel; the paper's Table 8 baseline).
    reference
        Statistics to measure against; by default those of ``X`` itself. With a
        reference from other data, Type 1 values are clipped to [0, 1] so that
        δ >= 0 still holds (needed for the descent property of the exact update).
    eps
        The stabiliser of Eq. 37.
    """
    if kind == "none":
        return np.ones_like(X)
    ref = kernel_reference(X) if reference is None else reference
    if kind == "type1":
        delta = (X - ref.minimum) / (ref.maximum - ref.minimum + eps)
        if reference is not None:
            np.clip(delta, 0.0, 1.0, out=delta)
        return delta
    if kind == "type2":
        return np.abs(X - ref.mean)
    raise ValidationError(f"unknown heat-kernel type {kind!r}; expected one of {KERNELS}")


def ked_distance(X: np.ndarray, centers: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """KED_2 distance (Eq. 12): 1 - exp(-Σ_j δ_ij (x_ij - a_kj)^2), shape (n, c).

    A direct, readable version used by tests and baselines; the fitting engine
    computes the same quantity from cached products.
    """
    phi = (delta[:, None, :] * (X[:, None, :] - centers[None, :, :]) ** 2).sum(axis=-1)
    return -np.expm1(-phi)
