"""SecAgg / SecAgg+ end to end, client refusals, server checks, the graph and the PRG."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nacl.bindings import crypto_aead_chacha20poly1305_ietf_encrypt
from scipy import stats

from fedstrata import wire
from fedstrata.errors import ValidationError, WireError
from fedstrata.privacy import fixedpoint as fp
from fedstrata.privacy import prg
from fedstrata.privacy.secagg import (
    CHECK,
    KEY_LIST,
    MASKED,
    UNMASK,
    BelowThresholdError,
    CheckTagError,
    ClientPhase,
    ConsistencyError,
    MalformedMessageError,
    SecAggClient,
    SecAggConfig,
    SecAggError,
    SecAggServer,
    ServerPhase,
    check_tag,
    neighbourhoods,
)
from fedstrata.privacy.secagg_check import encode_set

FAST = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROUNDS = ("keys", "shares", "masked", "signed", "reveal")  # the reply each round collects

# ------------------------------------------------------------------------------ harness


@dataclass
class Run:
    """One simulated aggregation; ``drop[c] = r`` silences client c from round r (0..4) on."""

    n: int
    config: SecAggConfig
    drop: dict[str, int] = field(default_factory=dict)
    seed: int = 0
    through_wire: bool = False
    roster: list[str] = field(init=False)
    server: SecAggServer = field(init=False)
    clients: dict[str, SecAggClient] = field(init=False)
    xs: dict[str, np.ndarray] = field(init=False)
    replied: list[set[str]] = field(init=False)

    def __post_init__(self) -> None:
        self.roster = [f"node-{i:03d}" for i in range(self.n)]
        self.server = SecAggServer(
            self.roster, self.config, graph_seed=self.seed.to_bytes(32, "little")
        )
        self.clients = {c: SecAggClient(c, self.config) for c in self.roster}
        rng = np.random.default_rng(self.seed)
        clip, length = self.config.clip, self.config.vector_length
        self.xs = {c: rng.uniform(-1.2 * clip, 1.2 * clip, length) for c in self.roster}
        for c in self.roster:
            self.clients[c].set_input(self.xs[c])
        self.replied = []

    def carry(self, sender: str, body: Mapping[str, Any]) -> dict[str, Any]:
        if not self.through_wire:
            return dict(body)
        env = wire.Envelope(kind="secagg", run="r", round=0, tier="edge", sender=sender, body=body)
        return wire.decode(wire.encode(env)).body

    def round(self, messages: dict[str, dict[str, Any]], r: int) -> None:
        got = set()
        for c, message in messages.items():
            if self.drop.get(c, 99) <= r:
                continue
            try:
                reply = self.clients[c].handle(self.carry("server", message))
            except SecAggError:
                continue  # a refusing client is a dropout
            assert self.server.receive(c, self.carry(c, reply))
            got.add(c)
        self.replied.append(got)

    def execute(self) -> Any:
        messages = self.server.start()
        for r in range(4):
            self.round(messages, r)
            messages = self.server.advance()
        self.round(messages, 4)
        return self.server.finish()

    def expected_total(self, survivors: tuple[str, ...]) -> np.ndarray:
        cfg = self.config
        total = np.zeros(cfg.vector_length, dtype=np.uint64)
        for c in survivors:
            total += fp.encode(
                self.xs[c],
                scale_bits=cfg.scale_bits,
                clip=cfg.clip,
                n_summands=self.n,
                modulus_bits=cfg.modulus_bits,
            )
        return fp.wrap(total, modulus_bits=cfg.modulus_bits)


def stage_sets(run: Run) -> list[set[str]]:
    """U1..U5 as intended by ``run.drop`` (before any client-side refusal)."""
    return [{c for c in run.roster if run.drop.get(c, 99) > r} for r in range(5)]


def recoverable(run: Run) -> bool:
    """Whether honest clients with these dropouts must give the sum (independent of the code)."""
    u1, u2, u3, _, u4 = stage_sets(run)  # the signers are a superset of the revealers
    t = run.config.threshold_for(run.n)
    if min(len(u1), len(u2), len(u3)) < t:
        return False
    graph = neighbourhoods(run.roster, run.config, run.server.graph_seed)
    return all(len(({u} | graph[u]) & u4) >= t for u in u3) and all(
        len(graph[u] & u4) >= t for u in u2 - u3
    )


def check_exact(run: Run, result: Any) -> None:
    """The result is the exact sum over the clients that actually sent masked input."""
    u2, u3 = run.replied[1], run.replied[2]
    assert set(result.survivors) == u3
    assert set(result.dropped) == u2 - u3
    assert np.array_equal(result.total, run.expected_total(result.survivors))
    cfg = run.config
    for j in range(cfg.vector_length):
        exact = math.fsum(float(np.clip(run.xs[c][j], -cfg.clip, cfg.clip)) for c in u3)
        tol = len(u3) * 2.0 ** -(cfg.scale_bits + 1) + 4 * np.spacing(abs(exact) + cfg.clip)
        assert abs(result.values[j] - exact) <= tol


def pick_drops(
    run_factory: Callable[[dict[str, int]], Run], n: int, counts: dict[int, int], seed: int
) -> Run:
    """A seeded dropout pattern (``counts[r]`` clients silent from round r) that can recover."""
    rng = np.random.default_rng(seed)
    for _ in range(500):
        order = rng.permutation(n)
        drop, k = {}, 0
        for r, count in sorted(counts.items()):
            for i in order[k : k + count]:
                drop[f"node-{i:03d}"] = r
            k += count
        run = run_factory(drop)
        if recoverable(run):
            return run
    raise AssertionError("no recoverable dropout pattern found")


def plus_degree(n: int) -> int:
    """An even SecAgg+ degree ~ 2 log2 n, below n - 1 so that the graph is not complete."""
    return min(2 * math.ceil(math.log2(n)), (n - 2) // 2 * 2)


# ------------------------------------------------------------------------- exact sums

SCENARIOS = {  # the rounds from which 30 % of the clients go silent, spread evenly
    "no dropouts": (),
    "30% after masked input": (3,),
    "30% before masked input": (2,),
    "30% across rounds": (0, 1, 2, 3, 4),
}


@pytest.mark.parametrize("n", [5, 12, 31, 50])
@pytest.mark.parametrize("plus", [False, True], ids=["secagg", "secagg+"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_sum_is_exact(n: int, plus: bool, scenario: str) -> None:
    cfg = SecAggConfig(
        vector_length=6, clip=50.0, scale_bits=20, degree=plus_degree(n) if plus else None
    )
    rounds = SCENARIOS[scenario]
    total = int(0.3 * n) if rounds else 0
    counts = {r: len(range(i, total, len(rounds))) for i, r in enumerate(rounds)}
    run = pick_drops(lambda drop: Run(n, cfg, drop, seed=n), n, counts, seed=n)
    result = run.execute()
    assert run.replied == stage_sets(run)  # no client refused
    check_exact(run, result)
    assert run.server.phase is ServerPhase.DONE
    # clients that sent masked input and then vanished are in the sum
    late = {c for c, r in run.drop.items() if r == 3}
    assert late <= set(result.survivors)
    if plus:
        assert len(run.server._graph.neighbours(run.roster[0])) == cfg.degree


def test_modulus_below_64_bits_and_messages_through_the_wire_format() -> None:
    cfg = SecAggConfig(vector_length=5, clip=8.0, scale_bits=12, modulus_bits=24, degree=4)
    run = Run(11, cfg, {"node-003": 2, "node-007": 3}, seed=3, through_wire=True)
    result = run.execute()
    check_exact(run, result)
    assert (result.total >> np.uint64(24)).sum() == 0


@settings(FAST, max_examples=80)
@given(data=st.data())
def test_either_the_exact_sum_or_below_threshold(data: st.DataObject) -> None:
    """Random dropouts: never a wrong sum.

    When every client's secrets can be rebuilt (:func:`recoverable`) the sum over the
    intended survivors comes out. Otherwise the server raises, or some isolated clients
    refuse early (too few partners), drop out, and the sum over the others is exact.
    """
    n = data.draw(st.integers(3, 16), label="n")
    degree = data.draw(st.sampled_from([None, *range(2, n - 1, 2)]), label="degree")
    threshold = data.draw(st.sampled_from([None, "max"]), label="threshold")
    cfg0 = SecAggConfig(vector_length=3, clip=4.0, degree=degree)
    t = cfg0.holders(n) if threshold == "max" else None
    cfg = SecAggConfig(vector_length=3, clip=4.0, degree=degree, threshold=t)
    stage = st.sampled_from([99] * 10 + [0, 1, 2, 3, 4])  # about one client in three drops
    drop = {f"node-{i:03d}": data.draw(stage) for i in range(n)}
    run = Run(n, cfg, {c: r for c, r in drop.items() if r < 99}, seed=n)
    if recoverable(run):
        check_exact(run, run.execute())
        assert run.replied == stage_sets(run)
        return
    try:
        result = run.execute()
    except BelowThresholdError:
        assert run.server.phase is ServerPhase.ABORTED
        return
    check_exact(run, result)
    assert run.replied != stage_sets(run)  # someone refused early


# ----------------------------------------------------------------- below threshold


def test_too_few_survivors_raise_and_never_return_a_sum() -> None:
    cfg = SecAggConfig(vector_length=4, clip=1.0)  # n = 6: t = 4
    run = Run(6, cfg, {"node-000": 4, "node-001": 4, "node-002": 4})  # signed, then silent
    with pytest.raises(BelowThresholdError, match="threshold 4: cannot unmask"):
        run.execute()
    assert run.server.phase is ServerPhase.ABORTED
    with pytest.raises(SecAggError):
        run.server.finish()


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_too_few_clients_in_a_round(stage: int) -> None:
    cfg = SecAggConfig(vector_length=2, clip=1.0)
    run = Run(5, cfg, {f"node-00{i}": stage for i in range(3)})  # 2 left, t = 3
    with pytest.raises(BelowThresholdError, match="threshold 3: aborted"):
        run.execute()


# -------------------------------------------------------------------- masked vectors


def masked_vectors(n: int, length: int, degree: int | None) -> dict[str, np.ndarray]:
    cfg = SecAggConfig(vector_length=length, clip=1.0, degree=degree)
    run = Run(n, cfg)
    for c in run.roster:
        run.clients[c].set_input(np.zeros(length))  # no entropy of its own
    messages = run.server.start()
    for r in range(2):
        run.round(messages, r)
        messages = run.server.advance()
    return {c: run.clients[c].handle(m)["masked"] for c, m in messages.items()}


@pytest.mark.parametrize("degree", [None, 2])
def test_masked_vector_looks_uniform_and_changes_between_runs(degree: int | None) -> None:
    first = masked_vectors(5, 1 << 16, degree)
    second = masked_vectors(5, 1 << 16, degree)
    for y in first.values():
        assert y.dtype == np.uint64
        for byte in (y >> np.uint64(56), y & np.uint64(0xFF)):
            hist = np.bincount(byte.astype(np.int64), minlength=256)
            assert stats.chisquare(hist).pvalue > 1e-6
    for c in first:
        assert np.mean(first[c] == second[c]) < 1e-3


# ------------------------------------------------------------- refusals (the client)


def up_to_unmask(n: int = 5, **kwargs: Any) -> tuple[Run, dict[str, dict[str, Any]]]:
    run = Run(n, SecAggConfig(vector_length=3, clip=1.0, **kwargs))
    messages = run.server.start()
    for r in range(4):
        run.round(messages, r)
        messages = run.server.advance()
    return run, messages


def test_client_refuses_to_reveal_both_kinds_of_shares_of_one_client() -> None:
    run, messages = up_to_unmask()
    victim, holder = "node-001", "node-002"
    evil = {**messages[holder], "dropped": [victim]}  # victim also in "survivors"
    assert victim in evil["survivors"]
    client = run.clients[holder]
    with pytest.raises(ConsistencyError, match="survivor and as dropped"):
        client.handle(evil)
    assert client.phase is ClientPhase.ABORTED
    with pytest.raises(ConsistencyError, match="no further request"):
        client.handle(messages[holder])  # and no retry with an honest-looking request


def test_client_answers_one_unmask_request_only() -> None:
    run, messages = up_to_unmask()
    holder, victim = "node-002", "node-001"
    reply = run.clients[holder].handle(messages[holder])
    assert victim in reply["b_shares"]
    assert reply["sk_shares"] == {}
    second = {
        **messages[holder],
        "survivors": [c for c in messages[holder]["survivors"] if c != victim],
        "dropped": [victim],
    }
    with pytest.raises(ConsistencyError, match="no further request"):
        run.clients[holder].handle(second)
    assert run.clients[holder].phase is ClientPhase.DONE


def up_to_check(n: int = 5, **kwargs: Any) -> tuple[Run, dict[str, dict[str, Any]]]:
    """A run whose clients all sent masked input; the server's check requests."""
    run = Run(n, SecAggConfig(vector_length=3, clip=1.0, **kwargs))
    messages = run.server.start()
    for r in range(3):
        run.round(messages, r)
        messages = run.server.advance()
    assert {m["type"] for m in messages.values()} == {CHECK}
    return run, messages


