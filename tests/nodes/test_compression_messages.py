"""Compressed partials: encode/decode hooks of the messages, and malformed ones dropped."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstrata import wire
from fedstrata.algorithms.combine import ParamUpdate
from fedstrata.algorithms.compression import levels
from fedstrata.algorithms.multiview import MultiViewModel, Stats
from fedstrata.errors import ValidationError, WireError
from fedstrata.nodes.aggregator import AggregatorNode
from fedstrata.nodes.client import ClientNode
from fedstrata.nodes.config import Address, ProtocolConfig
from fedstrata.nodes.events import Delivered, Publish, Record
from fedstrata.plugins.messages import (
    Shape,
    add_partials,
    check_partial,
    compress_partial,
    decompress_partial,
    params_partial,
    stats_partial,
    sum_partials,
)

from .helpers import Loopback

SHAPE = Shape(3, (2, 4))
SCHEMES = [("float32", 8), ("float16", 8), ("qsgd", 8), ("qsgd", 5), ("qsgd", 2)]


def _stats(rng, scale=50.0):
    return Stats(
        center_num=tuple(rng.normal(size=(3, d)) * scale for d in SHAPE.dims),
        center_den=tuple(rng.random((3, d)) * scale for d in SHAPE.dims),
        view_costs=rng.random(2) * scale,
        cluster_mass=rng.random(3) * scale,
        view_counts=np.array([40, 40]),
        n_samples=40,
    )


def _update(rng, held=(True, True)):
    centers = tuple(
        rng.normal(size=(3, d)) if h else None for d, h in zip(SHAPE.dims, held, strict=True)
    )
    v = rng.dirichlet(np.ones(2)) * np.array(held)
    return ParamUpdate(centers, v / v.sum(), 17, objective=3.5)


def _wire(body):
    env = wire.Envelope(kind="update", run="r", round=1, tier="edge", sender="c", body=body)
    return wire.decode(wire.encode(env)).body


def _arrays(body):
    """Every float array of a decoded partial, by field path."""
    out = {}
    for key, value in body.items():
        if isinstance(value, list) and key != "items":
            out.update({f"{key}[{h}]": a for h, a in enumerate(value) if a is not None})
        elif isinstance(value, np.ndarray) and key != "counts":
            out[key] = value
    for i, item in enumerate(body.get("items", [])):
        out.update({f"items[{i}].{k}": v for k, v in _arrays(item).items()})
    return out


def _bound(scheme, bits, x):
    """Largest |decoded - x| the scheme allows for array x."""
    if scheme == "float32":
        return 2.0**-24 * np.abs(x) + 1e-45
    if scheme == "float16":
        return 2.0**-11 * np.abs(x) + 2.0**-25
    return np.abs(x).max() / levels(bits) * (1 + 1e-9) + np.zeros_like(x)


@pytest.mark.parametrize(("scheme", "bits"), SCHEMES)
@pytest.mark.parametrize("mode", ["stats", "weighted", "mean", "median", "hybrid"])
def test_compressed_partial_decodes_in_place_to_float64(scheme, bits, mode):
    rng = np.random.default_rng(1)
    if mode == "stats":
        plain = stats_partial(_stats(rng), objective=12.5)
    else:
        rule = "weighted" if mode == "hybrid" else mode
        held = (True, False) if mode == "hybrid" else (True, True)
        plain = params_partial(_update(rng, held), rule)
    plain["sub"] = 2
    body, info = compress_partial(plain, scheme, bits=bits, rng=np.random.default_rng(0))
    assert body is not plain and "compression" not in plain  # the input is untouched
    assert body["compression"] == (f"qsgd{bits}" if scheme == "qsgd" else scheme)
    got = _wire(body)
    mode_name = check_partial(got, SHAPE)
    assert mode_name == plain["mode"] and "compression" not in got
    assert got["sub"] == 2 and got["n"] == plain["n"] and got["objective"] == plain["objective"]
    want = _arrays(plain)
    have = _arrays(got)
    assert set(have) == set(want)
    worst = 0.0
    for key, x in want.items():
        x = np.asarray(x, dtype=np.float64)
        assert have[key].dtype == np.float64 and have[key].shape == x.shape, key
        assert (np.abs(have[key] - x) <= _bound(scheme, bits, x)).all(), key
        worst = max(worst, float(np.linalg.norm(have[key] - x) / np.linalg.norm(x)))
    assert info["rel_error"] == pytest.approx(worst, rel=1e-12, abs=1e-300)
    assert info["fallbacks"] == 0
    if mode == "stats":  # integers stay exact
        assert got["counts"].dtype == np.int64 and (got["counts"] == 40).all()
    # what a sum sees: float64 only, and a second check is a no-op
    total = sum_partials([got, got])
    assert all(a.dtype == np.float64 for a in _arrays(total).values())
    assert check_partial(got, SHAPE) == mode_name


def test_none_is_the_plain_partial_byte_for_byte():
    plain = stats_partial(_stats(np.random.default_rng(0)))
    body, info = compress_partial(plain, "none")
    assert body is plain and info == {"rel_error": 0.0, "fallbacks": 0}


def test_float16_overflow_is_a_counted_fallback_not_an_inf():
    stats = _stats(np.random.default_rng(0), scale=1e5)  # beyond float16's 65504
    body, info = compress_partial(stats_partial(stats), "float16")
    assert info["fallbacks"] >= 1
    got = _wire(body)
    check_partial(got, SHAPE)
    np.testing.assert_allclose(got["num"][0], stats.center_num[0], rtol=2.0**-11)
    assert all(np.isfinite(a).all() for a in _arrays(got).values())


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 6), bits=st.integers(2, 8))
def test_sum_of_qsgd_partials_is_within_the_sum_of_steps(seed, k, bits):
    rng = np.random.default_rng(seed)
    stats = [_stats(rng) for _ in range(k)]
    plain = [stats_partial(s) for s in stats]
    sent = [_wire(compress_partial(p, "qsgd", bits=bits, rng=rng)[0]) for p in plain]
    total = add_partials(sent, SHAPE)
    exact = sum_partials(plain)
    for h in range(SHAPE.n_views):
        slack = sum(np.abs(p["num"][h]).max() for p in plain) / levels(bits) * (1 + 1e-9)
        assert (np.abs(total["num"][h] - exact["num"][h]) <= slack).all()


# ------------------------------------------------------------------------------ malformed


def _sent(scheme="qsgd", bits=8, mode="stats"):
    rng = np.random.default_rng(3)
    plain = (
        stats_partial(_stats(rng))
        if mode == "stats"
        else params_partial(_update(rng, (True, False)), mode)
    )
    return _wire(compress_partial(plain, scheme, bits=bits, rng=rng)[0])


def _set(path, value):
    """A tampering: ``path`` is a list of keys/indices into the body."""

    def apply(body):
        target = body
        for step in path[:-1]:
            target = target[step]
        if value is _DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value(target[path[-1]]) if callable(value) else value
        return body

    return apply


_DELETE = object()

MALFORMED = {
    "unknown tag": ("qsgd", 8, "stats", _set(["compression"], "qsgd9")),
    "tag none": ("qsgd", 8, "stats", _set(["compression"], "none")),
    "tag not a str": ("qsgd", 8, "stats", _set(["compression"], 8)),
    "tag of another scheme": ("qsgd", 8, "stats", _set(["compression"], "float16")),
    "tag bits mismatch": ("qsgd", 8, "stats", _set(["compression"], "qsgd4")),
    "code above 2L": ("qsgd", 8, "stats", _set(["num", 0, "q"], lambda q: q | 255)),
    "code above 2L, 2 bits": ("qsgd", 2, "stats", _set(["den", 1, "q"], lambda q: q | 0b11)),
    "padding bits": ("qsgd", 3, "stats", _set(["mass", "q"], lambda q: q | 0x80)),
    "scale NaN": ("qsgd", 8, "stats", _set(["costs", "s"], math.nan)),
    "scale inf": ("qsgd", 8, "stats", _set(["num", 1, "s"], math.inf)),
    "scale negative": ("qsgd", 8, "stats", _set(["den", 0, "s"], -1.0)),
    "scale an int": ("qsgd", 8, "stats", _set(["den", 0, "s"], 2)),
    "scale missing": ("qsgd", 8, "stats", _set(["den", 0, "s"], _DELETE)),
    "codes wrong dtype": (
        "qsgd",
        8,
        "stats",
        _set(["num", 0, "q"], lambda q: q.astype(np.uint16)),
    ),
    "codes too short": ("qsgd", 8, "stats", _set(["num", 0, "q"], lambda q: q[:-1])),
    "plain float64 in a qsgd body": (
        "qsgd",
        8,
        "stats",
        _set(["mass"], np.ones(3)),
    ),
    "field missing": ("qsgd", 8, "stats", _set(["mass"], _DELETE)),
    "list too short": ("qsgd", 8, "stats", _set(["num"], lambda v: v[:1])),
    "None where stats need an array": ("qsgd", 8, "stats", _set(["num", 0], None)),
    "float16 inf pattern": (
        "float16",
        8,
        "stats",
        _set(["num", 0], lambda a: np.full_like(a, 0x7C00)),
    ),
    "float16 wrong dtype": (
        "float16",
        8,
        "stats",
        _set(["num", 0], lambda a: a.astype(np.int32)),
    ),
    "float16 wrong shape": ("float16", 8, "stats", _set(["costs"], lambda a: a[:1])),
    "float32 NaN": ("float32", 8, "stats", _set(["mass"], lambda a: np.full_like(a, np.nan))),
    "float32 int array": ("float32", 8, "stats", _set(["mass"], lambda a: a.astype(np.int64))),
    "params wheld garbage": ("qsgd", 8, "weighted", _set(["wheld", "q"], lambda q: q | 255)),
    "params wcenters shape": (
        "float16",
        8,
        "weighted",
        _set(["wcenters", 0], lambda a: a[:, :1].copy()),
    ),
    "items centers garbage": (
        "qsgd",
        4,
        "median",
        _set(["items", 0, "centers", 0, "s"], -2.0),
    ),
    "items not maps": ("qsgd", 4, "median", _set(["items"], [1])),
    "unknown mode": ("qsgd", 8, "stats", _set(["mode"], "setup")),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_compressed_partials_raise_wire_error(case):
    scheme, bits, mode, tamper = MALFORMED[case]
    body = tamper(_sent(scheme, bits, mode))
    before = {k: body[k] for k in body}
    with pytest.raises(WireError):
        check_partial(body, SHAPE)
    assert body.keys() == before.keys() and all(body[k] is before[k] for k in body)
    with pytest.raises(WireError):
        decompress_partial(body, SHAPE) if "compression" in body else check_partial(body, SHAPE)


def test_decode_errors_are_wire_errors_not_validation_errors():
    body = _sent()
    body["mass"]["s"] = math.nan
    with pytest.raises(WireError, match="mass") as info:
        check_partial(body, SHAPE)
    assert isinstance(info.value, ValidationError) is False


# ------------------------------------------------------------------------------ nodes


def _blobs(n_per=40, seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(3), n_per)
    c1 = np.array([[0, 0], [6, 0], [0, 6]], float)
    c2 = np.array([[0, 0, 0, 0], [5, 5, 5, 5], [-5, 5, 0, 0]], float)
    return [c1[y] + rng.normal(0, 0.5, (y.size, 2)), c2[y] + rng.normal(0, 0.5, (y.size, 4))], y


def _is_client(node):
    return node[:1] == "c" and node[1:].isdigit()


def _federation(scheme="qsgd", bits=8, *, rule="sum", fogs=False, n_clients=2):
    views, y = _blobs()
    parts = np.array_split(np.arange(len(y)), n_clients)
    model = MultiViewModel(3)
    proto = ProtocolConfig(
        run="t",
        rule=rule,
        rounds=15,
        local_iters=1 if rule == "sum" else 3,
        kernel_scope="global" if rule == "sum" else "local",
        compression=scheme,
        compression_bits=bits,
    )
    clients = [f"c{i}" for i in range(n_clients)]
    parent = Address("fog", "f0") if fogs else Address("cloud", "cloud")
    nodes = {
        c: ClientNode(
            c,
            parent=parent,
            views=[X[parts[i]] for X in views],
            model=model,
            shape=SHAPE,
            protocol=proto,
            seed=i,
        )
        for i, c in enumerate(clients)
    }
    common = {"model": model, "shape": SHAPE, "protocol": proto}
    nodes["cloud"] = AggregatorNode(
        "cloud",
        tier="cloud",
        children=["f0"] if fogs else clients,
        parent=None,
        deadline_s=10.0,
        **common,
    )
    if fogs:
        nodes["f0"] = AggregatorNode(
            "f0",
            tier="fog",
            children=clients,
            parent=Address("cloud", "cloud"),
            deadline_s=5.0,
            **common,
        )
    return nodes


@pytest.mark.parametrize(("scheme", "bits"), [("none", 8), *SCHEMES])
def test_compressed_runs_finish_and_fogs_forward_float64(scheme, bits):
    nodes = _federation(scheme, bits, fogs=True)
    lb = Loopback(nodes)
    lb.start()
    lb.run()
    assert lb.results["cloud"]["status"] in ("converged", "round_limit")
    assert not lb.kinds("dropped")
    records = lb.kinds("compression")
    ups = [(n, p) for n, p in lb.published if "/up/" in p.topic]
    client_ups = [wire.decode(p.payload) for n, p in ups if _is_client(n)]
    iter_bodies = [e.body for e in client_ups if e.body.get("mode") != "setup"]
    if scheme == "none":
        assert not records
        assert all("compression" not in b for b in iter_bodies)
    else:
        assert len(records) == len(iter_bodies) > 0
        assert all(b["compression"] == records[0]["scheme"] for b in iter_bodies)
        assert all(math.isfinite(r["rel_error"]) and r["fallbacks"] == 0 for r in records)
        if scheme != "qsgd" or bits == 8:
            assert all(r["rel_error"] < 2 / levels(8) for r in records)
        sizes = sorted(len(p.payload) for n, p in ups if _is_client(n))
        assert {r["payload_bytes"] for r in records} <= set(sizes)
    for n, p in ups:
        if n == "f0":  # the fog decodes and forwards plain float64
            body = wire.decode(p.payload).body
            assert "compression" not in body
            if body.get("mode") == "stats":
                assert all(a.dtype == np.float64 for a in body["num"])


def test_client_records_the_error_and_bytes_of_what_it_sent():
    nodes = _federation("float16")
    lb = Loopback(nodes)
    lb.start()
    lb.run()
    recs = lb.kinds("compression")
    assert {r["node"] for r in recs} == {"c0", "c1"}
    assert all(r["scheme"] == "float16" and r["sub"] == 0 for r in recs)
    assert all(0 < r["rel_error"] <= 2.0**-11 for r in recs)
    sent = {
        (n, wire.decode(p.payload).round): len(p.payload)
        for n, p in lb.published
        if _is_client(n) and "/up/" in p.topic
    }
    assert all(sent[(r["node"], r["round"])] == r["payload_bytes"] for r in recs)


def test_qsgd_runs_are_deterministic_and_do_not_disturb_the_clients_rng():
    def published():
        lb = Loopback(_federation("qsgd", 4))
        lb.start()
        lb.run()
        return [p.payload for _, p in lb.published]

    assert published() == published()
    # the setup reply (drawn from the client's own rng) is the same with and without qsgd
    setups = []
    for scheme in ("none", "qsgd"):
        lb = Loopback(_federation(scheme, 4))
        lb.start()
        lb.run(max_steps=3, until_quiet=False)
        setups.append([p.payload for n, p in lb.published if _is_client(n)][:1])
    assert setups[0] == setups[1] and setups[0]


def _collecting_with_c0_held_back(scheme, bits, rule="sum"):
    """Run until the cloud collects an iteration round with c1's update in and c0's held."""
    nodes = _federation(scheme, bits, rule=rule)
    ups = []

    def drop(src, dst, topic):
        if src == "c0" and "/up/" in topic:
            ups.append(None)
            return len(ups) >= 2  # the setup reply goes through, the first update does not
        return False

    lb = Loopback(nodes, drop=drop)
    lb.start()
    while lb.queue:  # deliver everything; never fire a timer
        dst, topic, payload, _ = lb.queue.popleft()
        lb._apply(dst, nodes[dst].handle(Delivered(now=0.0, topic=topic, payload=payload)))
    held = [p for n, p in lb.published if n == "c0" and "/up/" in p.topic][-1]
    cloud = nodes["cloud"]
    assert cloud.phase == "iter" and set(cloud.received) == {"c1"}
    return cloud, held


@pytest.mark.parametrize(
    "case",
    [
        "code above 2L",
        "scale NaN",
        "scale negative",
        "codes wrong dtype",
        "codes too short",
        "plain float64 in a qsgd body",
        "unknown tag",
        "tag bits mismatch",
        "float16 inf pattern",
        "float16 wrong dtype",
        "float32 NaN",
    ],
)
def test_aggregator_drops_malformed_compressed_updates_and_takes_the_good_one(case):
    scheme, bits, _, tamper = MALFORMED[case]
    cloud, held = _collecting_with_c0_held_back(scheme, bits)
    env = wire.decode(held.payload)
    bad = wire.Envelope(
        kind=env.kind,
        run=env.run,
        round=env.round,
        tier=env.tier,
        sender=env.sender,
        body=tamper(env.body),
    )
    out = cloud.handle(Delivered(now=1.0, topic=held.topic, payload=wire.encode(bad)))
    assert [type(e) for e in out] == [Record] and out[0].kind == "dropped"
    assert out[0].fields["node"] == "cloud" and out[0].fields["reason"]
    assert set(cloud.received) == {"c1"}  # not counted, nothing summed
    out = cloud.handle(Delivered(now=1.0, topic=held.topic, payload=held.payload))
    aggregate = [e for e in out if isinstance(e, Record) and e.kind == "aggregate"]
    assert aggregate and aggregate[0].fields["participants"] == 2
    assert any(isinstance(e, Publish) for e in out)  # the next round's model went out
    state = cloud.global_state
    assert all(np.isfinite(c).all() for c in state.centers)
