"""Client certificates as identities: ``fedstrata broker config --tls-client-certs``.

The broker requires a client certificate signed by the site's CA and takes the user
name from its Common Name (the node id), so a node is whoever holds the private key
of its certificate, whatever user name it sends. On a real Mosquitto:

* a three-tier run where every node shows its own certificate (and no password)
  gives the simulator's labels;
* client-1's certificate with the user name ``client-0`` is still client-1: the
  broker refuses its publish on ``client-0``'s presence, accepts it on its own;
* no certificate, or one with the CN ``client-0`` from another CA, cannot connect.
"""

import secrets
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from fedstrata.broker.endpoint import Endpoint
from fedstrata.broker.launcher import PrivateBroker
from fedstrata.scenarios.loader import load_scenario
from fedstrata.scenarios.run import simulate
from fedstrata.scenarios.run_mqtt import mqtt_run
from fedstrata.scenarios.wiring import wire_topology
from tests.broker.conftest import _need_mosquitto, need_tool
from tests.broker.test_tls_acl import _certificate, _write, make_pki

pytestmark = pytest.mark.broker

EXE = shutil.which("fedstrata")
SCENARIO = """\
name: certs
seed: 9
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 20}, partition: {kind: iid}}
topology: {tiers: [{name: fog, count: 2}], clients: {count: 4}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 5, tol: 1.0e-6, deadline_s: 30}
"""
NOT_AUTHORIZED = 0x87


def _client_cert(folder: Path, ca: tuple, common_name: str, stem: str) -> tuple[Path, Path]:
    """A client certificate for ``common_name`` signed by ``ca`` = (cert, key)."""
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    issuer = ca_cert.subject.rfc4514_string().removeprefix("CN=")
    cert = _certificate(
        common_name, key, issuer, ca_key, ca=False, usage=ExtendedKeyUsageOID.CLIENT_AUTH
    )
    return _write(folder, stem, cert, key)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    _need_mosquitto()
    folder = tmp_path_factory.mktemp("cert-site")
    pki = make_pki(folder)
    ca = (
        x509.load_pem_x509_certificate(pki["ca"].read_bytes()),
        serialization.load_pem_private_key((folder / "ca.key").read_bytes(), None),
    )
    (folder / "scenario.yaml").write_text(SCENARIO)
    sc = load_scenario(folder / "scenario.yaml")
    wiring = wire_topology(sc)
    nodes = sorted(set(wiring.parents) | set(wiring.parents.values()))
    certs = {u: _client_cert(folder, ca, u, f"user-{u}") for u in [*nodes, "monitor", "audit"]}
    # a certificate for client-0 from a CA the broker does not trust
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _certificate("rogue CA", other_key, "rogue CA", other_key, ca=True)
    certs["rogue"] = _client_cert(folder, (other, other_key), "client-0", "rogue-client-0")
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"

    def config(port):
        args = [
            *(EXE, "broker", "config", "--site", "cloud", "--out", folder / "site.conf"),
            *("--port", str(port), "--bind", "127.0.0.1", "--scenario", folder / "scenario.yaml"),
            *("--tls-ca", pki["ca"], "--tls-cert", pki["server_cert"]),
            *("--tls-key", pki["server_key"], "--tls-client-certs", "--monitor-user", "monitor"),
        ]
        res = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        conf = (folder / "site.conf").read_text().splitlines()
        for line in ("require_certificate true", "use_identity_as_username true"):
            assert line in conf
        assert "use_username_as_clientid true" in conf
        assert not any(line.startswith("password_file") for line in conf)
        with (folder / "site.acl").open("a") as acl:  # a test-only watcher
            acl.write("\nuser audit\ntopic read fs/#\n")
        return "\n".join(conf) + "\n"

    with PrivateBroker(config=config, log_file=folder / "mosquitto.log") as broker:
        yield broker, pki, certs, sc, nodes, folder