def test_client_refuses_to_sign_when_left_out_or_too_few_survivors() -> None:
    run, messages = up_to_check()
    me = "node-004"
    without_me = encode_set(run.roster, [c for c in run.roster if c != me])
    with pytest.raises(ConsistencyError, match="not listed as a survivor"):
        run.clients[me].handle({**messages[me], "survivors": without_me})
    run, messages = up_to_check()
    few = {**messages[me], "survivors": encode_set(run.roster, [me, "node-000"])}
    with pytest.raises(BelowThresholdError, match="2 survivor"):
        run.clients[me].handle(few)
    padded = {**messages[me], "survivors": b"\xff"}  # 5 members: 3 padding bits set
    with pytest.raises(MalformedMessageError, match="bitmap"):
        run.clients["node-003"].handle(padded)


def test_client_refuses_unmasking_lists_other_than_the_set_it_signed() -> None:
    run, messages = up_to_unmask()
    me = "node-004"
    m = messages[me]
    with pytest.raises(ConsistencyError, match="differ from the set it signed"):
        run.clients[me].handle(
            {
                **m,
                "survivors": [c for c in m["survivors"] if c != "node-000"],
                "dropped": ["node-000"],
            }
        )


def test_equivocating_server_cannot_collect_both_kinds_for_one_client() -> None:
    """The server tells half the holders that a client survived, half that it dropped."""
    run, messages = up_to_unmask(7)  # complete graph, h = 7, t = 4
    victim = "node-000"
    b_shares = sk_shares = refused = 0
    for k, holder in enumerate(c for c in run.roster if c != victim):
        m = messages[holder]
        if k % 2:
            m = {
                **m,
                "survivors": [c for c in m["survivors"] if c != victim],
                "dropped": [victim],
            }
        try:
            reply = run.clients[holder].handle(m)
        except ConsistencyError:
            refused += 1
            continue
        b_shares += victim in reply["b_shares"]
        sk_shares += victim in reply["sk_shares"]
    assert (b_shares, sk_shares, refused) == (3, 0, 3)  # lists unlike the signed set: refused


