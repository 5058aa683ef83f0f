"""``wire.encode_unpacked``: the size and the decoded form of ``encode``, without the bytes.

Every claim is checked against the real codec (msgpack): the size equals
``len(encode(env))``, ``decode`` gives what it gives for those bytes, ``bytes()``
packs the very same bytes, and what ``encode`` refuses is refused with its error.
"""

from __future__ import annotations

import pickle
from collections import OrderedDict, namedtuple
from enum import IntEnum
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedstrata.errors import WireError
from fedstrata.wire import Envelope, Unpacked, decode, encode
from fedstrata.wire_unpacked import encode_unpacked
from tests.test_wire import BAD_BODIES, FAST, env, envelopes, same, same_env


def _arrays_of(value: Any) -> list[np.ndarray]:
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, dict):
        return [a for v in value.values() for a in _arrays_of(v)]
    if isinstance(value, list):
        return [a for v in value for a in _arrays_of(v)]
    return []


def _check_like_encode(message: Envelope) -> Unpacked:
    payload = encode(message)
    lazy = encode_unpacked(message)
    assert len(lazy) == len(payload)
    assert bytes(lazy) == payload
    got, want = decode(lazy), decode(payload)
    assert same_env(got, want)
    assert list(got.body) == list(want.body)  # the same (sorted) key order
    for a in _arrays_of(got.body):
        assert a.flags.writeable and a.flags.owndata and a.flags.c_contiguous
    return lazy


@settings(FAST, max_examples=300)
@given(envelopes)
def test_size_decoded_form_and_bytes_are_those_of_encode(message: Envelope) -> None:
    _check_like_encode(message)


# values at every boundary where msgpack changes its header
BOUNDARIES = [
    *[v for b in (0x7F, 0xFF, 0xFFFF, 2**32 - 1, 2**63 - 1) for v in (b, b + 1)],
    *[v for b in (-32, -128, -(2**15), -(2**31), -(2**63)) for v in (b, b - 1)][:-1],
    2**64 - 1,
    *["x" * n for n in (0, 31, 32, 255, 256, 65535, 65536)],
    "é" * 16,  # 32 bytes of UTF-8 in 16 characters: a str8, not a fixstr
    *[bytes(n) for n in (0, 255, 256, 65535, 65536)],
    *[list(range(n)) for n in (15, 16, 65535, 65536)],
    *[{f"k{i}": i for i in range(n)} for n in (15, 16)],
    # array ext data is 2 + 4 * ndim header bytes plus the elements
    np.zeros((), dtype=np.uint8),  # 3 bytes
    np.zeros((), dtype=np.int16),  # 4: fixext 4
    np.zeros(2, dtype=np.uint8),  # 8: fixext 8
    np.zeros(10, dtype=np.uint8),  # 16: fixext 16
    np.zeros(249, dtype=np.uint8),  # 255: ext 8
    np.zeros(250, dtype=np.uint8),  # 256: ext 16
    np.zeros(65530, dtype=np.uint8),  # 65536: ext 32
    np.zeros((3, 4), dtype=">f8"),  # big-endian: native on decode
    np.zeros((4, 3)).T,  # not contiguous
    np.float32(1.5),
    np.int64(-7),
    np.str_("numpy str"),
]


@pytest.mark.parametrize("value", BOUNDARIES, ids=lambda v: type(v).__name__)
def test_every_header_boundary_has_the_size_of_encode(value: Any) -> None:
    _check_like_encode(env(body={"x": value}))


@pytest.mark.parametrize(("value", "match"), BAD_BODIES)
def test_what_encode_refuses_is_refused_with_its_error(value: Any, match: str) -> None:
    with pytest.raises(WireError, match=match):
        encode_unpacked(env(body={"x": value}))


def test_subclasses_go_as_their_base_types() -> None:
    class Color(IntEnum):
        RED = 1

    class Name(str):
        pass

    point = namedtuple("point", "x y")
    body = {"c": Color.RED, "o": OrderedDict([("b", 1), ("a", point(2, 3))]), "n": Name("z")}
    lazy = _check_like_encode(env(body=body, sender=Name("client-1")))
    assert type(decode(lazy).sender) is str


def test_every_decode_is_its_own_copy() -> None:
    lazy = encode_unpacked(env(body={"a": np.arange(3.0), "d": {"l": [1, 2]}}))
    first = decode(lazy)
    first.body["a"][0] = 99.0
    first.body["d"]["l"].append(3)
    first.body["new"] = 1
    again = decode(lazy)
    assert again.body["a"].tolist() == [0.0, 1.0, 2.0]
    assert again.body["d"] == {"l": [1, 2]} and "new" not in again.body


def test_the_sender_changing_its_arrays_changes_nothing_sent() -> None:
    x = np.arange(4.0)
    lazy = encode_unpacked(env(body={"x": x}))
    x[:] = -1.0
    assert decode(lazy).body["x"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_size_limits_are_those_of_encode_and_decode() -> None:
    message = env(body={"a": bytes(100)})
    with pytest.raises(WireError, match="over the limit"):
        encode_unpacked(message, max_size=100)
    lazy = encode_unpacked(message)
    with pytest.raises(WireError, match="over the limit"):
        decode(lazy, max_size=len(lazy) - 1)
    assert same_env(decode(lazy, max_size=len(lazy)), message)
    with pytest.raises(WireError, match="needs an Envelope"):
        encode_unpacked({"kind": "update"})  # type: ignore[arg-type]


@settings(FAST, max_examples=30)
@given(envelopes)
def test_an_unpacked_message_survives_pickling(message: Envelope) -> None:
    lazy = encode_unpacked(message)
    copy = pickle.loads(pickle.dumps(lazy))
    assert len(copy) == len(lazy) and bytes(copy) == bytes(lazy)
    assert same(decode(copy).body, decode(lazy).body)


@given(st.integers(0, 2**63 - 1))
def test_is_never_empty_and_says_what_it_is(round_: int) -> None:
    lazy = encode_unpacked(env(round=round_))
    assert lazy and f"{len(lazy)} bytes" in repr(lazy)
