"""Record files: atomic writes, strict JSON, labels order, safe output folders."""

import json

import numpy as np
import pytest

from fedstrata.analysis.records import (
    OutputError,
    atomic_write,
    prepare_run_dir,
    write_labels,
    write_model,
    write_summary,
)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text("old\n")

    def killed_mid_write():
        with atomic_write(path) as fh:
            fh.write("half of the new")
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        killed_mid_write()
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_summary_refuses_nan_and_names_the_key(tmp_path):
    with pytest.raises(ValueError, match=r"summary\.metrics\.ari is nan"):
        write_summary({"metrics": {"ari": float("nan")}}, tmp_path / "s.json")
    assert not (tmp_path / "s.json").exists()
    write_summary({"metrics": {"ari": None}, "b": [1, 2.5]}, tmp_path / "s.json")
    assert json.loads((tmp_path / "s.json").read_text()) == {
        "b": [1, 2.5],
        "metrics": {"ari": None},
    }


def test_labels_rows_follow_clients_then_ascending_index(tmp_path):
    labels = np.array([7, 8, 9, 10, 11])
    write_labels(
        ["client-1", "client-0"],
        [np.array([4, 0]), np.array([3, 1, 2])],
        labels,
        tmp_path / "labels.csv",
    )
    assert (tmp_path / "labels.csv").read_text() == (
        "client,index,label\nclient-1,0,7\nclient-1,4,11\n"
        "client-0,1,8\nclient-0,2,9\nclient-0,3,10\n"
    )
    write_labels(["c"], [np.array([1, 0])], None, tmp_path / "none.csv")
    assert (tmp_path / "none.csv").read_text() == "client,index,label\nc,0,\nc,1,\n"


def test_labels_written_in_chunks_are_the_rows_written_at_once(tmp_path, monkeypatch):
    import fedstrata.analysis.records as rec

    rng = np.random.default_rng(0)
    clients = [f"client-{j}" for j in range(50)]
    indices = np.array_split(rng.permutation(400), 50)
    labels = rng.integers(0, 4, size=400)
    want = "client,index,label\n" + "".join(
        f"{c},{i},{labels[i]}\n"
        for c, idx in zip(clients, indices, strict=True)
        for i in sorted(idx)
    )
    monkeypatch.setattr(rec, "_LABEL_CHUNK", 7)  # many writes, one ending mid-client
    write_labels(clients, indices, labels, tmp_path / "labels.csv")
    assert (tmp_path / "labels.csv").read_text() == want


def test_model_npz_needs_no_pickle(tmp_path):
    write_model({"centers_0": np.eye(2), "algorithm": np.str_("hk-mvfc")}, tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz", allow_pickle=False) as m:
        np.testing.assert_array_equal(m["centers_0"], np.eye(2))
        assert str(m["algorithm"]) == "hk-mvfc"


def test_run_dir_rules(tmp_path):
    out = tmp_path / "run"
    assert prepare_run_dir(out, scenario_hash="h", seed=0) == out  # created
    write_summary({"scenario_hash": "h", "seed": 0}, out / "summary.json")
    (out / "rounds.csv").write_text("x\n")
    prepare_run_dir(out, scenario_hash="h", seed=0)  # the same run: reused, old files gone
    assert list(out.iterdir()) == []
    write_summary({"scenario_hash": "h", "seed": 0}, out / "summary.json")
    with pytest.raises(OutputError, match="holds another run; pass --overwrite"):
        prepare_run_dir(out, scenario_hash="h", seed=1)
    prepare_run_dir(out, scenario_hash="h", seed=1, overwrite=True)
    (out / "scenario.yaml").write_text("x")  # a run killed before its summary
    with pytest.raises(OutputError, match="holds an incomplete run"):
        prepare_run_dir(out, scenario_hash="h", seed=1)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"not a fedstrata run \(notes.txt\)"):
        prepare_run_dir(out, scenario_hash="h", seed=1, overwrite=True)
    assert (out / "notes.txt").exists()
