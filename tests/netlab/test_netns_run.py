"""End to end on the Linux network stack: a flat federation in namespaces against the simulator.

Six clients, each in its own namespace, reach the root's namespace (the root and a real
Mosquitto) over a veth pair shaped in the kernel: 10 Mbit/s (tbf on both ends) and 10 %
packet loss (nftables random drop on both ends). Every node is a ``fedstrata node``
process. The same scenario file and seed run in the simulator with ``network: {model:
tcp}`` and ``network: {model: message-retry}``. Checked: rounds and payload bytes equal;
the mean network-added round time of the real run (each round minus the same round of
an unshaped, loss-free real run) close to the TCP model's and far from the
message-retry model's (a lost message resent after 5 s, where TCP retransmits after
a tail loss probe or its 200 ms minimum RTO); the kernel's TCP/IP byte count close to
the simulator's ``network.ip_bytes``; no namespace left behind.

The mean, not the median: at this loss a round either sees a retransmission timeout
(about 0.2 s added) or does not (a few ms), and about half of the real rounds do, so
the median of 40 rounds jumps between the two modes from one run to the next while
the mean does not. The model predicts the expected added time, so the plain mean is
compared (a trimmed mean was tried and dropped: the two distributions differ in shape,
the model's with more rounds near 0 and a longer back-off tail, so trimming both alike
moved them 0.05 s apart, and CI failed on it). The tolerance is statistical: the means
may differ by three standard errors of their difference plus 10 % of the measured
mean. The simulator's mean pools six seeds, so its own draw (a seed-to-seed s.d. of
0.03 s) hardly counts; a real round that the machine's load stalled by seconds raises
the measured standard error with the mean, so load loosens the test instead of failing
it, while a model 2x off or the message-retry model (5 s) still fails. The median and
p90 are printed.

On 2026-11-27 (this machine, Linux 6.18, Mosquitto 2.0.11), plain means: measured
0.142-0.167 s, the TCP model 0.141 s (six seeds pooled), message-retry 5.25 s; kernel TCP/IP bytes 371,258-376,794 against
the model's 383,062 (+1.7 to +3.2 %). See docs/network-validation.md for the grid.

Needs root, ``ip``, ``tc``, ``nft``, ``ss`` and ``mosquitto``: skipped without them,
a failure under CI (``CI`` set).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedstrata.broker.launcher import find_mosquitto
from fedstrata.errors import TransportError
from fedstrata.netlab.cleanup import list_namespaces
from fedstrata.netlab.compare import network_added, quantiles, round_durations
from fedstrata.netlab.measure import measure, shaped, sim_wire_bytes
from fedstrata.netlab.names import prefix_for
from fedstrata.netlab.runner import SubprocessRunner, missing_tools
from fedstrata.netlab.simrun import simulate_file

pytestmark = [pytest.mark.slow, pytest.mark.netns]

SCENARIO = """\
name: netns-e2e
seed: 5
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 40}, partition: {kind: iid}}
topology: {clients: {count: 6}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 40, tol: 0.0, deadline_s: 60}
"""
LOSS, MBPS = 0.10, 10
SEED = 5
SIM_SEEDS = 6
"""Seeds the simulator's mean pools (each run's losses are its own draws)."""
N_SE, SYSTEMATIC = 3.0, 0.10
"""The means may differ by ``N_SE`` standard errors of their difference plus
``SYSTEMATIC`` of the measured mean."""
BYTES_TOL = 0.07
"""Kernel-counted TCP/IP bytes within 7 % of the simulator's ``network.ip_bytes``.

