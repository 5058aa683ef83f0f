"""The tensor family's named settings: the paper's printed ones and the real-data ones.

``"paper"`` (the default) is what "Personalized Federated Heat-Kernel Enhanced Multi-View
Clustering via Advanced Tensor Decomposition" prints or implies: min-max heat-kernel
coefficients (Eq. 23), the :class:`~fedstrata.algorithms.tensor.TensorModel` defaults
(m = 2, α = 2 are the project's reading; the paper asks only for m > 1, α > 1), Tucker
ranks (c, min(c, D), s) and a PARAFAC2 rank of at most every view's dimension.

``"real-data"`` is the project's choice, measured to hold up on real multi-view data
(see ``docs/algorithms.md``, "Tensor family: preset real-data"); every value is taken
from :class:`~fedstrata.algorithms.HKMVFC`'s real-data defaults where one exists:

* the Gaussian heat kernel of bandwidth γ = 8 on the pooled feature variances (HK-MVFC's
  ``bandwidth``) instead of per-sample min-max coefficients;
* m = 1.3, the ceiling of HK-MVFC's ``m="auto"``
  (:data:`~fedstrata.algorithms.multiview.AUTO_FUZZIFIER_MAX`): from m ≈ 1.4 the
  memberships of high-dimensional views flatten;
* α = 50 (HK-MVFC's): view weights v_h ∝ D_h^(-1/(α-1)) stay near 1/s and the kernel's
  ``view_balance="dimension"`` decides what a view counts (α = 10 gives 0.61 ARI on
  multiple-features against 0.82 at α = 50);
* ``init="kmeans-best"``: each client's k-means candidates are the best of 10 seedings;
* ranks that let the cluster mode hold every cluster and the feature mode every view's
  centres: Tucker (c, min(D, c·s), s) (exact: the centre tensor's mode-2 unfolding has
  rank <= min(D, c·s)); PARAFAC2 rank c, views with fewer than c features zero-padded
  (``pad``). CP keeps its c·s;
* PARAFAC2 works on views centred at the pooled mean (``center_views``): on data in
  [0, 1] the clusters' shared offset dominates the Gram matrices that PARAFAC2 ties
  together across views (multiple-features, FedHK-PARAFAC2, seeds 10-19: ARI 0.790
  centred against 0.763 centralized, 0.787 against 0.738 over 10 IID clients at
  λ = 0.5). Tucker's real-data ranks hold any centres exactly and
  keep the uncentred views; so does CP (its rank c·s: centring gave CP a singular
  first decomposition on iris and no measured gain);
* FedHK-MVC-Person starts its four λ at 0.8 instead of 0.5: a client's personalised
  model leans on the federation's factors, since each client fits its own from a tenth
  of the data (10 IID clients, seeds 0-2: multiple-features ARI 0.785 at 0.8 against
  0.723 at 0.5, digits 0.532 against 0.491). FedHK-PARAFAC2 blends its clients' start
  with the same λ = 0.8: on small clients the per-client PARAFAC2 fits degenerate
  (iris, 10 clients of 15 samples, seeds 0-9: ARI 0.679 with a seed at 0.000 at
  λ = 0.5, 0.862 with none below 0.80 at 0.8).

Kept apart from the estimators (which load scikit-learn) so that a scenario's model can
be built from them without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fedstrata.algorithms.multiview import AUTO_FUZZIFIER_MAX
from fedstrata.algorithms.presets import DEFAULTS as HK_DEFAULTS
from fedstrata.errors import ValidationError

__all__ = [
    "REAL_DATA_LAM",
    "REAL_DATA_M",
    "TENSOR_PRESETS",
    "preset_init",
    "preset_model_settings",
]

#: The named presets (``"paper"`` is the default).
TENSOR_PRESETS = ("paper", "real-data")
#: The real-data fuzzifier: HK-MVFC's ``m="auto"`` ceiling.
REAL_DATA_M = AUTO_FUZZIFIER_MAX
#: The PARAFAC2 methods' λ (weight of the global factors) under ``"real-data"``.
REAL_DATA_LAM = 0.8


def _kind(method: str, decomposition: str | None) -> str:
    if method == "e-fkmvc":
        return "centers"
    if method == "fedhk-parafac2":
        return "parafac2"
    if method == "fedhk-tucker":
        return "tucker"
    return decomposition or "parafac2"


def preset_model_settings(
    preset: str | None,
    method: str,
    n_clusters: int,
    dims: Sequence[int],
    decomposition: str | None = None,
) -> dict[str, Any]:
    """:class:`~fedstrata.algorithms.tensor.TensorModel` keywords of a preset.

    ``"paper"`` (or ``None``): none (the model's defaults). ``"real-data"``: ``m``,
    ``alpha``, ``bandwidth``, the ranks and ``center_views`` described in the module
    docstring.
    """
    if preset not in (None, *TENSOR_PRESETS):
        raise ValidationError(
            f"unknown tensor preset {preset!r}; expected one of {', '.join(TENSOR_PRESETS)}"
        )
    if preset in (None, "paper"):
        return {}
    out: dict[str, Any] = {
        "m": REAL_DATA_M,
        "alpha": float(HK_DEFAULTS["alpha"]),
        "bandwidth": float(HK_DEFAULTS["bandwidth"]),
    }
    kind = _kind(method, decomposition)
    if kind == "tucker":
        c, s, D = int(n_clusters), len(dims), max(int(d) for d in dims)
        out["ranks"] = (c, min(D, c * s), s)
    elif kind == "parafac2":
        out["pad"] = True
        out["center_views"] = True
    if method in ("fedhk-parafac2", "fedhk-mvc-person"):
        out["lam"] = REAL_DATA_LAM
    return out


def preset_init(preset: str | None) -> str:
    """The initialisation of a preset: ``"kmeans"`` (paper) or ``"kmeans-best"``."""
    return "kmeans-best" if preset == "real-data" else "kmeans"
