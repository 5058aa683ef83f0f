"""``fedstrata report DIR`` as a user meets it: the installed command, a real browser."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from matplotlib import image as mpimg

from tests.chromium import screenshot

EXE = shutil.which("fedstrata")

TINY = """\
name: report-tiny
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 20}, partition: {kind: iid}}
topology:
  tiers: [{name: fog, count: 2, link: {latency: 0.005, bandwidth_mbps: 50}}]
  clients: {count: 4, link: {latency: 0.01, loss: 0.05}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 6, deadline_s: 5, quorum: 0.5}
faults: {dropout: 0.1}
"""


def fedstrata(*args: object, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, timeout=timeout)


class _Refs(HTMLParser):
    """Every src/href of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.imgs: list[str] = []
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for key, value in attrs:
            if key in ("src", "href") and value is not None:
                self.refs.append(value)
                if tag == "img" and key == "src":
                    self.imgs.append(value)


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("report")
    (base / "tiny.yaml").write_text(TINY)
    out = base / "run"
    res = fedstrata("run", base / "tiny.yaml", "--out", out, "--events", "--seed", "3")
    assert res.returncode == 0, res.stderr
    res = fedstrata("report", out)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    return out


def test_report_is_self_contained(record: Path) -> None:
    page = (record / "report.html").read_text(encoding="utf-8")
    parser = _Refs()
    parser.feed(page)
    assert len(parser.imgs) >= 4  # topology, progress, bytes, timeline
    for ref in parser.refs:
        assert ref.startswith("data:image/png;base64,"), ref[:80]
    for src in parser.imgs:
        png = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        pixels = mpimg.imread(io.BytesIO(png), format="png")
        assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert not re.search(r"(?:src|href)\s*=\s*['\"](?!data:)", page)
    assert "url(" not in page and "@import" not in page
    # the content a reader looks for
    for needle in ("report-tiny", "scenario.yaml", "<details>", "fog", "edge", "bandwidth 50"):
        assert needle in page, needle
    assert "no event log" not in page  # the run had --events
    # summary.json's total and the per-round split from the event log agree
    assert "(equal)" in page


def test_report_md_references_its_images(record: Path) -> None:
    md = (record / "report.md").read_text(encoding="utf-8")
    names = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert len(names) >= 4
    for name in names:
        assert "/" not in name and (record / name).is_file()
        mpimg.imread(record / name)


def test_report_renders_in_chromium(record: Path, tmp_path: Path) -> None:
    pixels = screenshot(record / "report.html", tmp_path / "shot.png", 1200, 2000)
    assert pixels.shape[0] >= 1000 and pixels.shape[1] >= 1000
    rgb = pixels[..., :3]
    assert float(rgb.var()) > 0.002  # not a blank page
    assert float((rgb.min(axis=-1) < 0.9).mean()) > 0.02  # text and plots cover some of it


def test_report_without_events_says_so(tmp_path: Path) -> None:
    (tmp_path / "tiny.yaml").write_text(TINY)
    out = tmp_path / "run"
    assert fedstrata("run", tmp_path / "tiny.yaml", "--out", out, "--no-plots").returncode == 0
    res = fedstrata("report", out)
    assert res.returncode == 0, res.stderr
    assert "no event log: run with --events" in (out / "report.html").read_text()
    assert "no event log: run with --events" in (out / "report.md").read_text()


