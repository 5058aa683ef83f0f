"""Run the simulator on a lab's scenario: the installed ``fedstrata`` command, as a user would.

The link model is chosen with the top-level scenario key ``network: {model: ...}``
(``message-retry``: a lost message resent whole every ``retry_interval``; ``tcp``: loss
turned into TCP retransmission delay). Older versions have no such key and always use
the message-retry model: :func:`network_key_supported` tells which case holds, by
asking ``fedstrata validate`` about a scenario that uses the key.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedstrata.errors import TransportError
from fedstrata.netlab.compare import read_rounds

__all__ = [
    "SimResult",
    "fedstrata_exe",
    "network_key_supported",
    "simulate_file",
    "source_tree",
    "with_model",
]


@dataclass(frozen=True)
class SimResult:
    """A simulated run: its summary and its ``rounds.csv`` rows."""

    summary: dict[str, Any]
    rows: list[dict[str, str]]


def fedstrata_exe() -> str:
    """The installed ``fedstrata`` command (next to this interpreter if not on PATH)."""
    return shutil.which("fedstrata") or str(Path(sys.executable).parent / "fedstrata")


def with_model(text: str, model: str | None) -> str:
    """Scenario YAML ``text`` with ``network.model`` set (unchanged for None)."""
    if model is None:
        return text
    doc = yaml.safe_load(text)
    doc.setdefault("network", {})["model"] = model
    return yaml.safe_dump(doc, sort_keys=False)


def network_key_supported(model: str = "tcp") -> bool:
    """Whether this fedstrata accepts ``network: {model: MODEL}`` (``fedstrata validate``)."""
    text = with_model(
        "name: probe\nseed: 0\ndata: {dataset: heat-kernel-synthetic, params: "
        "{n_per_cluster: 10}}\ntopology: {clients: {count: 2}}\n"
        "algorithm: {name: hk-mvfc, n_clusters: 4}\n",
        model,
    )
    with tempfile.TemporaryDirectory(prefix="fsl-validate-") as tmp:
        path = Path(tmp) / "probe.yaml"
        path.write_text(text)
        res = subprocess.run(
            [fedstrata_exe(), "validate", str(path)], capture_output=True, text=True, timeout=120
        )
    return res.returncode == 0


def source_tree(ref: str, folder: Path, repo: Path | None = None) -> Path:
    """The ``fedstrata`` package of git ``ref`` exported into ``folder`` (``git archive``).

    A simulator of another version, run with ``PYTHONPATH=folder``: the link model of a
    commit made before the ``network`` key existed, for a "before" column. Nothing in
    the repository or its work tree changes.
    """
    repo = repo or Path(__file__).resolve().parents[2]
    folder.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", ref, "fedstrata"],
        capture_output=True,
        timeout=120,
    )
    if archive.returncode != 0:
        raise TransportError(f"git archive {ref}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def simulate_file(
    scenario: Path, out: Path, model: str | None = None, source: Path | None = None
) -> SimResult:
    """``fedstrata run SCENARIO --out OUT`` with ``network.model`` set to ``model``.

    ``source``: a tree of :func:`source_tree` whose ``fedstrata`` runs instead of the
    installed one.
    """
    path = out.with_suffix(".yaml")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(with_model(scenario.read_text(), model))
    if out.exists():
        shutil.rmtree(out)
    args = ["run", str(path), "--out", str(out), "--no-plots", "--quiet"]
    env, cwd, exe = None, None, [fedstrata_exe()]
    if source is not None:
        # run from the tree itself: ``python -c`` puts the current folder first on the path
        env, cwd = {**os.environ, "PYTHONPATH": str(source)}, str(source)
        exe = [sys.executable, "-c", "from fedstrata.cli import main; main()"]
    res = subprocess.run(
        [*exe, *args], capture_output=True, text=True, timeout=600, env=env, cwd=cwd
    )
    if res.returncode != 0:
        raise TransportError(f"fedstrata run {path}: {res.stderr.strip()[-500:]}")
    summary = json.loads((out / "summary.json").read_text())
    return SimResult(summary, read_rounds(out / "rounds.csv"))
