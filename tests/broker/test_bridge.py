"""Two Mosquitto instances bridged fog → cloud on loopback carry a three-tier run.

Both brokers run the configuration ``fedstrata broker config`` writes for their
site (password file and ACL; the fog's with ``--bridge-to`` the cloud broker): the
fog aggregator and its clients connect to the fog broker only, the root to the
cloud broker only, so every message between the root and the fog crosses the bridge.
"""

import secrets
import shutil
import subprocess
import threading
import time

import numpy as np
import paho.mqtt.client as mqtt
import pytest

from fedstrata.broker.launcher import PrivateBroker
from fedstrata.scenarios.loader import load_scenario
from fedstrata.scenarios.run import simulate
from fedstrata.scenarios.run_mqtt import mqtt_run
from fedstrata.scenarios.wiring import wire_topology
from tests.broker.conftest import _need_mosquitto

pytestmark = pytest.mark.broker

EXE = shutil.which("fedstrata")
PASSWD = shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"
THREE_TIER = """\
name: bridged
seed: 7
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 40}, partition: {kind: iid}}
topology: {tiers: [{name: fog, count: 1}], clients: {count: 3}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 8, tol: 1.0e-6, deadline_s: 30}
"""
#: The topics the bridge carries (``bridge_text`` with ``cloud_id``): the cloud group's,
#: and of its ``up`` topics the fog's own (the one its user may write on the cloud broker).
UP, DOWN = "fs/{run}/cloud/cloud/up/fog-0", "fs/{run}/cloud/cloud/down"
CONFIG = "fs/{run}/cloud/cloud/config"  # the run's configuration: once, retained


def _password(user):
    return f"pw-{user}"


def _password_file(path, users):
    for i, user in enumerate(users):
        args = [PASSWD, "-b", *(["-c"] if i == 0 else []), str(path), user, _password(user)]
        subprocess.run(args, check=True, capture_output=True, timeout=30)


def _site_config(folder, site, port, *options):
    """The configuration ``fedstrata broker config`` writes for ``site`` on ``port``."""
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"
    out = folder / f"{site}.conf"
    args = [
        *(EXE, "broker", "config", "--site", site, "--out", out, "--port", str(port)),
        *("--bind", "127.0.0.1", "--scenario", folder / "scenario.yaml"),
        *("--password-file", folder / "passwd", *options),
    ]
    res = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    # the watchers: a user of their own (one session per user: as a node, a watcher
    # would take over the node's session), reading and probing every fs/ topic
    with out.with_suffix(".acl").open("a") as acl:
        acl.write("\nuser audit\ntopic readwrite fs/#\n")
    return out.read_text()


class Watcher:
    """A paho client (own thread) logged in as ``user``, collecting its subscriptions."""

    def __init__(self, port, user, *topics):
        self.topics = []
        self.cond = threading.Condition()
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=f"watch-{user}-{secrets.token_hex(3)}"
        )
        self.client.username_pw_set(user, _password(user))
        granted, self.granted = threading.Event(), None

        def on_connect(client, userdata, flags, reason, props):
            if not reason.is_failure:
                client.subscribe([(topic, 1) for topic in topics])

        def on_subscribe(client, userdata, mid, reasons, props):
            self.granted = not any(r.is_failure for r in reasons)
            granted.set()

        def on_message(client, userdata, msg):
            if not msg.payload:  # the run clearing its retained model at the end
                return
            with self.cond:
                self.topics.append(msg.topic)
                self.cond.notify_all()

        self.client.on_connect = on_connect
        self.client.on_subscribe = on_subscribe
        self.client.on_message = on_message
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.loop_start()
        assert granted.wait(15) and self.granted, f"{user} could not subscribe to {topics}"

    def count(self, topic, at_least, timeout_s):
        """How many ``topic`` messages arrived, waiting up to ``timeout_s`` for ``at_least``."""
        with self.cond:
            self.cond.wait_for(lambda: self.topics.count(topic) >= at_least, timeout_s)
            return self.topics.count(topic)

    def wait_for(self, topic, timeout_s):
        """Whether ``topic`` has arrived (waiting up to ``timeout_s``)."""
        with self.cond:
            return self.cond.wait_for(lambda: topic in self.topics, timeout_s)

    def publish(self, topic):
        self.client.publish(topic, b"probe", qos=1)

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()


