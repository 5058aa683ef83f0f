"""Structure-aware fuzzing of the nodes' ``handle``: mutations of genuine messages.

Small simulated federations run to the end (plain, signed, compressed, SecAgg and
SecAgg+ at one and two tiers, the median rule, the adaptive protocol, the tensor and
deep families, personalization). While they run, every node's ``handle`` is wrapped:
the first few deliveries of each kind of message (node role x topic x envelope kind x
phase / secagg type) are *captured* together with a deep copy of the receiving node
taken just before the delivery, and the sender's seal. A fuzz case then takes one
capture, mutates the decoded body (a field replaced by a value of another type, a
wrong-shape array, NaN/inf/huge numbers, keys deleted or added, nested mutations in
lists and maps, the envelope's kind/round/sender), re-encodes and, when signing is
on, re-signs it with the sender's key, so the mutation reaches body parsing, and hands
it to a fresh copy of the node in the state where the genuine message arrived.

The one property: ``handle`` returns a list of effects and raises nothing. Every
exception is an *escape*, counted by the innermost ``fedstrata`` source line it
came from.

Usage::

    python benchmarks/fuzz_handle.py --cases 1000000      # the long run
    python benchmarks/fuzz_handle.py --smoke              # a few thousand cases

Prints the captures per role, the cases, the escapes by site and the cases per second;
exits 1 when anything escaped. ``tests/nodes/test_fuzz_handle.py`` runs a bounded
sample of the same cases in the suite.
"""

from __future__ import annotations

import argparse
import copy
import copyreg
import math
import pickle
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedstrata import wire
from fedstrata.errors import WireError
from fedstrata.nodes.aggregator import AggregatorNode
from fedstrata.nodes.client import ClientNode
from fedstrata.nodes.events import Delivered, TimerFired
from fedstrata.scenarios.build import build_federation
from fedstrata.scenarios.loader import parse_scenario

SIGNATURE_BYTES = 64

_COMMON = """
seed: {seed}
data: {{dataset: heat-kernel-synthetic, params: {{n_per_cluster: 20}}, partition: {{kind: iid}}}}
"""

#: name -> scenario YAML (without name/seed/data, which _COMMON adds unless given)
SCENARIOS: dict[str, str] = {
    "flat-sum-signed": """
topology: {clients: {count: 3}}
algorithm: {name: hk-mvfc, n_clusters: 3}
protocol: {rule: sum, rounds: 3, deadline_s: 10}
privacy: {sign: true}
""",
    "fog-weighted-qsgd": """
topology:
  tiers: [{name: fog, count: 2, period: 2}]
  clients: {count: 4}
algorithm: {name: hk-mvfc, n_clusters: 3}
protocol: {rule: weighted, rounds: 3, deadline_s: 10, compression: {scheme: qsgd, bits: 4}}
""",
    "flat-median-float16": """
topology: {clients: {count: 3}}
algorithm: {name: mvfcm, n_clusters: 3}
protocol: {rule: median, rounds: 2, deadline_s: 10, compression: {scheme: float16}}
""",
    "adaptive-fog": """
topology:
  tiers: [{name: fog, count: 2}]
  clients: {count: 4}
algorithm: {name: hk-mvfc, n_clusters: 3}
protocol: {kind: adaptive, rule: sum, rounds: 3, deadline_s: 10}
""",
    "secagg-flat-signed": """
topology: {clients: {count: 4}}
algorithm: {name: hk-mvfc, n_clusters: 3}
protocol: {rule: sum, rounds: 2, deadline_s: 10}
privacy: {secure_aggregation: secagg, sign: true}
""",
    "secagg-plus-fog": """
topology:
  tiers: [{name: fog, count: 3}]
  clients: {count: 9}
algorithm: {name: hk-mvfc, n_clusters: 3}
protocol: {rule: sum, rounds: 2, deadline_s: 10}
privacy: {secure_aggregation: secagg+, neighbours: 2}
""",
    "tensor-secagg": """
topology: {clients: {count: 4}}
algorithm: {name: e-fkmvc, n_clusters: 3, eps_a: 0.05, eps_v: 0.05}
protocol: {rule: sum, rounds: 2, deadline_s: 10}
privacy: {secure_aggregation: secagg}
""",
    "tensor-person": """
topology: {clients: {count: 3}}
algorithm: {name: fedhk-mvc-person, n_clusters: 3, decomposition: tucker, ranks: [3, 2, 2],
            local_epochs: 1}
protocol: {rule: sum, rounds: 2, deadline_s: 10}
""",
    "personalized": """
topology: {clients: {count: 3}}
algorithm: {name: hk-mvfc, n_clusters: 3}
protocol: {rule: sum, rounds: 2, deadline_s: 10, personalization: {local_iters: 2}}
""",
    "async-weighted": """
topology: {clients: {count: 4}}
algorithm: {name: hk-mvfc, n_clusters: 3}
protocol: {kind: async, rule: weighted, rounds: 6, deadline_s: 10}
""",
    "buffered-fog": """
topology:
  tiers: [{name: fog, count: 2}]
  clients: {count: 4}
algorithm: {name: hk-mvfc, n_clusters: 3}
protocol: {kind: buffered, rule: mean, rounds: 4, deadline_s: 10, buffer_size: 2}
""",
    "deep-efd-fog": """
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 10}}
topology:
  tiers: [{name: fog, count: 2}]
  clients: {count: 4}
algorithm: {name: efd-mvc, n_clusters: 3, hidden: [8], latent: 4, train_rounds: 1,
            local_epochs: 1, kmeans_rounds: 2, pretrain_rounds: 1}
protocol: {rounds: 6, deadline_s: 10}
""",
    "deep-fmcsc": """
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 10},
       views: {all: 0.5, single: 0.5}}
topology: {clients: {count: 3}}
algorithm: {name: fmcsc, n_clusters: 3, hidden: [8], latent: 4, train_rounds: 1,
            local_epochs: 1, copy_epochs: 1, mi_bins: 4, kmeans_rounds: 2, pretrain_rounds: 1}
protocol: {rounds: 6, deadline_s: 10}
""",
}


