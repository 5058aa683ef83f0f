"""``--emulate-links`` over a real Mosquitto: the simulator's links, partitions and degradations."""

import numpy as np
import pytest

from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import simulate
from fedstrata.scenarios.run_mqtt import mqtt_run

pytestmark = pytest.mark.broker

SCENARIO = """
name: emulated
seed: 3
data: {{dataset: heat-kernel-synthetic, params: {{n_per_cluster: 40}}, partition: {{kind: iid}}}}
topology: {{clients: {{count: 3, link: {{latency: {latency}, bandwidth_mbps: 10}}}}}}
algorithm: {{name: hk-mvfc, n_clusters: 4, center_update: exact}}
protocol: {{rule: sum, rounds: 3, tol: 0.0, deadline_s: {deadline}, quorum: 0.6}}
{faults}
"""


def durations(rows):
    t = [0.0] + [float(r["virtual_time_s"]) for r in rows if r["tier"] == "cloud"]
    return np.diff(t)


def test_emulated_latency_gives_the_simulated_round_times(mosquitto):
    sc = parse_scenario(SCENARIO.format(latency=0.2, deadline=30, faults=""))
    _, s_sim, rows_sim = simulate(sc)
    _, s, rows = mqtt_run(sc, mosquitto.host, mosquitto.port, timeout_s=60, emulate_links=True)
    assert s["status"] == s_sim["status"] and s["rounds"] == s_sim["rounds"] == 3
    sim_d, real_d = durations(rows_sim), durations(rows)
    # every round is a model down and statistics up, 0.2 s each way: ~0.4 s
    assert np.all(sim_d >= 0.4)
    # the real round takes the emulated time plus what loopback, Python and numpy add
    assert np.all(real_d >= sim_d - 0.01), (real_d, sim_d)
    assert np.all(real_d <= sim_d + 0.5), (real_d, sim_d)
    assert s["emulated_links"] == {"lost": 0, "gave_up": 0}


def test_emulated_partition_and_degradation_match_the_simulator(mosquitto):
    faults = (
        "faults:\n"
        "  partitions: [{nodes: [client-2], start: 0, end: 1000}]\n"
        "  degradations: [{nodes: [client-1], start: 0, end: 1000, extra_latency_s: 0.2}]\n"
    )
    # message-retry: a partition loses every transmission sent inside it
    sc = parse_scenario(
        SCENARIO.format(latency=0.05, deadline=1.5, faults=faults)
        + "network: {model: message-retry}\n"
    )
    fed_sim, s_sim, rows_sim = simulate(sc)
    fed, s, rows = mqtt_run(sc, mosquitto.host, mosquitto.port, timeout_s=60, emulate_links=True)
    key = lambda r: (r["round"], r["phase"], r["participants"], r.get("objective"))  # noqa: E731
    # client-2 never gets through: every round closes at its deadline with 2 of 3
    assert [r["participants"] for r in rows_sim] == [2, 2, 2, 2]
    assert [key(r) for r in rows] == [key(r) for r in rows_sim]
    assert s["status"] == s_sim["status"] and s["metrics"] == s_sim["metrics"]
    np.testing.assert_array_equal(fed.final_labels, fed_sim.final_labels)
    # the same transmissions lost to the partition on both transports
    assert s["emulated_links"]["lost"] == s_sim["messages_dropped"] > 0
    assert not any("partitions" in w for w in s["warnings"])


def test_emulated_tcp_partition_closes_the_session_as_in_the_simulator(mosquitto):
    # tcp (the default): a partition longer than 1.5 keep-alives closes client-2's
    # session; nothing is lost to loss, QoS 1 waits for the reconnection after 1000 s
    faults = "faults:\n  partitions: [{nodes: [client-2], start: 0, end: 1000}]\n"
    sc = parse_scenario(SCENARIO.format(latency=0.05, deadline=1.5, faults=faults))
    fed_sim, s_sim, rows_sim = simulate(sc)
    fed, s, rows = mqtt_run(sc, mosquitto.host, mosquitto.port, timeout_s=60, emulate_links=True)
    key = lambda r: (r["round"], r["phase"], r["participants"], r.get("objective"))  # noqa: E731
    assert [r["participants"] for r in rows_sim] == [2, 2, 2, 2]
    assert [key(r) for r in rows] == [key(r) for r in rows_sim]
    np.testing.assert_array_equal(fed.final_labels, fed_sim.final_labels)
    assert s_sim["network"]["model"] == "tcp"
    assert s_sim["network"]["connections_closed"] > 0
    assert s_sim["messages_dropped"] == 0 and s["emulated_links"]["lost"] == 0
