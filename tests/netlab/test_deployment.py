import numpy as np
import pytest
import yaml

from fedstrata.errors import ValidationError
from fedstrata.netlab.deployment import broker_config, prepare
from fedstrata.netlab.lab import Lab
from fedstrata.scenarios.build import build_federation
from fedstrata.scenarios.loader import load_scenario
from tests.netlab.fakes import FakeRunner

FOG = """\
name: dep
seed: 2
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 10}, partition: {kind: iid}}
topology:
  tiers: [{name: fog, count: 1, link: {bandwidth_mbps: 100}}]
  clients: {count: 2, link: {bandwidth_mbps: 5, loss: 0.01}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
"""


def _prepared(tmp_path):
    (tmp_path / "fed.yaml").write_text(FOG)
    run = FakeRunner()
    lab = Lab(runner=run, prefix="fsl-42-")
    dep = prepare(lab, tmp_path / "fed.yaml", tmp_path / "dep", "dep", timeout_s=90)
    return dep, run


def test_each_node_talks_to_its_own_or_its_parents_broker(tmp_path):
    dep, run = _prepared(tmp_path)
    # cloud, fog-0, client-0, client-1: uplinks fog-0 (link 0), then the clients
    assert [ln.lower_ns for ln in dep.lab.links] == [
        "fsl-42-fog-0",
        "fsl-42-client-0",
        "fsl-42-client-1",
    ]
    conf = {n: yaml.safe_load(p.read_text()) for n, p in dep.configs.items()}
    assert conf["cloud"]["broker"]["url"] == "mqtt://127.0.0.1:1883"
    assert conf["fog-0"]["broker"]["url"] == "mqtt://127.0.0.1:1883"
    # the clients reach the fog's broker at the fog's end of their own uplink
    assert conf["client-0"]["broker"]["url"] == "mqtt://10.203.0.5:1883"
    assert conf["client-1"]["broker"]["url"] == "mqtt://10.203.0.9:1883"
    assert all(c["insecure"] is True and c["run"] == "dep" for c in conf.values())
    assert all(c["timeout_s"] == 90 for c in conf.values())
    # the shaping of each uplink is its tier's
    rates = [a[a.index("rate") + 1] for a in run.argvs() if a[0] == "tc"]
    assert rates == ["100000kbit"] * 2 + ["5000kbit"] * 4


def test_the_fog_broker_is_bridged_over_its_uplink(tmp_path):
    dep, _ = _prepared(tmp_path)
    fog = broker_config(dep, "fog-0")
    assert "address 10.203.0.1:1883" in fog  # the cloud's end of fog-0's uplink
    assert "topic fs/+/cloud/cloud/up/fog-0 out 1" in fog
    assert "connection" not in broker_config(dep, "cloud")


def test_clients_hold_the_simulators_rows(tmp_path):
    dep, _ = _prepared(tmp_path)
    fed = build_federation(load_scenario(tmp_path / "fed.yaml"))
    for c, idx in fed.client_indices.items():
        conf = yaml.safe_load(dep.configs[c].read_text())
        with np.load(dep.folder / conf["data"][0]["path"]) as npz:
            for entry in conf["data"]:
                g = entry["view"]
                np.testing.assert_array_equal(npz[entry["key"]], fed.dataset.views[g][np.sort(idx)])


def test_a_used_folder_is_refused(tmp_path):
    (tmp_path / "fed.yaml").write_text(FOG)
    (tmp_path / "dep").mkdir()
    (tmp_path / "dep" / "records").mkdir()
    with pytest.raises(ValidationError, match="not empty"):
        prepare(
            Lab(runner=FakeRunner(), prefix="fsl-1-"), tmp_path / "fed.yaml", tmp_path / "dep", "x"
        )
