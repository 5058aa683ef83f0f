"""``data.files``: a scenario over the user's own view and label files.

The files are written here from the built-in heat-kernel data (CSV with 18 decimal
digits and NPZ both read back exactly), so a run over the files must be the run of
the built-in dataset: same partition, same labels, same ARI. Every bad file gives
one located line through the installed ``fedstrata validate``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import fedstrata
from fedstrata.device.data import DataFileError
from fedstrata.scenarios.datasets import heat_kernel_synthetic, read_data_file

EXE = shutil.which("fedstrata")
N_PER_CLUSTER = 40  # 160 samples, two views of 2 features
COMMON = """\
seed: 3
topology:
  clients: {{count: 4}}
algorithm: {{name: hk-mvfc, n_clusters: 4}}
protocol: {{rounds: 8}}
"""


def _write_files(folder: Path) -> None:
    ds = heat_kernel_synthetic(n_per_cluster=N_PER_CLUSTER, random_state=3)
    folder.mkdir(parents=True, exist_ok=True)
    np.savetxt(folder / "view0.csv", ds.views[0], delimiter=",", header="x,y", comments="")
    np.savez(folder / "view1.npz", features=ds.views[1], other=np.zeros(3))
    np.savetxt(folder / "labels.csv", ds.labels, fmt="%d", header="label", comments="")


def _scenario(folder: Path, data: str, name: str = "own") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(f"name: {name}\n{COMMON.format()}data:\n{textwrap.indent(data, '  ')}")
    return path


FILES = """\
files:
  views: [data/view0.csv, {path: data/view1.npz, key: features}]
  labels: data/labels.csv
