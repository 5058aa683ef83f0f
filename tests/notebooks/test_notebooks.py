"""The notebooks of notebooks/ are committed without outputs, and run from top to bottom.

Each notebook is executed with nbclient in a fresh kernel, from the repository's root
(the folder its paths are relative to); a cell that raises fails the test with the
cell's error. The MQTT notebook starts its own Mosquitto: marked ``broker``.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from tests.broker.conftest import _need_mosquitto

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: Notebooks that need a Mosquitto broker (started by the notebook itself).
NEEDS_BROKER = {"03-mqtt-vs-simulation"}
#: Seconds a notebook may take (each is meant to run in well under a minute).
TIMEOUT_S = 180


def test_there_are_notebooks():
    names = {p.stem for p in NOTEBOOKS}
    assert {"01-first-federation", "02-fault-study", "03-mqtt-vs-simulation"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebooks_have_no_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        assert cell.outputs == [], f"{path.name}: cell {i} has outputs; strip them"
        assert cell.execution_count is None, f"{path.name}: cell {i} has an execution count"


def _execute(path: Path) -> nbformat.NotebookNode:
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT)}},
    )
    client.execute()
    return nb


def _outputs(nb: nbformat.NotebookNode, mime: str) -> list[str]:
    return [
        out["data"][mime]
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if "data" in out and mime in out["data"]
    ]


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(
            p,
            marks=[pytest.mark.slow, *([pytest.mark.broker] if p.stem in NEEDS_BROKER else [])],
        )
        for p in NOTEBOOKS
    ],
    ids=lambda p: p.stem,
)
def test_notebook_runs(path):
    if path.stem in NEEDS_BROKER:
        _need_mosquitto()
    nb = _execute(path)
    errors = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if out.get("output_type") == "error"
    ]
    assert errors == []
    # every notebook shows at least one plot: they are there to be looked at
    assert _outputs(nb, "image/png"), f"{path.name} drew no figure"
