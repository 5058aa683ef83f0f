"""Reusable scratch arrays for :func:`fedstrata.algorithms.multiview.local_statistics`.

Large (c, n) temporaries live in a per-thread workspace of their own data set
(:class:`Workspace`, one per prepared views): freshly allocated 320 kB arrays made glibc
trim and re-fault the heap (~600 page faults per call in a VM, which doubled the cost of
an iteration). Small ones, a simulated client's few samples, come from one shared
per-thread set per shape (:data:`SMALL`): a workspace per client cost ~2.9 kB each, kept
for the whole run (100,000 clients: ~290 MB), and small arrays are cheap to allocate.
Nothing :func:`local_statistics` returns aliases its scratch, so sharing is safe.
"""

from __future__ import annotations

import math
import threading

import numpy as np

__all__ = ["OWN_MIN", "SMALL", "Workspace", "is_small"]

#: From this many elements per scratch array a data set keeps its own workspace.
OWN_MIN = 4096


class Workspace(threading.local):
    """Per-thread scratch (..., c, n) arrays, kept for at most ``shapes`` shapes.

    A data set's own workspace keeps one shape (its latest); :data:`SMALL` keeps 64.
    When a new shape would exceed the bound, every kept shape is forgotten.
    """

    def __init__(self, shapes: int = 1) -> None:
        self.shapes = shapes
        self.by_shape: dict[tuple[int, ...], list[np.ndarray]] = {}

    def get(self, shape: tuple[int, ...], count: int) -> list[np.ndarray]:
        """``count`` scratch arrays of ``shape``."""
        buffers = self.by_shape.get(shape)
        if buffers is None:
            if len(self.by_shape) >= self.shapes:
                self.by_shape.clear()
            buffers = self.by_shape[shape] = []
        while len(buffers) < count:
            buffers.append(np.empty(shape))
        return buffers[:count]


#: The shared small-array workspaces (per thread).
SMALL = Workspace(shapes=64)


def is_small(shape: tuple[int, ...]) -> bool:
    """Whether arrays of ``shape`` come from :data:`SMALL` rather than an own workspace."""
    return math.prod(shape) < OWN_MIN
