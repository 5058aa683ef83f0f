"""The held-out data sets: shapes, label counts, and values checked against independent sources.

The expected values come from scikit-learn's own arrays, hand computation, the published
nutrimouse CSV files read with the standard library, and the Fed-MVKM tutorial's own
generator (its code, copied below, run with its seed).
"""

# ruff: noqa: NPY002 (the tutorial's generator below is numpy's legacy global one)

from __future__ import annotations

import csv
import io
import json
import lzma
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from sklearn.datasets import load_breast_cancer, load_digits, load_iris

from fedstrata.errors import ValidationError
from fedstrata.scenarios.datasets import DATASETS, dataset_size, load_dataset
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.real_sets import (
    DATA_FOLDER,
    REAL_SETS,
    digit_views,
    fed_mvkm_dha_like,
    fed_mvkm_dha_like_sites,
    nutrimouse,
)

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- registry


def test_every_real_set_is_registered_with_its_size():
    for name in ("breast-cancer", "digits", "iris", "nutrimouse", "fed-mvkm-dha-like"):
        assert DATASETS[name] is REAL_SETS[name]
        ds = load_dataset(name, random_state=0)
        assert dataset_size(name) == ds.n_samples
        assert ds.name == name
        assert all(v.dtype == np.float64 and v.ndim == 2 for v in ds.views)
        assert ds.labels.dtype == np.int64


