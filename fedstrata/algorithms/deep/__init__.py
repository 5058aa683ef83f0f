"""Deep hybrid-view federated clustering (FMCSC, EFD-MVC): the ``[deep]`` extra.

:class:`DeepModel` (the hyper-parameters) imports without PyTorch; the networks,
losses and local training in :mod:`fedstrata.algorithms.deep.network` and
:mod:`fedstrata.algorithms.deep.training` need ``pip install "fedstrata[deep]"``.
:func:`require_torch` says so in one line when it is missing.
"""

from __future__ import annotations

import importlib.util

from fedstrata.algorithms.deep.config import DEEP_METHODS, DeepModel
from fedstrata.errors import FedstrataError

__all__ = ["DEEP_METHODS", "DeepModel", "MissingExtraError", "require_torch", "torch_available"]


class MissingExtraError(FedstrataError):
    """A deep algorithm was chosen but PyTorch (the ``[deep]`` extra) is not installed."""


def torch_available() -> bool:
    """Whether PyTorch can be imported (without importing it).

    An import hook that refuses ``torch`` (``find_spec`` raising
    :class:`ImportError`) counts as missing, as does a broken ``torch.__spec__``.
    """
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def require_torch() -> None:
    """Raise :class:`MissingExtraError` naming the extra when PyTorch is missing."""
    if not torch_available():
        raise MissingExtraError(
            'the deep algorithms (fmcsc, efd-mvc) need PyTorch: pip install "fedstrata[deep]"'
        )
