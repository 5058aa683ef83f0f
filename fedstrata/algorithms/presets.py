"""HK-MVFC's named settings: the defaults that hold up on real data, and the paper's.

``"paper"`` takes m = 2, α = 5 and Type 1 coefficients from the one place the
FedHK-MVFC paper prints them, its federated two-client analysis (§6.6.2); Algorithm 1
itself asks only for m > 1 and α > 1. Eq. 16 centres and |ΔJ| < tol are Algorithm 1's.
The k-means start and keeping the best of 10 restarts are the project's choices: the
paper averages ten runs from random initialisations (§6.5).

Kept apart from the estimator (which loads scikit-learn) so that a scenario's model can
be built from them without it. See :class:`fedstrata.algorithms.HKMVFC` for what each
setting does and why.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULTS", "PRESETS"]

#: Settings of ``preset=None`` (the default) for every parameter left at ``None``.
DEFAULTS: dict[str, Any] = {
    "m": "auto",
    "alpha": 50.0,
    "kernel": "none",
    "center_update": "exact",
    "bandwidth": 8.0,
    "relative_tol": True,
    "n_init": 1,
    "init": "kmeans-best",
}
#: Named presets: ``"paper"`` is the FedHK-MVFC paper's Algorithm 1 with the settings of its
#: federated analysis and the project's restarts (the pre-0.x defaults; see above).
PRESETS: dict[str | None, dict[str, Any]] = {
    None: DEFAULTS,
    "real-data": DEFAULTS,  # the defaults by name (scenario files: algorithm.preset)
    "paper": {
        "m": 2.0,
        "alpha": 5.0,
        "kernel": "type1",
        "center_update": "paper",
        "bandwidth": "none",
        "relative_tol": False,
        "n_init": 10,
        "init": "kmeans",
    },
}
