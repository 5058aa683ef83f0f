"""The worked examples of docs/architecture.md run, and compute what the page claims.

Every fenced block whose info string is ``python example`` is executed, in order, in
one fresh module (so the page's code is the code under test); the block marked
``python example-mqtt`` runs only in the broker test. Executing the page registers
its ``KMeansModel`` with :func:`~fedstrata.nodes.algorithm.register_algorithm` for the
rest of the session; the type is private to that module, so no other test sees it.
"""

import os
import re
import sys
import types
from collections import deque
from pathlib import Path

import numpy as np
import pytest

from fedstrata import wire
from fedstrata.mqtt import topic_matches, up_topic
from fedstrata.nodes.config import ProtocolConfig
from fedstrata.nodes.events import (
    CancelTimer,
    Delivered,
    Finished,
    Publish,
    Record,
    SetTimer,
    Started,
    Subscribe,
    TimerFired,
)

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
FENCE = re.compile(r"^```(python example(?:-mqtt)?)\n(.*?)^```$", re.S | re.M)


def _blocks(info: str) -> list[tuple[int, str]]:
    """(first line number, code) of every block of ``info``, in page order."""
    text = DOC.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start(2)), m.group(2))
        for m in FENCE.finditer(text)
        if m.group(1) == info
    ]


def _exec(module: types.ModuleType, info: str) -> None:
    for line, code in _blocks(info):
        # padded so that a traceback points at the page's own line numbers
        exec(compile("\n" * line + code, str(DOC), "exec"), module.__dict__)


@pytest.fixture(scope="module")
def doc():
    """The page's example code, executed once: a module namespace."""
    module = types.ModuleType("architecture_example")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    try:
        _exec(module, "python example")
        yield module
    finally:
        sys.modules.pop(module.__name__, None)


# -- a synchronous loopback transport (no SimPy, no broker) ---------------------------


class Loopback:
    """Carries out effects in memory: publishes are delivered in FIFO order, retained
    messages replayed on subscribe, and timers fire only once nothing else is queued."""

    def __init__(self, nodes):
        self.nodes = {n.node_id: n for n in nodes}
        self.now = 0.0
        self.subs: dict[str, list[str]] = {}
        self.retained: dict[str, bytes] = {}
        self.timers: dict[tuple[str, str], float] = {}
        self.queue: deque = deque()
        self.records: list[tuple[str, Record]] = []
        self.results: dict[str, object] = {}

    def _apply(self, name, effects):
        for eff in effects:
            if isinstance(eff, Subscribe):
                self.subs.setdefault(name, []).append(eff.pattern)
                self.queue.extend(
                    (name, t, p) for t, p in self.retained.items() if topic_matches(eff.pattern, t)
                )
            elif isinstance(eff, Publish):
                if eff.retain:
                    self.retained[eff.topic] = eff.payload
                for other, patterns in self.subs.items():
                    if any(topic_matches(p, eff.topic) for p in patterns):
                        self.queue.append((other, eff.topic, eff.payload))
            elif isinstance(eff, SetTimer):
                self.timers[(name, eff.name)] = self.now + eff.delay_s
            elif isinstance(eff, CancelTimer):
                self.timers.pop((name, eff.name), None)
            elif isinstance(eff, Record):
                self.records.append((name, eff))
            elif isinstance(eff, Finished):
                self.results[name] = eff.result

    def run(self, max_steps=100_000):
        for name, node in self.nodes.items():
            self._apply(name, node.handle(Started(now=self.now)))
        for _ in range(max_steps):
            if self.queue:
                dst, topic, payload = self.queue.popleft()
                if dst not in self.results:
                    event = Delivered(now=self.now, topic=topic, payload=payload)
                    self._apply(dst, self.nodes[dst].handle(event))
                continue
            live = {k: t for k, t in self.timers.items() if k[0] not in self.results}
            if not live:
                return self
            (name, timer), t = min(live.items(), key=lambda kv: (kv[1], kv[0]))
            del self.timers[(name, timer)]
            self.now = max(self.now, t)
            self._apply(name, self.nodes[name].handle(TimerFired(now=self.now, name=timer)))
        raise AssertionError("the loopback did not go quiet")

    def kinds(self, kind, node=None):
        return [r.fields for n, r in self.records if r.kind == kind and node in (None, n)]


