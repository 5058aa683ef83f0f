"""The composition root registers installed plug-ins: entry points of group
``fedstrata.plugins`` in another package reach the installed ``fedstrata`` command.

Each test writes a tiny "installed" distribution (a ``.dist-info`` folder with an
``entry_points.txt``, as pip writes one) into a temporary folder on ``PYTHONPATH`` and
runs the real command in a subprocess: nothing in fedstrata names the plug-in. The
plug-in itself is the test suite's spherical k-means (``tests/plugins/spherical_kmeans.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fedstrata.plugins.spec import unregister_algorithm_plugin

ROOT = Path(__file__).resolve().parents[1]
EXE = shutil.which("fedstrata") or "fedstrata"
SCENARIO = """\
name: spherical
seed: 3
topology: {clients: {count: 3}}
algorithm: {name: spherical-kmeans, n_clusters: 4, balance: dimension}
protocol: {rounds: 30, tol: 1.0e-9}
output: {plots: false}
"""


def _installed(site: Path, entry: str, dist: str = "fedstrata_spherical") -> Path:
    """A distribution in ``site`` whose entry point ``spherical`` is ``entry``."""
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[fedstrata.plugins]\nspherical = {entry}\n")
    return site


def _fedstrata(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return subprocess.run(
        [EXE, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )


def test_an_installed_plugin_validates_and_runs_from_the_command(tmp_path):
    site = _installed(tmp_path / "site", "tests.plugins.spherical_kmeans:SPHERICAL")
    (tmp_path / "s.yaml").write_text(SCENARIO)
    ok = _fedstrata(site, "validate", "s.yaml", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    ran = _fedstrata(site, "run", "s.yaml", "--out", "rec", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    summary = json.loads((tmp_path / "rec" / "summary.json").read_text())
    assert summary["status"] in ("converged", "round_limit")
    # the same record as the plug-in registered in this process by hand
    import fedstrata
    from tests.plugins import spherical_kmeans

    spherical_kmeans.register()
    try:
        here = fedstrata.run(tmp_path / "s.yaml", out=tmp_path / "here")
    finally:
        unregister_algorithm_plugin(spherical_kmeans.SPHERICAL)
    assert here.summary["metrics"] == summary["metrics"]
    assert (tmp_path / "here" / "labels.csv").read_bytes() == (
        tmp_path / "rec" / "labels.csv"
    ).read_bytes()


def test_without_the_distribution_the_name_is_unknown(tmp_path):
    (tmp_path / "s.yaml").write_text(SCENARIO)
    res = _fedstrata(tmp_path / "empty", "validate", "s.yaml", cwd=tmp_path)
    assert res.returncode == 1
    assert "algorithm.name" in res.stderr and "spherical-kmeans" in res.stderr


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("no_such_module_here:PLUGIN", "does not load: ModuleNotFoundError"),
        ("tests.plugins.spherical_kmeans:SphericalSettings", "is a ModelMetaclass, not an"),
        ("fedstrata.plugins.multiview_spec:MULTIVIEW", None),  # the built-in, once more
    ],
    ids=["missing", "not-a-plugin", "built-in-again"],
)
def test_a_broken_installed_plugin_is_one_line_naming_it(tmp_path, entry, says):
    site = _installed(tmp_path / "site", entry)
    (tmp_path / "s.yaml").write_text("name: flat\n")
    res = _fedstrata(site, "validate", "s.yaml", cwd=tmp_path)
    if says is None:  # the very object registered by the root: registering it again is a no-op
        assert res.returncode == 0, res.stderr
        return
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr
    assert lines[0].startswith("error: plug-in 'spherical' (") and says in lines[0]


def test_a_plugin_taking_a_built_in_name_is_refused(tmp_path):
    """A second declaration of ``hk-mvfc`` (another object) must not replace the built-in."""
    pkg = tmp_path / "site" / "clash_plugin"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "import dataclasses\n"
        "from fedstrata.plugins.multiview_spec import MULTIVIEW\n"
        "PLUGIN = dataclasses.replace(MULTIVIEW, family='impostor')\n"
    )
    site = _installed(tmp_path / "site", "clash_plugin:PLUGIN")
    (tmp_path / "s.yaml").write_text("name: flat\n")
    res = _fedstrata(site, "validate", "s.yaml", cwd=tmp_path)
    assert res.returncode == 1
    assert "algorithm names already registered: hk-mvfc" in res.stderr


def test_the_registry_lists_what_it_loaded():
    """In this process nothing is installed: the built-ins only."""
    import fedstrata.registry as registry

    assert registry.INSTALLED == ()
    assert sys.modules["fedstrata.registry"] is registry