# ------------------------------------------------------------------------- capture


@dataclass
class Capture:
    """A genuine delivery: the node just before it, the event, and how to re-sign."""

    scenario: str
    role: str  # client, middle, root
    label: str  # role/topic/kind/phase-or-type
    snapshot: Any  # the pickled node before the delivery (or a deep copy of it)
    topic: str
    env: wire.Envelope
    signer: Any  # the sender's Seal (None: plain)
    now: float

    def node(self) -> Any:
        """A fresh copy of the node in the state where the genuine message arrived."""
        if isinstance(self.snapshot, bytes):
            return pickle.loads(self.snapshot)
        return copy.deepcopy(self.snapshot)


def _role(node: Any) -> str:
    if isinstance(node, ClientNode):
        return "client"
    if isinstance(node, AggregatorNode):
        return "root" if node.is_root else "middle"
    return type(node).__name__


def _bare(payload: bytes) -> tuple[wire.Envelope, bool] | None:
    """The envelope of a payload, and whether it was signed (None: not an envelope)."""
    try:
        return wire.decode(payload), False
    except WireError:
        pass
    try:
        return wire.decode(payload[SIGNATURE_BYTES:]), True
    except WireError:
        return None


def _topic_part(topic: str) -> str:
    # a per-member topic (``to/<node>``, ``up/<node>``) is labelled by its kind, not its node
    parts = topic.split("/")
    return parts[-2] if len(parts) >= 2 and parts[-2] in ("to", "up") else parts[-1]


def _label(role: str, topic: str, env: wire.Envelope) -> str:
    body = env.body
    what = body.get("phase") or body.get("type") or body.get("mode") or ""
    if isinstance(body.get("secagg"), dict):
        what = f"{what}+secagg"
    if "compression" in body:
        what = f"{what}+{body['compression']}"
    return f"{role}/{_topic_part(topic)}/{env.kind}/{what}"


def _scratch_pickles() -> None:
    """Per-thread scratch buffers (a ``threading.local``) pickle as a fresh, empty one."""
    try:
        from fedstrata.algorithms.multiview import _Workspace
    except ImportError:  # another layout of the cache: nothing to teach pickle
        return
    copyreg.pickle(_Workspace, lambda _w: (_Workspace, ()))


_scratch_pickles()


def _snapshot(node: Any) -> Any:
    """The node pickled (fast to copy), or deep-copied when it does not pickle."""
    try:
        return pickle.dumps(node)
    except (TypeError, AttributeError, pickle.PicklingError):
        return copy.deepcopy(node)