# -- the hand computation -------------------------------------------------------------


def lloyd(X, centres, max_iter=1000):
    """Centralised Lloyd's k-means from ``centres`` to its fixed point: (centres, labels)."""
    centres = np.array(centres, dtype=np.float64)
    for _ in range(max_iter):
        labels = ((X[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2).argmin(axis=1)
        new = centres.copy()
        for j in range(len(centres)):
            if (labels == j).any():
                new[j] = X[labels == j].mean(axis=0)
        if np.array_equal(new, centres):
            return centres, labels
        centres = new
    raise AssertionError("Lloyd did not reach a fixed point")


def _init(records):
    """The root's initial centres (its ``init`` record)."""
    (init,) = records
    return init["state"]


def _check_is_lloyd(data, init, state, labels, used=None):
    """``state`` and the clients' ``labels`` are Lloyd's on the pooled data of ``used``."""
    used = range(len(data)) if used is None else used
    centres, _ = lloyd(np.vstack([data[i] for i in used]), init)
    np.testing.assert_allclose(state, centres, rtol=1e-12, atol=1e-12)
    for i, X in enumerate(data):  # every client labels its samples by the final centres
        want = ((X[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2).argmin(axis=1)
        np.testing.assert_array_equal(labels[i], want)


# -- the algorithm plug-in --------------------------------------------------------------


def test_the_page_has_its_examples():
    assert len(_blocks("python example")) == 5
    assert len(_blocks("python example-mqtt")) == 1


def test_simulated_kmeans_is_centralised_lloyd(doc):
    result = doc.result
    assert result["status"] == "converged"
    assert result["iterations"] == 5, "update the printed output in docs/architecture.md"
    init = _init([r["fields"] for r in doc.sim.records if r["kind"] == "init"])
    _check_is_lloyd(doc.data, init, result["state"], doc.labels)
    assert doc.sim.now > 0  # links and Compute took virtual time


@pytest.mark.parametrize("fogs", [None, [[0, 1], [2]], [[0], [1, 2]]])
def test_kmeans_through_a_loopback_flat_and_with_fogs(doc, fogs):
    lb = Loopback(doc.kmeans_federation(doc.data, k=3, fogs=fogs)).run()
    result = lb.results["cloud"]
    assert result["status"] == "converged"
    assert not lb.kinds("dropped") and not lb.kinds("late")
    if fogs is not None:  # partials went through the fogs
        fog_rounds = lb.kinds("aggregate", "fog-0")
        assert fog_rounds and all(r["ok"] for r in fog_rounds)
    labels = [lb.results[f"client-{i}"]["labels"] for i in range(len(doc.data))]
    _check_is_lloyd(doc.data, _init(lb.kinds("init", "cloud")), result["state"], labels)


def test_one_cluster_is_the_federated_mean(doc):
    lb = Loopback(doc.kmeans_federation(doc.data, k=1, fogs=[[0], [1, 2]])).run()
    want = np.vstack(doc.data).mean(axis=0)
    np.testing.assert_allclose(lb.results["cloud"]["state"], [want], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kind", ["async", "buffered"])
def test_kmeans_is_additive_enough_for_the_asynchronous_kinds(doc, kind):
    protocol = ProtocolConfig(run="kmeans", rule="sum", rounds=200, tol=1e-12, kind=kind)
    lb = Loopback(doc.kmeans_federation(doc.data, k=3, protocol=protocol)).run()
    result = lb.results["cloud"]
    assert result["status"] == "converged"
    labels = [lb.results[f"client-{i}"]["labels"] for i in range(len(doc.data))]
    _check_is_lloyd(doc.data, _init(lb.kinds("init", "cloud")), result["state"], labels)


def test_a_malformed_partial_is_dropped_not_fatal(doc):
    root, *_ = doc.kmeans_federation(doc.data, k=3)
    root.handle(Started(now=0.0))  # the setup round is open
    env = wire.Envelope(
        kind="update",
        run="kmeans",
        round=0,
        tier="edge",
        sender="client-0",
        body={"mode": "setup", "candidates": np.zeros((2, 5)), "n": 3},  # 5 features, not 2
    )
    topic = up_topic("kmeans", "cloud", "cloud", "client-0")
    effects = root.handle(Delivered(now=1.0, topic=topic, payload=wire.encode(env)))
    (record,) = effects
    assert record.kind == "dropped" and "candidates" in record.fields["reason"]


def test_nodes_look_the_plug_in_up_by_model_type(doc):
    root, *_, client = doc.kmeans_federation(doc.data, k=3)
    assert isinstance(root.algorithm, doc.FederatedKMeans)
    assert isinstance(client.learner, doc.KMeansLearner)
    assert root.algorithm.name == "kmeans/k=3"


# -- the protocol strategy ----------------------------------------------------------------


def test_first_replies_on_the_simulator(doc):
    rounds = [r for r in doc.rounds if r["phase"] == "iter"]
    assert [r["phase"] for r in doc.rounds[:1]] == ["setup"]
    assert doc.rounds[0]["participants"] == 3  # the setup round is not the strategy's
    assert rounds and all(r["participants"] == 2 and r["ok"] for r in rounds)
    assert {r["first"] for r in rounds} == {"client-0,client-1"}
    assert doc.late == ["client-2", "client-2"], "update the printed output in the page"
    result = doc.sim2.results["cloud"]
    assert result["status"] == "converged"
    init = _init([r["fields"] for r in doc.sim2.records if r["kind"] == "init"])
    labels = [doc.sim2.results[f"client-{i}"]["labels"] for i in range(3)]
    _check_is_lloyd(doc.data, init, result["state"], labels, used=[0, 1])


def test_first_replies_through_a_loopback(doc):
    strategy = doc.FirstReplies(["client-0", "client-1", "client-2"], k=2)
    lb = Loopback(doc.kmeans_federation(doc.data, k=3, strategy=strategy)).run()
    rounds = [r for r in lb.kinds("aggregate", "cloud") if r["phase"] == "iter"]
    firsts = {r["first"] for r in rounds}
    assert len(firsts) == 1 and all(r["participants"] == 2 for r in rounds)
    (first,) = firsts
    used = [int(c.rsplit("-", 1)[1]) for c in first.split(",")]
    (slow,) = {0, 1, 2} - set(used)
    assert {r["sender"] for r in lb.kinds("late", "cloud")} == {f"client-{slow}"}
    result = lb.results["cloud"]
    labels = [lb.results[f"client-{i}"]["labels"] for i in range(3)]
    _check_is_lloyd(doc.data, _init(lb.kinds("init", "cloud")), result["state"], labels, used)


# -- over a real broker -------------------------------------------------------------------


@pytest.mark.broker
@pytest.mark.timeout(120)
def test_the_mqtt_block_computes_the_simulated_centres(doc):
    from fedstrata.broker.launcher import find_mosquitto
    from fedstrata.errors import TransportError

    try:
        find_mosquitto()
    except TransportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {exc}")
        pytest.skip(str(exc))
    _exec(doc, "python example-mqtt")
    assert doc.results["cloud"]["status"] == "converged"
    np.testing.assert_array_equal(doc.results["cloud"]["state"], doc.result["state"])
    for i in range(len(doc.data)):
        np.testing.assert_array_equal(doc.results[f"client-{i}"]["labels"], doc.labels[i])
