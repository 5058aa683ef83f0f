"""The deep hybrid-view family's hyper-parameters (no PyTorch needed to read them).

Two methods, both for federations whose clients hold different subsets of the views:

``"fmcsc"``
    "Bridging Gaps: Federated Multi-View Clustering in Heterogeneous Hybrid Views"
    (Chen, Ren, Xu, Lin, Pu, Yang; NeurIPS 2024). Per-view autoencoders, a feature
    contrast on multi-view clients (Eq. 5), a model contrast on single-view clients
    (Eq. 7), and V+1 global models aggregated by mutual-information weights within
    each architecture group ("specific aggregation", Eqs. 9-10).
``"efd-mvc"``
    "Enhanced Federated Deep Multi-View Clustering under Uncertainty Scenario" (Wei,
    Cao, Liu, Liang, Yang; AAAI 2026). One global model; hierarchical contrast for
    full-, partial- and single-view clients (Eqs. 4-7), the view-adaptive drift module
    (Eq. 8, a MOON contrast plus a FedProx term) and balanced aggregation weights
    ``α_c n_c`` with ``α_c = |V_c| / V`` (Eqs. 9-10).

FMCSC's network (Fc500-Fc500-Fc2000 encoders, 250 pre-training and 25 local epochs,
its Appendix D.2) costs minutes per client-round on a CPU; the defaults here are the
project's choice, a smaller network and fewer epochs that run the multiple-features
setting in minutes on two cores. ``hidden=(500, 500, 2000)``, ``pretrain_epochs=250``,
``local_epochs=25`` and ``lr=3e-4`` are FMCSC's settings. The EFD-MVC paper gives no
network size, epochs, learning rate, batch size, temperature or rounds; only α = 0.5
and μ = 0.01.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from fedstrata.errors import ValidationError

__all__ = ["DEEP_METHODS", "DeepModel"]

DEEP_METHODS = ("fmcsc", "efd-mvc")


def _check_int(name: str, value: Any, low: int, high: int) -> None:
    if type(value) is not int or not low <= value <= high:
        raise ValidationError(f"{name} must be an int in {low} .. {high}, got {value!r}")


def _check_float(name: str, value: Any, low: float, high: float, *, open_low: bool) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok:
        v = float(value)
        ok = (v > low if open_low else v >= low) and v <= high
    if not ok:
        bracket = "(" if open_low else "["
        raise ValidationError(f"{name} must be a number in {bracket}{low}, {high}], got {value!r}")


@dataclass(frozen=True)
class DeepModel:
    """What a deep hybrid-view run trains: method, network sizes and the schedule.

    ``hidden``: widths of each view's encoder layers (the decoder mirrors them);
    ``latent``: the per-view code size (20 in FMCSC's paper; EFD-MVC's gives none);
    ``head``: the width of the
    projection heads ℋ^v and the fusion ℋ. A run has ``pretrain_rounds`` consensus
    pre-training rounds (reconstruction only, ``pretrain_epochs`` each, averaged; in
    FMCSC's paper the first multi-view client to finish hands its autoencoders to the
    others, which a synchronous round cannot do, and one averaging round of independent pre-training
    lost half the ARI of four on the digits), ``train_rounds`` training rounds of
    ``local_epochs`` each (FMCSC multi-view clients also fit ``copy_epochs`` on each
    single-view global model, Eq. 6), then federated k-means on the final embeddings:
    one round of local k-means++ candidates and at most ``kmeans_rounds`` Lloyd rounds.
    ``temperature`` is τ of every contrastive loss; ``contrast_weight`` (α of EFD-MVC's
    Eq. 11), ``mu`` (its FedProx μ) and ``noise`` (σ of the single-view clients'
    augmentation, on [0, 1]-scaled inputs) are EFD-MVC's. ``seed`` fixes the initial
    network (every client starts from the same one).
    """

    method: str
    n_clusters: int
    dims: tuple[int, ...]
    hidden: tuple[int, ...] = (256, 256)
    latent: int = 20
    head: int = 256
    pretrain_rounds: int = 4
    train_rounds: int = 5
    pretrain_epochs: int = 50
    local_epochs: int = 10
    copy_epochs: int = 5
    batch_size: int = 256
    lr: float = 1e-3
    temperature: float = 0.5
    contrast_weight: float = 0.5
    mu: float = 0.01
    noise: float = 0.1
    kmeans_rounds: int = 20
    mi_bins: int = 10
    seed: int = 0

    def __post_init__(self) -> None:
        if self.method not in DEEP_METHODS:
            raise ValidationError(f"method must be one of {DEEP_METHODS}, got {self.method!r}")
        _check_int("n_clusters", self.n_clusters, 2, 1000)
        dims = tuple(self.dims)
        if not dims or any(type(d) is not int or d < 1 for d in dims):
            raise ValidationError(f"dims must be positive ints, got {self.dims!r}")
        if self.method == "fmcsc" and len(dims) < 2:
            raise ValidationError("fmcsc needs at least two views")
        object.__setattr__(self, "dims", dims)
        hidden = tuple(self.hidden)
        bad = any(type(h) is not int or not 1 <= h <= 8192 for h in hidden)
        if not 1 <= len(hidden) <= 6 or bad:
            raise ValidationError(
                f"hidden must be 1 .. 6 layer widths, each 1 .. 8192, got {self.hidden!r}"
            )
        object.__setattr__(self, "hidden", hidden)
        _check_int("latent", self.latent, 1, 4096)
        _check_int("head", self.head, 1, 8192)
        _check_int("pretrain_rounds", self.pretrain_rounds, 1, 10_000)
        _check_int("train_rounds", self.train_rounds, 0, 10_000)
        _check_int("pretrain_epochs", self.pretrain_epochs, 0, 100_000)
        _check_int("local_epochs", self.local_epochs, 1, 100_000)
        _check_int("copy_epochs", self.copy_epochs, 0, 100_000)
        _check_int("batch_size", self.batch_size, 2, 1_000_000)
        _check_int("kmeans_rounds", self.kmeans_rounds, 1, 10_000)
        _check_int("mi_bins", self.mi_bins, 2, 1000)
        _check_int("seed", self.seed, 0, 2**63 - 1)
        _check_float("lr", self.lr, 0.0, 10.0, open_low=True)
        _check_float("temperature", self.temperature, 0.0, 100.0, open_low=True)
        _check_float("contrast_weight", self.contrast_weight, 0.0, 1.0, open_low=False)
        _check_float("mu", self.mu, 0.0, 1e6, open_low=False)
        _check_float("noise", self.noise, 0.0, 100.0, open_low=False)

    @property
    def n_views(self) -> int:
        """Number of views of the federation."""
        return len(self.dims)

    @property
    def rounds_before_kmeans(self) -> int:
        """Pre-training plus training rounds: the step of the k-means candidates round."""
        return self.pretrain_rounds + self.train_rounds

    @property
    def parameter_count(self) -> int:
        """Float32 parameters of one network (what one model upload carries).

        Computed from the architecture alone, so an aggregator checks message sizes
        without PyTorch.
        """

        def mlp(widths: list[int]) -> int:
            return sum(a * b + b for a, b in itertools.pairwise(widths))

        hidden, z = list(self.hidden), self.latent
        total = sum(mlp([d, *hidden, z]) + mlp([z, *hidden[::-1], d]) for d in self.dims)
        total += self.n_views * mlp([z, self.head, z]) + mlp([z * self.n_views, self.head, z])
        if self.method == "efd-mvc":
            total += self.n_views * (z * self.n_clusters + self.n_clusters)
        return total
