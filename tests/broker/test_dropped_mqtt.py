"""Over a real Mosquitto, summary.json counts what the nodes refused, by reason and tier.

An outsider (a plain MQTT client, not a node) publishes garbage and a well-formed
envelope with a malformed body on the root's ``up`` topic once the run is under way.
"""

from __future__ import annotations

import os
import threading

import paho.mqtt.client as mqtt
import pytest

from fedstrata.mqtt import up_topic
from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run_mqtt import mqtt_run
from tests.scenarios.test_dropped_summary import GARBAGE, malformed

pytestmark = pytest.mark.broker

SCENARIO = """
name: outsider-mqtt
seed: 4
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 40}, partition: {kind: iid}}
topology: {clients: {count: 3, link: {latency: 0.01}}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 15, tol: 0.0, deadline_s: 5}
"""


def _attack_after_first_model(broker, run_id: str, payloads: list[bytes]) -> threading.Thread:
    """Once the root published a model, publish ``payloads`` on its up topic (QoS 1)."""

    def work() -> None:
        seen = threading.Event()
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
        client.on_connect = lambda c, *_: c.subscribe(f"fs/{run_id}/cloud/+/down", qos=1)
        client.on_message = lambda _c, _u, msg: None if msg.retain else seen.set()
        client.connect(broker.host, broker.port)
        client.loop_start()
        try:
            if seen.wait(60):
                for payload in payloads:
                    # client-0's up topic: the malformed body claims to be client-0's
                    client.publish(
                        up_topic(run_id, "cloud", "cloud", "client-0"), payload, qos=1
                    ).wait_for_publish(10)
        finally:
            client.loop_stop()
            client.disconnect()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_an_mqtt_run_counts_an_outsiders_garbage_and_malformed_body(mosquitto):
    run_id = f"outsider-{os.getpid()}"
    attack = _attack_after_first_model(mosquitto, run_id, [GARBAGE, malformed(run_id)])
    _, summary, _ = mqtt_run(
        parse_scenario(SCENARIO),
        mosquitto.host,
        mosquitto.port,
        timeout_s=60,
        run_id=run_id,
        insecure=True,  # unsigned: the malformed body reaches the body checks
    )
    attack.join(timeout=5)
    assert summary["status"] == "round_limit", summary["reason"]
    assert summary["crashed"] == []
    cloud = summary["dropped"]["per_tier"]["cloud"]
    assert cloud.get("garbage") == 1, summary["dropped"]
    assert cloud.get("malformed") == 1, summary["dropped"]
    assert summary["dropped"]["lost_in_network"] == 0


def test_a_signed_mqtt_run_counts_the_outsiders_envelope_as_unsigned(mosquitto):
    run_id = f"outsider-signed-{os.getpid()}"
    attack = _attack_after_first_model(mosquitto, run_id, [GARBAGE, malformed(run_id)])
    _, summary, _ = mqtt_run(
        parse_scenario(SCENARIO), mosquitto.host, mosquitto.port, timeout_s=60, run_id=run_id
    )
    attack.join(timeout=5)
    assert summary["status"] == "round_limit", summary["reason"]
    cloud = summary["dropped"]["per_tier"]["cloud"]
    assert cloud.get("garbage") == 1, summary["dropped"]
    assert cloud.get("unsigned") == 1, summary["dropped"]
