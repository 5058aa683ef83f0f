"""`fedstrata broker config`: a Mosquitto that starts with it and enforces its ACL."""

import asyncio
import os
import shutil
import subprocess

import aiomqtt
import pytest

from fedstrata.broker.config import acl_text, bridge_text, mosquitto_conf, parse_host_port
from fedstrata.broker.launcher import find_mosquitto, free_port, wait_for_port
from fedstrata.errors import ValidationError

EXE = shutil.which("fedstrata")
FOG = """\
name: fogacl
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 20}, partition: {kind: iid}}
topology: {tiers: [{name: fog, count: 2}], clients: {count: 4}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
"""
PARENTS = {
    "fog-0": "cloud",
    "fog-1": "cloud",
    "client-0": "fog-0",
    "client-1": "fog-0",
    "client-2": "fog-1",
    "client-3": "fog-1",
}
TIERS = {"cloud": "cloud", "fog-0": "fog", "fog-1": "fog"}


def _as_root(conf):
    """Run as root, Mosquitto drops to user 'mosquitto', who cannot read pytest's tmp."""
    if os.geteuid() == 0:
        conf.write_text(conf.read_text() + "user root\n")


def test_acl_rules_per_site():
    acl = acl_text(PARENTS, TIERS, site="fog-0")
    assert "pattern read fs/+/+/%u/up" in acl and "pattern write fs/+/+/%u/down" in acl
    assert "pattern write fs/+/presence/%u" in acl
    assert "user client-0\ntopic write fs/+/fog/fog-0/up\ntopic read fs/+/fog/fog-0/down" in acl
    # the run's configuration (sent once, retained): the aggregator writes, children read
    assert "pattern write fs/+/+/%u/config" in acl
    assert "topic read fs/+/fog/fog-0/down\ntopic read fs/+/fog/fog-0/config" in acl
    assert "user fog-0\ntopic write fs/+/cloud/cloud/up" in acl
    assert "client-2" not in acl  # connects to fog-1's broker
    everyone = acl_text(PARENTS, TIERS)
    assert "user client-3" in everyone and "topic read fs/+/presence/fog-1" in everyone
    assert "\nuser " not in acl_text()


def test_conf_and_bridge_text():
    conf = mosquitto_conf(
        "fog-0",
        port=1884,
        password_file="/p",
        acl_file="/a",
        tls_cert="/c",
        tls_key="/k",
        tls_ca="/ca",
    )
    for line in (
        "listener 1884",
        "allow_anonymous false",
        "password_file /p",
        "acl_file /a",
        "cafile /ca",
        "certfile /c",
        "keyfile /k",
    ):
        assert line in conf.splitlines()
    br = bridge_text("fog-0", "cloud.example:8883", cloud_id="cloud")
    assert "address cloud.example:8883" in br and "topic fs/+/cloud/cloud/up out 1" in br
    assert "topic fs/+/cloud/cloud/down in 1\ntopic fs/+/cloud/cloud/config in 1" in br
    assert "topic fs/r1/# both 1" in bridge_text("fog-0", "h:1", run="r1")
    with pytest.raises(ValidationError):
        mosquitto_conf("fog-0", tls_cert="/c")
    with pytest.raises(ValidationError):
        parse_host_port("host")
    with pytest.raises(ValidationError):
        bridge_text("fog-0", "h:1", run="a/b")


async def _collect(port, user, pattern, got, ready):
    async with aiomqtt.Client(
        "127.0.0.1", port, username=user, password=f"pw-{user}", identifier=f"t-{user}"
    ) as c:
        await c.subscribe(pattern, 1)
        ready.set()
        async for m in c.messages:
            got.append((m.topic.value, bytes(m.payload)))


async def _publish(port, user, items):
    async with aiomqtt.Client(
        "127.0.0.1", port, username=user, password=f"pw-{user}", identifier=f"p-{user}"
    ) as c:
        for topic, payload in items:
            await c.publish(topic, payload, qos=1)


