"""The hybrid-view network both deep methods train, and its flat float32 parameters.

One :class:`HybridViewNet` has every view's branch, as in the FMCSC reference code:
per view an encoder ``E^v`` (``d_v → hidden… → latent``, ReLU), a mirrored decoder
``D^v`` and a projection head ``ℋ^v`` (``latent → head → latent``), then a fusion head
``ℋ`` over the concatenated codes (``V·latent → head → latent``) and, for EFD-MVC's
label contrast, a label head per view (``latent → K``, softmax). A client that lacks
a view feeds nothing through that branch: its code is zero in the fusion input, so
the fused feature is made of the views it holds (EFD-MVC's ``H^p``) and every client
still has the same parameter shapes, which averaging needs.

Parameters travel as one float32 vector in ``named_parameters`` order
(:func:`flat_parameters`), so a message's bytes depend only on the architecture.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812  (the PyTorch convention)

from fedstrata.algorithms.deep.config import DeepModel

__all__ = [
    "Forward",
    "HybridViewNet",
    "flat_parameters",
    "initial_parameters",
    "load_parameters",
    "network_of",
    "parameter_count",
]


def _mlp(widths: Sequence[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


@dataclass
class Forward:
    """One forward pass over a batch: per-view codes, reconstructions and features.

    Lists are indexed by the federation's view; entries of views not held are None.
    ``h`` is the L2-normalised fused feature, ``hv`` the normalised per-view features,
    ``q`` the per-view soft labels (EFD-MVC only, else None entries).
    """

    z: list[torch.Tensor | None]
    xhat: list[torch.Tensor | None]
    hv: list[torch.Tensor | None]
    q: list[torch.Tensor | None]
    h: torch.Tensor


class HybridViewNet(nn.Module):
    """Per-view autoencoders and heads plus a fusion head (see the module docstring)."""

    def __init__(self, model: DeepModel) -> None:
        super().__init__()
        self.n_views = model.n_views
        self.latent = model.latent
        self.encoders = nn.ModuleList(_mlp([d, *model.hidden, model.latent]) for d in model.dims)
        self.decoders = nn.ModuleList(
            _mlp([model.latent, *reversed(model.hidden), d]) for d in model.dims
        )
        self.view_heads = nn.ModuleList(
            _mlp([model.latent, model.head, model.latent]) for _ in model.dims
        )
        self.fusion = _mlp([model.latent * model.n_views, model.head, model.latent])
        self.label_heads = (
            nn.ModuleList(nn.Linear(model.latent, model.n_clusters) for _ in model.dims)
            if model.method == "efd-mvc"
            else None
        )

    def forward(self, xs: Sequence[torch.Tensor | None]) -> Forward:
        """Encode the held views (``None`` for a view not held) and fuse them."""
        z: list[torch.Tensor | None] = [None] * self.n_views
        xhat: list[torch.Tensor | None] = [None] * self.n_views
        hv: list[torch.Tensor | None] = [None] * self.n_views
        q: list[torch.Tensor | None] = [None] * self.n_views
        batch = next(x.shape[0] for x in xs if x is not None)
        codes = []
        for v, x in enumerate(xs):
            if x is None:
                codes.append(torch.zeros(batch, self.latent))
                continue
            zv = self.encoders[v](x)
            z[v] = zv
            xhat[v] = self.decoders[v](zv)
            hv[v] = F.normalize(self.view_heads[v](zv), dim=1)
            if self.label_heads is not None:
                q[v] = F.softmax(self.label_heads[v](zv), dim=1)
            codes.append(zv)
        h = F.normalize(self.fusion(torch.cat(codes, dim=1)), dim=1)
        return Forward(z, xhat, hv, q, h)

    def embed(self, xs: Sequence[torch.Tensor | None]) -> torch.Tensor:
        """The fused features only (no reconstruction): what k-means clusters."""
        batch = next(x.shape[0] for x in xs if x is not None)
        codes = [
            self.encoders[v](x) if x is not None else torch.zeros(batch, self.latent)
            for v, x in enumerate(xs)
        ]
        return F.normalize(self.fusion(torch.cat(codes, dim=1)), dim=1)


def network_of(model: DeepModel) -> HybridViewNet:
    """An untrained network of ``model``'s architecture (parameters to be loaded)."""
    return HybridViewNet(model)


def parameter_count(model: DeepModel) -> int:
    """Number of float32 parameters of one network of ``model``'s architecture."""
    return sum(p.numel() for p in network_of(model).parameters())


def flat_parameters(net: nn.Module) -> np.ndarray:
    """Every parameter, in ``named_parameters`` order, as one float32 vector (a copy)."""
    with torch.no_grad():
        return torch.nn.utils.parameters_to_vector(net.parameters()).numpy().astype(np.float32)


def load_parameters(net: nn.Module, flat: np.ndarray) -> None:
    """Overwrite ``net``'s parameters with a copy of a flat float32 vector.

    A copy: ``vector_to_parameters`` makes the parameters views of the vector, so
    training would write into the caller's array (a global model other clients start
    from, or a received message's buffer).
    """
    vec = torch.tensor(np.asarray(flat, dtype=np.float32))
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(vec, net.parameters())


def initial_parameters(model: DeepModel) -> np.ndarray:
    """The seeded initial network (PyTorch's default initialisation under ``model.seed``)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(model.seed)
        return flat_parameters(network_of(model))
