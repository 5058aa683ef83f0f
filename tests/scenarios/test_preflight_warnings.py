"""``fedstrata validate`` warns about ms-looking latencies and deadlines no round can meet.

Warnings go to stderr as ``file:line: path: warning: ...`` and leave the exit code 0.
The scenarios are written here; the lines and figures expected are worked out from
them by hand (the starter's client link is on line 28, its deadline on line 46).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test runs the installed command

EXE = shutil.which("fedstrata")
ROOT = Path(__file__).resolve().parents[2]

FLAT = """\
name: flat
seed: 0
data: {{dataset: heat-kernel-synthetic, params: {{n_per_cluster: 25}}}}
topology:
  clients:
    count: 2
    link: {link}
    speed_gflops: {speed}
algorithm: {{name: hk-mvfc, n_clusters: 4}}
protocol: {{rounds: 5, deadline_s: 2s, quorum: 1.0}}
"""


def validate(*files: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"
    return subprocess.run(
        [EXE, "validate", *map(str, files)], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def flat(tmp_path: Path, name: str, link: str, speed: str = "1.0") -> Path:
    (tmp_path / f"{name}.yaml").write_text(FLAT.format(link=link, speed=speed))
    return Path(f"{name}.yaml")  # validate runs in tmp_path: lines name the file so


def test_latency_50_warns_twice_and_the_run_then_stalls(tmp_path):
    assert (
        subprocess.run([EXE, "init", "s.yaml"], cwd=tmp_path, capture_output=True).returncode == 0
    )
    text = (tmp_path / "s.yaml").read_text()
    assert text.count("latency: 40ms, jitter") == 1
    (tmp_path / "s.yaml").write_text(text.replace("latency: 40ms, jitter", "latency: 50, jitter"))
    res = validate(Path("s.yaml"), cwd=tmp_path)
    assert res.returncode == 0 and res.stdout == "s.yaml: ok\n"
    assert res.stderr.splitlines() == [
        "s.yaml:28: topology.clients.link.latency: warning: latency 50 is read as 50 s (a bare "
        "number is seconds); if you meant milliseconds write 50ms",
        # fog deadline 0.8 x 2 s; each client answers after 50 s down and 50 s up; the
        # 128 B model down and 128 B up, each with a 52 B TCP/IP header: 360 B at 5 Mbit/s
        "s.yaml:46: protocol.deadline_s: warning: every round of fog-0 (fog) misses its 1.6 s "
        "deadline: its quorum of children needs at least about 100 s to answer (latency 100 s "
        "+ transfer 0.576 ms + compute 0.0326 ms), so rounds fail and the run stalls; raise the "
        "deadline or check the links and speeds",
    ]
    # what the warning foretells: the run stalls in setup
    run = subprocess.run(
        [EXE, "run", "s.yaml", "--out", "r", "--quiet", "--no-plots"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "stalled" and "setup" in summary["reason"]


def test_units_and_fitting_deadlines_give_no_warning(tmp_path):
    ok = flat(tmp_path, "ok", "{latency: 50ms, bandwidth_mbps: 5Mbps}")
    small = flat(tmp_path, "small", "{latency: 0.5}")  # under a second: plausible seconds
    res = validate(ok, small, cwd=tmp_path)
    assert res.returncode == 0 and res.stderr == ""


def test_mapping_latency_bandwidth_and_compute(tmp_path):
    # value: 3 in a mapping: 3 s each way, 6 s > 2 s
    mapping = flat(tmp_path, "mapping", "{latency: {dist: constant, value: 3}}")
    # 25 samples x 4 clusters... the model is 4 x 4 floats = 128 B; down and up, each with
    # a 52 B TCP/IP header (network.model: tcp): 360 B = 2880 bits at 1e-3 Mbps
    # (1,000 bit/s): 2.88 s > 2 s
    slow_link = flat(tmp_path, "slowlink", "{latency: 0.0, bandwidth_mbps: 0.001}")
    # a client holds 50 of the 100 samples: 50 x 4 x 4 x 1 x 30 flops = 24,000 at 1e-5 GFLOP/s
    slow_cpu = flat(tmp_path, "slowcpu", "{latency: 0.0}", speed="1.0e-5")
    res = validate(mapping, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert lines[0] == (
        "mapping.yaml:7: topology.clients.link.latency.value: warning: latency 3 is read as 3 s "
        "(a bare number is seconds); if you meant milliseconds write 3ms"
    )
    assert lines[1].startswith("mapping.yaml:10: protocol.deadline_s: warning: every round of ")
    assert "needs at least about 6 s to answer (latency 6 s + " in lines[1]
    assert len(lines) == 2
    # without latency the rest is deterministic: a transfer or compute alone over the
    # deadline means no round can ever close, which is an error, not a warning
    res = validate(slow_link, slow_cpu, cwd=tmp_path)
    assert res.returncode == 1
    lines = res.stderr.splitlines()
    assert lines[0].startswith("slowlink.yaml:10: protocol.deadline_s: rounds of cloud (cloud) ")
    assert "at least 2.88 s even with no latency (transfer 2.88 s + compute" in lines[0]
    assert lines[1].startswith("slowcpu.yaml:10: protocol.deadline_s: rounds of cloud (cloud) ")
    assert "at least 2.4 s even with no latency (compute 2.4 s)" in lines[1]
    assert len(lines) == 2


@pytest.mark.parametrize("name", ["edge-fog-cloud", "paper-flat", "fog-partition"])
def test_shipped_scenarios_validate_without_warnings(name):
    res = validate(ROOT / "scenarios" / f"{name}.yaml", cwd=ROOT)
    assert res.returncode == 0 and res.stderr == "", res.stderr
