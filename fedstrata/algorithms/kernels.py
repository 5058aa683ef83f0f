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
    A client computes its own (the paper's local FedH-KC, Eq. 37/38); merging the
    clients' references gives the pooled one (min of mins, sum of sums), which is
    what makes the federated fit equal the centralized one.
    """

    minimum: np.ndarray
    maximum: np.ndarray
    total: np.ndarray
    count: int

    @property
    def mean(self) -> np.ndarray:
        """Per-feature mean."""
        return self.total / self.count


def kernel_reference(X: np.ndarray) -> KernelReference:
    """Return the per-feature min, max, sum and count of one view ``X`` (n, d)."""
    return KernelReference(X.min(axis=0), X.max(axis=0), X.sum(axis=0), X.shape[0])


def merge_kernel_references(refs: list[KernelReference]) -> KernelReference:
    """Pool references from several clients (exact: min, max and sums compose)."""
    if not refs:
        raise ValidationError("cannot merge an empty list of kernel references")
    return KernelReference(
        np.minimum.reduce([r.minimum for r in refs]),
        np.maximum.reduce([r.maximum for r in refs]),
        np.sum([r.total for r in refs], axis=0),
        sum(r.count for r in refs),
    )


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
