import numpy as np
import pytest


def blobs(n_per=200, seed=0, noise=0.4):
    """Two-view, four-cluster Gaussian blobs (independent of fedstrata's generators)."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(4), n_per)
    c1 = np.array([[2, 2], [8, 2], [2, 8], [8, 8]], float)
    c2 = np.array([[2, 2, 0], [6, 6, 1], [6, -3, 2], [-2, -2, 3]], float)
    X1 = c1[y] + rng.normal(0, noise, (y.size, 2))
    X2 = c2[y] + rng.normal(0, noise, (y.size, 3))
    return [X1, X2], y


@pytest.fixture
def two_view():
    return blobs()
