"""The contrastive losses of FMCSC and EFD-MVC (pure functions of tensors).

Every feature passed here is L2-normalised or compared by cosine, so ``sim`` is the
papers' ``sim``/``d`` (FMCSC Eq. 3, EFD-MVC Eq. 3).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F  # noqa: N812  (the PyTorch convention)

__all__ = ["cluster_entropy", "nt_xent", "pair_contrast", "reconstruction"]


def nt_xent(a: torch.Tensor, b: torch.Tensor, tau: float) -> torch.Tensor:
    """NT-Xent between two aligned feature sets (rows i of ``a`` and ``b`` are positives).

    FMCSC Eq. 5 and EFD-MVC Eqs. 4-6: for each of the 2B features, the positive is its
    partner and every other feature of the 2B is a negative. 0 for a batch of one.
    """
    batch = a.shape[0]
    if batch < 2:
        return a.sum() * 0.0
    z = F.normalize(torch.cat([a, b], dim=0), dim=1)
    sim = (z @ z.T) / tau
    eye = torch.eye(2 * batch, dtype=torch.bool)
    sim = sim.masked_fill(eye, float("-inf"))
    idx = torch.arange(batch)
    targets = torch.cat([idx + batch, idx])
    return F.cross_entropy(sim, targets)


def pair_contrast(
    h: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor, tau: float
) -> torch.Tensor:
    """``−log e^{sim(h,p)/τ} / (e^{sim(h,p)/τ} + e^{sim(h,n)/τ})``, averaged over rows.

    FMCSC's model contrast (Eq. 7), EFD-MVC's single-view contrast (Eq. 7) and its drift
    module's MOON term (Eq. 8).
    """
    pos = F.cosine_similarity(h, positive, dim=1)
    neg = F.cosine_similarity(h, negative, dim=1)
    logits = torch.stack([pos, neg], dim=1) / tau
    return F.cross_entropy(logits, torch.zeros(h.shape[0], dtype=torch.long))


def cluster_entropy(q: torch.Tensor) -> torch.Tensor:
    """``Σ_j s_j log s_j`` with ``s_j`` the batch mean of column j (EFD-MVC Eq. 5's tail).

    Minimising it spreads the samples over the clusters (it is minus an entropy).
    """
    s = q.mean(dim=0)
    return (s * torch.log(s.clamp_min(1e-12))).sum()


def reconstruction(x: torch.Tensor, xhat: torch.Tensor) -> torch.Tensor:
    """Mean squared reconstruction error of one view (FMCSC Eq. 1, EFD-MVC Eq. 1)."""
    return F.mse_loss(xhat, x)