def _bridge_up(sender, receiver, topic, timeout_s=20.0):
    """Publish ``topic`` through ``sender`` until ``receiver`` gets it: the bridge is up.

    A message sent before the bridge subscribed on the remote side is lost, hence the
    repeats (each a bounded wait for the arrival, not a fixed sleep).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sender.publish(topic)
        if receiver.wait_for(topic, 0.5):
            return True
    return False


def test_bridged_fog_and_cloud_brokers_carry_a_three_tier_run(tmp_path):
    _need_mosquitto()
    (tmp_path / "scenario.yaml").write_text(THREE_TIER)
    sc = load_scenario(tmp_path / "scenario.yaml")
    wiring = wire_topology(sc)
    root = sc.topology.cloud_id
    fog_site = [n for n, p in wiring.parents.items() if p == root]
    assert fog_site == ["fog-0"]
    fog_nodes = ["fog-0", *(n for n, p in wiring.parents.items() if p == "fog-0")]
    assert len(fog_nodes) == 4  # fog-0 and its 3 clients
    _password_file(tmp_path / "passwd", [root, *fog_nodes, "monitor", "audit"])
    fed_sim, s_sim, rows_sim = simulate(sc)
    sim_root = s_sim["per_tier"]["cloud"]  # the root's messages: all cross the bridge

    cloud_conf = lambda port: _site_config(  # noqa: E731
        tmp_path, root, port, "--monitor-user", "monitor"
    )
    with PrivateBroker(config=cloud_conf) as cloud:

        def fog_conf(port):
            text = _site_config(tmp_path, "fog-0", port, "--bridge-to", f"127.0.0.1:{cloud.port}")
            assert (
                "connection fs-bridge-fog-0" in text
                and "topic fs/+/cloud/cloud/up/fog-0 out 1" in text
            )
            # the cloud broker has a password file: the bridge logs in as fog-0
            return text + f"remote_password {_password('fog-0')}\n"

        with PrivateBroker(config=fog_conf) as fog:
            # on each side a watcher, user "audit" (its ACL line is added above)
            cloud_side = Watcher(cloud.port, "audit", UP.format(run="+"))
            fog_side = Watcher(fog.port, "audit", DOWN.format(run="+"), CONFIG.format(run="+"))
            try:
                probe = f"probe-{secrets.token_hex(3)}"
                assert _bridge_up(fog_side, cloud_side, UP.format(run=probe)), "fog→cloud"
                assert _bridge_up(cloud_side, fog_side, DOWN.format(run=probe)), "cloud→fog"
                fog_ep = {n: fog.endpoint(username=n, password=_password(n)) for n in fog_nodes}
                started = time.monotonic()
                fed, s, rows = mqtt_run(
                    sc,
                    cloud.endpoint(username="monitor", password=_password("monitor")),
                    node_brokers={
                        root: cloud.endpoint(username=root, password=_password(root)),
                        **fog_ep,
                    },
                    timeout_s=60,
                )
                elapsed = time.monotonic() - started
                run = s["run_id"]
                # the watchers may lag the nodes by a message: wait (bounded) for them
                ups = cloud_side.count(UP.format(run=run), sim_root["delivered"], 15)
                downs = fog_side.count(DOWN.format(run=run), sim_root["publishes"] - 1, 15)
                configs = fog_side.count(CONFIG.format(run=run), 1, 15)
            finally:
                cloud_side.close()
                fog_side.close()
            assert fog.running and cloud.running

    assert s["status"] in ("converged", "round_limit"), (s["status"], s["reason"], s["warnings"])
    assert s["status"] == s_sim["status"] and s["rounds"] == s_sim["rounds"] == 8
    np.testing.assert_array_equal(fed.final_labels, fed_sim.final_labels)
    for a, b in zip(fed.final_state.centers, fed_sim.final_state.centers, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-10)
    key = lambda r: (r["round"], r["tier"], r["phase"], r["participants"])  # noqa: E731
    assert [key(r) for r in rows] == [key(r) for r in rows_sim]
    # the traffic crossed the bridge: the root, connected to the cloud broker only,
    # received every fog update there, and the fog saw every message the root sent
    assert ups == sim_root["delivered"] > 0
    assert configs == 1  # the root's configuration crossed once
    assert downs + configs == sim_root["publishes"] == s["per_tier"]["cloud"]["publishes"] > 0
    # the $SYS counters were read on the cloud broker by the monitor user; it received
    # the bytes of the root's messages and of the fog's (Mosquitto 2.0 counts the bytes
    # a bridge sends it, but not its PUBLISHes in publish/messages/received)
    assert s["broker_sys"] is not None, s["broker_sys_reason"]
    payload = sim_root["payload_bytes_up"] + sim_root["payload_bytes_down"]
    assert s["broker_sys"]["bytes_received"] >= payload
    print(
        f"bridged three-tier run: {s['rounds']} rounds in {elapsed:.2f} s; {ups} up, {downs} down"
    )
