from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fedstrata.errors import ValidationError
from fedstrata.scenarios.datasets import heat_kernel_synthetic
from fedstrata.scenarios.partition import (
    dirichlet_label_skew,
    hybrid_views,
    iid,
    largest_remainder,
    paper_split,
    quantity_skew,
    stratified_split,
)

seeds = st.integers(0, 2**32)
label_lists = st.lists(st.integers(-2, 4), min_size=1, max_size=80).map(np.array)


def assert_partition(parts, n, n_clients):
    assert len(parts) == n_clients
    for p in parts:
        assert p.ndim == 1
        assert np.issubdtype(p.dtype, np.integer)
        assert np.all(np.diff(p) > 0)  # sorted, no duplicates
    joined = np.concatenate(parts)
    assert joined.size == n  # disjoint ...
    np.testing.assert_array_equal(np.sort(joined), np.arange(n))  # ... and covering


def attempt(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except ValidationError as exc:
        return exc


def same(parts_a, parts_b):
    return len(parts_a) == len(parts_b) and all(
        np.array_equal(a, b) for a, b in zip(parts_a, parts_b, strict=True)
    )


def class_counts(labels, parts):
    classes = np.unique(labels)
    return np.array([[np.sum(labels[p] == c) for p in parts] for c in classes])


# ---------------------------------------------------------------- largest remainder


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 10), min_size=1, max_size=8), st.integers(0, 10_000))
def test_largest_remainder_sums_and_rounds(weights, total):
    w = np.asarray(weights)
    assume(w.sum() > 1e-6)
    counts = largest_remainder(w, total)
    assert counts.sum() == total
    quotas = w / w.sum() * total
    assert np.all(counts >= np.floor(quotas) - 1e-9)
    assert np.all(counts <= np.ceil(quotas) + 1e-9)


def test_largest_remainder_known_values():
    np.testing.assert_array_equal(largest_remainder([0.85, 0.15], 2500), [2125, 375])
    np.testing.assert_array_equal(largest_remainder([1, 1, 1], 10), [4, 3, 3])
    np.testing.assert_array_equal(largest_remainder([0.1] * 10, 2500), [250] * 10)
    with pytest.raises(ValidationError):
        largest_remainder([0, 0], 3)


# ---------------------------------------------------------------- iid


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300), st.integers(1, 20), seeds)
def test_iid_is_a_balanced_partition(n, m, seed):
    assume(m <= n)
    parts = iid(n, m, random_state=seed)
    assert_partition(parts, n, m)
    sizes = [p.size for p in parts]
    assert max(sizes) - min(sizes) <= 1
    assert same(parts, iid(n, m, random_state=seed))


def test_iid_depends_on_the_seed():
    assert not same(iid(100, 3, random_state=0), iid(100, 3, random_state=1))


# ---------------------------------------------------------------- Dirichlet label skew


@settings(max_examples=60, deadline=None)
@given(label_lists, st.integers(1, 6), st.floats(0.05, 100), seeds)
def test_dirichlet_is_a_partition_and_deterministic(labels, m, alpha, seed):
    parts = dirichlet_label_skew(labels, m, alpha, min_size=0, random_state=seed)
    assert_partition(parts, labels.size, m)
    assert same(parts, dirichlet_label_skew(labels, m, alpha, min_size=0, random_state=seed))


@settings(max_examples=40, deadline=None)
@given(label_lists, st.integers(1, 4), st.floats(0.5, 100), seeds)
def test_dirichlet_min_size_is_respected(labels, m, alpha, seed):
    assume(m * 2 <= labels.size)
    parts = attempt(dirichlet_label_skew, labels, m, alpha, min_size=2, random_state=seed)
    if isinstance(parts, ValidationError):  # allowed: no draw met min_size
        assert "min_size" in str(parts)
        return
    assert_partition(parts, labels.size, m)
    assert min(p.size for p in parts) >= 2


def test_dirichlet_huge_alpha_is_nearly_balanced():
    labels = np.repeat(np.arange(4), 2500)
    parts = dirichlet_label_skew(labels, 5, 1e6, random_state=0)
    counts = class_counts(labels, parts)
    assert np.all(np.abs(counts - 500) <= 5)


def test_dirichlet_tiny_alpha_is_skewed():
    labels = np.repeat(np.arange(4), 2500)
    parts = dirichlet_label_skew(labels, 3, 0.01, min_size=0, random_state=0)
    counts = class_counts(labels, parts)
    # each class lands almost entirely on one client
    assert np.all(counts.max(axis=1) >= 0.95 * 2500)
    balanced = class_counts(labels, dirichlet_label_skew(labels, 3, 100.0, random_state=0))
    assert np.all(balanced.max(axis=1) < 0.45 * 2500)


