"""EFD-MVC's client round.

From "Enhanced Federated Deep Multi-View Clustering under Uncertainty Scenario" (Wei
et al., AAAI 2026).

Every client trains the one global model on its type's loss (Eq. 11):

* full-view (all V views): reconstruction + α(label contrast + feature contrast)
  + (1 − α) drift. The label contrast (Eq. 5) runs over view pairs, as in MFLVC; the
  feature contrast (Eq. 4) pairs each view's feature with the fused feature H (reading
  the paper's ``n`` as the fused view, the form of Eq. 6), because Eq. 12 clusters H:
  with view pairs only, nothing but the drift term trains H, and a two-view toy
  federation lost half its ARI (0.50 against 0.70 this way);
* partial-view (2 .. V−1 views): reconstruction + α·Σ_v NT-Xent(H^p, h^v) (Eq. 6)
  + (1 − α) drift;
* single-view: reconstruction + α·(fused vs view feature against the view feature of
  noisy inputs x + ε, ε ~ N(0, σ²), Eq. 7) + (1 − α) drift.

The drift module (Eq. 8) is a MOON contrast with the pairs the paper gives per type
(full: positive = the previous local model, negative = the previous global; partial:
positive = global, negative = previous local; single: positive = global, negative =
the current model on noisy inputs) plus FedProx ``(μ/2)‖ω − ω_G‖²``. In a client's
first training round its "previous local model" is the global one.

The upload weight is ``α_c n_c`` with ``α_c = |V_c| / V`` (Eqs. 9-10; the paper only
says α_c favours clients with richer view coverage).
"""

from __future__ import annotations

import copy
import itertools

import numpy as np
import torch

from fedstrata.algorithms.deep.losses import (
    cluster_entropy,
    nt_xent,
    pair_contrast,
    reconstruction,
)
from fedstrata.algorithms.deep.network import flat_parameters
from fedstrata.algorithms.deep.training import DeepClient, Upload, train

__all__ = ["efd_mvc_round"]


def efd_mvc_round(
    client: DeepClient, globals_: dict[str, np.ndarray], gen: torch.Generator
) -> tuple[list[Upload], float]:
    """One EFD-MVC round of ``client`` from the global model; its upload and loss."""
    model, tau = client.model, client.model.temperature
    alpha, held = model.contrast_weight, client.view_ids
    kind = "single" if len(held) == 1 else "full" if len(held) == model.n_views else "partial"
    net = client.net(globals_["all"])
    glob = copy.deepcopy(net).requires_grad_(False)
    prev = client.net(
        client.previous_local if client.previous_local is not None else globals_["all"]
    ).requires_grad_(False)
    anchors = [p.detach().clone() for p in glob.parameters()]

    def noisy(xb: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
        return [
            x + model.noise * torch.randn(x.shape, generator=gen) if x is not None else None
            for x in xb
        ]

    def loss_of(xb: list[torch.Tensor | None], _: torch.Tensor) -> torch.Tensor:
        out = net(xb)
        loss = torch.zeros(())
        for v, x in enumerate(xb):
            if x is not None:
                loss = loss + reconstruction(x, out.xhat[v])
        with torch.no_grad():
            h_glob = glob.embed(xb)
        if kind == "full":
            contrast = torch.zeros(())
            for v in held:
                contrast = contrast + nt_xent(out.h, out.hv[v], tau)
            for a, b in itertools.combinations(held, 2):
                qa, qb = out.q[a], out.q[b]
                assert qa is not None
                assert qb is not None
                contrast = contrast + nt_xent(qa.T, qb.T, tau)
            for v in held:
                qv = out.q[v]
                assert qv is not None
                contrast = contrast + cluster_entropy(qv)
            with torch.no_grad():
                positive, negative = prev.embed(xb), h_glob
        elif kind == "partial":
            contrast = sum((nt_xent(out.h, out.hv[v], tau) for v in held), torch.zeros(()))
            with torch.no_grad():
                positive, negative = h_glob, prev.embed(xb)
        else:
            (v,) = held
            jittered = net(noisy(xb))
            hv, hv_noisy = out.hv[v], jittered.hv[v]
            assert hv is not None
            assert hv_noisy is not None
            contrast = pair_contrast(out.h, hv, hv_noisy, tau)
            positive, negative = h_glob, jittered.h.detach()
        prox = sum(((p - a) ** 2).sum() for p, a in zip(net.parameters(), anchors, strict=True))
        drift = pair_contrast(out.h, positive, negative, tau) + 0.5 * model.mu * prox
        return loss + alpha * contrast + (1.0 - alpha) * drift

    loss = train(net, client.xs, model.local_epochs, model, gen, loss_of)
    params = flat_parameters(net)
    client.previous_local = params
    weight = len(held) / model.n_views * client.n_samples
    return [Upload("all", params, float(weight))], loss