def capture(name: str, text: str, *, seed: int = 1, per_label: int = 2) -> list[Capture]:
    """Run scenario ``name`` and capture up to ``per_label`` deliveries of each kind."""
    body = text if "data:" in text else _COMMON.format(seed=seed) + text
    if "seed:" not in body:
        body = f"seed: {seed}\n" + body
    sc = parse_scenario(f"name: fuzz-{name}\n" + body)
    fed = build_federation(sc)
    sim = fed.sim
    nodes = {nid: ns.node for nid, ns in sim.engine.nodes.items()}
    seals = {nid: getattr(n, "_seal", None) for nid, n in nodes.items()}
    counts: Counter[str] = Counter()
    out: list[Capture] = []

    def wrap(node: Any) -> None:
        original = node.handle

        def handle(event: Any) -> Any:
            if isinstance(event, Delivered):
                got = _bare(event.payload)
                if got is not None:
                    env, signed = got
                    label = _label(_role(node), event.topic, env)
                    if counts[label] < per_label:
                        counts[label] += 1
                        del node.__dict__["handle"]  # the copy must not hold the wrapper
                        try:
                            snapshot = _snapshot(node)
                        finally:
                            node.handle = handle
                        signer = seals.get(env.sender) if signed else None
                        out.append(
                            Capture(
                                name,
                                _role(node),
                                label,
                                snapshot,
                                event.topic,
                                env,
                                signer,
                                event.now,
                            )
                        )
            return original(event)

        node.handle = handle

    for node in nodes.values():
        wrap(node)
    sim.run()
    for node in nodes.values():
        node.__dict__.pop("handle", None)
    return out


def capture_all(names: list[str] | None = None, per_label: int = 2) -> list[Capture]:
    """Captures of every scenario of :data:`SCENARIOS` (or those named)."""
    out: list[Capture] = []
    for name, text in SCENARIOS.items():
        if names is None or name in names:
            out += capture(name, text, per_label=per_label)
    return out


# ------------------------------------------------------------------------ mutation

#: Field names the node core and SecAgg route on; added keys are drawn from these too.
ROUTING = (
    "phase",
    "mode",
    "type",
    "session",
    "sub",
    "ask",
    "config",
    "compression",
    "secagg",
    "quorum",
    "roster",
    "n",
    "contributors",
    "objective",
    "extras",
    "masked",
    "refs",
    "init",
    "init_w",
    "items",
)

_STRINGS = (
    "setup",
    "iter",
    "final",
    "stats",
    "params",
    "items",
    "secagg/setup",
    "secagg/keys",
    "secagg/shares",
    "secagg/masked",
    "secagg/reveal",
    "float16",
    "qsgd4",
    "qsgd99",
    "none",
    "",
    "x" * 300,
)


def _values(rng: np.random.Generator) -> Any:
    """One replacement value of a random type."""
    k = int(rng.integers(26))
    if k == 0:
        return rng.standard_normal(int(rng.integers(0, 5)))
    if k == 1:
        return rng.standard_normal((int(rng.integers(1, 4)), int(rng.integers(1, 4))))
    if k == 2:
        return np.array(["a"] * 0 + [1, 2, 3], dtype=np.int64)
    if k == 3:
        return np.zeros(3, dtype=np.uint64) + np.uint64(2**63)
    if k == 4:
        return np.array([True, False])
    if k == 5:
        return [1, 2]
    if k == 6:
        return [str(rng.integers(3))]
    if k == 7:
        return {}
    if k == 8:
        return {"a": 1, "phase": "iter"}
    if k == 9:
        return str(_STRINGS[int(rng.integers(len(_STRINGS)))])
    if k == 10:
        return bytes(int(rng.integers(0, 40)))
    if k == 11:
        return None
    if k == 12:
        return bool(rng.integers(2))
    if k == 13:
        return int(rng.choice([0, 1, -1, 2, 7, 2**31, 2**63 - 1, -(2**63), 2**64 - 1]))
    if k == 14:
        return float(rng.choice([math.nan, math.inf, -math.inf, 1e308, -1e308, 0.0, -0.0]))
    if k == 15:
        return 0.5
    if k == 16:
        return np.full(int(rng.integers(1, 6)), np.nan)
    if k == 17:
        return np.full(int(rng.integers(1, 6)), 1e308)
    if k == 18:
        return [None, None]
    if k == 19:
        return [[1.0]]
    if k == 20:
        return {"min": np.zeros(2), "max": np.ones(2), "sum": np.ones(2), "count": 3}
    if k == 21:
        return np.zeros(0)
    if k == 22:
        return np.zeros((0, 3))
    if k == 23:
        return ["setup", "iter"]
    if k == 24:
        return np.array(5.0)  # a 0-d array
    return -1.5


