"""Personalized models (Eq. 78/79) next to the global one, on the clients' own results."""

from __future__ import annotations

import csv

import pytest

from fedstrata.scenarios.loader import parse_scenario
from fedstrata.scenarios.run import run_scenario

BASE = """
name: pers
seed: 3
data:
  dataset: heat-kernel-synthetic
  params: {{n_per_cluster: 150}}
  partition: {{kind: dirichlet, alpha: 0.3}}
topology: {{clients: {{count: 6}}}}
algorithm: {{name: hk-mvfc, n_clusters: 4}}
protocol:
  rule: {rule}
  local_iters: {iters}
  rounds: 15
  gamma: {gamma}
  rho: {rho}
  personalization:
    local_iters: 4
    clients: {{client-2: {{gamma: 0.25}}}}
"""


def rows(folder):
    with open(folder / "clients.csv", newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize(("rule", "iters"), [("sum", 1), ("weighted", 3)])
def test_one_row_per_client_with_its_own_mixing(tmp_path, rule, iters):
    sc = parse_scenario(BASE.format(rule=rule, iters=iters, gamma=0.6, rho=0.8))
    summary = run_scenario(sc, tmp_path, progress=False, plots=False)
    got = rows(tmp_path)
    assert [r["client"] for r in got] == [f"client-{i}" for i in range(6)]
    mixing = {r["client"]: (float(r["gamma"]), float(r["rho"])) for r in got}
    assert mixing["client-2"] == (0.25, 0.8) and mixing["client-0"] == (0.6, 0.8)
    block = summary["personalization"]
    assert block["clients_reported"] == 6 and block["clients_missing"] == 0
    accs = [float(r["acc_personal"]) for r in got]
    assert block["acc_personal_mean"] == pytest.approx(sum(accs) / 6, abs=1e-6)
    assert "clients.csv" in summary["files"]


def test_gamma_and_rho_one_give_the_global_model_back(tmp_path):
    # Eq. 78/79 with γ = ρ = 1 is the global model: every client's personal labels are
    # its global labels, whatever its local fit found
    text = BASE.format(rule="sum", iters=1, gamma=1.0, rho=1.0).replace(
        "clients: {client-2: {gamma: 0.25}}", "clients: {}"
    )
    run_scenario(parse_scenario(text), tmp_path, progress=False, plots=False)
    for r in rows(tmp_path):
        for k in ("ari", "nmi", "acc"):
            assert r[f"{k}_personal"] == r[f"{k}_global"], r


def test_without_personalization_no_clients_csv(tmp_path):
    text = BASE.format(rule="sum", iters=1, gamma=0.7, rho=0.7)
    text = text[: text.index("  personalization:")]
    summary = run_scenario(parse_scenario(text), tmp_path, progress=False, plots=False)
    assert "personalization" not in summary
    assert not (tmp_path / "clients.csv").exists()
