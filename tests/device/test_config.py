"""node.yaml: what loads, and every problem located as FILE:LINE: path: reason (by hand)."""

import os

import numpy as np
import pytest

from fedstrata.device import config as config_module
from fedstrata.device.config import PASSWORD_ENV, load_node_config
from fedstrata.scenarios.schema import ScenarioErrors

SCENARIO = """\
name: site-test
seed: 3
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 10}}
topology: {clients: {count: 3}}
algorithm: {name: hk-mvfc, n_clusters: 4}
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder with the scenario and client data; cwd is the folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    (tmp_path / "fed.yaml").write_text(SCENARIO)
    (tmp_path / "v0.csv").write_text("a,b\n1,2\n3,4\n5,6\n")
    np.savez(tmp_path / "v1.npz", x1=np.arange(6.0).reshape(3, 2), y=np.zeros((2, 2)))
    return tmp_path


def insecure(text: str) -> str:
    """``text`` with ``insecure: true`` appended, unless it says how it signs.

    Most tests here are about other keys: an unsigned node keeps them short (signing
    is tested in test_signed_node_mqtt.py and below).
    """
    if "signing" in text or "insecure" in text or "out:" not in text:
        return text  # (a config that is not a mapping of keys stays as it is)
    return text + "insecure: true\n"


def problems(text: str, name: str = "node.yaml") -> list[str]:
    with open(name, "w") as fh:
        fh.write(insecure(text))
    with pytest.raises(ScenarioErrors) as info:
        load_node_config(name)
    return [e.located() for e in info.value.errors]


CLIENT = """\
scenario: fed.yaml
node: client-1
broker:
  url: mqtt://broker.lan
data:
  - {view: 0, path: v0.csv}
  - {view: 1, path: v1.npz, key: x1}