def test_the_registry_is_complete_whichever_module_is_imported_first():
    code = (
        "import fedstrata.scenarios.real_sets\n"
        "from fedstrata.scenarios.datasets import DATASETS\n"
        "print(sorted(DATASETS))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "'nutrimouse'" in out.stdout and "'multiple-features'" in out.stdout


def test_a_scenario_takes_the_nutrimouse_label_parameter():
    doc = {"data": {"dataset": "nutrimouse", "params": {"label": "diet"}}}
    assert parse_scenario(yaml.safe_dump(doc)).data.params == {"label": "diet"}
    doc["data"]["params"]["label"] = "litter"
    with pytest.raises(Exception, match=r"data\.params\.label"):
        parse_scenario(yaml.safe_dump(doc))


# ---------------------------------------------------------------- breast cancer


def test_breast_cancer_is_sklearns_columns_in_three_views():
    ds = load_dataset("breast-cancer")
    ref = load_breast_cancer()
    assert ds.dims == (10, 10, 10)
    assert ds.n_samples == 569
    assert np.bincount(ds.labels).tolist() == [212, 357]  # malignant, benign
    for h, prefix in enumerate(("mean ", "", "worst ")):
        cols = list(range(10 * h, 10 * h + 10))
        names = [str(ref.feature_names[j]) for j in cols]
        assert all(n.startswith(prefix) for n in names)
        if h == 1:
            assert all(n.endswith(" error") for n in names)
        np.testing.assert_array_equal(ds.views[h], ref.data[:, cols])
    np.testing.assert_array_equal(ds.labels, ref.target)
    assert ds.views[0][0, 0] == 17.99  # the first sample's mean radius


# ---------------------------------------------------------------- digits


def test_digits_shapes_and_label_counts():
    ds = load_dataset("digits")
    assert ds.dims == (64, 16, 64)
    assert ds.n_clusters == 10
    # the per-digit counts of scikit-learn's copy of the UCI test set
    assert np.bincount(ds.labels).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    np.testing.assert_array_equal(ds.views[0], load_digits().data)


def test_digit_views_by_hand():
    img = np.arange(64, dtype=float).reshape(1, 8, 8) ** 2 / 50.0  # not linear: gradients vary
    pixels, profiles, grad = digit_views(img)
    a = img[0]
    rows = [sum(a[r, c] for c in range(8)) for r in range(8)]
    cols = [sum(a[r, c] for r in range(8)) for c in range(8)]
    np.testing.assert_allclose(profiles[0], rows + cols)
    np.testing.assert_array_equal(pixels[0], a.ravel())
    # interior pixel (3, 4): central differences; corner (0, 7): one-sided ones
    gy = (a[4, 4] - a[2, 4]) / 2
    gx = (a[3, 5] - a[3, 3]) / 2
    assert grad[0, 3 * 8 + 4] == pytest.approx(np.hypot(gx, gy))
    gy = a[1, 7] - a[0, 7]
    gx = a[0, 7] - a[0, 6]
    assert grad[0, 7] == pytest.approx(np.hypot(gx, gy))


# ---------------------------------------------------------------- iris


def test_iris_sepal_and_petal_views():
    ds = load_dataset("iris")
    assert ds.dims == (2, 2)
    assert np.bincount(ds.labels).tolist() == [50, 50, 50]
    np.testing.assert_array_equal(np.hstack(ds.views), load_iris().data)
    # Fisher's first flower: sepal 5.1 x 3.5 cm, petal 1.4 x 0.2 cm
    assert ds.views[0][0].tolist() == [5.1, 3.5]
    assert ds.views[1][0].tolist() == [1.4, 0.2]


def test_shuffle_permutes_rows_together():
    plain = load_dataset("iris")
    mixed = load_dataset("iris", shuffle=True, random_state=3)
    order = np.random.default_rng(3).permutation(150)
    np.testing.assert_array_equal(mixed.views[1], plain.views[1][order])
    np.testing.assert_array_equal(mixed.labels, plain.labels[order])


# ---------------------------------------------------------------- nutrimouse


def _csv_rows(stem: str) -> list[list[str]]:
    with lzma.open(DATA_FOLDER / f"nutrimouse-{stem}.csv.xz", "rt", encoding="utf-8") as fh:
        return list(csv.reader(io.StringIO(fh.read())))


def test_nutrimouse_views_and_labels():
    geno = nutrimouse()
    diet = nutrimouse(label="diet")
    assert geno.dims == (120, 21) and geno.n_samples == 40
    assert np.bincount(geno.labels).tolist() == [20, 20]
    assert np.bincount(diet.labels).tolist() == [8, 8, 8, 8, 8]
    for h, stem in enumerate(("gene", "lipid")):
        rows = _csv_rows(stem)
        assert len(rows[0]) == geno.dims[h]  # the header: one name per feature
        np.testing.assert_array_equal(geno.views[h], np.array(rows[1:], dtype=float))
    # the published first mouse: lipid C14.0 0.34, C16.0 26.45; diet "lin" (sorted names:
    # coc fish lin ref sun -> 2); genotype "wt" (ppar wt -> 1)
    assert geno.views[1][0, :2].tolist() == [0.34, 26.45]
    assert diet.labels[0] == 2 and geno.labels[0] == 1
    names = [r[0] for r in _csv_rows("diet")[1:]]
    assert [sorted(set(names)).index(n) for n in names] == diet.labels.tolist()


def test_nutrimouse_rejects_another_label():
    with pytest.raises(ValidationError, match="genotype"):
        nutrimouse(label="sex")  # type: ignore[arg-type]


def test_the_shipped_files_have_their_source_and_licence():
    readme = (DATA_FOLDER / "README.md").read_text(encoding="utf-8")
    assert "nutrimouse" in readme.lower() and "MIT" in readme and "GPL" in readme


# ---------------------------------------------------------------- Fed-MVKM's DHA-like set
# The tutorial's own code (section "Load and Simulate DHA Dataset" and "Prepare Data for
# Federated Setup"), prints removed, run after np.random.seed(42) as the tutorial does: it
# draws from numpy's legacy global generator (hence this file's NPY002 exemption).


def _tutorial_load_dha_simulation():
    n_samples, n_clusters, depth_dim, rgb_dim = 600, 23, 6144, 110
    samples_per_cluster = n_samples // n_clusters
    y_true = np.repeat(np.arange(n_clusters), samples_per_cluster)
    remaining = n_samples - len(y_true)
    y_true = np.concatenate([y_true, np.random.choice(n_clusters, remaining)])
    y_true = y_true[np.random.permutation(n_samples)]
    depth_centers = np.random.randn(n_clusters, depth_dim) * 2
    depth_features = []
    for i in range(n_samples):
        base_feature = depth_centers[y_true[i]] + np.random.randn(depth_dim) * 0.5
        for j in range(0, depth_dim, 64):
            base_feature[j : min(j + 64, depth_dim)] += np.random.randn() * 0.2
        depth_features.append(base_feature)
    depth_features = np.array(depth_features)
    rgb_centers = np.random.randn(n_clusters, rgb_dim) * 1.5
    rgb_features = []
    for i in range(n_samples):
        base_feature = rgb_centers[y_true[i]] + np.random.randn(rgb_dim) * 0.3
        depth_summary = np.mean(depth_features[i].reshape(-1, 64), axis=1)
        if len(depth_summary) >= rgb_dim:
            depth_summary = depth_summary[:rgb_dim]
        else:
            depth_summary = np.pad(depth_summary, (0, rgb_dim - len(depth_summary)), "constant")
        base_feature += 0.2 * depth_summary
        rgb_features.append(base_feature)
    rgb_features = np.array(rgb_features)
    depth_features = (depth_features - depth_features.mean(axis=0)) / (
        depth_features.std(axis=0) + 1e-8
    )
    rgb_features = (rgb_features - rgb_features.mean(axis=0)) / (rgb_features.std(axis=0) + 1e-8)
    return [depth_features, rgb_features], y_true


def _tutorial_create_federated_splits(y_true):
    n_samples = len(y_true)
    site1_mask = (y_true < 8) | ((y_true >= 15) & (y_true < 18))
    site1 = np.where(site1_mask)[0]
    pool = np.where(~site1_mask)[0]
    site1 = np.concatenate([site1, np.random.choice(pool, size=min(50, len(pool)), replace=False)])
    site2_mask = ((y_true >= 8) & (y_true < 15)) | ((y_true >= 18) & (y_true < 21))
    site2 = np.where(site2_mask)[0]
    remaining = np.setdiff1d(np.arange(n_samples), site1)
    pool = np.setdiff1d(remaining, site2)
    site2 = np.concatenate([site2, np.random.choice(pool, size=min(40, len(pool)), replace=False)])
    site3 = np.setdiff1d(np.arange(n_samples), np.concatenate([site1, site2]))
    if len(site3) < 25:
        needed = 25 - len(site3)
        site3 = np.concatenate([site3, site1[:needed]])
        site1 = site1[needed:]
    return [site1, site2, site3]


@pytest.fixture(scope="module")
def tutorial():
    state = np.random.get_state()
    try:
        np.random.seed(42)
        views, y = _tutorial_load_dha_simulation()
        sites = _tutorial_create_federated_splits(y)
    finally:
        np.random.set_state(state)
    return views, y, sites


def test_dha_like_is_the_tutorials_data_at_its_seed(tutorial):
    views, y, sites = tutorial
    ds, got = fed_mvkm_dha_like_sites(random_state=42)
    np.testing.assert_array_equal(ds.labels, y)
    for mine, theirs in zip(ds.views, views, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-12)
    for mine, theirs in zip(got, sites, strict=True):
        np.testing.assert_array_equal(mine, theirs)
    alone = fed_mvkm_dha_like(random_state=42)
    np.testing.assert_array_equal(alone.views[1], ds.views[1])


def test_dha_like_shape_labels_and_standardization():
    ds = fed_mvkm_dha_like(random_state=0)
    assert ds.dims == (6144, 110)
    counts = np.bincount(ds.labels, minlength=23)
    assert counts.size == 23 and counts.sum() == 600
    assert sorted(counts.tolist())[:21] == [26] * 21  # 26 each plus 2 drawn at random
    for v in ds.views:
        np.testing.assert_allclose(v.mean(axis=0), 0.0, atol=1e-9)
        np.testing.assert_allclose(v.std(axis=0), 1.0, atol=1e-6)
    again = fed_mvkm_dha_like(random_state=0)
    np.testing.assert_array_equal(again.views[0], ds.views[0])
    other = fed_mvkm_dha_like(random_state=1)
    assert not np.array_equal(other.labels, ds.labels)


def test_dha_like_sites_are_label_skewed_and_overlap(tutorial):
    _, y, sites = tutorial
    assert [len(s) for s in sites] == [312, 301, 25]
    assert len(np.intersect1d(sites[0], sites[1])) == 38
    assert len(np.union1d(np.union1d(sites[0], sites[1]), sites[2])) == 600
    assert set(y[sites[1]].tolist()) == set(range(8, 15)) | set(range(18, 23))


@pytest.mark.slow
def test_the_dha_like_scenario_runs_with_the_installed_command(tmp_path):
    import shutil

    exe = shutil.which("fedstrata") or "fedstrata"
    path = ROOT / "scenarios" / "papers" / "fed-mvkm-dha-like.yaml"
    res = subprocess.run(
        [exe, "run", str(path), "--out", str(tmp_path / "run"), "--quiet", "--no-plots"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "converged"
    assert summary["rounds"] <= 8  # the tutorial's 8 communication rounds
    # well-separated simulated clusters: a sound MVKM-ED recovers them
    assert summary["metrics"]["ari"] > 0.95
