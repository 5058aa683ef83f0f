"""``compare`` and ``report`` on ``fedstrata node`` records: a deployment against its simulation.

A real deployment (one ``fedstrata node`` process per node, a private Mosquitto)
of a scenario whose clients hold exactly the simulator's rows, and the simulated
run of the same scenario: compared from the CLI, they agree on status, rounds and
every label (the devices number their rows locally; compare reads client j's k-th
row as its k-th simulated sample), and the comparison says what a device record
lacks.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.broker.conftest import mosquitto  # noqa: F401 - the fixture
from tests.device.conftest import EXE, FLAT, start_node, write_deployment

pytestmark = [pytest.mark.slow, pytest.mark.broker]


def fedstrata(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [EXE, *map(str, args)], capture_output=True, text=True, timeout=180, cwd=cwd
    )


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, mosquitto):  # noqa: F811 - the fixture imported above
    base = tmp_path_factory.mktemp("deployed")
    text = FLAT.format(seed=5)
    configs = write_deployment(base, text, run="cmp-device", url=mosquitto.url)
    procs = {nid: start_node(path) for nid, path in configs.items()}
    try:
        for nid, p in procs.items():
            out, err = p.communicate(timeout=90)
            assert p.returncode == 0, (nid, out, err)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()
    res = fedstrata("run", base / "federation.yaml", "--out", base / "sim", "--quiet", "--no-plots")
    assert res.returncode == 0, res.stderr
    return base


def _rows(cmp: dict) -> dict:
    return {r["field"]: r for r in cmp["rows"]}


def test_compare_a_simulation_with_the_node_folders_of_its_deployment(deployed):
    rec = deployed / "records"
    nodes = [rec / n for n in ("cloud", "client-0", "client-1", "client-2")]
    res = fedstrata("compare", deployed / "sim", *nodes, "--json")
    assert res.returncode == 0, res.stderr
    cmp = json.loads(res.stdout)
    assert [r["record"] for r in cmp["runs"]] == ["run", "device"]
    rows = _rows(cmp)
    assert rows["transport"]["values"] == ["sim", "device"]
    assert rows["status"]["same"] and rows["rounds"]["same"]
    assert rows["scenario_hash"]["same"]
    # every client's labels are the simulator's labels of its samples
    sim, dev = cmp["labels"]["runs"]
    assert dev == {
        "rows": sim["rows"],
        "identical": True,
        "differing_rows": 0,
        "raw_differing_rows": 0,
    }
    lacks = cmp["runs"][1]["lacks"]
    assert any(x.startswith("ARI/NMI/ACC: the devices hold no ground truth") for x in lacks)
    assert cmp["runs"][1]["target"]["reason"] == "no ARI: a device record holds no ground truth"
    # the deployment's records folder is the same deployment
    res = fedstrata("compare", deployed / "sim", rec, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["labels"]["runs"][1]["identical"] is True
    # the table says what the device record lacks
    res = fedstrata("compare", deployed / "sim", *nodes)
    assert res.returncode == 0, res.stderr
    assert "lacks" in res.stdout and "device: 4 node(s)" in res.stdout


def test_the_root_alone_lacks_the_labels_and_other_nodes(deployed):
    res = fedstrata("compare", deployed / "sim", deployed / "records" / "cloud", "--json")
    assert res.returncode == 0, res.stderr
    cmp = json.loads(res.stdout)
    lacks = cmp["runs"][1]["lacks"]
    assert any(x.startswith("3 node folder(s): client-0, client-1, client-2") for x in lacks)
    assert cmp["labels"]["runs"][1]["rows"] == 0
    assert _rows(cmp)["rounds"]["same"]


def test_report_of_a_device_folder(deployed):
    for node in ("cloud", "client-1"):
        folder = deployed / "records" / node
        res = fedstrata("report", folder)
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
        page = (folder / "report.html").read_text(encoding="utf-8")
        assert f"device node {node}" in page and "it lacks: ARI/NMI/ACC" in page
        assert "run with --events" not in page
    root_page = (deployed / "records" / "cloud" / "report.html").read_text(encoding="utf-8")
    summary = json.loads((deployed / "sim" / "summary.json").read_text())
    assert f"{summary['status']}: {summary['reason']}" in root_page.replace("&#x27;", "'")