def test_threshold_rule_is_enforced() -> None:
    with pytest.raises(ValidationError, match=r"2\*t > h"):
        SecAggServer(
            [f"c{i}" for i in range(6)], SecAggConfig(vector_length=1, clip=1, threshold=3)
        )
    with pytest.raises(ValidationError, match=r"2\*t > h"):
        SecAggServer(
            [f"c{i}" for i in range(20)],
            SecAggConfig(vector_length=1, clip=1, degree=4, threshold=6),
        )
    with pytest.raises(ValidationError, match="group size"):
        SecAggServer(["a", "b"], SecAggConfig(vector_length=1, clip=1))
    with pytest.raises(ValidationError, match="even"):
        SecAggConfig(vector_length=1, clip=1, degree=3)
    with pytest.raises(ValidationError, match="threshold"):
        SecAggConfig(vector_length=1, clip=1, threshold=1)
    with pytest.raises(fp.FixedPointOverflowError):
        SecAggServer([f"c{i}" for i in range(5)], SecAggConfig(vector_length=1, clip=2.0**40))


def test_client_checks_setup_and_keys() -> None:
    cfg = SecAggConfig(vector_length=2, clip=1.0)
    server = SecAggServer([f"c{i}" for i in range(4)], cfg)
    setup = server.start()["c0"]
    for change in ({"clip": 2.0}, {"threshold": 3}, {"degree": 2}, {"roster": ["c1", "c2", "c3"]}):
        with pytest.raises(ConsistencyError):
            SecAggClient("c0", cfg).handle({**setup, **change})
    with pytest.raises(MalformedMessageError):
        SecAggClient("c0", cfg).handle({**setup, "session": b"short"})
    with pytest.raises(MalformedMessageError):
        SecAggClient("c0", cfg).handle({**setup, "roster": ["c0", "c0", "c1"]})

    run = Run(4, cfg)
    messages = run.server.start()
    run.round(messages, 0)
    key_lists = run.server.advance()
    m = key_lists["node-000"]
    dup = {**m, "s_pks": {**m["s_pks"], "node-001": m["c_pks"]["node-002"]}}
    with pytest.raises(ConsistencyError, match="distinct"):
        run.clients["node-000"].handle(dup)
    fresh = SecAggClient("node-001", cfg)
    fresh.handle(messages["node-001"])
    low_order = {**key_lists["node-001"], "c_pks": {**key_lists["node-001"]["c_pks"]}}
    low_order["c_pks"]["node-000"] = bytes(32)
    with pytest.raises(ConsistencyError):
        fresh.handle(low_order)
    with pytest.raises(ConsistencyError, match="expected"):
        run.clients["node-002"].handle({**key_lists["node-002"], "type": MASKED})
    with pytest.raises(ConsistencyError, match="another session"):
        run.clients["node-003"].handle({**key_lists["node-003"], "session": bytes(16)})