async def _scenario(port):
    fog0_up, fog1_up, down = [], [], []
    ready = [asyncio.Event() for _ in range(3)]
    tasks = [
        asyncio.create_task(_collect(port, "fog-0", "fs/r1/fog/fog-0/up", fog0_up, ready[0])),
        asyncio.create_task(_collect(port, "fog-1", "fs/r1/fog/fog-1/up", fog1_up, ready[1])),
        asyncio.create_task(_collect(port, "client-1", "fs/r1/fog/fog-0/down", down, ready[2])),
    ]
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in ready)), 10)
    # denied first, then allowed: once the allowed ones arrive, the denied ones would have too
    await _publish(
        port,
        "client-0",
        [
            ("fs/r1/fog/fog-1/up", b"not my parent"),
            ("fs/r1/fog/fog-0/down", b"not an aggregator"),
            ("fs/r1/fog/fog-0/up", b"ok"),
        ],
    )
    await _publish(port, "fog-0", [("fs/r1/fog/fog-0/down", b"state")])
    for _ in range(100):
        if fog0_up and down:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return fog0_up, fog1_up, down


@pytest.mark.broker
def test_mosquitto_enforces_the_generated_acl(tmp_path):
    from tests.broker.conftest import _need_mosquitto

    _need_mosquitto()
    passwd = shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"
    tmp_path.chmod(0o755)
    pw = tmp_path / "passwd"
    users = ["fog-0", "fog-1", "client-0", "client-1"]
    for i, u in enumerate(users):
        args = [passwd, "-b", *(["-c"] if i == 0 else []), str(pw), u, f"pw-{u}"]
        subprocess.run(args, check=True, capture_output=True, timeout=30)
    (tmp_path / "fog.yaml").write_text(FOG)
    port = free_port()
    conf = tmp_path / "site.conf"
    assert EXE is not None, "the fedstrata command is not installed (pip install -e .)"
    res = subprocess.run(
        [
            EXE,
            "broker",
            "config",
            "--site",
            "fog-0",
            "--out",
            conf,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--password-file",
            pw,
            "--scenario",
            tmp_path / "fog.yaml",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    # fog-1's clients connect elsewhere; add fog-1 to this broker to watch its up topic
    acl = tmp_path / "site.acl"
    acl.write_text(acl.read_text() + "\n" + acl_text(PARENTS, TIERS, site="fog-1"))
    _as_root(conf)
    proc = subprocess.Popen(
        [find_mosquitto(), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        assert wait_for_port("127.0.0.1", port, 10), proc.stderr.read1().decode()
        fog0_up, fog1_up, down = asyncio.run(_scenario(port))
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stderr.close()
    assert fog0_up == [("fs/r1/fog/fog-0/up", b"ok")]
    assert fog1_up == []
    assert down == [("fs/r1/fog/fog-0/down", b"state")]


@pytest.mark.broker
def test_wrong_password_is_refused(tmp_path):
    from tests.broker.conftest import _need_mosquitto

    _need_mosquitto()
    passwd = shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"
    tmp_path.chmod(0o755)
    pw = tmp_path / "passwd"
    subprocess.run(
        [passwd, "-b", "-c", str(pw), "client-0", "pw-client-0"],
        check=True,
        capture_output=True,
        timeout=30,
    )
    port = free_port()
    acl = tmp_path / "site.acl"
    acl.write_text(acl_text(PARENTS, TIERS))
    conf = tmp_path / "site.conf"
    conf.write_text(
        mosquitto_conf("fog-0", port=port, bind="127.0.0.1", password_file=pw, acl_file=acl)
    )
    _as_root(conf)
    proc = subprocess.Popen(
        [find_mosquitto(), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        assert wait_for_port("127.0.0.1", port, 10)

        async def connect(password):
            async with aiomqtt.Client(
                "127.0.0.1", port, username="client-0", password=password, timeout=5
            ):
                return True

        assert asyncio.run(connect("pw-client-0"))
        with pytest.raises(aiomqtt.MqttError):
            asyncio.run(connect("wrong"))
    finally:
        proc.terminate()
        proc.wait(10)
