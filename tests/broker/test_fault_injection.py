"""Scenario faults on a real Mosquitto: the simulator's fault sequence, round by round.

One scenario with a permanent crash, a crash with restart, dropouts and Markov
availability runs through the installed ``fedstrata`` command, once simulated and
once over a real broker. Every round closes at its deadline (a client is down for
good), so both clocks tick alike and the faults land in the same rounds: the rounds
(participants, expected, ok), the fault sequence (which node, which second, which
fault) and the labels must agree. The availability chain steps every 1.3 s, so that
no client comes back online on a round boundary (within 0.1 s), where the real
clock's few milliseconds of drift per round would decide which round it joins.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run_mqtt import _faults_ignored
from tests.broker.conftest import _need_mosquitto

EXE = shutil.which("fedstrata")

SCENARIO = """\
name: faults-both
seed: 7
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 40}, partition: {kind: iid}}
topology: {clients: {count: 4, link: {latency: 0.01, bandwidth_mbps: 10}}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 8, tol: 1.0e-12, deadline_s: 1.0, quorum: 0.25}
faults:
  dropout: 0.3
  crashes:
    - {node: client-3, at: 0.0}
    - {node: client-1, at: 1.5, restart_after: 2.0}
  availability: {kind: markov, p_off: 0.2, p_on: 0.5, step_s: 1.3}
"""
#: The faults compared (a ``deferred`` start the simulator does not log). ``held``: a
#: QoS 1 message kept for an offline client until it is back (``network.model: tcp``),
#: which the simulator logs as a resend (``dup``) when the client is back.
COMPARED = ("dropout", "offline", "held", "crash", "restart")


def _run(tmp: Path, name: str, *args: str) -> Path:
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"
    out = tmp / name
    done = subprocess.run(
        [EXE, "run", str(tmp / "faults.yaml"), "--out", str(out), "--no-plots", "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def _rounds(out: Path) -> list[tuple[str, ...]]:
    with (out / "rounds.csv").open() as f:
        keep = ("round", "phase", "participants", "expected", "ok")
        return [tuple(row[k] for k in keep) for row in csv.DictReader(f)]


def _last_round_time(out: Path) -> float:
    with (out / "rounds.csv").open() as f:
        return max(float(row["virtual_time_s"]) for row in csv.DictReader(f))


def _sim_faults(out: Path, until: int, held: bool = True) -> list[tuple[int, str, str]]:
    """(second, node, fault) of the simulator's event log, before second ``until``.

    ``held``: a resend (``dup``) is a message kept for an offline client
    (``network.model: tcp``); under ``message-retry`` it is a timed resend instead.
    """
    seq = []
    sent: dict[tuple[str, int], float] = {}  # (client, mid) -> when it was last sent
    for line in (out / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        t, dst = e["t"], e["dst"]
        if e["ev"] == "drop" and e.get("reason") in COMPARED:
            seq.append((t, dst, e["reason"]))
        elif e["ev"] in ("crash", "restart"):
            seq.append((t, dst, e["ev"]))
        elif held and e["ev"] == "send" and dst.startswith("client"):
            if e.get("dup"):  # kept while the client was offline, sent when it is back
                seq.append((sent[dst, e["mid"]], dst, "held"))
            sent[dst, e["mid"]] = t
    return sorted((int(t), dst, fault) for t, dst, fault in seq if int(t) < until)


def _mqtt_faults(summary: dict, until: int) -> list[tuple[int, str, str]]:
    timeline = summary["faults_injected"]["timeline"]
    return sorted(
        (int(t), node, fault) for t, node, fault in timeline if fault in COMPARED and t < until
    )


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    (tmp / "faults.yaml").write_text(SCENARIO)
    return tmp, _run(tmp, "sim", "--events")


def _check_same_run(sim: Path, real: Path, held: bool = True) -> None:
    s_sim = json.loads((sim / "summary.json").read_text())
    s_real = json.loads((real / "summary.json").read_text())
    assert (s_real["status"], s_real["rounds"]) == (s_sim["status"], s_sim["rounds"])
    assert _rounds(real) == _rounds(sim)
    # rounds of one, two and three contributions of four clients: the faults show
    assert {r[2] for r in _rounds(sim)} >= {"1", "2", "3"}
    until = int(_last_round_time(sim))
    faults = _sim_faults(sim, until, held)
    kept = "held" if held else "offline"
    assert {f for _, _, f in faults} >= {"dropout", kept, "crash", "restart"}
    assert _mqtt_faults(s_real, until) == faults
    crashes = [(c["node"], c["restarts"]) for c in s_sim["crashed"]]
    assert [(c["node"], c["restarts"]) for c in s_real["crashed"]] == crashes
    for a, b in zip(s_real["crashed"], s_sim["crashed"], strict=True):
        assert abs(a["t"] - b["t"]) < 0.1
    injected = s_real["faults_injected"]
    assert (injected["crashes"], injected["restarts"]) == (2, 1)
    assert not [w for w in s_real["warnings"] if "not injected" in w]
    # the same contributions in every round: the simulator's model and labels
    assert (real / "labels.csv").read_bytes() == (sim / "labels.csv").read_bytes()


@pytest.mark.broker
@pytest.mark.slow
def test_mqtt_runs_the_simulators_fault_sequence(simulated, mosquitto):
    _need_mosquitto()
    tmp, sim = simulated
    real = _run(tmp, "mqtt", "--transport", "mqtt", "--broker", mosquitto.url)
    _check_same_run(sim, real)


@pytest.mark.broker
@pytest.mark.slow
def test_mqtt_in_two_processes_runs_the_same_fault_sequence(simulated, mosquitto):
    _need_mosquitto()
    tmp, sim = simulated
    real = _run(tmp, "mqtt2", "--transport", "mqtt", "--broker", mosquitto.url, "--processes", "2")
    _check_same_run(sim, real)


@pytest.mark.broker
@pytest.mark.slow
def test_mqtt_resends_to_an_offline_client_under_message_retry(tmp_path, mosquitto):
    """``network.model: message-retry``: lost while offline, resent every 5 s, as simulated."""
    _need_mosquitto()
    (tmp_path / "faults.yaml").write_text(SCENARIO + "network: {model: message-retry}\n")
    sim = _run(tmp_path, "sim", "--events")
    real = _run(tmp_path, "mqtt", "--transport", "mqtt", "--broker", mosquitto.url)
    _check_same_run(sim, real, held=False)


def test_only_link_faults_are_reported_ignored():
    text = SCENARIO + "  partitions: [{nodes: [client-0], start: 1, end: 2}]\n"
    sc = parse_scenario(text)
    warning = _faults_ignored(sc, emulate_links=False)
    assert warning is not None and "ignored: partitions" in warning
    assert "dropout" not in warning.split("ignored:")[1].split("(")[0]
    assert _faults_ignored(sc, emulate_links=True) is None
    assert _faults_ignored(parse_scenario(SCENARIO), emulate_links=False) is None
