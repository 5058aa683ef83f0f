"""No documented m, α or bandwidth makes the tensor family's memberships uniform.

The sweep runs E-FKMVC with the real-data preset over each setting's documented range
(``M_BANDWIDTH_MAX``, ``ALPHA_RANGE``, ``BANDWIDTH_RANGE``) on 600-sample subsamples of
two real sets, the UCI multiple-features digits and scikit-learn's digits split into
pixels / ink profiles / gradients, against scikit-learn's ``KMeans(n_init=10)`` on the
standardized concatenation (the reference). "Works" means the memberships are not
uniform (mean largest membership >= 2/c) and the labels keep at least half of
k-means's ARI; uniform memberships give ARI ≈ 0 (the absolute floor did at α = 50).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score

from fedstrata.algorithms.tensor import TensorModel, tensor_federated_fit
from fedstrata.algorithms.tensor._common import EPS_DIST, memberships, view_powers
from fedstrata.algorithms.tensor.model import ALPHA_RANGE, BANDWIDTH_RANGE, M_BANDWIDTH_MAX
from fedstrata.scenarios.datasets import load_dataset, multiple_features

C = 10
SIZE = 600
#: Points of each documented range (ends included where the range is closed).
SWEEPS = {
    "m": (1.05, 1.2, 1.3, M_BANDWIDTH_MAX),
    "alpha": (1.01, 10.0, 50.0, ALPHA_RANGE[1]),
    "bandwidth": (BANDWIDTH_RANGE[0], 8.0, BANDWIDTH_RANGE[1]),
}
REAL_DATA = {"m": 1.3, "alpha": 50.0, "bandwidth": 8.0}


def test_memberships_do_not_depend_on_the_scale_of_the_view_weights():
    # Eq. 29 is homogeneous of degree 0 in v^α: the rows must match whatever the
    # scale; an absolute floor of 1e-10 made every row uniform at v^α = 1e-39
    rng = np.random.default_rng(0)
    fked = [rng.uniform(0.01, 1.0, size=(20, 4)) for _ in range(6)]
    va = rng.uniform(0.5, 1.0, size=6)
    want = memberships(fked, va, 1.1)
    got = memberships(fked, va * 1e-39, 1.1)
    np.testing.assert_allclose(got, want, rtol=1e-9)
    assert (got.max(axis=1) - got.min(axis=1)).min() > 0.05  # no row is uniform


def test_the_floor_is_relative_to_the_samples_largest_distance():
    # a sample sitting on centre 0 (distance 0) takes it with membership 1 - O(floor^(1/(m-1)))
    fked = [np.array([[0.0, 1e-45, 2e-45]])]
    U = memberships(fked, np.array([1.0]), 2.0)
    # floor = EPS_DIST · 2e-45; μ ∝ 1/max(S, floor), by hand
    inv = 1.0 / np.array([EPS_DIST * 2e-45, 1e-45, 2e-45])
    np.testing.assert_allclose(U[0], inv / inv.sum(), rtol=1e-12)


def test_view_powers_never_underflow():
    v = np.array([0.5, 0.3, 0.2])
    va = view_powers(v, 1000.0)  # 0.5^1000 = 9e-302, the others underflow to 0
    assert va[0] == 1.0
    assert va[1] == pytest.approx(math.exp(1000.0 * math.log(0.6)), rel=1e-9)
    assert va[2] == pytest.approx(math.exp(1000.0 * math.log(0.4)), rel=1e-9)
    np.testing.assert_array_equal(view_powers(v, 2.0), v**2.0)  # no rescaling when safe


def _digits() -> tuple[list[np.ndarray], np.ndarray]:
    ds = load_dataset("digits")  # pixels, ink profiles, gradients
    return list(ds.views), np.asarray(ds.labels)


def _mfeat() -> tuple[list[np.ndarray], np.ndarray]:
    ds = multiple_features()
    return [np.asarray(v, dtype=np.float64) for v in ds.views], np.asarray(ds.labels)


@pytest.fixture(scope="module", params=["multiple-features", "digits"])
def real_set(request):
    views, y = _mfeat() if request.param == "multiple-features" else _digits()
    idx = np.random.default_rng(0).choice(y.size, SIZE, replace=False)
    views, y = [X[idx] for X in views], y[idx]
    Z = np.hstack(views)
    sd = Z.std(axis=0)
    sd[sd == 0] = 1.0
    km = KMeans(C, n_init=10, random_state=0).fit((Z - Z.mean(axis=0)) / sd).labels_
    return views, y, adjusted_rand_score(y, km)


def _fit(views: list[np.ndarray], **settings: float) -> np.ndarray:
    model = TensorModel("e-fkmvc", C, tuple(X.shape[1] for X in views), **settings)
    res = tensor_federated_fit(model, [views], rounds=30, random_state=0, init="kmeans-best")
    return res.memberships[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_every_documented_value_keeps_structure(name, real_set):
    views, y, km_ari = real_set
    for value in SWEEPS[name]:
        U = _fit(views, **{**REAL_DATA, name: value})
        ari = adjusted_rand_score(y, U.argmax(axis=1))
        assert U.max(axis=1).mean() >= 2.0 / C, (name, value)
        assert ari >= 0.5 * km_ari, (name, value, ari, km_ari)


@pytest.mark.slow
def test_the_paper_kernel_at_alpha_50_with_six_views_is_not_uniform():
    # the collapse: m = 2, α = 50, six views, min-max coefficients gave ARI 0.000
    views, y = _mfeat()
    idx = np.random.default_rng(0).choice(y.size, SIZE, replace=False)
    U = _fit([X[idx] for X in views], m=2.0, alpha=50.0)
    assert len(np.unique(U.argmax(axis=1))) >= C // 2
    assert adjusted_rand_score(y[idx], U.argmax(axis=1)) > 0.2


@pytest.mark.parametrize("preset", ["paper", "real-data"])
def test_cp_above_what_a_small_tensor_holds_still_fits(preset):
    # FedHK-MVC-Person on CP has rank c·s = 6 on iris's 3 × 2 × 2 centre tensor: the
    # first decomposition's normal equations were singular on 10 of these 20 seeds
    # (LinAlgError out of fit); it now retries with the ALS step's ridge
    from fedstrata.algorithms import FedHKMVCPerson

    views = load_dataset("iris").views
    for seed in range(20):
        est = FedHKMVCPerson(3, preset=preset, decomposition="cp", max_iter=3, random_state=seed)
        assert np.isfinite(est.fit(views).memberships_).all()