def test_sparse_client_rejects_keys_of_non_neighbours() -> None:
    cfg = SecAggConfig(vector_length=2, clip=1.0, degree=2)
    run = Run(8, cfg)
    messages = run.server.start()
    run.round(messages, 0)
    key_lists = run.server.advance()
    me = "node-000"
    stranger = next(c for c in run.roster if c != me and c not in key_lists[me]["c_pks"])
    other = key_lists[stranger]["c_pks"]
    m = key_lists[me]
    extra_c = {**m["c_pks"], stranger: next(iter(other.values()))}
    extra_s = {**m["s_pks"], stranger: bytes(range(32))}
    with pytest.raises(ConsistencyError, match="not neighbours"):
        run.clients[me].handle({**m, "c_pks": extra_c, "s_pks": extra_s})


def test_tampered_or_misrouted_ciphertext_is_refused() -> None:
    run = Run(5, SecAggConfig(vector_length=2, clip=1.0))
    messages = run.server.start()
    for r in range(2):
        run.round(messages, r)
        messages = run.server.advance()
    m = messages["node-000"]
    cts = dict(m["ciphertexts"])
    ct = bytearray(cts["node-001"])
    ct[-1] ^= 1
    with pytest.raises(ConsistencyError, match="does not authenticate"):
        run.clients["node-000"].handle({**m, "ciphertexts": {**cts, "node-001": bytes(ct)}})
    # node-002's ciphertext for node-001, handed to node-001 as if it came from node-003
    m1 = messages["node-001"]
    swapped = {**m1["ciphertexts"], "node-003": m1["ciphertexts"]["node-002"]}
    with pytest.raises(ConsistencyError):
        run.clients["node-001"].handle({**m1, "ciphertexts": swapped})


