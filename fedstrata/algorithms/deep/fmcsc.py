"""FMCSC's client round.

From "Bridging Gaps: Federated Multi-View Clustering in Heterogeneous Hybrid Views"
(Chen et al., NeurIPS 2024).

A *multi-view* client (two views or more) trains the multi-view global model ``f_g``
on reconstruction plus the feature contrast between the fused feature and each view's
feature (Eqs. 1, 5, 8), then fits a copy of every single-view global model ``f_g^v`` of
a view it holds to its own fused features (Eq. 6: reconstruction of view v plus the
squared distance to the multi-view features). A *single-view* client trains ``f_g^v``
on reconstruction plus the model contrast (Eq. 7): the frozen global model's feature
is the positive, the client's own code ``z^v`` the negative.

Upload weights are the mutual-information qualities of Theorem 1: ``Σ_v I(H, H^v)``
for the multi-view model, ``I(H, H_copy)`` for a copy, and ``I(H, H^g) − I(H, Z^v)``
for a single-view model, floored at 1e-6 (a difference of estimates can be negative).
The server averages each group's uploads by these weights ("specific aggregation",
Eq. 10). A client with two views but not all is a multi-view client whose missing
branches stay at the global values (the paper has only full- and single-view clients).
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch.nn import functional as F  # noqa: N812  (the PyTorch convention)

from fedstrata.algorithms.deep.losses import nt_xent, pair_contrast, reconstruction
from fedstrata.algorithms.deep.mutual_information import mutual_information
from fedstrata.algorithms.deep.network import flat_parameters
from fedstrata.algorithms.deep.training import DeepClient, Upload, train

__all__ = ["fmcsc_round"]

_FLOOR = 1e-6


def _features(t: torch.Tensor | None) -> np.ndarray:
    assert t is not None
    return t.detach().numpy()


def fmcsc_round(
    client: DeepClient, globals_: dict[str, np.ndarray], gen: torch.Generator
) -> tuple[list[Upload], float]:
    """One FMCSC round of ``client`` from the V+1 global models; its uploads and loss."""
    if len(client.view_ids) == 1:
        return _single_view(client, globals_, gen)
    return _multi_view(client, globals_, gen)


def _multi_view(
    client: DeepClient, globals_: dict[str, np.ndarray], gen: torch.Generator
) -> tuple[list[Upload], float]:
    model, tau = client.model, client.model.temperature
    net = client.net(globals_["all"])

    def loss_of(xb: list[torch.Tensor | None], _: torch.Tensor) -> torch.Tensor:
        out = net(xb)
        loss = torch.zeros(())
        for v, x in enumerate(xb):
            if x is not None:
                loss = loss + reconstruction(x, out.xhat[v]) + nt_xent(out.h, out.hv[v], tau)
        return loss

    loss = train(net, client.xs, model.local_epochs, model, gen, loss_of)
    with torch.no_grad():
        out = net(client.xs)
    H = _features(out.h)
    quality = sum(
        mutual_information(H, _features(out.hv[v]), model.mi_bins) for v in client.view_ids
    )
    uploads = [Upload("all", flat_parameters(net), max(float(quality), _FLOOR))]
    if model.copy_epochs == 0:
        return uploads, loss
    h_ref = out.h.detach()
    for v in client.view_ids:
        twin = client.net(globals_[f"view{v}"])
        only = [x if g == v else None for g, x in enumerate(client.xs)]

        def copy_loss(xb: list[torch.Tensor | None], idx: torch.Tensor, twin=twin, v=v):
            o = twin(xb)
            return reconstruction(xb[v], o.xhat[v]) + F.mse_loss(o.h, h_ref[idx])

        train(twin, only, model.copy_epochs, model, gen, copy_loss)
        with torch.no_grad():
            h_copy = twin.embed(only).numpy()
        weight = max(mutual_information(H, h_copy, model.mi_bins), _FLOOR)
        uploads.append(Upload(f"view{v}", flat_parameters(twin), weight))
    return uploads, loss


def _single_view(
    client: DeepClient, globals_: dict[str, np.ndarray], gen: torch.Generator
) -> tuple[list[Upload], float]:
    model, tau = client.model, client.model.temperature
    (v,) = client.view_ids
    group = f"view{v}"
    net = client.net(globals_[group])
    frozen = copy.deepcopy(net).requires_grad_(False)
    with torch.no_grad():
        h_global = frozen.embed(client.xs)

    def loss_of(xb: list[torch.Tensor | None], idx: torch.Tensor) -> torch.Tensor:
        out = net(xb)
        x = xb[v]
        assert x is not None
        zv = out.z[v]
        assert zv is not None
        return reconstruction(x, out.xhat[v]) + pair_contrast(out.h, h_global[idx], zv, tau)

    loss = train(net, client.xs, model.local_epochs, model, gen, loss_of)
    with torch.no_grad():
        out = net(client.xs)
    H = _features(out.h)
    quality = mutual_information(H, h_global.numpy(), model.mi_bins) - mutual_information(
        H, _features(out.z[v]), model.mi_bins
    )
    return [Upload(group, flat_parameters(net), max(float(quality), _FLOOR))], loss
