"""One training round of a deep client, by its method (FMCSC or EFD-MVC).

Kept apart from :mod:`.training` because the methods build on the client of that
module: the dispatch importing both methods would otherwise close an import cycle.
"""

from __future__ import annotations

import numpy as np
import torch

from fedstrata.algorithms.deep.efd_mvc import efd_mvc_round
from fedstrata.algorithms.deep.fmcsc import fmcsc_round
from fedstrata.algorithms.deep.training import DeepClient, Upload, deterministic

__all__ = ["train_round"]


def train_round(
    client: DeepClient, globals_: dict[str, np.ndarray], seed: int
) -> tuple[list[Upload], float]:
    """One training round of the client's method from the global models."""
    round_of = fmcsc_round if client.model.method == "fmcsc" else efd_mvc_round
    with deterministic():
        gen = torch.Generator().manual_seed(seed)
        return round_of(client, globals_, gen)
