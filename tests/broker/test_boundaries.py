"""The broker package only translates events and effects: no protocol, no simulator."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from fedstrata.broker import launcher

PKG = Path(__file__).resolve().parents[2] / "fedstrata"
FORBIDDEN_IN_BROKER = (
    "fedstrata.algorithms",
    "fedstrata.nodes.client",
    "fedstrata.nodes.aggregator",
    "fedstrata.scenarios",
    "fedstrata.sim",
)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _hits(names: set[str], forbidden) -> list[str]:
    return sorted(n for n in names for f in forbidden if n == f or n.startswith(f + "."))


@pytest.mark.parametrize("path", sorted((PKG / "broker").glob("*.py")), ids=lambda p: p.name)
def test_broker_has_no_protocol_or_simulator_imports(path):
    assert _hits(_imports(path), FORBIDDEN_IN_BROKER) == []


@pytest.mark.parametrize("path", sorted((PKG / "sim").glob("*.py")), ids=lambda p: p.name)
def test_simulator_never_imports_the_broker(path):
    assert _hits(_imports(path), ("fedstrata.broker", "aiomqtt", "paho")) == []


def test_importing_the_runner_loads_no_protocol_module():
    code = (
        "import sys, fedstrata.broker.runner, fedstrata.broker.launcher;"
        "bad = [m for m in sys.modules if m.startswith(('fedstrata.algorithms', "
        "'fedstrata.nodes.client', 'fedstrata.nodes.aggregator', 'fedstrata.sim'))];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_missing_mosquitto_is_one_line_with_the_install_hint(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(launcher, "_EXTRA_DIRS", ())
    with pytest.raises(launcher.TransportError) as info:
        launcher.find_mosquitto()
    msg = str(info.value)
    assert (
        "\n" not in msg and "apt-get install mosquitto" in msg and "brew install mosquitto" in msg
    )


def test_private_broker_is_terminated_on_exit(mosquitto):
    with launcher.PrivateBroker() as broker:
        assert broker.running and launcher.wait_for_port(broker.host, broker.port, 1)
        proc = broker._proc
    assert proc.poll() is not None and not broker.running