def test_dirichlet_gives_up_after_max_attempts():
    with pytest.raises(ValidationError, match="min_size"):
        dirichlet_label_skew(np.zeros(10), 3, 1e-3, min_size=3, max_attempts=5, random_state=0)


# ---------------------------------------------------------------- quantity skew


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300), st.integers(1, 10), st.floats(0.05, 50), st.integers(0, 3), seeds)
def test_quantity_skew_partition(n, m, alpha, min_size, seed):
    assume(m * max(min_size, 1) <= n)
    parts = quantity_skew(n, m, alpha=alpha, min_size=min_size, random_state=seed)
    assert_partition(parts, n, m)
    assert min(p.size for p in parts) >= min_size
    assert same(parts, quantity_skew(n, m, alpha=alpha, min_size=min_size, random_state=seed))


def test_quantity_skew_explicit_proportions_are_exact():
    parts = quantity_skew(1000, 4, proportions=[0.1, 0.2, 0.3, 0.4], random_state=0)
    assert [p.size for p in parts] == [100, 200, 300, 400]
    assert_partition(parts, 1000, 4)


def test_quantity_skew_small_alpha_is_uneven():
    sizes = [p.size for p in quantity_skew(10_000, 5, alpha=0.05, random_state=0)]
    assert max(sizes) > 5000


# ---------------------------------------------------------------- stratified / paper split


@settings(max_examples=60, deadline=None)
@given(
    label_lists,
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5).filter(lambda f: sum(f) > 0.1),
    seeds,
)
def test_stratified_split_counts_per_class(labels, raw, seed):
    fractions = np.asarray(raw) / np.sum(raw)
    parts = stratified_split(labels, fractions, random_state=seed)
    assert_partition(parts, labels.size, fractions.size)
    sizes = np.bincount(np.unique(labels, return_inverse=True)[1])
    expected = np.stack([largest_remainder(fractions, int(s)) for s in sizes])
    np.testing.assert_array_equal(class_counts(labels, parts), expected)
    assert same(parts, stratified_split(labels, fractions, random_state=seed))


def test_paper_split_exact_counts_on_the_synthetic_data():
    labels = heat_kernel_synthetic(random_state=0).labels
    parts = paper_split(labels, random_state=42)
    assert_partition(parts, 10_000, 2)
    assert [p.size for p in parts] == [8500, 1500]
    np.testing.assert_array_equal(class_counts(labels, parts), [[2125, 375]] * 4)
    assert same(parts, stratified_split(labels, [0.85, 0.15], random_state=42))
    assert not same(parts, paper_split(labels, random_state=43))


def test_stratified_split_is_random_within_classes():
    labels = np.repeat([0, 1], 100)
    first = stratified_split(labels, [0.5, 0.5], random_state=0)[0]
    assert not np.array_equal(first, np.r_[0:50, 100:150])


# ---------------------------------------------------------------- hybrid views

ratio_triples = st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)).filter(
    lambda t: sum(t) > 0.05
)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 30), st.integers(1, 6), ratio_triples, seeds)
def test_hybrid_views_categories_and_coverage(m, v, raw, seed):
    total = sum(raw)
    ratios = {"all": raw[0] / total, "some": raw[1] / total, "single": raw[2] / total}
    counts = largest_remainder([ratios["all"], ratios["some"], ratios["single"]], m)
    n_all, n_some, n_single = (int(c) for c in counts)
    missing = 0 if n_all else max(v - n_single, 0)
    impossible = (n_some and v == 1) or (
        missing and (n_some == 0 or missing > n_some * max(v - 1, 1))
    )
    if impossible:
        with pytest.raises(ValidationError):
            hybrid_views(m, v, ratios, random_state=seed)
        return
    held = hybrid_views(m, v, ratios, random_state=seed)
    assert len(held) == m
    for views in held:
        assert isinstance(views, tuple)
        assert len(views) >= 1
        assert list(views) == sorted(set(views))
        assert all(isinstance(x, int) and 0 <= x < v for x in views)
    assert set().union(*held) == set(range(v))  # every view is held by some client
    sizes = np.array([len(h) for h in held])
    if v >= 3:
        assert np.sum(sizes == v) == n_all
        assert np.sum(sizes == 1) == n_single
        assert np.sum((sizes >= 2) & (sizes <= v - 1)) == n_some
    elif v == 2:
        assert np.sum(sizes == 2) == n_all
        assert np.sum(sizes == 1) == n_some + n_single
    assert hybrid_views(m, v, ratios, random_state=seed) == held