@pytest.mark.parametrize("kind", ["missing", "file", "empty"])
def test_report_usage_errors(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "x"
    if kind == "file":
        target.write_text("hello")
    elif kind == "empty":
        target.mkdir()
    res = fedstrata("report", "/nonexistent" if kind == "missing" else target)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a run record" in lines[0], res.stderr


def test_report_malformed_summary(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text("{nope")
    res = fedstrata("report", tmp_path)
    assert res.returncode == 1
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_report_of_a_sweep(tmp_path: Path) -> None:
    """A sweep folder gets metric-vs-parameter plots with the cells' intervals."""
    (tmp_path / "tiny.yaml").write_text(TINY)
    out = tmp_path / "sweep"
    res = fedstrata(
        "sweep",
        tmp_path / "tiny.yaml",
        "--grid",
        "faults.dropout=0,0.2",
        "--repeats",
        "2",
        "--out",
        out,
        "--quiet",
    )
    if "No such command" in res.stderr:
        pytest.skip("fedstrata sweep is not available")
    assert res.returncode == 0, res.stderr
    res = fedstrata("report", out)
    assert res.returncode == 0, res.stderr
    page = (out / "report.html").read_text(encoding="utf-8")
    parser = _Refs()
    parser.feed(page)
    assert parser.imgs and all(r.startswith("data:image/png;base64,") for r in parser.refs)
    mpimg.imread(io.BytesIO(base64.b64decode(parser.imgs[0].split(",", 1)[1])), format="png")
    assert "faults.dropout" in page and "95 % interval" in page
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "](report-sweep.png)" in md and (out / "report-sweep.png").is_file()


def test_report_of_an_unfinished_sweep(tmp_path: Path) -> None:
    (tmp_path / "results.csv").write_text("cell,faults.dropout,repeat\n")
    res = fedstrata("report", tmp_path)
    assert res.returncode == 1
    assert "summary.csv" in res.stderr and "Traceback" not in res.stderr


def test_a_reported_run_can_be_overwritten(tmp_path: Path) -> None:
    (tmp_path / "tiny.yaml").write_text(TINY)
    out = tmp_path / "run"
    assert fedstrata("run", tmp_path / "tiny.yaml", "--out", out, "--no-plots").returncode == 0
    assert fedstrata("report", out).returncode == 0
    res = fedstrata("run", tmp_path / "tiny.yaml", "--out", out, "--no-plots", "--overwrite")
    assert res.returncode == 0, res.stderr
    assert not (out / "report.html").exists()  # the old run's report went with it


FAULTS = """\
name: report-faults
seed: 1
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 20}, partition: {kind: iid}}
topology:
  tiers: [{name: fog, count: 10, link: {latency: 5ms}}]
  clients: {count: 40, link: {latency: 10ms}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 12, deadline_s: 1, quorum: 0.5, tol_mode: per_sample, tol: 0}
faults:
  partitions: [{nodes: [fog-3], start: 0.05, end: 0.25}]
  crashes:
    - {node: client-5, at: 0.1, restart_after: 0.15}
    - {node: client-7, at: 0.12}
# a partition loses messages under message-retry (under tcp it only delays them)
network: {model: message-retry}
"""


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("faults")
    (base / "faults.yaml").write_text(FAULTS)
    out = base / "run"
    res = fedstrata("run", base / "faults.yaml", "--out", out, "--events", "--no-plots")
    assert res.returncode == 0, res.stderr
    res = fedstrata("report", out)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    return out


def test_report_draws_fault_windows_with_their_nodes(faulty: Path) -> None:
    page = (faulty / "report.html").read_text(encoding="utf-8")
    md = (faulty / "report.md").read_text(encoding="utf-8")
    # the settings count faults in the singular and the plural as they are
    assert "2 crashes, 1 partition" in page and "1 partitions" not in page
    assert "fault windows and their nodes" in page  # the timeline's alt text
    assert "](report-timeline.png)" in md
    # the drop reason of a partitioned link is named as docs/records.md names it
    assert "outage (a partitioned link)" in page
    text = (Path(__file__).resolve().parents[2] / "docs" / "records.md").read_text()
    assert "`outage` (a partitioned link" in text


def test_report_timeline_lanes_are_the_faults(faulty: Path) -> None:
    import json

    from fedstrata.analysis.report import _fault_windows

    summary = json.loads((faulty / "summary.json").read_text())
    sc = __import__("yaml").safe_load((faulty / "scenario.yaml").read_text())
    windows = _fault_windows(summary, sc, summary["virtual_time_s"])
    end = summary["virtual_time_s"]
    # from the scenario above: fog-3 cut 0.05-0.25 s, client-5 down 0.1-0.25 s, client-7
    # from 0.12 s to the end
    assert end > 0.25
    assert windows == [
        ("partition: fog-3", 0.05, 0.25, False),
        ("crash: client-5", 0.1, pytest.approx(0.25), False),
        ("crash: client-7 (no restart)", 0.12, end, True),
    ]


def test_report_plots_j_per_sample_when_the_stop_rule_used_it(faulty: Path) -> None:
    page = (faulty / "report.html").read_text(encoding="utf-8")
    assert "J/n and ARI per root round" in page
    rows = (faulty / "rounds.csv").read_text().splitlines()
    header = rows[0].split(",")
    cloud = [dict(zip(header, r.split(","), strict=True)) for r in rows[1:]]
    cloud = [r for r in cloud if r["tier"] == "cloud" and r["objective"]]
    assert cloud and all(int(r["n"]) > 0 for r in cloud)  # what J/n is drawn from


def test_topology_labels_fit_their_nodes_at_ten_fogs() -> None:
    """Ten fogs of ten clients each: every node's label fits inside its circle.

    The groups of clients used to read "10 clients (fog-0)", wider than their circle.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from fedstrata.analysis.report import _topology_figure

    fogs = [f"fog-{i}" for i in range(10)]
    clients = [f"client-{j}" for j in range(100)]
    parents = {f: "cloud" for f in fogs} | {c: fogs[j // 10] for j, c in enumerate(clients)}
    fig = _topology_figure(
        ([("cloud", ["cloud"]), ("fog", fogs), ("edge", clients)], parents), {"fog": "x"}
    )
    renderer = FigureCanvasAgg(fig).get_renderer()
    ax = fig.axes[0]
    # node circles: 600 pt^2 markers (at most 12 nodes a level), diameter sqrt(600) pt
    diameter = 600**0.5 * fig.dpi / 72
    labels = [t for t in ax.texts if t.get_fontsize() == 7]
    assert len(labels) == 1 + 10 + 10  # the cloud, the fogs, a group of clients per fog
    for t in labels:
        assert t.get_window_extent(renderer).width < diameter, t.get_text()
    boxes = [t.get_window_extent(renderer) for t in ax.texts if t.get_text().strip()]
    for b in boxes:  # every text inside the figure, none over another
        assert b.x0 >= fig.bbox.x0 - 1 and b.x1 <= fig.bbox.x1 + 1, b
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not a.overlaps(b), (a, b)


@pytest.mark.broker
def test_report_of_an_mqtt_run_says_what_is_true_there(tmp_path: Path) -> None:
    from tests.broker.conftest import _need_mosquitto

    _need_mosquitto()
    (tmp_path / "tiny.yaml").write_text(TINY)
    out = tmp_path / "run"
    res = fedstrata(
        "run", tmp_path / "tiny.yaml", "--out", out, "--transport", "mqtt", "--no-plots"
    )
    assert res.returncode == 0, res.stderr
    assert fedstrata("report", out).returncode == 0
    for name in ("report.html", "report.md"):
        text = (out / name).read_text(encoding="utf-8")
        assert "run with --events" not in text  # --transport mqtt refuses it
        assert "an MQTT run writes no event log" in text
