"""A run that holds the pooled data warns, as the estimator refuses, about m above m*.

The scenario's `preset: real-data` is the estimator's default (the bandwidth kernel, a fixed
metric); the paper's Type 1 kernel weighs each sample by itself and is not checked.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from fedstrata.algorithms import HKMVFC
from fedstrata.errors import ValidationError
from fedstrata.scenarios.datasets import load_dataset

SCENARIO = """\
name: m-check
seed: 1
data: {{dataset: digits, partition: {{kind: iid}}}}
topology: {{clients: {{count: 3}}}}
algorithm: {{name: hk-mvfc, n_clusters: 10, preset: real-data, m: {m}}}
protocol: {{rule: sum, rounds: 2}}
"""


def _run(tmp_path: Path, m: float) -> tuple[dict, str]:
    path = tmp_path / f"m{m}.yaml"
    path.write_text(SCENARIO.format(m=m))
    out = tmp_path / f"run-{m}"
    res = subprocess.run(
        ["fedstrata", "run", str(path), "--out", str(out), "--no-plots"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    return json.loads((out / "summary.json").read_text()), res.stdout + res.stderr


def test_an_m_above_the_ceiling_is_in_the_record_with_the_estimators_ceiling(tmp_path):
    ds = load_dataset("digits")
    with pytest.raises(ValidationError, match=r"at or above (\d\.\d{3})") as refused:
        HKMVFC(10, m=1.38, random_state=0).fit(ds.views)
    ceiling = re.search(r"at or above (\d\.\d{3})", str(refused.value)).group(1)
    summary, output = _run(tmp_path, 1.38)
    notes = [w for w in summary["warnings"] if w.startswith("algorithm.m = 1.38")]
    assert len(notes) == 1 and f"at or above {ceiling}," in notes[0]
    assert "algorithm.m = 1.38" in output  # and the user sees it


def test_an_m_below_the_ceiling_gives_no_note(tmp_path):
    ds = load_dataset("digits")
    HKMVFC(10, m=1.2, random_state=0).fit(ds.views)  # the estimator accepts it too
    summary, _ = _run(tmp_path, 1.2)
    assert not [w for w in summary["warnings"] if w.startswith("algorithm.m")]