The kernel's own count moves from run to run with its ACKs: under CPU load the
receivers delay and coalesce more of them. Measured on this machine: 371,258-376,794
bytes on a quiet machine, 362,754 with two other test runs beside it, against the
model's 383,062 (+1.7 % to +5.6 %). The model's earlier miss, PUBACK resends left
uncounted, was 6 % the other way (the model under the kernel)."""


def _need_lab() -> None:
    problems = [f"{t} is not installed" for t in missing_tools(("ip", "tc", "nft", "ss"))]
    try:
        find_mosquitto()
    except TransportError as exc:
        problems.append(str(exc))
    if os.geteuid() != 0:
        problems.append("not root: creating network namespaces needs CAP_SYS_ADMIN")
    elif not problems:
        ns = f"{prefix_for()}check"
        res = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True)
        if res.returncode != 0:
            problems.append(f"cannot create a network namespace: {res.stderr.strip()}")
        else:
            subprocess.run(["ip", "netns", "delete", ns], check=True)
    if problems:
        if os.environ.get("CI"):
            pytest.fail("CI is set but the namespace lab cannot run: " + "; ".join(problems))
        pytest.skip("; ".join(problems))


def _added(runs) -> tuple[float, float, float, float]:
    """Mean, its standard error, median and p90 of the network-added round times.

    ``runs`` is a list of (lossy rows, base rows) pairs, pooled.
    """
    added = np.concatenate(
        [network_added(round_durations(rows), round_durations(base)) for rows, base in runs]
    )
    se = float(np.std(added, ddof=1) / np.sqrt(len(added)))
    return (float(np.mean(added)), se, *quantiles(list(added)))


def _simulate(paths: dict[str, Path], tmp: Path, model: str, seeds: range):
    """(lossy rows, base rows) of the simulator at each seed, and the first lossy run."""
    runs, first = [], None
    for seed in seeds:
        res = {}
        for tag, path in paths.items():
            doc = yaml.safe_load(path.read_text())
            doc["seed"] = seed
            seeded = tmp / f"{tag}-{model}-{seed}.yaml"
            seeded.write_text(yaml.safe_dump(doc, sort_keys=False))
            res[tag] = simulate_file(seeded, tmp / f"sim-{model}-{tag}-{seed}", model)
        first = first or res["lossy"]
        runs.append((res["lossy"].rows, res["base"].rows))
    return runs, first


def test_a_lossy_flat_federation_on_the_kernel_matches_the_tcp_model(tmp_path: Path):
    _need_lab()
    paths = {}
    for tag, (loss, mbps) in {"base": (0.0, None), "lossy": (LOSS, MBPS)}.items():
        paths[tag] = tmp_path / f"{tag}.yaml"
        paths[tag].write_text(shaped(SCENARIO, loss, mbps))
    try:
        real = {
            tag: measure(p, tmp_path / f"real-{tag}", timeout_s=120) for tag, p in paths.items()
        }
    finally:
        left = [ns for ns in list_namespaces(SubprocessRunner()) if ns.startswith(prefix_for())]
    assert left == [], f"namespaces left behind: {left}"
    tcp_runs, sim = _simulate(paths, tmp_path, "tcp", range(SEED, SEED + SIM_SEEDS))
    retry_runs, _ = _simulate(paths, tmp_path, "message-retry", range(SEED, SEED + 1))
    lossy = real["lossy"]
    assert set(lossy.statuses.values()) == {"finished"}, lossy.statuses
    assert set(lossy.exit_codes.values()) == {0}, lossy.exit_codes
    assert lossy.dropped_packets > 0 and lossy.queue_drops == 0
    assert lossy.root["rounds"] == sim.summary["rounds"] == 40
    assert real["base"].root["rounds"] == 40
    payload = sim.summary["payload_bytes"]
    assert (lossy.payload_up, lossy.payload_down) == (payload["up"], payload["down"])

    measured = _added([(lossy.rows, real["base"].rows)])
    tcp = _added(tcp_runs)
    retry = _added(retry_runs)
    for name, v in (("measured", measured), ("tcp", tcp), ("message-retry", retry)):
        print(
            f"network-added s, {name}: mean {v[0]:.3f} (s.e. {v[1]:.3f}) "
            f"median {v[2]:.3f} p90 {v[3]:.3f}"
        )
    tol = N_SE * float(np.hypot(measured[1], tcp[1])) + SYSTEMATIC * measured[0]
    print(f"tolerance {tol:.3f} s")
    # the test can tell the models apart: the message-retry model misses by far more
    assert abs(retry[0] - measured[0]) > 4 * tol, (retry, measured, tol)
    assert abs(tcp[0] - measured[0]) <= tol, (tcp, measured, tol)

    wire, kind = sim_wire_bytes(sim.summary)
    print(f"bytes: kernel TCP/IP {lossy.tcp_bytes}, simulator {kind} {wire}")
    assert kind == "ip", "the simulator reports no network.ip_bytes (network.model tcp)"
    assert abs(wire / lossy.tcp_bytes - 1) <= BYTES_TOL, (wire, lossy.tcp_bytes)
