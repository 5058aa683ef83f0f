"""`fedstrata compare` counts label rows that differ up to a renaming of cluster ids.

Two runs that find the same clustering under other ids (ARI 1.0) used to be
reported as "2,000 rows differ". The labels below are written by hand: run b is
run a with ids 0 -> 2, 1 -> 0, 2 -> 1, and run c is run b with two rows moved.
"""

import json

import pytest

from fedstrata.analysis.compare import compare_many
from fedstrata.analysis.metrics import matched_disagreement
from tests.analysis.test_compare_many import FAST, cli, summary, write_run

N = 2000
A = [(i, i % 3) for i in range(N)]
RENAME = {0: 2, 1: 0, 2: 1}
B = [(i, RENAME[lab]) for i, lab in A]
# rows 0 and 1 of b (ids 2 and 0) swapped: 2 rows off the renamed clustering, and row 0
# (id 0) now reads as in a, so 1,999 rows differ from a as written
C = [(0, 0), (1, 2), *B[2:]]


def test_matched_disagreement_counts_up_to_renaming():
    assert matched_disagreement([0, 0, 1, 1, 2], [5, 5, 7, 7, 6]) == 0
    assert matched_disagreement([0, 0, 1, 1], [0, 1, 1, 1]) == 1
    # a surplus cluster stays unmatched: its samples count
    assert matched_disagreement([0, 0, 0, 0], [0, 0, 1, 2]) == 2


def test_permuted_ids_are_the_same_clustering(tmp_path):
    a = write_run(tmp_path / "a", summary(), FAST, labels=A)
    b = write_run(tmp_path / "b", summary(), FAST, labels=B)
    c = write_run(tmp_path / "c", summary(), FAST, labels=C)
    cmp = compare_many([a, b, c])
    ref, rb, rc = cmp["labels"]["runs"]
    assert ref == {"rows": N, "identical": True, "differing_rows": 0, "raw_differing_rows": 0}
    assert rb == {"rows": N, "identical": False, "differing_rows": 0, "raw_differing_rows": N}
    assert rc["differing_rows"] == 2 and rc["raw_differing_rows"] == N - 1


@pytest.mark.slow
def test_installed_compare_shows_both_counts(tmp_path):
    a = write_run(tmp_path / "a", summary(), FAST, labels=A)
    b = write_run(tmp_path / "b", summary(), FAST, labels=B)
    c = write_run(tmp_path / "c", summary(), FAST, labels=C)
    res = cli("compare", a, b, c)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    start = next(i for i, s in enumerate(lines) if s.startswith(" labels.csv"))
    # a cell of the table may fold over several lines: join each column's pieces
    cells = [s.split("│") for s in lines[start:]]
    column = [" ".join(c[i].strip() for c in cells if len(c) > i).strip() for i in range(5)]
    assert column[2] == "same clusters, ids renamed (2,000 rows differ as written)"
    assert column[3] == "2 rows differ (1,999 as written)"
    res = cli("compare", a, b, "--json")
    assert json.loads(res.stdout)["labels"]["runs"][1]["differing_rows"] == 0