def _endpoint(broker, pki, cert, username=None):
    crt, key = cert
    return Endpoint.from_url(
        broker.url, ca_file=str(pki["ca"]), cert_file=str(crt), key_file=str(key), username=username
    )


def test_a_run_where_every_node_shows_its_own_certificate(site):
    broker, pki, certs, sc, nodes, _ = site
    fed, s, _ = mqtt_run(
        sc,
        _endpoint(broker, pki, certs["monitor"]),
        node_brokers={n: _endpoint(broker, pki, certs[n]) for n in nodes},
        timeout_s=60,
    )
    fed_sim, s_sim, _ = simulate(sc)
    assert s["status"] in ("converged", "round_limit"), (s["status"], s["reason"], s["warnings"])
    assert (s["status"], s["rounds"]) == (s_sim["status"], s_sim["rounds"])
    np.testing.assert_array_equal(fed.final_labels, fed_sim.final_labels)
    assert all(t["reconnects"] == 0 for t in s["per_tier"].values()), s["per_tier"]


def _pub(broker, pki, cert, user, topic, payload):
    """``mosquitto_pub`` over TLS with ``cert``, claiming ``user``: (exit code, PUBACK code)."""
    crt, key = cert
    args = [
        *(need_tool("mosquitto_pub"), "-h", "127.0.0.1", "-p", str(broker.port)),
        *("--cafile", str(pki["ca"]), "--cert", str(crt), "--key", str(key)),
        *("-u", user, "-P", "any", "-i", f"pub-{secrets.token_hex(3)}"),
        *("-V", "mqttv5", "-q", "1", "-d", "-t", topic, "-m", payload),
    ]
    res = subprocess.run(args, capture_output=True, text=True, timeout=30)
    acks = [line for line in res.stdout.splitlines() if "received PUBACK" in line]
    rc = int(acks[0].rsplit("RC:", 1)[1].rstrip(")")) if acks else None
    return res.returncode, rc


def test_the_certificate_not_the_user_name_says_who_publishes(site):
    broker, pki, certs, *_ = site
    run = f"r-{secrets.token_hex(3)}"
    got, ready = [], threading.Event()
    (crt, key) = certs["audit"]
    audit = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="audit")
    audit.tls_set(ca_certs=str(pki["ca"]), certfile=str(crt), keyfile=str(key))
    audit.on_connect = lambda c, u, f, rc, p: c.subscribe("fs/#", 1)
    audit.on_subscribe = lambda c, u, mid, rcs, p: ready.set()
    audit.on_message = lambda c, u, m: got.append((m.topic, bytes(m.payload)))
    audit.connect("127.0.0.1", broker.port)
    audit.loop_start()
    try:
        assert ready.wait(15)
        victim = f"fs/{run}/presence/client-0"
        own = f"fs/{run}/presence/client-1"
        # client-1's certificate, claiming to be client-0: the broker sees client-1
        assert _pub(broker, pki, certs["client-1"], "client-0", victim, "gone") == (
            0,
            NOT_AUTHORIZED,
        )
        assert _pub(broker, pki, certs["client-1"], "client-0", own, "online") == (0, 0)
        # without the CA's certificate for client-0 nobody gets in as client-0
        code, rc = _pub(broker, pki, certs["rogue"], "client-0", victim, "gone")
        assert code != 0 and rc is None
        deadline = time.monotonic() + 15
        while not got and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        assert got == [(own, b"online")]
    finally:
        audit.disconnect()
        audit.loop_stop()


def test_no_certificate_no_connection(site, tmp_path):
    broker, pki, *_ = site
    args = [
        *(need_tool("mosquitto_pub"), "-h", "127.0.0.1", "-p", str(broker.port)),
        *("--cafile", str(pki["ca"]), "-u", "client-0", "-P", "any"),
        *("-V", "mqttv5", "-q", "1", "-t", "fs/r/presence/client-0", "-m", "x"),
    ]
    res = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert res.returncode != 0, (res.stdout, res.stderr)
    assert broker.running
