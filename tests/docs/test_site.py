"""The docs site: ``mkdocs build --strict`` passes, and fails on a broken link or a stale
API reference; the API reference carries the docstrings; the front page renders."""

from __future__ import annotations

import html
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chromium import screenshot

ROOT = Path(__file__).resolve().parents[2]


def mkdocs_build(config_dir: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict -d SITE`` in ``config_dir``, as CI and a writer run it."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's end-of-life banner
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=config_dir,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    res = mkdocs_build(ROOT, out)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "WARNING" not in res.stderr, res.stderr[-4000:]
    return out


def page_text(path: Path) -> str:
    """The visible text of a built page, whitespace collapsed."""
    raw = re.sub(r"<(script|style)\b.*?</\1>", " ", path.read_text(), flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", raw)).split())


def summary_line(obj: object) -> str:
    """The docstring's first line up to its first markup (``code``, :role:, *em*)."""
    doc = inspect.getdoc(obj)
    assert doc, f"{obj!r} has no docstring"
    first = " ".join(doc.split("\n\n")[0].split())
    plain = re.split(r"[`*:]", first)[0].strip()
    assert len(plain) >= 15, (obj, first)
    return plain


def test_every_doc_page_is_in_the_site(site: Path) -> None:
    for md in sorted((ROOT / "docs").rglob("*.md")):
        rel = md.relative_to(ROOT / "docs").with_suffix("")
        page = site / ("index.html" if rel.name == "index" else rel / "index.html")
        assert page.is_file(), f"{md} was not built"


def test_api_reference_carries_the_docstrings(site: Path) -> None:
    from fedstrata import tracking, wire
    from fedstrata.algorithms.hk_mvfc import HKMVFC
    from fedstrata.analysis import metrics

    pages = {
        "reference/tracking": [tracking.trackers_from_specs, tracking.TensorBoardTracker],
        "reference/algorithms": [HKMVFC, HKMVFC.fit],
        "reference/wire": [wire.encode, wire.decode],
        "reference/analysis": [metrics.ari, metrics.evaluate],
    }
    if (ROOT / "fedstrata" / "api.py").exists():  # the Python API's page, once it exists
        from fedstrata import api

        pages["reference/api"] = [api.run, api.load, api.Run]
    for page, objects in pages.items():
        text = page_text(site / page / "index.html")
        for obj in objects:
            assert summary_line(obj) in text, (page, obj)
    # the docstrings' Sphinx roles are read as code (docs/griffe_rst.py), never shown raw
    for page in sorted((site / "reference").glob("*/index.html")):
        raw = re.findall(r":(?:func|class|meth|mod|attr|data|exc|obj):[`\s]", page_text(page))
        assert not raw, (page, raw[:3])


def test_front_page_is_the_readme(site: Path) -> None:
    text = page_text(site / "index.html")
    readme = (ROOT / "README.md").read_text()
    first = next(p for p in readme.split("\n\n")[1:] if p.strip() and not p.startswith("#"))
    assert " ".join(first.split()) in text
    # README's links to docs/*.md land on the site's pages, its benchmarks link on the
    # page that includes benchmarks/README.md
    index = (site / "index.html").read_text()
    assert 'href="deploy/"' in index and 'href="benchmarks/"' in index
    assert "docs/deploy.md" not in re.findall(r'href="([^"]*)"', index)


def _copy_project(dst: Path) -> Path:
    """mkdocs.yml, docs/ and the READMEs they include, to break one of them."""
    dst.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", dst / "mkdocs.yml")
    shutil.copy(ROOT / "README.md", dst / "README.md")
    shutil.copytree(ROOT / "docs", dst / "docs")
    (dst / "benchmarks").mkdir()
    shutil.copy(ROOT / "benchmarks" / "README.md", dst / "benchmarks" / "README.md")
    shutil.copytree(ROOT / "fedstrata", dst / "fedstrata", ignore=shutil.ignore_patterns("*.pyc"))
    return dst


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    proj = _copy_project(tmp_path / "proj")
    page = proj / "docs" / "sweeps.md"
    page.write_text(page.read_text() + "\nSee [the old page](no-such-page.md).\n")
    res = mkdocs_build(proj, tmp_path / "site")
    assert res.returncode != 0
    assert "no-such-page.md" in res.stderr


def test_a_stale_api_reference_fails_the_build(tmp_path: Path) -> None:
    proj = _copy_project(tmp_path / "proj")
    page = proj / "docs" / "reference" / "tracking.md"
    page.write_text(page.read_text() + "\n::: fedstrata.tracking.no_such_function\n")
    res = mkdocs_build(proj, tmp_path / "site")
    assert res.returncode != 0
    assert "fedstrata.tracking.no_such_function" in res.stderr


def test_front_page_renders_in_chromium(site: Path, tmp_path: Path) -> None:
    rgb = screenshot(site / "index.html", tmp_path / "front.png", 1280, 1000)[..., :3]
    assert rgb.shape[:2] == (1000, 1280)
    assert float(rgb.var()) > 0.002  # not a blank page
    # the Material header bar: the top rows are one dark colour, the body mostly white
    assert float(rgb[5:40, :, :].mean()) < 0.6
    assert float((rgb[100:, :].min(axis=-1) > 0.9).mean()) > 0.5