def test_client_needs_an_input_of_the_right_shape() -> None:
    cfg = SecAggConfig(vector_length=3, clip=1.0)
    client = SecAggClient("a", cfg)
    with pytest.raises(ValidationError, match="length 3"):
        client.set_input(np.zeros(4))
    with pytest.raises(ValidationError, match="NaN"):
        client.set_input(np.array([0.0, np.nan, 1.0]))
    run = Run(4, cfg)
    run.clients["node-000"] = SecAggClient("node-000", cfg)  # never gets an input
    messages = run.server.start()
    for r in range(2):
        run.round(messages, r)
        messages = run.server.advance()
    with pytest.raises(SecAggError, match="set_input"):
        run.clients["node-000"].handle(messages["node-000"])
    run.clients["node-001"].handle(messages["node-001"])
    with pytest.raises(SecAggError, match="already sent"):
        run.clients["node-001"].set_input(np.zeros(3))


# ------------------------------------------------------------------- server checks


def test_server_ignores_late_stray_and_duplicate_replies() -> None:
    cfg = SecAggConfig(vector_length=2, clip=1.0)
    run = Run(4, cfg)
    messages = run.server.start()
    late = run.clients["node-003"].handle(messages["node-003"])
    for c in run.roster[:3]:
        assert run.server.receive(c, run.clients[c].handle(messages[c]))
    assert not run.server.receive("node-000", {"type": "secagg/keys"})  # duplicate
    assert run.server.waiting_for == {"node-003"}
    run.server.advance()
    assert not run.server.receive("node-003", late)  # round 0 is closed
    assert not run.server.receive("stranger", late)
    assert not run.server.receive("node-000", {**late, "session": bytes(16)})
    assert run.server.waiting_for == {"node-000", "node-001", "node-002"}