out: records/client-1
insecure: true
"""


def test_a_client_config_loads(site):
    (site / "node.yaml").write_text(CLIENT)
    cfg = load_node_config("node.yaml")
    assert (cfg.node_id, cfg.role, cfg.tier, cfg.parent) == ("client-1", "client", "edge", "cloud")
    assert cfg.run == "site-test"  # the scenario's name by default
    assert cfg.dims == (2, 2) and cfg.dims_from == "dataset"
    assert cfg.view_ids == (0, 1) and cfg.n_samples == 3
    np.testing.assert_array_equal(cfg.views[1], np.arange(6.0).reshape(3, 2))
    assert cfg.endpoint.url == "mqtt://broker.lan:1883" and not cfg.endpoint.tls
    assert cfg.out == site / "records" / "client-1" and not cfg.out.exists()  # nothing written
    assert cfg.mqtt_protocol == 4 and cfg.max_attempts == 30 and cfg.timeout_s is None
    assert cfg.warnings == ()
    node = cfg.build()
    assert node.role == "client" and node.node.view_ids == (0, 1)


def test_paths_are_read_from_the_config_folder(site, monkeypatch):
    (site / "node.yaml").write_text(CLIENT)
    elsewhere = site / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_node_config(site / "node.yaml")
    assert cfg.scenario_file == site / "fed.yaml" and cfg.data_files[0] == site / "v0.csv"


def test_an_aggregator_config_loads_with_view_dims(site, monkeypatch):
    def no_dataset(sc):
        raise AssertionError("view_dims given: the dataset must not be loaded")

    monkeypatch.setattr(config_module, "_dataset_dims", no_dataset)
    (site / "node.yaml").write_text(
        "scenario: fed.yaml\nnode: cloud\nrun: trial-1\nbroker: {url: 'mqtts://b:8884'}\n"
        "view_dims: [2, 2]\nout: rec\ntimeout_s: 60\ninsecure: true\n"
    )
    cfg = load_node_config("node.yaml")
    assert (cfg.role, cfg.parent, cfg.run, cfg.dims, cfg.timeout_s) == (
        "root",
        None,
        "trial-1",
        (2, 2),
        60.0,
    )
    assert cfg.endpoint.url == "mqtts://b:8884" and cfg.endpoint.tls
    assert cfg.build().node.children == {"client-0", "client-1", "client-2"}


def test_unknown_and_missing_keys(site):
    assert problems("scenario: fed.yaml\nnode: cloud\nbrokr: {url: 'mqtt://b'}\nout: o\n") == [
        "node.yaml:1: broker: required key is missing",
        "node.yaml:3: brokr: unknown key; known keys: scenario, node, run, broker, data, "
        "view_dims, out, timeout_s, signing, insecure, faults",
    ]
    assert problems(
        "scenario: fed.yaml\nnode: cloud\nbroker:\n  url: mqtt://b\n  tls: true\nout: o\n"
    ) == [
        "node.yaml:5: broker.tls: unknown key; known keys: url, username, password_file, ca, "
        "cert, key, protocol, max_attempts",
    ]


def test_strict_types(site):
    text = (
        "scenario: fed.yaml\nnode: client-1\nrun: 'a b'\nbroker: {url: 'mqtt://b', protocol: 3}\n"
        "data: [{view: '0', path: v0.csv}]\nout: o\ntimeout_s: '60'\n"
    )
    assert problems(text) == [
        "node.yaml:3: run: must be 1-64 letters, digits, '_', '.' or '-', starting with a letter "
        "or digit (it is an MQTT topic level and a node id), got 'a b'",
        "node.yaml:4: broker.protocol: must be 4 or 5, got 3",
        "node.yaml:5: data.0.view: must be an integer, got '0'",
        "node.yaml:7: timeout_s: must be a number, got '60'",
    ]


def test_the_password_is_never_inline(site):
    text = "scenario: fed.yaml\nnode: cloud\nbroker:\n  url: mqtt://b\n  username: u\n  password: s3cret\nout: o\n"
    assert problems(text) == [
        "node.yaml:6: broker.password: never write the password here (node.yaml is shown, copied "
        "and backed up): put it in a file named by password_file, or in the "
        "FEDSTRATA_BROKER_PASSWORD environment variable"
    ]


def test_password_file_and_environment(site, monkeypatch):
    head = "scenario: fed.yaml\nnode: cloud\nbroker:\n  url: mqtt://b\n"
    tail = "out: o\n"
    assert problems(head + "  password_file: p.txt\n" + tail) == [
        "node.yaml:5: broker.password_file: a password needs a username: add broker.username"
    ]
    assert problems(head + "  username: u\n  password_file: p.txt\n" + tail) == [
        "node.yaml:6: broker.password_file: p.txt does not exist (relative paths are read from "
        "the folder of the node config)"
    ]
    (site / "p.txt").write_text("\n")
    assert problems(head + "  username: u\n  password_file: p.txt\n" + tail) == [
        "node.yaml:6: broker.password_file: p.txt is empty (the password is line 1)"
    ]
    (site / "p.txt").write_text("pa ss\nignored\n")
    os.chmod(site / "p.txt", 0o600)
    (site / "node.yaml").write_text(
        insecure(head + "  username: u\n  password_file: p.txt\n" + tail)
    )
    assert load_node_config("node.yaml").endpoint.password == "pa ss"
    os.chmod(site / "p.txt", 0o644)
    assert load_node_config("node.yaml").warnings == (
        "the password file p.txt can be read by other users (mode 0644); chmod 600 it",
    )
    monkeypatch.setenv(PASSWORD_ENV, "from-env")
    (site / "node.yaml").write_text(insecure(head + "  username: u\n" + tail))
    assert load_node_config("node.yaml").endpoint.password == "from-env"
    (site / "node.yaml").write_text(insecure(head + tail))
    cfg = load_node_config("node.yaml")
    assert cfg.endpoint.password is None
    assert cfg.warnings == (
        "FEDSTRATA_BROKER_PASSWORD is set but broker.username is not: it is not used",
    )


def test_broker_url_and_tls_files(site):
    text = (
        "scenario: fed.yaml\nnode: cloud\nbroker:\n  url: mqtt://b\n  ca: ca.pem\n"
        "  cert: c.pem\nout: o\n"
    )
    assert problems(text) == [
        "node.yaml:5: broker.ca: TLS files need an mqtts:// broker url",
        "node.yaml:6: broker.cert: TLS files need an mqtts:// broker url",
        "node.yaml:6: broker.cert: a client cert needs its key: add broker.key",
    ]
    text = "scenario: fed.yaml\nnode: cloud\nbroker:\n  url: mqtts://b\n  ca: ca.pem\nout: o\n"
    assert problems(text) == [
        "node.yaml:5: broker.ca: ca.pem does not exist (relative paths are read from the folder "
        "of the node config)"
    ]
    (site / "ca.pem").write_text("not a certificate\n")
    assert problems(text)[0].startswith("node.yaml:3: broker: cannot set up TLS for mqtts://b:8883")
    assert problems("scenario: fed.yaml\nnode: cloud\nbroker: {url: 'http://b'}\nout: o\n") == [
        "node.yaml:3: broker.url: broker URL 'http://b': the scheme must be mqtt:// or mqtts://, "
        "got 'http'://"
    ]


def test_the_node_must_be_in_the_topology(site):
    text = "scenario: fed.yaml\nnode: client-7\nbroker: {url: 'mqtt://b'}\nout: o\n"
    assert problems(text) == [
        "node.yaml:2: node: no node 'client-7' in the scenario (its nodes: cloud, client-0, "
        "client-1, client-2)"
    ]


def test_who_holds_data(site):
    assert problems("scenario: fed.yaml\nnode: client-0\nbroker: {url: 'mqtt://b'}\nout: o\n") == [
        "node.yaml:2: node: client-0 is a client: list the views it holds under data"
    ]
    text = (
        "scenario: fed.yaml\nnode: cloud\nbroker: {url: 'mqtt://b'}\n"
        "data: [{view: 0, path: v0.csv}]\nout: o\n"
    )
    assert problems(text) == [
        "node.yaml:4: data: cloud is an aggregator (root): it holds no data; remove data"
    ]


def test_data_problems_name_the_file_and_where(site):
    (site / "bad.csv").write_text("1,2\n3,x\n")
    (site / "three.csv").write_text("1,2,3\n")
    (site / "short.csv").write_text("1,2\n")
    text = """\
