"""The tensor family's bandwidth kernel: HK-MVFC's real-data heat kernel on scaled views.

The paper's coefficients (Eq. 23) weight each feature by a sample's own min-max-scaled
value, which saturates or vanishes when features differ in scale. With a bandwidth γ
(the ``real-data`` preset, the project's choice) δ_ij = 1/(γ·D̄·var_j) for every sample,
with var_j the federation's pooled variance of feature j and D̄ the mean view dimension:
φ becomes the squared distance of the standardized features divided by γ·D̄, the kernel
of :class:`~fedstrata.algorithms.HKMVFC`'s defaults. The widths come from
:func:`fedstrata.algorithms.multiview.bandwidth_scales` (reused, not copied), so they
are computed from mergeable sums exactly as HK-MVFC's are.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedstrata.algorithms.kernels import KernelReference
from fedstrata.algorithms.multiview import MultiViewModel, bandwidth_scales
from fedstrata.algorithms.tensor.model import TensorModel
from fedstrata.errors import ValidationError

__all__ = ["view_scales"]


def view_scales(
    model: TensorModel,
    references: Sequence[KernelReference],
    view_ids: Sequence[int],
    *,
    minmax: bool = False,
) -> list[np.ndarray]:
    """Kernel widths γ·D̄·var_j (d_h,) of the views ``view_ids`` from their references.

    ``references`` describe the raw views (per-feature min, max and the sum of squared
    deviations, pooled over the federation). With ``minmax`` the widths are those of the
    data after min-max scaling with the same references (var_j / span_j²), the space the
    tensor clients work in.
    """
    if model.bandwidth is None:
        raise ValidationError(f"{model.method}: the model has no bandwidth")
    mv = MultiViewModel(model.n_clusters, kernel="none", bandwidth=float(model.bandwidth))
    scales = bandwidth_scales(list(references), mv, list(model.dims))
    ids = list(view_ids)
    if len(ids) != len(scales):
        raise ValidationError(f"got {len(scales)} references but {len(ids)} view ids")
    if not minmax:
        return scales
    out = []
    for s, ref in zip(scales, references, strict=True):
        span = ref.maximum - ref.minimum
        out.append(np.where(span > 0, s / np.where(span > 0, span, 1.0) ** 2, s))
    return out