def test_server_rejects_malformed_replies() -> None:
    cfg = SecAggConfig(vector_length=3, clip=1.0, modulus_bits=32)
    run = Run(4, cfg)
    messages = run.server.start()
    session = run.server.session
    with pytest.raises(MalformedMessageError):
        run.server.receive("node-000", {"type": "secagg/keys", "session": session, "c_pk": b"x"})
    run.round(messages, 0)
    messages = run.server.advance()
    reply = run.clients["node-000"].handle(messages["node-000"])
    partial = {**reply, "ciphertexts": dict(list(reply["ciphertexts"].items())[:-1])}
    with pytest.raises(MalformedMessageError, match="one ciphertext per neighbour"):
        run.server.receive("node-000", partial)  # asymmetric masks would spoil the sum
    assert run.server.receive("node-000", reply)
    run.round({c: m for c, m in messages.items() if c != "node-000"}, 1)
    messages = run.server.advance()
    for bad in (  # the right length is the input's 3 words and the check tag
        np.zeros(4, np.int64),
        np.zeros(3, np.uint64),
        np.zeros(5, np.uint64),
        np.full(4, 2**40, np.uint64),
        [0] * 4,
    ):
        with pytest.raises(MalformedMessageError):
            run.server.receive("node-000", {"type": MASKED, "session": session, "masked": bad})
    assert issubclass(MalformedMessageError, WireError)
    run.round(messages, 2)
    messages = run.server.advance()
    run.round(messages, 3)
    messages = run.server.advance()
    reply = run.clients["node-000"].handle(messages["node-000"])
    unasked = {**reply, "sk_shares": {"node-001": bytes(64)}}
    with pytest.raises(MalformedMessageError, match="not asked"):
        run.server.receive("node-000", unasked)


def test_server_detects_a_lying_share_holder() -> None:
    run, messages = up_to_unmask(5)
    for c, m in messages.items():
        reply = run.clients[c].handle(m)
        if c == "node-000":  # corrupts its share of node-001's b
            share = bytearray(reply["b_shares"]["node-001"])
            share[0] ^= 0x55
            reply["b_shares"]["node-001"] = bytes(share)
        run.server.receive(c, reply)
    with pytest.raises(SecAggError, match="node-001"):
        run.server.finish()
    assert run.server.phase is ServerPhase.ABORTED


def test_server_state_machine_misuse() -> None:
    server = SecAggServer(["a", "b", "c"], SecAggConfig(vector_length=1, clip=1))
    with pytest.raises(SecAggError, match="advance"):
        server.advance()
    server.start()
    with pytest.raises(SecAggError, match="already"):
        server.start()
    with pytest.raises(SecAggError, match="finish"):
        server.finish()
    with pytest.raises(ValidationError):
        SecAggServer(["a", "b", "b"], SecAggConfig(vector_length=1, clip=1))


def test_message_types() -> None:
    run = Run(4, SecAggConfig(vector_length=2, clip=1.0))
    messages = run.server.start()
    run.round(messages, 0)
    lists = run.server.advance()
    assert {m["type"] for m in lists.values()} == {KEY_LIST}
    for r in (1, 2, 3):
        run.round(lists, r)
        lists = run.server.advance()
    assert {m["type"] for m in lists.values()} == {UNMASK}


# --------------------------------------------------------------------------- graph