def _reshape(value: np.ndarray, rng: np.random.Generator) -> Any:
    """The array with a wrong shape, dtype or content."""
    k = int(rng.integers(7))
    if k == 0 and value.size:
        return value.ravel()[:-1]
    if k == 1:
        return np.concatenate([value.ravel(), value.ravel()[:1]])
    if k == 2:
        return value.T.copy() if value.ndim == 2 else value.reshape(1, -1)
    if k == 3:
        return value.astype(np.float32) if value.dtype != np.float32 else value.astype(np.int8)
    if k == 4 and value.size:
        out = value.astype(np.float64) if value.dtype.kind not in "fu" else value.copy()
        flat = out.reshape(-1)
        flat[int(rng.integers(flat.size))] = (
            np.nan if out.dtype.kind == "f" else np.iinfo(out.dtype).max
        )
        return out
    if k == 5:
        return -np.abs(value.astype(np.float64)) - 1.0
    return value[..., None]


def _same_type(value: Any, rng: np.random.Generator) -> Any:
    """Another value of ``value``'s type: bounds, sizes and shapes are what fails."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return int(rng.choice([0, 1, -1, 2, 3, 10**6, 2**31, 2**62, -(2**62), value + 1]))
    if isinstance(value, float):
        return float(rng.choice([math.nan, math.inf, -math.inf, 1e308, -1e308, 0.0, -value, 1.0]))
    if isinstance(value, str):
        return str(_STRINGS[int(rng.integers(len(_STRINGS)))])
    if isinstance(value, bytes):
        k = int(rng.integers(3))
        if k == 0 and value:
            return value[:-1]
        if k == 1:
            return value + b"\x00"
        return bytes(b ^ 0xFF for b in value)
    if isinstance(value, np.ndarray):
        return _reshape(value, rng)
    if isinstance(value, list):
        return value[:-1] if value and rng.random() < 0.5 else value + value[:1]
    if isinstance(value, dict) and value:
        out = dict(value)
        out.pop(list(out)[int(rng.integers(len(out)))])
        return out
    return _values(rng)


def _paths(value: Any, prefix: tuple[Any, ...] = (), depth: int = 0) -> Iterator[tuple[Any, ...]]:
    """Every path (key or index sequence) into a body, containers first."""
    if depth > 5:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from _paths(item, (*prefix, key), depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value[:8]):
            yield (*prefix, i)
            yield from _paths(item, (*prefix, i), depth + 1)


def _get(root: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        root = root[p]
    return root


def mutate_body(body: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """A mutated deep copy of ``body`` (one to three mutations)."""
    out = copy.deepcopy(body)
    for _ in range(int(rng.integers(1, 4))):
        paths = list(_paths(out))
        op = int(rng.integers(10))
        if op == 0 or not paths:  # add a key (routing names first) at the top or nested
            maps = [()] + [p for p in paths if isinstance(_get(out, p), dict)]
            where = _get(out, maps[int(rng.integers(len(maps)))])
            key = ROUTING[int(rng.integers(len(ROUTING)))] if rng.random() < 0.8 else "zz"
            where[key] = _values(rng)
            continue
        path = paths[int(rng.integers(len(paths)))]
        parent = _get(out, path[:-1])
        current = parent[path[-1]]
        if op == 1 and isinstance(parent, dict):
            del parent[path[-1]]
        elif op == 2 and isinstance(current, np.ndarray):
            parent[path[-1]] = _reshape(current, rng)
        elif op == 3 and isinstance(current, list) and current:
            if rng.random() < 0.5:
                current.pop(int(rng.integers(len(current))))
            else:
                current.append(copy.deepcopy(current[0]))
        elif op in (5, 6):  # the same type, another value: reaches past the schema
            parent[path[-1]] = _same_type(current, rng)
        elif op == 4:  # a routing field replaced by anything
            names = [p for p in paths if p[-1] in ROUTING]
            if names:
                path = names[int(rng.integers(len(names)))]
                _get(out, path[:-1])[path[-1]] = _values(rng)
            else:
                parent[path[-1]] = _values(rng)
        else:
            parent[path[-1]] = _values(rng)
    return out


def mutate_envelope(env: wire.Envelope, rng: np.random.Generator) -> wire.Envelope:
    """The envelope with its body, or (1 in 8) one of its header fields, mutated."""
    if rng.random() < 0.125:
        k = int(rng.integers(4))
        if k == 0:
            return wire.Envelope(
                kind=str(rng.choice(sorted(wire.KINDS))),
                run=env.run,
                round=env.round,
                tier=env.tier,
                sender=env.sender,
                body=env.body,
            )
        if k == 1:
            r = int(rng.choice([-1, 0, env.round + 1, env.round - 1, 2**62, -(2**62)]))
            return wire.Envelope(
                kind=env.kind, run=env.run, round=r, tier=env.tier, sender=env.sender, body=env.body
            )
        if k == 2:
            return wire.Envelope(
                kind=env.kind,
                run=env.run + "-other",
                round=env.round,
                tier=env.tier,
                sender=env.sender,
                body=mutate_body(env.body, rng),
            )
        return wire.Envelope(
            kind=env.kind,
            run=env.run,
            round=env.round,
            tier=env.tier,
            sender=str(rng.choice(["nobody", "", env.sender + "x"])),
            body=env.body,
        )
    return wire.Envelope(
        kind=env.kind,
        run=env.run,
        round=env.round,
        tier=env.tier,
        sender=env.sender,
        body=mutate_body(env.body, rng),
    )


def payload_of(cap: Capture, env: wire.Envelope) -> bytes | None:
    """The mutant's bytes, signed with the sender's key when the original was signed."""
    try:
        raw = wire.encode(env)
    except WireError:
        return None  # not representable on the wire (e.g. an int beyond 64 bits)
    if cap.signer is None or getattr(cap.signer, "keys", None) is None:
        return raw
    try:  # the signature binds the topic it is published on
        return cap.signer.wrap(raw, cap.topic)
    except TypeError:  # a seal of before topic binding (the fuzzer also runs on old trees)
        return cap.signer.wrap(raw)


# --------------------------------------------------------------------------- cases


def _site(exc: BaseException) -> str:
    """The innermost fedstrata source line of a traceback, and the exception type."""
    site = "?"
    for frame in traceback.extract_tb(exc.__traceback__):
        if "/fedstrata/" in frame.filename:
            path = frame.filename.split("/fedstrata/", 1)[1]
            site = f"{path}:{frame.lineno}"
    return f"{site} {type(exc).__name__}"


@dataclass
class Report:
    """Counts of one fuzz run."""

    cases: int = 0
    skipped: int = 0  # mutants the wire cannot carry
    escapes: Counter[str] = field(default_factory=Counter)
    by_role: Counter[str] = field(default_factory=Counter)
    escapes_by_role: Counter[str] = field(default_factory=Counter)
    effects: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)


def transplant(cap: Capture, donors: list[Capture], rng: np.random.Generator) -> wire.Envelope:
    """``cap``'s header with the (maybe mutated) body of another genuine message.

    A well-formed body of another phase, mode or secagg step, where the node expects
    this one: it passes the schema and must be refused by the protocol's own logic.
    """
    donor = donors[int(rng.integers(len(donors)))]
    body = donor.env.body if rng.random() < 0.5 else mutate_body(donor.env.body, rng)
    kind = donor.env.kind if rng.random() < 0.5 else cap.env.kind
    return wire.Envelope(
        kind=kind,
        run=cap.env.run,
        round=cap.env.round,
        tier=cap.env.tier,
        sender=cap.env.sender,
        body=copy.deepcopy(body),
    )


def run_case(
    cap: Capture,
    rng: np.random.Generator,
    report: Report,
    donors: list[Capture] | None = None,
) -> None:
    """One mutant of ``cap`` handed to a fresh copy of its node; counts what came out.

    ``donors``: genuine messages of the same federation whose bodies may be
    transplanted into ``cap`` (1 case in 8).
    """
    try:
        if donors and rng.random() < 0.125:
            env = transplant(cap, donors, rng)
        else:
            env = mutate_envelope(cap.env, rng)
    except WireError:  # an envelope header the wire refuses (e.g. an empty sender)
        report.skipped += 1
        return
    payload = payload_of(cap, env)
    if payload is None:
        report.skipped += 1
        return
    node = cap.node()
    report.cases += 1
    report.by_role[cap.role] += 1
    try:
        effects = node.handle(Delivered(now=cap.now, topic=cap.topic, payload=payload))
        if not isinstance(effects, list):
            raise TypeError(f"handle returned {type(effects).__name__}, not a list")
        if isinstance(node, AggregatorNode):
            # what the mutant left in the node is read when the round closes: the
            # deadline fires (each secure phase has its own), nothing may escape then
            now = cap.now
            for _ in range(5):
                now += 1e4
                more = node.handle(TimerFired(now=now, name="deadline"))
                if not isinstance(more, list):
                    raise TypeError(f"handle returned {type(more).__name__}, not a list")
                effects += more
    except Exception as exc:  # the property under test: nothing escapes
        site = _site(exc)
        report.escapes[site] += 1
        report.escapes_by_role[cap.role] += 1
        report.examples.setdefault(site, f"{cap.label}: {exc!s:.160}")
        return
    for eff in effects:
        kind = getattr(eff, "kind", type(eff).__name__)
        report.effects[kind] += 1


def fuzz(
    captures: list[Capture],
    cases: int,
    *,
    seed: int = 0,
    progress: Callable[[Report], None] | None = None,
) -> Report:
    """Run ``cases`` mutants, round robin over the captures (each its own seeded stream)."""
    rng = np.random.default_rng(seed)
    report = Report()
    order = np.arange(len(captures))
    last = -1
    donors: dict[str, list[Capture]] = {}
    for cap in captures:
        donors.setdefault(cap.scenario, []).append(cap)
    i = 0
    while report.cases < cases:
        if i % len(captures) == 0:
            rng.shuffle(order)
        cap = captures[order[i % len(captures)]]
        run_case(cap, rng, report, donors[cap.scenario])
        i += 1
        if progress is not None and report.cases % 10_000 == 0 and report.cases != last:
            last = report.cases
            progress(report)
    return report


def print_report(report: Report, seconds: float, out: Any = sys.stdout) -> None:
    """The figures: cases, escapes (total and by site), per role, cases per second."""
    total = sum(report.escapes.values())
    print(f"cases: {report.cases}  (unencodable mutants skipped: {report.skipped})", file=out)
    print(f"escapes: {total}", file=out)
    for site, n in report.escapes.most_common():
        print(f"  {n:8d}  {site}   e.g. {report.examples[site]}", file=out)
    for role, n in sorted(report.by_role.items()):
        print(f"role {role}: {n} cases, {report.escapes_by_role[role]} escapes", file=out)
    top = ", ".join(f"{k}={v}" for k, v in report.effects.most_common(8))
    print(f"effects: {top}", file=out)
    rate = report.cases / seconds if seconds > 0 else float("nan")
    print(f"seconds: {seconds:.1f}  cases/s: {rate:.0f}", file=out)


def main(argv: list[str] | None = None) -> int:
    """Command line: capture, fuzz, print; exit 1 when anything escaped."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="2,000 cases on every capture")
    ap.add_argument("--scenarios", nargs="*", help="only these scenarios")
    ap.add_argument("--per-label", type=int, default=2)
    args = ap.parse_args(argv)
    cases = 2_000 if args.smoke else args.cases
    t0 = time.perf_counter()
    captures = capture_all(args.scenarios, per_label=args.per_label)
    t1 = time.perf_counter()
    labels = Counter(c.role for c in captures)
    print(
        f"captured {len(captures)} genuine deliveries ({len(set(c.label for c in captures))} "
        f"kinds) from {len(set(c.scenario for c in captures))} scenarios in {t1 - t0:.1f} s: "
        + ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
    )

    shown: set[str] = set()

    def progress(r: Report) -> None:
        el = time.perf_counter() - t1
        print(
            f"  .. {r.cases} cases, {sum(r.escapes.values())} escapes, {r.cases / el:.0f} cases/s",
            flush=True,
        )
        for site in sorted(set(r.escapes) - shown):  # a long run shows a new site at once
            print(f"  .. new escape site {site}: {r.examples[site]}", flush=True)
            shown.add(site)

    report = fuzz(captures, cases, seed=args.seed, progress=progress)
    print_report(report, time.perf_counter() - t1)
    return 1 if report.escapes else 0


if __name__ == "__main__":
    # overflow in mutants (1e308 sums, casts) is the input, not news
    warnings.simplefilter("ignore", RuntimeWarning)
    sys.exit(main())
