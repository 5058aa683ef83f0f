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

__all__ = ["OWN_MIN", "SMALL", "SmallWorkspaces", "Workspace", "is_small"]

#: From this many elements per scratch array a data set keeps its own workspace.
OWN_MIN = 4096


class Workspace(threading.local):
    """Per-thread scratch (..., c, n) arrays of one data set; the latest shape is kept."""

    def __init__(self) -> None:
        self.shape: tuple[int, ...] = ()
        self.buffers: list[np.ndarray] = []

    def get(self, shape: tuple[int, ...], count: int) -> list[np.ndarray]:
        """``count`` scratch arrays of ``shape``; only the latest shape is kept."""
        if shape != self.shape:
            self.shape, self.buffers = shape, []
        while len(self.buffers) < count:
            self.buffers.append(np.empty(shape))
        return self.buffers[:count]


class SmallWorkspaces(threading.local):
    """Per-thread scratch arrays of small shapes, shared by every data set of that shape."""

    def __init__(self) -> None:
        self.by_shape: dict[tuple[int, ...], list[np.ndarray]] = {}

    def get(self, shape: tuple[int, ...], count: int) -> list[np.ndarray]:
        """``count`` scratch arrays of ``shape`` (at most 64 shapes are kept)."""
        buffers = self.by_shape.get(shape)
        if buffers is None:
            if len(self.by_shape) >= 64:
                self.by_shape.clear()
            buffers = self.by_shape[shape] = []
        while len(buffers) < count:
            buffers.append(np.empty(shape))
        return buffers[:count]


#: The shared small-array workspaces (per thread).
SMALL = SmallWorkspaces()


def is_small(shape: tuple[int, ...]) -> bool:
    """Whether arrays of ``shape`` come from :data:`SMALL` rather than an own workspace."""
    return math.prod(shape) < OWN_MIN