@pytest.mark.parametrize(("n", "k"), [(5, 2), (10, 4), (31, 10), (100, 14)])
def test_harary_graph_is_k_regular_symmetric_and_seeded(n: int, k: int) -> None:
    roster = [f"c{i}" for i in range(n)]
    cfg = SecAggConfig(vector_length=1, clip=1, degree=k)
    g = neighbourhoods(roster, cfg, bytes(32))
    assert all(len(nb) == k and c not in nb for c, nb in g.items())
    assert all(c in g[v] for c, nb in g.items() for v in nb)
    assert g == neighbourhoods(roster, cfg, bytes(32))
    assert g != neighbourhoods(roster, cfg, bytes([1]) * 32)


def test_complete_graph_when_degree_is_none_or_large() -> None:
    roster = [f"c{i}" for i in range(6)]
    for degree in (None, 6, 8):
        g = neighbourhoods(roster, SecAggConfig(vector_length=1, clip=1, degree=degree), b"s" * 32)
        assert all(nb == set(roster) - {c} for c, nb in g.items())


# ----------------------------------------------------------------------------- PRG


def test_prg_is_the_chacha20_ietf_keystream() -> None:
    seed = bytes(range(32))
    words = prg.expand(seed, 100)
    zeros = crypto_aead_chacha20poly1305_ietf_encrypt(bytes(736), None, prg.NONCE, seed)
    # the AEAD encrypts with block counter 1 onward: keystream bytes 64..
    assert words.tobytes()[64:800] == zeros[:736]
    assert words.dtype == np.uint64 and words.flags.writeable


def test_prg_is_deterministic_distinct_and_fast() -> None:
    a, b = bytes(32), bytes([1]) + bytes(31)
    assert np.array_equal(prg.expand(a, 1000), prg.expand(a, 1000))
    assert np.array_equal(prg.expand(a, 1000)[:10], prg.expand(a, 10))
    assert np.mean(prg.expand(a, 1000) == prg.expand(b, 1000)) == 0.0
    assert prg.expand(a, 0).shape == (0,)
    start = time.perf_counter()
    words = prg.expand(a, 10**6)
    assert time.perf_counter() - start < 1.0
    assert words.shape == (10**6,)


def test_prg_validation_and_seed_derivation() -> None:
    for seed in (b"", bytes(31), bytes(33), "x" * 32):
        with pytest.raises(ValidationError, match="32 bytes"):
            prg.expand(seed, 1)  # type: ignore[arg-type]
    for length in (-1, prg.MAX_LENGTH + 1, 1.0, True):
        with pytest.raises(ValidationError, match="length"):
            prg.expand(bytes(32), length)  # type: ignore[arg-type]
    s1 = prg.derive_seed(b"key", label=b"a")
    assert len(s1) == 32
    assert s1 == prg.derive_seed(b"key", label=b"a")
    assert s1 != prg.derive_seed(b"key", label=b"b")
    assert s1 != prg.derive_seed(b"key", label=b"a", context=b"c")
    assert prg.derive_seed(b"ke", label=b"a", context=b"y") != prg.derive_seed(b"key", label=b"a")
    with pytest.raises(ValidationError, match="label"):
        prg.derive_seed(b"key", label=b"x" * 17)


# ------------------------------------------------------------ the check tag (input range)


def run_with_masked(
    n: int, cfg: SecAggConfig, seed: int, tamper: Callable[[str, np.ndarray], np.ndarray]
) -> Run:
    """A run up to the reveals in which ``tamper(client, masked)`` replaces masked inputs."""
    run = Run(n, cfg, seed=seed)
    messages = run.server.start()
    for r in range(2):
        run.round(messages, r)
        messages = run.server.advance()
    for c, message in messages.items():
        reply = run.clients[c].handle(message)
        reply["masked"] = tamper(c, reply["masked"])
        assert run.server.receive(c, reply)
    messages = run.server.advance()
    run.round(messages, 3)
    messages = run.server.advance()
    run.round(messages, 4)
    return run