scenario: fed.yaml
node: client-1
broker: {url: 'mqtt://b'}
data:
  - {view: 0, path: bad.csv}
  - view: 1
    path: v1.npz
    key: x9
  - {view: 1, path: v0.csv}
  - {view: 2, path: v0.csv}
  - {view: 3, path: missing.npz}
out: o
"""
    assert problems(text) == [
        "node.yaml:5: data.0.path: bad.csv: line 2, column 2: 'x' is not a number",
        "node.yaml:8: data.1.key: v1.npz: has no array 'x9' (it holds: x1, y)",
        "node.yaml:9: data.2.view: view 1 is listed twice (also data.1)",
        "node.yaml:10: data.3.view: no view 2: the federation's views are 0 .. 1",
        "node.yaml:11: data.4.view: no view 3: the federation's views are 0 .. 1",
    ]
    text = """\
scenario: fed.yaml
node: client-1
broker: {url: 'mqtt://b'}
data:
  - {view: 0, path: v0.csv}
  - {view: 1, path: short.csv}
out: o
"""
    assert problems(text) == [
        "node.yaml:6: data.1: short.csv has 1 samples but v0.csv (data.0) has 3; row i of every "
        "view is the same sample"
    ]
    text = text.replace("short.csv", "three.csv")
    assert problems(text) == [
        "node.yaml:6: data.1: three.csv has 3 features (columns) but view 1 of the federation has 2"
    ]
    text = text.replace("three.csv", "nope.csv")
    assert problems(text) == [
        "node.yaml:6: data.1.path: nope.csv: does not exist (relative paths are read from the "
        "folder of the node config)"
    ]


def test_dataset_not_on_the_device(site, monkeypatch):
    def absent(sc):
        raise FileNotFoundError("mfeat-fou not found")

    monkeypatch.setattr(config_module, "_dataset_dims", absent)
    assert problems("scenario: fed.yaml\nnode: cloud\nbroker: {url: 'mqtt://b'}\nout: o\n") == [
        "node.yaml:1: scenario: cannot load the scenario's dataset 'heat-kernel-synthetic' to "
        "learn the views' feature counts (mfeat-fou not found); give them as view_dims: "
        "[d0, d1, ...]"
    ]


def test_scenario_problems_are_located_in_the_scenario(site):
    node = "scenario: {}\nnode: cloud\nbroker: {{url: 'mqtt://b'}}\nout: o\n"
    assert problems(node.format("nope.yaml")) == [
        "node.yaml:1: scenario: nope.yaml does not exist (relative paths are read from the "
        "folder of the node config)"
    ]
    (site / "bad.yaml").write_text(SCENARIO + "protocol: {rounds: 0}\n")
    assert problems(node.format("bad.yaml")) == [
        f"{site / 'bad.yaml'}:6: protocol.rounds: must be >= 1, got 0"
    ]
    (site / "mvkm.yaml").write_text(SCENARIO.replace("hk-mvfc,", "mvkm-ed, kernel: type1,"))
    assert problems(node.format("mvkm.yaml")) == [
        f"{site / 'mvkm.yaml'}:5: algorithm.kernel: mvkm-ed has hard memberships, no heat "
        "kernel and the exact centre update; remove kernel"
    ]


def test_the_output_folder(site):
    (site / "afile").write_text("")
    assert problems("scenario: fed.yaml\nnode: cloud\nbroker: {url: 'mqtt://b'}\nout: afile\n") == [
        "node.yaml:4: out: afile is a file, not a folder"
    ]


def test_reading_problems(site):
    with pytest.raises(ScenarioErrors) as info:
        load_node_config("absent.yaml")
    assert [e.located() for e in info.value.errors] == [
        "absent.yaml: cannot read file: no such file"
    ]
    assert problems("# nothing\n") == ["node.yaml:1: empty node config"]
    assert problems("- a\n- b\n") == ["node.yaml:1: a node config must be a mapping"]
    assert problems("node: a\nnode: b\n") == [
        "node.yaml:1: scenario: required key is missing",
        "node.yaml:1: broker: required key is missing",
        "node.yaml:1: out: required key is missing",
        "node.yaml:2: node: duplicate key (first given on line 1)",
    ]
    assert problems("node: [\n") == [
        "node.yaml:2: not valid YAML: expected the node content, but found '<stream end>'"
    ]


def test_a_node_signs_unless_it_says_insecure(site):
    bare = CLIENT.replace("insecure: true\n", "")
    assert problems(bare + "insecure: false\n") == [
        "node.yaml:2: node: a node signs its messages: give signing.key and "
        "signing.public_keys (written by `fedstrata keys SCENARIO --out DIR`), or set "
        "insecure: true to run unsigned (anyone who can publish on the broker can then "
        "impersonate a node)"
    ]
    both = bare + "signing: {key: k.key, public_keys: p.json}\ninsecure: true\n"
    assert problems(both) == [
        "node.yaml:10: insecure: signing is given too: remove insecure or signing"
    ]
    (site / "node.yaml").write_text(CLIENT)
    cfg = load_node_config("node.yaml")
    assert cfg.insecure is True and cfg.seal is None
