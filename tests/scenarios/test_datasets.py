from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score

from fedstrata.errors import ValidationError
from fedstrata.scenarios import datasets
from fedstrata.scenarios.datasets import (
    DATASETS,
    MultiViewDataset,
    as_generator,
    heat_kernel_synthetic,
    load_dataset,
    multiple_features,
)

N_C = 2500


@pytest.fixture(scope="module")
def paper():
    return heat_kernel_synthetic(random_state=0)


def block(ds, view, k):
    return ds.views[view][ds.labels == k]


def dist(points, center):
    return np.hypot(points[:, 0] - center[0], points[:, 1] - center[1])


# ---------------------------------------------------------------- shape of the output


def test_default_size_and_layout(paper):
    assert paper.n_samples == 10_000
    assert paper.n_views == 2
    assert paper.n_clusters == 4
    assert paper.dims == (2, 2)
    assert paper.name == "heat-kernel-synthetic"
    for view in paper.views:
        assert view.shape == (10_000, 2)
        assert view.dtype == np.float64
        assert np.all(np.isfinite(view))
    np.testing.assert_array_equal(paper.labels, np.repeat(np.arange(4), N_C))
    assert paper.labels.dtype == np.int64


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 40),
    variant=st.sampled_from(["paper", "expanded"]),
    split=st.sampled_from(["half", "bernoulli"]),
    seed=st.integers(0, 2**32),
)
def test_any_size_gives_cluster_blocks(n, variant, split, seed):
    ds = heat_kernel_synthetic(n, variant=variant, split=split, random_state=seed)
    assert [v.shape for v in ds.views] == [(4 * n, 2), (4 * n, 2)]
    np.testing.assert_array_equal(ds.labels, np.repeat(np.arange(4), n))
    assert all(np.all(np.isfinite(v)) for v in ds.views)


# ---------------------------------------------------------------- randomness


def test_same_seed_same_data_and_different_seeds_differ(paper):
    again = heat_kernel_synthetic(random_state=0)
    other = heat_kernel_synthetic(random_state=1)
    for a, b, c in zip(paper.views, again.views, other.views, strict=True):
        np.testing.assert_array_equal(a, b)
        assert not np.allclose(a, c)


def test_generator_and_int_seed_agree():
    a = heat_kernel_synthetic(10, random_state=7)
    b = heat_kernel_synthetic(10, random_state=np.random.default_rng(7))
    for u, v in zip(a.views, b.views, strict=True):
        np.testing.assert_array_equal(u, v)


def test_none_seed_gives_fresh_data():
    a, b = heat_kernel_synthetic(5), heat_kernel_synthetic(5)
    assert not np.array_equal(a.views[0], b.views[0])


def test_as_generator_accepts_legacy_random_state():
    g1 = as_generator(np.random.RandomState(3))
    g2 = as_generator(np.random.RandomState(3))
    assert g1.random() == g2.random()


@pytest.mark.parametrize("bad", [-1, True, 1.5, "seed", [1, 2]])
def test_bad_random_state(bad):
    with pytest.raises(ValidationError, match="random_state"):
        heat_kernel_synthetic(5, random_state=bad)


# ---------------------------------------------------------------- geometry (spec §5.1)


def test_view1_shapes(paper):
    disk = block(paper, 0, 0)
    assert dist(disk, (2, 2)).max() <= 0.5
    assert dist(disk, (2, 2)).max() > 0.49  # the disk is filled out to its rim
    ellipse = block(paper, 0, 1)
    assert np.all(((ellipse[:, 0] - 8) / 1.5) ** 2 + ((ellipse[:, 1] - 2) / 0.4) ** 2 <= 1)
    assert np.ptp(ellipse[:, 0]) > 2.8
    assert np.ptp(ellipse[:, 1]) < 0.8
    wavy = block(paper, 0, 3)
    # |r| with r = 0.3 + 0.3 sin 3t + 0.1 N(0,1): at most 0.6 plus noise, mean a bit above 0.3
    assert dist(wavy, (8, 8)).max() < 0.6 + 0.5
    assert 0.3 < dist(wavy, (8, 8)).mean() < 0.34