@pytest.mark.parametrize("degree", [None, 2])
def test_a_member_sending_uniformly_random_masked_input_is_detected(degree: int | None) -> None:
    """50 seeded trials, each detected: a random vector passes the tag with probability 2**-64.

    So the chance that this test sees one miss in its 50 trials is 50 * 2**-64 < 3e-18;
    without the tag, the range check alone passed such a sum (the sum range is nearly
    the whole ring with the nodes' headroom clip).
    """
    n, length = 5, 6
    clip = float(2.0**62 / n / 2**24)  # the widest range whose sum cannot wrap: as the nodes
    cfg = SecAggConfig(vector_length=length, clip=clip, scale_bits=24, degree=degree)
    for seed in range(50):
        rng = np.random.default_rng(seed)

        def garbage(c: str, y: np.ndarray, rng: np.random.Generator = rng) -> np.ndarray:
            if c != "node-002":
                return y
            return rng.integers(0, 2**64, size=y.shape, dtype=np.uint64)

        run = run_with_masked(n, cfg, seed, garbage)
        with pytest.raises(CheckTagError, match="check tag"):
            run.server.finish()
        assert run.server.phase is ServerPhase.ABORTED


def test_one_corrupted_word_is_always_detected() -> None:
    """c_j is odd, so c_j * e is never 0 mod 2**k for e != 0: a single changed word never passes."""
    cfg = SecAggConfig(vector_length=4, clip=1.0, modulus_bits=32)
    for seed, (j, e) in enumerate([(0, 1), (3, 2**31), (4, 12345), (1, 2**32 - 1)]):

        def corrupt(c: str, y: np.ndarray, j: int = j, e: int = e) -> np.ndarray:
            if c != "node-001":
                return y
            out = y.copy()
            out[j] = (int(out[j]) + e) % 2**32  # j == 4: the tag word itself
            return out

        run = run_with_masked(4, cfg, seed, corrupt)
        with pytest.raises(CheckTagError):
            run.server.finish()


def test_honest_sums_pass_the_tag_with_any_modulus() -> None:
    for bits in (16, 32, 64):
        cfg = SecAggConfig(vector_length=3, clip=1.0, scale_bits=8, modulus_bits=bits)
        run = Run(5, cfg, seed=bits)
        check_exact(run, run.execute())


def test_check_tag_is_linear_in_the_encoded_input() -> None:
    """Σ tag(q_u) = |U| + (tag(Σ q_u) - 1) mod 2**k: what finish() relies on."""
    rng = np.random.default_rng(0)
    session = bytes(range(16))
    qs = [rng.integers(0, 2**64, 7, dtype=np.uint64) for _ in range(4)]
    with np.errstate(over="ignore"):
        lhs = sum((int(check_tag(q, session, 64)) for q in qs), 0) % 2**64
        total = qs[0] + qs[1] + qs[2] + qs[3]
    rhs = (4 + int(check_tag(total, session, 64)) - 1) % 2**64
    assert lhs == rhs
    assert check_tag(qs[0], session, 64) != check_tag(qs[0], bytes(16), 64)  # session-bound


def test_a_knowing_member_shifts_the_sum_within_its_range_undetected() -> None:
    """What stays undetectable (docs/privacy.md): a member that masks a vector of its choice.

    Here one member encodes with 2.5 times the agreed clip, its tag consistent with
    that: the tag passes, and the sum's range check passes while the sum stays within
    ±n*Q. Beyond that the range check refuses the sum.
    """
    import dataclasses

    n = 5
    cfg = SecAggConfig(vector_length=2, clip=1.0, scale_bits=20)
    for factor, caught in ((2.5, False), (40.0, True)):
        run = Run(n, cfg, seed=7)
        for c in run.roster:  # honest inputs of 0.5: the sum's range is ±5, theirs 2
            run.xs[c] = np.full(2, 0.5)
            run.clients[c].set_input(run.xs[c])
        liar = run.clients["node-003"]
        messages = run.server.start()
        for r in range(2):
            run.round(messages, r)
            messages = run.server.advance()
        liar.config = dataclasses.replace(cfg, clip=factor)  # after the setup's comparison
        liar.set_input(np.full(2, factor))
        run.round(messages, 2)
        messages = run.server.advance()
        run.round(messages, 3)
        messages = run.server.advance()
        run.round(messages, 4)
        if caught:
            with pytest.raises(fp.FixedPointOverflowError):
                run.server.finish()
        else:
            result = run.server.finish()
            assert np.allclose(result.values, 4 * 0.5 + factor, atol=1e-4)