def test_hybrid_views_fmcsc_style():
    held = hybrid_views(9, 3, {"all": 2 / 3, "single": 1 / 3}, random_state=0)  # M/S = 2:1
    assert sorted(len(h) for h in held) == [1, 1, 1, 3, 3, 3, 3, 3, 3]
    assert sorted(h[0] for h in held if len(h) == 1) == [0, 1, 2]  # singles spread over views


def test_hybrid_views_partial_clients_cover_missing_views():
    held = hybrid_views(3, 5, {"some": 2 / 3, "single": 1 / 3}, random_state=1)
    assert set().union(*held) == set(range(5))
    assert sorted(len(h) for h in held)[0] == 1


@pytest.mark.parametrize(
    ("ratios", "match"),
    [
        ({"all": 0.5, "single": 0.4}, "sum to 1"),
        ({"all": 1.2, "single": -0.2}, "non-negative"),
        ({"all": 0.5, "many": 0.5}, "unknown"),
        ([0.5, 0.5], "mapping"),
        ({"all": math.nan, "single": 1.0}, "finite"),
    ],
)
def test_hybrid_views_bad_ratios(ratios, match):
    with pytest.raises(ValidationError, match=match):
        hybrid_views(4, 3, ratios, random_state=0)


def test_hybrid_views_impossible_cases():
    with pytest.raises(ValidationError, match="cannot all be held"):
        hybrid_views(2, 4, {"single": 1.0}, random_state=0)
    with pytest.raises(ValidationError, match="n_views >= 2"):
        hybrid_views(2, 1, {"some": 1.0}, random_state=0)
    with pytest.raises(ValidationError, match="n_views"):
        hybrid_views(2, 0, {"all": 1.0}, random_state=0)


# ---------------------------------------------------------------- bad parameters


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: iid(10, 0, random_state=0), "n_clients"),
        (lambda: iid(3, 4, random_state=0), "n_clients=4 is more than n_samples=3"),
        (lambda: iid(10, True, random_state=0), "n_clients"),
        (lambda: iid(10, 2.0, random_state=0), "n_clients"),
        (lambda: iid(0, 1, random_state=0), "n_samples"),
        (lambda: iid(10, 2, random_state=-3), "random_state"),
        (lambda: dirichlet_label_skew([0, 1, 1], 2, 0.0, random_state=0), "alpha"),
        (lambda: dirichlet_label_skew([0, 1, 1], 2, -1.0, random_state=0), "alpha"),
        (lambda: dirichlet_label_skew([0, 1, 1], 2, math.inf, random_state=0), "alpha"),
        (lambda: dirichlet_label_skew([0, 1, 1], 0, 1.0, random_state=0), "n_clients"),
        (lambda: dirichlet_label_skew([0, 1, 1], 4, 1.0, random_state=0), "min_size"),
        (lambda: dirichlet_label_skew([], 1, 1.0, random_state=0), "labels"),
        (lambda: dirichlet_label_skew([[0, 1]], 1, 1.0, random_state=0), "labels"),
        (lambda: dirichlet_label_skew([0.0, math.nan], 1, 1.0, random_state=0), "NaN"),
        (lambda: quantity_skew(10, 2, alpha=0, random_state=0), "alpha"),
        (lambda: quantity_skew(10, 11, random_state=0), "n_clients"),
        (lambda: quantity_skew(10, 2, proportions=[0.5, 0.6], random_state=0), "sum to 1"),
        (lambda: quantity_skew(10, 2, proportions=[1.0], random_state=0), "2 entries"),
        (lambda: quantity_skew(10, 2, proportions=[1.0, 0.0], random_state=0), "min_size"),
        (lambda: quantity_skew(10, 2, min_size=6, random_state=0), "min_size"),
        (lambda: stratified_split([0, 1], [0.5, 0.4], random_state=0), "sum to 1"),
        (lambda: stratified_split([0, 1], [1.2, -0.2], random_state=0), "non-negative"),
        (lambda: stratified_split([0, 1], [], random_state=0), "fractions"),
        (lambda: stratified_split([0, 1], [[0.5, 0.5]], random_state=0), "fractions"),
    ],
)
def test_bad_parameters_raise_validation_error(call, match):
    with pytest.raises(ValidationError, match=match):
        call()
