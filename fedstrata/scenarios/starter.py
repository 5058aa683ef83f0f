"""The starter scenario written by ``fedstrata init``: commented, valid, quick to run.

:func:`starter_text` renders it for a flat network (``tiers=2``: clients under the
cloud) or an edge-fog-cloud one (``tiers=3``: clients under fog nodes under the
cloud); :func:`write_starter` writes it, refusing to replace an existing file unless
asked to. Every section carries a one-line comment, and the values show the units
syntax (``40ms``, ``5Mbps``, ``10%``) next to plain numbers.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["StarterExistsError", "starter_text", "write_starter"]

_HEAD = """\
# A fedstrata scenario: validate it with `fedstrata validate {file}`,
# run it with `fedstrata run {file}`. Reference: docs/scenarios.md.
# Editor completion (VS Code YAML extension): `fedstrata schema --out scenario.schema.json`,
# then start this file with the comment line  yaml-language-server: $schema=scenario.schema.json
# Units: durations 40ms, 2s, 1.5min (or plain seconds); bandwidths 100kbps, 5Mbps,
# 1Gbps (or plain Mbit/s); fractions 10% (or 0.1).
# Another file may reuse this one: `extends: {file}` then only the keys that change.

# name: the run's id (records go to runs/NAME); seed: makes the run reproducible
name: my-scenario
seed: 0

# data: the dataset, how its samples are split over the clients, and their views
data:
  dataset: heat-kernel-synthetic   # built-in synthetic multi-view data (4 clusters)
  params: {{n_per_cluster: 50}}
  partition: {{kind: iid}}           # or dirichlet (with alpha), stratified, quantity

"""

_TOPOLOGY_3 = """\
# topology: clients under 2 fog nodes under the cloud (edge-fog-cloud)
topology:
  tiers:
    - name: fog
      count: 2
      link: {latency: 20ms, bandwidth_mbps: 1Gbps}   # fog -> cloud
      speed_gflops: 10
  clients:
    count: 6
    link: {latency: 40ms, jitter: 5ms, bandwidth_mbps: 5Mbps, loss: 1%}   # client -> fog
    speed_gflops: 0.5

"""

_TOPOLOGY_2 = """\
# topology: clients directly under the cloud (a flat network)
topology:
  clients:
    count: 4
    link: {latency: 40ms, jitter: 5ms, bandwidth_mbps: 5Mbps, loss: 1%}   # client -> cloud
    speed_gflops: 0.5

"""

_TAIL = """\
# algorithm: the federated multi-view clustering method and its settings
algorithm:
  name: hk-mvfc              # heat-kernel multi-view fuzzy c-means
  n_clusters: 4
  center_update: exact

# protocol: how rounds run and end (sync waits for children up to deadline_s)
protocol:
  kind: sync
  rule: sum                  # aggregate summed statistics
  rounds: 20                 # at most
  tol: 1.0e-6                # stop once |J - J_prev| < tol, J the objective summed
  tol_mode: absolute         # over the samples that answered (it jumps when they
                             # change: per_sample tests |Δ(J/n)|, relative |ΔJ|/|J|),
  plateau: 5                 # or once J/n has not improved on its best by 0.1% in 5 rounds
  deadline_s: 2s             # how long a node waits for its children each round
  quorum: 50%                # share of children needed for a round to count

# faults: what goes wrong on purpose (dropout: share of clients missing each round)
faults:
  dropout: 5%

# output: what a run writes besides its record
output:
  plots: true
"""


class StarterExistsError(FileExistsError):
    """The target of :func:`write_starter` exists and ``force`` was not given."""


def starter_text(tiers: int = 3, *, file: str = "scenario.yaml") -> str:
    """The commented starter scenario.

    Parameters
    ----------
    tiers
        3 for edge-fog-cloud (one fog tier), 2 for a flat network.
    file
        The file name shown in the comments.

    Returns
    -------
    str
        YAML text that ``fedstrata validate`` accepts and ``fedstrata run`` runs.

    Raises
    ------
    ValueError
        ``tiers`` is neither 2 nor 3.

    """
    if tiers not in (2, 3):
        raise ValueError(f"tiers must be 2 or 3, got {tiers}")
    topology = _TOPOLOGY_3 if tiers == 3 else _TOPOLOGY_2
    return _HEAD.format(file=file) + topology + _TAIL


def write_starter(path: str | Path, tiers: int = 3, *, force: bool = False) -> Path:
    """Write the starter scenario to ``path``.

    Parameters
    ----------
    path
        The file to write.
    tiers
        See :func:`starter_text`.
    force
        Replace an existing file.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    StarterExistsError
        ``path`` exists and ``force`` is False.
    ValueError
        ``tiers`` is neither 2 nor 3.

    """
    p = Path(path)
    text = starter_text(tiers, file=p.name)
    if p.exists() and not force:
        raise StarterExistsError(f"{p} already exists; pass --force to overwrite it")
    p.write_text(text, encoding="utf-8")
    return p
