"""Centred views (``center_views``) and the sign rule that goes with them."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from fedstrata.algorithms import FedHKPARAFAC2
from fedstrata.algorithms.tensor import TensorModel
from fedstrata.algorithms.tensor._common import minmax_scale_views
from fedstrata.algorithms.tensor.decompositions import align, reconstruct
from fedstrata.algorithms.tensor.federated import tensor_federated_fit
from fedstrata.algorithms.tensor.presets import preset_model_settings
from fedstrata.errors import ValidationError
from fedstrata.scenarios.datasets import load_dataset

# quarter steps: no subnormal spans, whose quotients lose the mean's exactness
finite = st.integers(-4000, 4000).map(lambda k: k / 4)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(2, 30), st.integers(1, 5)), elements=finite))
def test_centred_scaling_has_mean_zero_and_the_min_max_spread(X):
    lo, hi, mu = X.min(axis=0), X.max(axis=0), X.mean(axis=0)
    (plain,) = minmax_scale_views([X], [lo], [hi])
    (centred,) = minmax_scale_views([X], [lo], [hi], [mu])
    moving = hi > lo
    np.testing.assert_allclose(centred.mean(axis=0), 0.0, atol=1e-9)
    np.testing.assert_allclose(
        (centred - plain)[:, moving], np.broadcast_to(-plain.mean(axis=0), X.shape)[:, moving],
        atol=1e-9,
    )  # fmt: skip
    assert (centred[:, ~moving] == 0).all()  # a constant feature stays at 0


def _parafac2(rng, c=4, r=4, dims=(5, 3, 6)):
    rows = [max(d, r) for d in dims]
    return {
        "B": rng.standard_normal((r, r)),
        "C": rng.standard_normal((c, r)),
        "A": rng.standard_normal((len(dims), r)),
        "P": np.vstack([np.linalg.qr(rng.standard_normal((p, r)))[0] for p in rows]),
    }, list(dims)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.lists(st.booleans(), min_size=8, max_size=8))
def test_reference_signs_undo_any_flip_and_keep_the_reconstruction(seed, flips):
    rng = np.random.default_rng(seed)
    f, dims = _parafac2(rng)
    ref = align("parafac2", f, None)
    sc, sa = np.where(flips[:4], -1.0, 1.0), np.where(flips[4:], -1.0, 1.0)
    flipped = {**ref, "C": ref["C"] * sc, "A": ref["A"] * sa, "B": ref["B"] * (sc * sa)}
    back = align("parafac2", flipped, ref, signs="reference")
    for key in ref:
        np.testing.assert_allclose(back[key], ref[key], atol=1e-12, err_msg=key)
    views = range(len(dims))
    for a, b in zip(reconstruct("parafac2", flipped, dims, views),
                    reconstruct("parafac2", back, dims, views), strict=True):  # fmt: skip
        np.testing.assert_allclose(a, b, atol=1e-12)


def test_an_unknown_sign_rule_is_refused():
    f, _ = _parafac2(np.random.default_rng(0))
    with pytest.raises(ValidationError, match="signs"):
        align("parafac2", f, f, signs="largest")


def test_center_views_needs_a_bandwidth_and_a_bool():
    with pytest.raises(ValidationError, match="center_views needs a bandwidth"):
        TensorModel("fedhk-parafac2", 3, (4, 2), center_views=True)
    with pytest.raises(ValidationError, match="center_views must be True or False"):
        TensorModel("fedhk-parafac2", 3, (4, 2), bandwidth=8.0, m=1.3, center_views=1)


def test_the_real_data_preset_centres_parafac2_only():
    dims = (4, 2, 6)

    def centred(method, decomposition=None, preset="real-data"):
        settings = preset_model_settings(preset, method, 3, dims, decomposition)
        return TensorModel(method, 3, dims, **settings).center_views

    assert centred("fedhk-parafac2") and centred("fedhk-mvc-person")
    assert not centred("fedhk-mvc-person", "cp") and not centred("fedhk-mvc-person", "tucker")
    assert not centred("fedhk-tucker") and not centred("e-fkmvc")
    assert not centred("fedhk-parafac2", preset="paper")


def test_centring_moves_nothing_an_unconstrained_model_sees():
    # the bandwidth kernel depends only on differences and E-FKMVC's centres are free,
    # so its run on centred views is the same run, shifted
    ds = load_dataset("breast-cancer")
    clients = [[V[i::3] for V in ds.views] for i in range(3)]
    runs = []
    for center in (False, True):
        model = TensorModel(
            "e-fkmvc", 2, tuple(V.shape[1] for V in ds.views), m=1.3, alpha=50.0,
            bandwidth=8.0, center_views=center,
        )  # fmt: skip
        runs.append(tensor_federated_fit(model, clients, rounds=8, random_state=5))
    plain, centred = runs
    np.testing.assert_allclose(centred.objective_history, plain.objective_history, rtol=1e-8)
    for a, b in zip(plain.labels, centred.labels, strict=True):
        np.testing.assert_array_equal(a, b)
    assert plain.mean is None and centred.mean is not None


def test_predict_scales_new_samples_as_the_fit_did():
    X = load_dataset("iris").views
    est = FedHKPARAFAC2(3, preset="real-data", random_state=0, max_iter=20).fit(X)
    assert est.model_.center_views
    np.testing.assert_array_equal(est.predict(X), est.labels_)
    lo, hi, _ = est._ranges
    est._ranges = (lo, hi, None)  # the uncentred space: the same model reads it otherwise
    assert not np.allclose(est.predict_memberships(X), est.memberships_)


def test_an_exact_first_decomposition_warns_nothing():
    # centred iris views (2 features, rank 3 padded) are fitted exactly; tensorly's
    # expanded error then took the sqrt of a rounding-negative number, and the command
    # printed "invalid value encountered in sqrt"
    X = load_dataset("iris").views
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for seed in range(3):
            FedHKPARAFAC2(3, preset="real-data", random_state=seed, max_iter=3).fit(X)
