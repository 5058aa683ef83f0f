"""Histogram mutual information, FMCSC's model-quality measure (Theorem 1, Eq. 9)."""

from __future__ import annotations

import numpy as np

__all__ = ["mutual_information"]


def mutual_information(a: np.ndarray, b: np.ndarray, bins: int = 10) -> float:
    """I(A; B) in bits between two equally sized feature matrices, flattened.

    As in the FMCSC reference code: the entries of both matrices are paired
    elementwise and binned into a ``bins`` × ``bins`` joint histogram. 0 for empty or
    constant input.
    """
    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    if x.size != y.size:
        raise ValueError(f"feature matrices differ in size: {x.size} and {y.size}")
    if x.size == 0 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return 0.0
    joint, _, _ = np.histogram2d(x, y, bins=bins)
    p = joint / joint.sum()
    px = p.sum(axis=1, keepdims=True)
    py = p.sum(axis=0, keepdims=True)
    nz = p > 0
    return float((p[nz] * np.log2(p[nz] / (px @ py)[nz])).sum())
