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
the mean does not. A 10 % trimmed mean (the 4 largest and 4 smallest of 39 rounds
dropped, on both sides alike): inside the suite, beside other tests on two cores, the
CPU once stalled a few real rounds by seconds (a mean of 0.306 s with a median of
0.221 s), which is the machine's load, not the network. The median and p90 are
printed.

On 2026-11-27 (this machine, Linux 6.18, Mosquitto 2.0.11), plain means: measured
0.156-0.167 s, the TCP model 0.149 s, message-retry 5.25 s; kernel TCP/IP bytes 371,258-376,794 against
the model's 383,062 (+1.7 to +3.2 %). See docs/network-validation.md for the grid.

Needs root, ``ip``, ``tc``, ``nft``, ``ss`` and ``mosquitto``: skipped without them,
a failure under CI (``CI`` set).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

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
MEAN_TOL, MEAN_FLOOR_S = 0.3, 0.05
"""The simulated mean network-added round time within 30 % (or 0.05 s) of the measured
one: the two sides draw their losses independently, and over 40 rounds the mean of a
two-mode quantity (0 or about one RTO) varies by about 15 % from run to run."""
BYTES_TOL = 0.05
"""Kernel-counted TCP/IP bytes within 5 % of the simulator's ``network.ip_bytes``."""


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


def _added(rows, base_rows) -> tuple[float, float, float]:
    """10 % trimmed mean, median and p90 of the network-added round times."""
    added = sorted(network_added(round_durations(rows), round_durations(base_rows)))
    cut = len(added) // 10
    kept = added[cut : len(added) - cut]
    return (sum(kept) / len(kept), *quantiles(added))


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
    sims = {
        (model, tag): simulate_file(p, tmp_path / f"sim-{model}-{tag}", model)
        for model in ("tcp", "message-retry")
        for tag, p in paths.items()
    }
    lossy, sim = real["lossy"], sims["tcp", "lossy"]
    assert set(lossy.statuses.values()) == {"finished"}, lossy.statuses
    assert set(lossy.exit_codes.values()) == {0}, lossy.exit_codes
    assert lossy.dropped_packets > 0 and lossy.queue_drops == 0
    assert lossy.root["rounds"] == sim.summary["rounds"] == 40
    assert real["base"].root["rounds"] == 40
    payload = sim.summary["payload_bytes"]
    assert (lossy.payload_up, lossy.payload_down) == (payload["up"], payload["down"])

    measured = _added(lossy.rows, real["base"].rows)
    tcp = _added(sim.rows, sims["tcp", "base"].rows)
    retry = _added(sims["message-retry", "lossy"].rows, sims["message-retry", "base"].rows)
    for name, v in (("measured", measured), ("tcp", tcp), ("message-retry", retry)):
        print(f"network-added s, {name}: mean {v[0]:.3f} median {v[1]:.3f} p90 {v[2]:.3f}")
    tol = max(MEAN_TOL * measured[0], MEAN_FLOOR_S)
    # the test can tell the models apart: the message-retry model misses by far more
    assert abs(retry[0] - measured[0]) > 4 * tol, (retry, measured)
    assert abs(tcp[0] - measured[0]) <= tol, (tcp, measured)

    wire, kind = sim_wire_bytes(sim.summary)
    print(f"bytes: kernel TCP/IP {lossy.tcp_bytes}, simulator {kind} {wire}")
    assert kind == "ip", "the simulator reports no network.ip_bytes (network.model tcp)"
    assert abs(wire / lossy.tcp_bytes - 1) <= BYTES_TOL, (wire, lossy.tcp_bytes)
