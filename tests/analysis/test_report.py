"""``fedstrata report DIR`` as a user meets it: the installed command, a real browser."""

from __future__ import annotations

import base64
import io
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image as mpimg

EXE = shutil.which("fedstrata")
CHROMIUM = next(
    (p for p in ("/usr/bin/chromium", shutil.which("chromium")) if p and Path(p).exists()), None
)

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
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing on CI")
        pytest.skip("chromium is not installed")
    shot = tmp_path / "shot.png"
    res = subprocess.run(
        [
            CHROMIUM,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            f"--screenshot={shot}",
            "--window-size=1200,2000",
            (record / "report.html").resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.is_file(), res.stderr[-2000:]
    pixels = np.asarray(mpimg.imread(shot))
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
