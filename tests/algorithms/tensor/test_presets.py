"""The tensor family's ``preset="real-data"``: its kernel, its ranks, its wiring, its results.

Expected values come from hand computation (the Gaussian kernel on standardized
features, written out with numpy here) or from the data (the §6.1 synthetic views
separate the four clusters perfectly, so ARI 1 is reachable).
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from fedstrata.algorithms.tensor import TensorClient, TensorModel
from fedstrata.algorithms.tensor._common import phi
from fedstrata.algorithms.tensor.decompositions import initial_factors, reconstruct
from fedstrata.algorithms.tensor.estimators import (
    EFKMVC,
    FedHKMVCPerson,
    FedHKPARAFAC2,
    FedHKTucker,
)
from fedstrata.algorithms.tensor.presets import preset_model_settings
from fedstrata.errors import ValidationError
from fedstrata.scenarios.datasets import heat_kernel_synthetic

ESTIMATORS = (EFKMVC, FedHKPARAFAC2, FedHKTucker, FedHKMVCPerson)


@pytest.fixture(scope="module")
def synthetic():
    ds = heat_kernel_synthetic(100, random_state=4)
    return list(ds.views), np.asarray(ds.labels)


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_real_data_preset_separates_the_synthetic_clusters(cls, synthetic):
    # two 2-feature views, four clusters: the paper preset's PARAFAC2 rank is capped at
    # 2 < c and reaches ARI ≈ 0.6; the real-data preset pads the views to rank c
    views, y = synthetic
    est = cls(4, preset="real-data", random_state=0).fit(views)
    assert adjusted_rand_score(y, est.labels_) >= 0.99
    # predict uses the training kernel widths: the training samples keep their labels
    np.testing.assert_array_equal(est.predict(views), est.labels_)


def test_the_paper_preset_is_the_default_model():
    dims = (76, 216, 64, 240, 47, 6)
    for method in ("e-fkmvc", "fedhk-parafac2", "fedhk-tucker", "fedhk-mvc-person"):
        assert preset_model_settings("paper", method, 10, dims) == {}
        assert preset_model_settings(None, method, 10, dims) == {}


def test_real_data_ranks_hold_every_cluster():
    dims = (76, 216, 64, 240, 47, 6)  # multiple-features: one view has 6 < c features
    tucker = TensorModel(
        "fedhk-tucker", 10, dims, **preset_model_settings("real-data", "fedhk-tucker", 10, dims)
    )
    assert tucker.tucker_ranks == (10, 60, 6)  # (c, min(D, c·s), s)
    p2 = TensorModel(
        "fedhk-parafac2", 10, dims, **preset_model_settings("real-data", "fedhk-parafac2", 10, dims)
    )
    assert p2.factor_rank == 10 and p2.pad
    with pytest.raises(ValidationError, match="rank 10 is larger than view 5"):
        TensorModel("fedhk-parafac2", 10, dims, rank=10)  # the paper's rule without padding


def test_padded_parafac2_reproduces_centres_of_a_thin_view():
    # slices with fewer features (2) than the rank (4): with padding the rank-4 model can
    # hold four distinct centres per view; a centre tensor built from one PARAFAC2
    # (shared C, B; diagonal view weights) is reproduced exactly
    rng = np.random.default_rng(0)
    C, B = rng.normal(size=(4, 4)), rng.normal(size=(4, 4))
    a = rng.uniform(0.5, 1.5, size=(2, 4))
    P = [np.linalg.qr(rng.normal(size=(4, 4)))[0] for _ in range(2)]  # padded to 4 rows
    centres = [((C * a[h]) @ (P[h] @ B).T)[:, :2] for h in range(2)]
    f = initial_factors("parafac2", centres, (2, 2), (4,))
    for got, want in zip(reconstruct("parafac2", f, (2, 2), [0, 1]), centres, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_the_bandwidth_kernel_is_the_gaussian_kernel_of_standardized_features():
    # φ_ik = ||z_i − z(a_k)||² / (γ·D̄) with z the features standardized by their
    # population s.d.: the heat kernel exp(-φ) of HK-MVFC's real-data default
    rng = np.random.default_rng(1)
    views = [rng.normal(3.0, 5.0, size=(50, 3)) * [1.0, 10.0, 0.1], rng.uniform(0, 9, size=(50, 5))]
    model = TensorModel("e-fkmvc", 2, (3, 5), m=1.3, bandwidth=8.0)
    lo = [X.min(axis=0) for X in views]
    span = [X.max(axis=0) - X.min(axis=0) for X in views]
    scaled = [(X - m) / s for X, m, s in zip(views, lo, span, strict=True)]
    client = TensorClient(model, scaled, [0, 1])  # its own spread: one client
    centres = [X[:2] for X in scaled]
    gamma_dbar = 8.0 * (3 + 5) / 2
    for data, X, A in zip(client._data, scaled, centres, strict=True):
        sd = X.std(axis=0)
        want = (((X[:, None, :] - A[None]) / sd) ** 2).sum(axis=-1) / gamma_dbar
        np.testing.assert_allclose(phi(data, A), want, rtol=1e-10, atol=1e-12)


def test_an_explicit_value_wins_over_the_preset(synthetic):
    views, _ = synthetic
    est = FedHKTucker(4, preset="real-data", m=1.2, ranks=(4, 2, 2), max_iter=2).fit(views)
    assert est.model_.m == 1.2 and est.model_.tucker_ranks == (4, 2, 2)
    assert est.model_.alpha == 50.0 and est.model_.bandwidth == 8.0
    paper = FedHKTucker(4, max_iter=2).fit(views)
    assert paper.model_.m == 2.0 and paper.model_.bandwidth is None


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"m": 2.5}, r"m must be a number in \(1, 2\]"),
        ({"m": 1.5, "bandwidth": 8.0}, r"m must be in \(1, 1\.4\] with a bandwidth"),
        ({"alpha": 1001.0}, r"alpha must be a number in \(1, 1000\]"),
        ({"alpha": 1.0}, r"alpha must be a number in \(1, 1000\]"),
        ({"bandwidth": 1.0, "m": 1.3}, r"bandwidth must be None or a number in \[2, 64\]"),
        ({"bandwidth": 65.0, "m": 1.3}, r"bandwidth must be None or a number in \[2, 64\]"),
    ],
)
def test_out_of_range_settings_name_their_range(kwargs, text):
    with pytest.raises(ValidationError, match=text):
        TensorModel("e-fkmvc", 3, (2, 2), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"m": 2.5}, r"must be None or a number in \(1, 2\]"),
        ({"alpha": 0.5}, r"must be None or a number in \(1, 1000\]"),
        ({"bandwidth": 100.0}, r"must be None or a number in \[2, 64\]"),
        ({"preset": "best"}, "preset"),
    ],
)
def test_the_estimators_check_the_ranges(kwargs, text, synthetic):
    views, _ = synthetic
    with pytest.raises(ValidationError, match=text):
        EFKMVC(4, **kwargs).fit(views)
