"""Without an extra, the command that needs it says which, in one line (exit 2), not a trace.

The extra's modules are hidden from the installed ``fedstrata`` command by an import hook
(``sitecustomize``), as on a machine where it was never installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs the installed command

HIDE = '''
import sys


class _Hidden:
    """Refuse these modules as if they were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {hidden!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _Hidden())
'''

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "paper-flat.yaml"


def _without(tmp_path: Path, modules: set[str], *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("fedstrata")
    assert exe is not None, "the fedstrata command is not on PATH: pip install -e ."
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HIDE.format(hidden=modules), encoding="utf-8")
    path = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run(
        [exe, *args], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )


def test_run_over_mqtt_without_the_mqtt_extra_names_it(tmp_path):
    res = _without(
        tmp_path, {"aiomqtt", "paho"}, "run", str(SCENARIO), "--transport", "mqtt", "--quiet"
    )
    assert "Traceback" not in res.stderr + res.stdout
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert 'the MQTT transport needs the [mqtt] extra: pip install "fedstrata[mqtt]"' in lines[0]
    assert not (tmp_path / "runs").exists()  # nothing half-written


def test_the_simulator_needs_no_mqtt_extra(tmp_path):
    res = _without(tmp_path, {"aiomqtt", "paho"}, "run", str(SCENARIO), "--quiet", "--no-plots")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "runs" / "paper-flat" / "summary.json").is_file()