"""
BUILTIN = f"dataset: heat-kernel-synthetic\nparams: {{n_per_cluster: {N_PER_CLUSTER}}}\n"


@pytest.mark.parametrize(
    "partition",
    ["", "partition: {kind: dirichlet, alpha: 0.5}\n", "partition: {kind: quantity, alpha: 1}\n"],
    ids=["iid", "label-skew", "quantity"],
)
def test_files_run_as_the_builtin_dataset(tmp_path, partition):
    _write_files(tmp_path / "data")
    own = fedstrata.run(_scenario(tmp_path, FILES + partition))
    ref = fedstrata.run(_scenario(tmp_path, BUILTIN + partition, name="ref"))
    assert own.summary["metrics"]["ari"] == ref.summary["metrics"]["ari"]
    assert own.summary["metrics"]["ari"] > 0.3  # a real clustering, not a degenerate one
    assert own.labels.equals(ref.labels)  # same samples on the same clients, same labels


def test_without_labels_the_same_clustering_and_no_metrics(tmp_path):
    _write_files(tmp_path / "data")
    plain = "files:\n  views: [data/view0.csv, {path: data/view1.npz, key: features}]\n"
    own = fedstrata.run(_scenario(tmp_path, plain, name="plain"))
    ref = fedstrata.run(_scenario(tmp_path, BUILTIN, name="ref"))
    # the clients never see labels: the same clusters, and nothing scored
    assert own.labels.equals(ref.labels)
    assert set(own.summary["metrics"]) >= {"acc", "nmi", "ari"}
    assert all(v is None for v in own.summary["metrics"].values())
    assert own.summary["metrics_reason"].startswith("no labels: data.files names no label")
    assert own.rounds["ari"].isna().all() and own.rounds["objective"].notna().any()


@pytest.mark.slow
def test_installed_run_from_another_folder_reads_paths_from_the_scenario(tmp_path):
    _write_files(tmp_path / "data")
    sc = _scenario(tmp_path, FILES)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    res = subprocess.run(
        [EXE, "run", sc, "--out", tmp_path / "run", "--quiet", "--no-plots"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=elsewhere,
    )
    assert res.returncode == 0, res.stderr
    ref = fedstrata.run(_scenario(tmp_path, BUILTIN, name="ref"))
    assert f"ARI {ref.summary['metrics']['ari']:.4f}" in res.stdout


def test_parquet_view_and_the_missing_pyarrow_line(tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    X = np.array([[1.5, 2.0], [3.0, -4.25], [0.0, 1e-3]])
    path = tmp_path / "v.parquet"
    pq.write_table(pa.table({"a": X[:, 0], "b": pa.array([2, -4, 0], pa.int32())}), path)
    assert np.array_equal(read_data_file(path), np.array([[1.5, 2], [3, -4], [0, 0]]))
    other = tmp_path / "w.parquet"  # another file: the cache of read views holds the first
    pq.write_table(pa.table({"a": X[:, 0]}), other)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now fails
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(DataFileError, match=r"^reading \.parquet files needs pyarrow: pip"):
        read_data_file(other)


def _bad_cases(folder: Path) -> dict[str, tuple[str, str]]:
    """name -> (data section, the one line validate must print after the file name)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = folder / "data"
    (d / "text.csv").write_text("1,2\n3,abc\n")
    np.savez(d / "nan.npz", X=np.array([[1.0, 2.0], [np.nan, 1.0]]))
    np.savez(d / "flat.npz", X=np.arange(4.0))
    (d / "broken.npz").write_bytes(b"not a zip archive")
    (d / "latin1.csv").write_bytes(b"1,2\n\xe9,3\n")
    np.savetxt(d / "short.csv", np.ones((10, 2)), delimiter=",")
    np.savetxt(d / "labels3.csv", [0, 1, 2], fmt="%d")
    pq.write_table(pa.table({"a": [1.0, 2.0], "name": ["x", "y"]}), d / "strings.parquet")
    v1 = "{path: data/view1.npz, key: features}"
    return {
        "missing": (
            f"files: {{views: [data/nope.csv, {v1}], labels: data/labels.csv}}\n",
            "8: data.files.views.0: 'data/nope.csv' (relative to the scenario file) does not exist",
        ),
        "unreadable": (
            "files:\n  views:\n    - data/view0.csv\n    - {path: data/broken.npz}\n"
            "  labels: data/labels.csv\n",
            "11: data.files.views.1.path: 'data/broken.npz' is not a NumPy .npz archive",
        ),
        "not-utf8": (
            f"files: {{views: [data/latin1.csv, {v1}], labels: data/labels.csv}}\n",
            "8: data.files.views.0: 'data/latin1.csv' is not UTF-8 text (byte 0xe9)",
        ),
        "wrong-shape": (
            "files:\n  views: [data/view0.csv, {path: data/flat.npz}]\n  labels: data/labels.csv\n",
            "9: data.files.views.1.path: 'data/flat.npz' array "
            "'X' must be 2-D (samples x features), got shape (4,); a one-feature view has shape "
            "(4, 1)",
        ),
        "rows-differ": (
            "files:\n  views:\n    - data/view0.csv\n    - data/short.csv\n"
            "  labels: data/labels.csv\n",
            "11: data.files.views.1: 'data/short.csv' has 10 rows "
            "but view 0 has 160; row i of every view is sample i",
        ),
        "non-numeric": (
            f"files: {{views: [data/text.csv, {v1}], labels: data/labels.csv}}\n",
            "8: data.files.views.0: 'data/text.csv' line 2, column 2: 'abc' is not a number",
        ),
        "nan": (
            f"files: {{views: [{v1}, {{path: data/nan.npz}}], labels: data/labels.csv}}\n",
            "8: data.files.views.1.path: 'data/nan.npz' array "
            "'X': element [1, 0] is nan, not a finite number",
        ),
        "parquet-text": (
            "files:\n  views: [data/view0.csv, data/strings.parquet]\n  labels: data/labels.csv\n",
            "9: data.files.views.1: 'data/strings.parquet' "
            "column 'name' holds string, not numbers (integers or floats)",
        ),
        "labels-count": (
            "files:\n  views: [data/view0.csv]\n  labels: data/labels3.csv\n",
            "10: data.files.labels: 'data/labels3.csv' has 3 labels but the views have 160 rows",
        ),
        "npz-key": (
            "files:\n  views: [{path: data/view1.npz, key: X}]\n  labels: data/labels.csv\n",
            "9: data.files.views.0.key: has no array 'X' (it holds: features, other)",
        ),
        "skew-without-labels": (
            "files: {views: [data/view0.csv]}\npartition: {kind: dirichlet, alpha: 0.5}\n",
            "9: data.partition.kind: partition 'dirichlet' splits by label: give "
            "data.files.labels, or use iid or quantity",
        ),
        "with-dataset": (
            f"dataset: multiple-features\n{FILES}",
            "8: data.dataset: data.files gives the data: remove this (or files)",
        ),
    }


@pytest.mark.slow
def test_each_bad_file_gives_its_located_line(tmp_path):
    pytest.importorskip("pyarrow")
    _write_files(tmp_path / "data")
    cases = _bad_cases(tmp_path)
    files = [_scenario(tmp_path, data, name=name) for name, (data, _) in cases.items()]
    res = subprocess.run(
        [EXE, "validate", *files], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert res.returncode == 1
    lines = res.stderr.splitlines()
    assert len(lines) == len(cases), res.stderr  # one line per bad scenario, nothing else
    for (name, (_, expected)), path in zip(cases.items(), files, strict=True):
        assert f"{path}:{expected}" in lines, (name, res.stderr)
