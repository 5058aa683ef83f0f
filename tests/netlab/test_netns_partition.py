"""A partition on the Linux network stack against the simulator's TCP model (rule 7).

Four clients on the multiple-features digits (messages of 70-80 kB each way) reach the
root's namespace over 2 Mbit/s veth links (tbf on both ends), so a round lasts about
0.75 s on both sides. From 4.0 s to 6.5 s on client-1's run clock its link drops every
packet on both ends (nftables; the interfaces stay up). TCP retransmits with back-off
and nothing is lost: the round that waits for client-1 closes after the link is back,
and the run goes on with all four clients. The same scenario file runs in the
simulator (``network: {model: tcp}``).

Checked: rounds and every round's participants equal to the simulator's; payload bytes
equal (TCP loses nothing in a 2.5 s outage); on each side exactly one round is long
(over 2 s: the one that waited), and it closes within :data:`CLOSE_TOL_S` of the
simulator's on the root's clock; every namespace removed. Which round waits may
differ by one (see :data:`CLOSE_TOL_S`).

Needs root, ``ip``, ``tc``, ``nft``, ``ss`` and ``mosquitto``: skipped without them,
a failure under CI (``CI`` set), as ``test_netns_run.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fedstrata.netlab.cleanup import list_namespaces
from fedstrata.netlab.compare import per_round
from fedstrata.netlab.faultcompare import round_table, waiting_round
from fedstrata.netlab.measure import measure
from fedstrata.netlab.names import prefix_for
from fedstrata.netlab.runner import SubprocessRunner
from fedstrata.netlab.simrun import simulate_file
from tests.netlab.test_netns_run import _need_lab

pytestmark = [pytest.mark.slow, pytest.mark.netns]

SCENARIO = """\
name: netns-partition
seed: 3
data: {dataset: multiple-features, partition: {kind: iid}}
topology: {clients: {count: 4, link: {bandwidth_mbps: 2}}}
algorithm: {name: hk-mvfc, n_clusters: 10, center_update: exact}
protocol: {rule: sum, rounds: 8, tol: 0.0, deadline_s: 8, quorum: 0.5}
faults:
  partitions: [{nodes: [client-1], start: 4.0, end: 6.5}]
"""
CLOSE_TOL_S = 2.0
"""The round that waited for client-1 closes within this of the simulator's (root clock).

Why 2 s: the waiting round closes once the first TCP retransmission after the heal
gets through, and retransmissions come at back-off instants ``rto * (1, 3, 7, 15)``
after the send that met the outage; around the heal (2-3 s after the send) they are
one step of ``8 rto`` apart: 1.6 s for the simulator's ``rto = 0.2 s``, about 2 s for
Linux's ``rto = 0.2 s + srtt`` with the 2 Mbit/s bucket's queueing. Which send meets
the outage differs between the two sides, because the real rounds are shifted against
the simulated ones at the cut: the real setup round is 0.3-0.6 s shorter (the
simulator's setup compute at 1 GFLOP/s is 0.97 s, far more than the real one), and
client-1's clock starts up to 0.5 s away from the root's. Measured on 2026-11-27,
thirteen runs: real minus simulated close -1.19 to +1.41 s, median -0.33 s (see
docs/network-validation.md, "Partitions and crashes")."""


def test_a_partition_on_the_kernel_delays_one_round_as_the_tcp_model_does(tmp_path: Path):
    _need_lab()
    path = tmp_path / "partition.yaml"
    path.write_text(SCENARIO)
    try:
        real = measure(path, tmp_path / "real", timeout_s=90)
    finally:
        left = [ns for ns in list_namespaces(SubprocessRunner()) if ns.startswith(prefix_for())]
    assert left == [], f"namespaces left behind: {left}"
    sim = simulate_file(path, tmp_path / "sim", "tcp")
    sim_rounds, real_rounds = per_round(sim.rows), per_round(real.rows)
    print(round_table(sim_rounds, real_rounds))
    print("faults applied:", real.faults, "clock offsets:", real.offsets)

    assert set(real.statuses.values()) == {"finished"}, real.statuses
    assert [f["action"] for f in real.faults] == ["cut", "heal"]
    assert real.root["rounds"] == sim.summary["rounds"] == 8
    assert [(r.round, r.participants, r.expected, r.ok) for r in real_rounds] == [
        (r.round, r.participants, r.expected, r.ok) for r in sim_rounds
    ]
    payload = sim.summary["payload_bytes"]
    assert (real.payload_up, real.payload_down) == (payload["up"], payload["down"])

    ws = waiting_round(sim_rounds, 6.5)
    wr = waiting_round(real_rounds, real.faults[1]["root_s"])
    print(f"waiting round: sim {ws}, real {wr}")
    # the outage is felt in exactly one round on each side: TCP held the messages back
    # (the setup round is left out: a real one also waits for slow-starting nodes)
    for rounds, w in ((sim_rounds, ws), (real_rounds, wr)):
        long = [r.round for r in rounds[1:] if r.duration_s > 2.0]
        assert long == [w.round], (long, w)
    assert wr.participants == ws.participants == 4
    assert abs(wr.end_s - ws.end_s) <= CLOSE_TOL_S, (wr, ws)
