from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score, rand_score
from sklearn.metrics.cluster import contingency_matrix as sk_contingency

from fedstrata.analysis import metrics
from fedstrata.analysis.metrics import (
    ari,
    clustering_accuracy,
    contingency_matrix,
    evaluate,
    nmi,
    purity,
    rand_index,
)
from fedstrata.errors import FedstrataError, ValidationError

TOL = 1e-12


@st.composite
def label_pairs(draw, max_n=60, max_labels=6):
    n = draw(st.integers(1, max_n))
    k_true = draw(st.integers(1, max_labels))
    k_pred = draw(st.integers(1, max_labels))
    y_true = draw(st.lists(st.integers(-3, k_true - 4), min_size=n, max_size=n))
    y_pred = draw(st.lists(st.integers(10, 10 + k_pred - 1), min_size=n, max_size=n))
    return np.array(y_true), np.array(y_pred)


def brute_force_accuracy(y_true, y_pred):
    classes, a = np.unique(y_true, return_inverse=True)
    clusters, b = np.unique(y_pred, return_inverse=True)
    k = max(classes.size, clusters.size)
    best = 0
    for perm in itertools.permutations(range(k)):
        mapped = np.asarray(perm)[b]
        best = max(best, int(np.sum(mapped == a)))
    return best / y_true.size


def loop_purity(y_true, y_pred):
    total = 0
    for cluster in set(y_pred.tolist()):
        members = y_true[y_pred == cluster]
        total += max(int(np.sum(members == c)) for c in set(members.tolist()))
    return total / y_true.size


# ---------------------------------------------------------------- agreement with scikit-learn


@settings(max_examples=120, deadline=None)
@given(label_pairs())
def test_nmi_ari_ri_match_sklearn(pair):
    y_true, y_pred = pair
    assert abs(nmi(y_true, y_pred) - normalized_mutual_info_score(y_true, y_pred)) <= TOL
    assert abs(ari(y_true, y_pred) - adjusted_rand_score(y_true, y_pred)) <= TOL
    assert abs(rand_index(y_true, y_pred) - rand_score(y_true, y_pred)) <= TOL


@settings(max_examples=60, deadline=None)
@given(label_pairs())
def test_contingency_matches_sklearn(pair):
    y_true, y_pred = pair
    np.testing.assert_array_equal(
        contingency_matrix(y_true, y_pred), sk_contingency(y_true, y_pred)
    )


@pytest.mark.parametrize(
    ("y_true", "y_pred"),
    [
        ([0, 0, 0, 0], [1, 1, 1, 1]),  # one cluster each
        ([0, 1, 2, 3], [5, 6, 7, 8]),  # all singletons both
        ([0, 0, 1, 1], [0, 1, 2, 3]),  # singletons vs pairs
        ([0, 1, 2, 3], [0, 0, 0, 0]),  # singletons vs one cluster
        ([0, 0, 1, 1], [7, 7, 7, 7]),  # two classes vs one cluster
        ([0, 0, 1, 1], [0, 1, 0, 1]),  # independent: MI = 0
        ([3], [9]),  # a single sample
        ([0, 1], [0, 0]),
    ],
)
def test_degenerate_cases_match_sklearn(y_true, y_pred):
    assert abs(nmi(y_true, y_pred) - normalized_mutual_info_score(y_true, y_pred)) <= TOL
    assert abs(ari(y_true, y_pred) - adjusted_rand_score(y_true, y_pred)) <= TOL
    assert abs(rand_index(y_true, y_pred) - rand_score(y_true, y_pred)) <= TOL


def test_large_random_labellings_match_sklearn():
    rng = np.random.default_rng(0)
    y_true = rng.integers(0, 7, 20_000)
    y_pred = np.where(rng.random(20_000) < 0.7, y_true, rng.integers(0, 9, 20_000))
    assert abs(nmi(y_true, y_pred) - normalized_mutual_info_score(y_true, y_pred)) <= TOL
    assert abs(ari(y_true, y_pred) - adjusted_rand_score(y_true, y_pred)) <= TOL
    assert abs(rand_index(y_true, y_pred) - rand_score(y_true, y_pred)) <= TOL


def test_many_singletons_stay_sparse():
    y_true = np.arange(50_000) % 10
    y_pred = np.arange(50_000)  # as dense tables: 10 x 5e4 and 5e4 x 5e4 cells
    y_pred_pairs = np.arange(50_000) // 2
    assert nmi(y_pred, y_pred[::-1]) == 1.0
    assert abs(nmi(y_true, y_pred) - normalized_mutual_info_score(y_true, y_pred)) <= TOL
    assert abs(ari(y_pred, y_pred_pairs) - adjusted_rand_score(y_pred, y_pred_pairs)) <= TOL
    assert abs(rand_index(y_pred, y_pred_pairs) - rand_score(y_pred, y_pred_pairs)) <= TOL
    assert purity(y_true, y_pred) == 1.0


