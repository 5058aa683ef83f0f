"""What a deep client computes: pre-training, a method's training round, embeddings.

:class:`DeepClient` owns a client's views (already scaled into [0, 1]) and the state a
method keeps between rounds (EFD-MVC's previous local model). Each call takes the
global parameters (one float32 vector per model group) and a seed, and is
deterministic given them: shuffles and noise come from a seeded
:class:`torch.Generator`, training runs on one thread with PyTorch's deterministic
algorithms, so a simulated and a real client produce the same bytes.

The method-specific rounds live in :mod:`~fedstrata.algorithms.deep.fmcsc` and
:mod:`~fedstrata.algorithms.deep.efd_mvc`; both return :class:`Upload` entries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from fedstrata.algorithms.deep.config import DeepModel
from fedstrata.algorithms.deep.losses import reconstruction
from fedstrata.algorithms.deep.network import (
    HybridViewNet,
    flat_parameters,
    load_parameters,
    network_of,
)
from fedstrata.errors import ValidationError

__all__ = [
    "DeepClient",
    "Upload",
    "batches",
    "deterministic",
    "embedding_group",
    "train",
]

_EMBED_CHUNK = 4096


@dataclass(frozen=True)
class Upload:
    """One trained model for one global-model group, and its aggregation weight."""

    group: str
    params: np.ndarray
    weight: float


def embedding_group(model: DeepModel, view_ids: Sequence[int]) -> str:
    """The global model whose features a client clusters.

    FMCSC gives a single-view client the global model of its view and every client
    with two views or more the multi-view model; EFD-MVC has one global model.
    """
    if model.method == "fmcsc" and len(view_ids) == 1:
        return f"view{view_ids[0]}"
    return "all"


@contextmanager
def deterministic() -> Iterator[None]:
    """One thread and deterministic algorithms for the block (restored after)."""
    threads = torch.get_num_threads()
    was = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was)
        torch.set_num_threads(threads)


def batches(n: int, size: int, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """Shuffled index batches of one epoch; a last batch of one sample joins the previous."""
    order = torch.randperm(n, generator=gen)
    starts = list(range(0, n, size))
    if len(starts) > 1 and n - starts[-1] < 2:
        starts.pop()
    for i, s in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else n
        yield order[s:end]


def train(
    net: HybridViewNet,
    xs: Sequence[torch.Tensor | None],
    epochs: int,
    model: DeepModel,
    gen: torch.Generator,
    loss_of: Callable[[list[torch.Tensor | None], torch.Tensor], torch.Tensor],
) -> float:
    """``epochs`` of Adam on ``loss_of(batch views, batch indices)``; the last epoch's mean loss."""
    n = next(x.shape[0] for x in xs if x is not None)
    opt = torch.optim.Adam(net.parameters(), lr=model.lr)
    last = float("nan")
    for _ in range(epochs):
        total, count = 0.0, 0
        for idx in batches(n, model.batch_size, gen):
            xb = [x[idx] if x is not None else None for x in xs]
            loss = loss_of(xb, idx)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
            count += len(idx)
        last = total / max(count, 1)
    return last


class DeepClient:
    """A client's scaled views and what its method keeps between rounds."""

    def __init__(
        self, model: DeepModel, views: Sequence[np.ndarray], view_ids: Sequence[int]
    ) -> None:
        if len(views) != len(view_ids) or not views:
            raise ValidationError("a deep client needs at least one view, with its view id")
        n = views[0].shape[0]
        self.model = model
        self.view_ids = tuple(int(v) for v in view_ids)
        self.xs: list[torch.Tensor | None] = [None] * model.n_views
        for g, X in zip(self.view_ids, views, strict=True):
            if not 0 <= g < model.n_views or X.shape != (n, model.dims[g]):
                raise ValidationError(f"view {g} does not match the model's dims {model.dims}")
            self.xs[g] = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))
        self.n_samples = n
        #: EFD-MVC: the previous round's local model (the drift module's M^{(r-1)})
        self.previous_local: np.ndarray | None = None

    def net(self, params: np.ndarray) -> HybridViewNet:
        """A network holding ``params``."""
        net = network_of(self.model)
        load_parameters(net, params)
        return net

    def pretrain(self, params: np.ndarray, seed: int) -> tuple[list[Upload], float]:
        """Consensus pre-training: reconstruction only, from the shared initial network."""
        with deterministic():
            gen = torch.Generator().manual_seed(seed)
            net = self.net(params)

            def loss_of(xb: list[torch.Tensor | None], _: torch.Tensor) -> torch.Tensor:
                out = net(xb)
                return sum(
                    (reconstruction(x, out.xhat[v]) for v, x in enumerate(xb) if x is not None),
                    torch.zeros(()),
                )

            loss = train(net, self.xs, self.model.pretrain_epochs, self.model, gen, loss_of)
            return [Upload("all", flat_parameters(net), float(self.n_samples))], loss

    def embed(self, globals_: dict[str, np.ndarray]) -> np.ndarray:
        """The fused features (float64, n × latent) under the client's global model."""
        group = embedding_group(self.model, self.view_ids)
        with deterministic(), torch.no_grad():
            net = self.net(globals_[group])
            parts = [
                net.embed([x[s : s + _EMBED_CHUNK] if x is not None else None for x in self.xs])
                for s in range(0, self.n_samples, _EMBED_CHUNK)
            ]
        return torch.cat(parts).numpy().astype(np.float64)