def test_view1_crescent_half_split(paper):
    crescent = block(paper, 0, 2)
    outer, inner = crescent[: N_C // 2], crescent[N_C // 2 :]
    # outer arc: radius 1.2 + 0.1 N(0,1) around (2, 8); inner: 0.6 + 0.1 N(0,1) around (2.4, 8)
    assert dist(outer, (2, 8)).mean() == pytest.approx(1.2, abs=0.01)
    assert dist(outer, (2, 8)).std() == pytest.approx(0.1, abs=0.01)
    assert dist(inner, (2.4, 8)).mean() == pytest.approx(0.6, abs=0.01)
    # both open to the right: angles within ±π/3 up to the 0.1 angle jitter
    assert np.all(outer[:, 0] > 2 + 1.2 * np.cos(np.pi / 3 + 0.5) - 0.5)


def test_view2_shapes(paper):
    diamond = block(paper, 1, 0)
    r = dist(diamond, (2, 2))
    assert 0.5 < r.mean() < 0.8
    assert r.max() < 0.8 + 0.6
    ring = block(paper, 1, 1)
    r = dist(ring, (6, 6))
    assert r.min() >= 0.8
    assert r.max() <= 1.3
    assert r.min() < 0.81
    assert r.max() > 1.29
    heart = block(paper, 1, 3)
    # x = -2 + 0.3·16 sin³t ∈ [-6.8, 2.8]; y = -2 + 0.3(13cos t - ...) ∈ [-7.1, 1.58], plus noise
    assert -7.4 < heart[:, 0].min() < -6.3
    assert 2.3 < heart[:, 0].max() < 3.3
    assert -7.5 < heart[:, 1].min() < -6.6
    assert 1.1 < heart[:, 1].max() < 2.1


def test_view2_cross_half_split(paper):
    cross = block(paper, 1, 2)
    horizontal, vertical = cross[: N_C // 2], cross[N_C // 2 :]
    assert np.all(np.abs(horizontal[:, 0] - 6) <= 1)  # x = 6 + 2(ξ - 0.5)
    assert np.all(np.abs(vertical[:, 1] + 3) <= 1)  # y = -3 + 2(ξ - 0.5)
    assert horizontal[:, 1].std() == pytest.approx(0.3, abs=0.02)
    assert vertical[:, 0].std() == pytest.approx(0.3, abs=0.02)
    assert horizontal[:, 0].std() == pytest.approx(2 / np.sqrt(12), abs=0.02)


def test_bernoulli_split_mixes_the_parts():
    ds = heat_kernel_synthetic(split="bernoulli", random_state=0)
    cross = block(ds, 1, 2)
    first, second = cross[: N_C // 2], cross[N_C // 2 :]
    # with the half split the first half has var(x) = 1/3 and the second 0.09
    for part in (first, second):
        assert 0.17 < part[:, 0].var() < 0.25
    outer_fraction = (cross[:, 0].var() - 0.09) / (1 / 3 - 0.09)
    assert outer_fraction == pytest.approx(0.5, abs=0.06)


def test_half_split_with_odd_size_gives_extra_point_to_first_part():
    # with one point per cluster, that point is always on the horizontal bar:
    # x uniform on [5, 7] (std 0.577), y = -3 + 0.3 N(0, 1)
    points = np.array(
        [block(heat_kernel_synthetic(1, random_state=s), 1, 2)[0] for s in range(300)]
    )
    assert np.all(np.abs(points[:, 0] - 6) <= 1)
    assert points[:, 0].std() > 0.45
    assert points[:, 1].std() < 0.4


def test_kmeans_on_concatenated_views_recovers_the_clusters(paper):
    X = np.hstack(paper.views)
    labels = KMeans(n_clusters=4, n_init=3, random_state=0).fit_predict(X)
    assert adjusted_rand_score(paper.labels, labels) > 0.95


# ---------------------------------------------------------------- expanded variant


def test_expanded_variant_layout():
    ds = heat_kernel_synthetic(500, variant="expanded", random_state=0)
    assert ds.n_samples == 2000
    np.testing.assert_allclose(block(ds, 0, 0).mean(axis=0), (-8, -8), atol=0.1)
    assert dist(block(ds, 0, 0), (-8, -8)).max() <= 1.5
    np.testing.assert_allclose(block(ds, 0, 1).mean(axis=0), (12, -8), atol=0.2)
    crescent = block(ds, 0, 2)
    assert np.all(dist(crescent, (-7, 12)) > 1.4)  # the rejected disk
    assert dist(crescent, (-8, 12)).mean() == pytest.approx(2.8, abs=0.05)
    r = dist(block(ds, 1, 1), (12, 12))
    assert r.min() >= 1.8
    assert r.max() <= 3.2
    assert np.all(np.abs(block(ds, 1, 2)[:250, 0] + 8) <= 2.25)
    X = np.hstack(ds.views)
    labels = KMeans(n_clusters=4, n_init=3, random_state=0).fit_predict(X)
    assert adjusted_rand_score(ds.labels, labels) > 0.95


# ---------------------------------------------------------------- bad parameters


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_per_cluster": 0}, "n_per_cluster"),
        ({"n_per_cluster": 2.5}, "n_per_cluster"),
        ({"n_per_cluster": True}, "n_per_cluster"),
        ({"variant": "compact"}, "variant"),
        ({"split": "thirds"}, "split"),
    ],
)
def test_bad_generator_parameters(kwargs, match):
    with pytest.raises(ValidationError, match=match):
        heat_kernel_synthetic(**kwargs)


# ---------------------------------------------------------------- MultiViewDataset


def small_dataset():
    views = [np.arange(10.0).reshape(5, 2), np.arange(15).reshape(5, 3)]
    return MultiViewDataset(views=views, labels=np.array([0, 1, 0, 2, 1]), name="toy")


def test_container_properties_and_conversion():
    ds = small_dataset()
    assert (ds.n_samples, ds.n_views, ds.n_clusters, ds.dims) == (5, 2, 3, (2, 3))
    assert all(v.dtype == np.float64 for v in ds.views)
    with pytest.raises(AttributeError):
        ds.name = "other"  # type: ignore[misc]


def test_subset_by_indices_and_mask():
    ds = small_dataset()
    sub = ds.subset([3, 0])
    np.testing.assert_array_equal(sub.labels, [2, 0])
    np.testing.assert_array_equal(sub.views[1], [[9, 10, 11], [0, 1, 2]])
    assert sub.name == "toy"
    masked = ds.subset(ds.labels == 1)
    np.testing.assert_array_equal(masked.views[0], [[2, 3], [8, 9]])
    assert ds.subset([]).n_samples == 0


@pytest.mark.parametrize(
    ("indices", "match"),
    [([5], r"\[0, 5\)"), ([-1], r"\[0, 5\)"), ([0.5], "integers"), ([True, False], "mask")],
)
def test_subset_rejects_bad_indices(indices, match):
    with pytest.raises(ValidationError, match=match):
        small_dataset().subset(indices)


@pytest.mark.parametrize(
    ("views", "labels", "match"),
    [
        ([], [0], "at least one view"),
        ([np.zeros((3, 2)), np.zeros((4, 2))], [0, 0, 0], "different numbers of rows"),
        ([np.zeros(3)], [0, 0, 0], "2-D"),
        ([np.zeros((3, 2))], [0, 0], "3 rows"),
        ([np.zeros((3, 2))], [0.5, 1, 2], "whole numbers"),
        ([np.zeros((3, 2))], ["a", "b", "c"], "integers"),
        ([[["x", "y"]]], [0], "numeric"),
        (np.zeros((2, 3, 2)), [0, 0, 0], "list"),
    ],
)
def test_container_rejects_bad_input(views, labels, match):
    with pytest.raises(ValidationError, match=match):
        MultiViewDataset(views=views, labels=np.asarray(labels))


def test_whole_float_labels_are_accepted():
    ds = MultiViewDataset(views=[np.zeros((2, 1))], labels=np.array([1.0, 3.0]))
    assert ds.labels.dtype == np.int64


# ---------------------------------------------------------------- registry


def test_load_dataset_forwards_arguments():
    ds = load_dataset("heat-kernel-synthetic", n_per_cluster=10, random_state=3)
    ref = heat_kernel_synthetic(10, random_state=3)
    np.testing.assert_array_equal(ds.views[1], ref.views[1])
    assert set(DATASETS) == {
        "heat-kernel-synthetic",
        "multiple-features",
        "breast-cancer",
        "digits",
        "iris",
        "nutrimouse",
        "fed-mvkm-dha-like",
    }


def test_unknown_dataset_lists_known_names():
    with pytest.raises(ValidationError, match="heat-kernel-synthetic, iris, multiple-features"):
        load_dataset("mnist")


def test_unknown_keyword_is_a_validation_error():
    with pytest.raises(ValidationError, match="n_samples"):
        load_dataset("heat-kernel-synthetic", n_samples=10)


# ---------------------------------------------------------------- UCI multiple features


MFEAT_DIMS = (76, 216, 64, 240, 47, 6)


def test_multiple_features_ships_with_the_package():
    ds = multiple_features()
    assert ds.name == "multiple-features"
    assert ds.dims == MFEAT_DIMS
    assert ds.n_samples == 2000
    assert ds.n_clusters == 10
    np.testing.assert_array_equal(ds.labels, np.repeat(np.arange(10), 200))
    # spot values typed from the UCI files (first row of mfeat-mor and mfeat-pix)
    np.testing.assert_array_equal(ds.views[5][0], [1, 0, 0, 133.15, 1.3117, 1620.2])
    np.testing.assert_array_equal(ds.views[3][0, :5], [0, 3, 4, 4, 6])
    for X in ds.views:
        assert np.isfinite(X).all()


def test_multiple_features_shuffle_is_seeded():
    ds = multiple_features()
    shuffled = load_dataset("multiple-features", shuffle=True, random_state=0)
    again = multiple_features(shuffle=True, random_state=0)
    np.testing.assert_array_equal(shuffled.labels, again.labels)
    assert not np.array_equal(shuffled.labels, ds.labels)
    order = np.lexsort(shuffled.views[0].T[::-1])
    np.testing.assert_array_equal(
        shuffled.views[0][order], ds.views[0][np.lexsort(ds.views[0].T[::-1])]
    )


def test_multiple_features_damaged_file_is_a_validation_error(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "MFEAT_FOLDER", tmp_path)
    with pytest.raises(ValidationError, match="reinstall fedstrata"):
        multiple_features()
    import lzma

    for stem, dim in datasets._MFEAT_VIEWS:
        with lzma.open(tmp_path / f"{stem}.txt.xz", "wt") as fh:
            np.savetxt(fh, np.zeros((2000, dim if stem != "mfeat-zer" else dim - 1)))
    with pytest.raises(ValidationError, match=r"mfeat-zer.txt.xz has shape \(2000, 46\)"):
        multiple_features()