def test_accuracy_refuses_huge_matchings(monkeypatch):
    monkeypatch.setattr(metrics, "_MAX_MATCHING_CELLS", 6)
    assert clustering_accuracy([0, 0, 1, 1], [0, 1, 2, 2]) == pytest.approx(0.75)  # 2 x 3
    with pytest.raises(ValidationError, match="3 x 4 matching"):
        clustering_accuracy([0, 1, 2, 2], [0, 1, 2, 3])
    assert nmi([0, 1, 2, 2], [0, 1, 2, 3]) > 0


# ---------------------------------------------------------------- accuracy and purity


@settings(max_examples=80, deadline=None)
@given(label_pairs(max_n=30, max_labels=5))
def test_accuracy_equals_brute_force_matching(pair):
    y_true, y_pred = pair
    assert clustering_accuracy(y_true, y_pred) == pytest.approx(
        brute_force_accuracy(y_true, y_pred)
    )


@settings(max_examples=60, deadline=None)
@given(label_pairs())
def test_purity_equals_definition(pair):
    y_true, y_pred = pair
    assert purity(y_true, y_pred) == pytest.approx(loop_purity(y_true, y_pred))


@settings(max_examples=60, deadline=None)
@given(label_pairs(), st.permutations(list(range(12))))
def test_relabelling_the_clusters_changes_nothing(pair, perm):
    y_true, y_pred = pair
    relabelled = np.asarray(perm)[y_pred - 10]
    assert evaluate(y_true, relabelled) == pytest.approx(evaluate(y_true, y_pred), abs=1e-12)


def test_perfect_clustering_with_renamed_labels():
    y = np.repeat([0, 1, 2], 5)
    scores = evaluate(y, 2 - y)
    assert scores == {"acc": 1.0, "nmi": 1.0, "ari": 1.0, "ri": 1.0, "purity": 1.0}


def test_accuracy_with_more_clusters_than_classes():
    y_true = [0, 0, 0, 1, 1, 1]
    y_pred = [0, 0, 1, 2, 2, 3]  # each class split in two: best matching keeps 2 + 2
    assert clustering_accuracy(y_true, y_pred) == pytest.approx(4 / 6)
    assert purity(y_true, y_pred) == 1.0


def test_accuracy_with_fewer_clusters_than_classes():
    y_true = [0, 0, 1, 1, 2, 2]
    y_pred = [5, 5, 5, 5, 6, 6]
    assert clustering_accuracy(y_true, y_pred) == pytest.approx(4 / 6)
    assert purity(y_true, y_pred) == pytest.approx(4 / 6)


def test_accuracy_known_value():
    y_true = [0, 0, 0, 1, 1, 1]
    y_pred = [1, 1, 0, 0, 0, 0]
    assert clustering_accuracy(y_true, y_pred) == pytest.approx(5 / 6)


def test_string_and_negative_labels():
    y_true = np.array(["a", "a", "b", "b", "c"])
    y_pred = np.array([-1, -1, -5, -5, -5])
    codes_true = np.array([0, 0, 1, 1, 2])
    codes_pred = np.array([1, 1, 0, 0, 0])
    assert evaluate(y_true, y_pred) == evaluate(codes_true, codes_pred)
    assert evaluate(list(y_true), y_pred.tolist())["acc"] == pytest.approx(0.8)


def test_evaluate_returns_plain_floats_with_all_keys():
    scores = evaluate([0, 1, 1, 0], [1, 1, 0, 0])
    assert set(scores) == {"acc", "nmi", "ari", "ri", "purity"}
    assert all(type(v) is float for v in scores.values())


def test_worse_clustering_scores_lower():
    rng = np.random.default_rng(1)
    y = np.repeat(np.arange(4), 50)
    noisy = np.where(rng.random(200) < 0.3, rng.integers(0, 4, 200), y)
    good, bad = evaluate(y, y), evaluate(y, noisy)
    assert all(bad[k] < good[k] for k in good)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("y_true", "y_pred", "match"),
    [
        ([0, 1, 2], [0, 1], "same length"),
        ([], [], "empty"),
        ([0.0, np.nan], [0, 1], "NaN"),
        ([0, 1], [np.inf, 1.0], "NaN or infinite"),
        (np.array([0, np.nan], dtype=object), [0, 1], "NaN"),
        ([[0, 1], [1, 0]], [[0, 1], [1, 0]], "1-D"),
        (5, 5, "1-D"),
        ([0, None, "a"], [0, 1, 1], "cannot be compared"),
    ],
)
@pytest.mark.parametrize("metric", [clustering_accuracy, nmi, ari, rand_index, purity, evaluate])
def test_bad_input_raises_validation_error(metric, y_true, y_pred, match):
    with pytest.raises(ValidationError, match=match) as info:
        metric(y_true, y_pred)
    assert isinstance(info.value, FedstrataError)
    assert isinstance(info.value, ValueError)
