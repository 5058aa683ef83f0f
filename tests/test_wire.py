"""Tests of fedstrata.wire: exact bytes, round trips, strict decoding, determinism."""

from __future__ import annotations

import math
import struct
import subprocess
import sys
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedstrata.errors import WireError
from fedstrata.wire import (
    DTYPE_CODES,
    EXT_NDARRAY,
    KINDS,
    MAX_DEPTH,
    MAX_NDIM,
    VERSION,
    Envelope,
    decode,
    encode,
)

# ----------------------------------------------------------------------- helpers


def same(a: Any, b: Any) -> bool:
    """Structural equality: exact types, dicts ignoring key order, arrays by
    dtype/shape/bytes, floats by bit pattern (so NaN == NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return bool(a == b)


def same_env(a: Envelope, b: Envelope) -> bool:
    def head(e: Envelope) -> tuple[Any, ...]:
        return (e.v, e.kind, e.run, e.round, e.tier, e.sender)

    return head(a) == head(b) and same(a.body, b.body)


def canonical(x: Any) -> Any:
    """What a body value decodes as: lists, Python scalars, native contiguous arrays."""
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x.astype(x.dtype.newbyteorder("="))).reshape(x.shape)
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, list | tuple):
        return [canonical(v) for v in x]
    if isinstance(x, dict):
        return {k: canonical(v) for k, v in x.items()}
    return x


def env(**fields: Any) -> Envelope:
    base: dict[str, Any] = {
        "kind": "update",
        "run": "r",
        "round": 1,
        "tier": "edge",
        "sender": "c",
        "body": {},
    }
    return Envelope(**{**base, **fields})


# ------------------------------------------------------- CASES: exact bytes, by hand

CASES = [
    pytest.param(
        Envelope(kind="presence", run="r1", round=0, tier="edge", sender="c1", body={}),
        b"\x87"
        b"\xa1v\x01"
        b"\xa4kind\xa8presence"
        b"\xa3run\xa2r1"
        b"\xa5round\x00"
        b"\xa4tier\xa4edge"
        b"\xa6sender\xa2c1"
        b"\xa4body\x80",
        id="presence-empty-body",
    ),
    pytest.param(
        Envelope(
            kind="update",
            run="run-7",
            round=3,
            tier="edge",
            sender="c12",
            # inserted unsorted: the encoder sorts keys
            body={
                "xs": [1, -1, 200, -200, 70000],
                "w": -1.5,
                "tag": None,
                "ok": True,
                "n": 3,
                "blob": b"\x00\xff",
            },
        ),
        b"\x87"
        b"\xa1v\x01"
        b"\xa4kind\xa6update"
        b"\xa3run\xa5run-7"
        b"\xa5round\x03"
        b"\xa4tier\xa4edge"
        b"\xa6sender\xa3c12"
        b"\xa4body\x86"
        b"\xa4blob\xc4\x02\x00\xff"  # bin 8
        b"\xa1n\x03"
        b"\xa2ok\xc3"
        b"\xa3tag\xc0"
        b"\xa1w\xcb\xbf\xf8\x00\x00\x00\x00\x00\x00"  # float 64, -1.5
        b"\xa2xs\x95\x01\xff\xcc\xc8\xd1\xff\x38\xce\x00\x01\x11\x70",  # uint8, int16, uint32
        id="update-scalars-sorted",
    ),
    pytest.param(
        Envelope(
            kind="model",
            run="r1",
            round=7,
            tier="cloud",
            sender="cloud-0",
            body={"centers": np.array([[1.0, 2.0]], dtype=np.float32)},
        ),
        b"\x87"
        b"\xa1v\x01"
        b"\xa4kind\xa5model"
        b"\xa3run\xa2r1"
        b"\xa5round\x07"
        b"\xa4tier\xa5cloud"
        b"\xa6sender\xa7cloud-0"
        b"\xa4body\x81"
        b"\xa7centers"
        b"\xc7\x12\x01"  # ext 8, 18 bytes, type 1
        b"\x0a\x02\x01\x00\x00\x00\x02\x00\x00\x00"  # float32, ndim 2, shape (1, 2)
        b"\x00\x00\x80\x3f\x00\x00\x00\x40",  # 1.0f, 2.0f
        id="model-float32-matrix",
    ),
    pytest.param(
        Envelope(
            kind="secagg",
            run="r1",
            round=300,
            tier="fog",
            sender="nœud",
            body={
                "meta": {"z": False, "a": 1.0},
                "mask": np.arange(10, dtype=np.uint8),
                "empty": np.zeros((0, 3), dtype=np.int64),
            },
        ),
        b"\x87"
        b"\xa1v\x01"
        b"\xa4kind\xa6secagg"
        b"\xa3run\xa2r1"
        b"\xa5round\xcd\x01\x2c"  # uint 16, 300
        b"\xa4tier\xa3fog"
        b"\xa6sender\xa5n\xc5\x93ud"  # UTF-8 of "nœud"
        b"\xa4body\x83"
        b"\xa5empty\xc7\x0a\x01"  # ext 8, 10 bytes, type 1
        b"\x05\x02\x00\x00\x00\x00\x03\x00\x00\x00"  # int64, ndim 2, shape (0, 3), no data
        b"\xa4mask\xd8\x01"  # fixext 16, type 1
        b"\x06\x01\x0a\x00\x00\x00"  # uint8, ndim 1, shape (10,)
        b"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09"
        b"\xa4meta\x82\xa1a\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00\xa1z\xc2",
        id="secagg-arrays-nested",
    ),
]


@pytest.mark.parametrize(("message", "payload"), CASES)
def test_encode_exact_bytes(message: Envelope, payload: bytes) -> None:
    assert encode(message) == payload


@pytest.mark.parametrize(("message", "payload"), CASES)
def test_decode_exact_bytes(message: Envelope, payload: bytes) -> None:
    assert same_env(decode(payload), message)


def test_decode_accepts_bytes_like() -> None:
    payload = CASES[2].values[1]
    for view in (bytearray(payload), memoryview(payload)):
        assert same_env(decode(view), CASES[2].values[0])


def test_kinds_registry() -> None:
    assert set(KINDS) == {"update", "model", "presence", "control", "secagg"}
    assert all(isinstance(d, str) and d for d in KINDS.values())
    assert VERSION == 1
    assert EXT_NDARRAY == 1


def test_dtype_table() -> None:
    names = [dt.name for dt in DTYPE_CODES.values()]
    assert names == [
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float32",
        "float64",
    ]
    assert list(DTYPE_CODES) == list(range(1, 12))
    assert all(dt == dt.newbyteorder("<") for dt in DTYPE_CODES.values())


# ---------------------------------------------------------------------- arrays


@pytest.mark.parametrize("code", list(DTYPE_CODES))
def test_array_layout_every_dtype(code: int) -> None:
    dt = DTYPE_CODES[code]
    arr = np.arange(6).reshape(2, 3).astype(dt)
    ext = msgpack.unpackb(encode(env(body={"a": arr})))["body"]["a"]
    assert isinstance(ext, msgpack.ExtType)
    assert ext.code == EXT_NDARRAY
    assert ext.data[:10] == bytes([code, 2]) + struct.pack("<2I", 2, 3)
    assert ext.data[10:] == arr.astype(dt.newbyteorder("<")).tobytes()


def test_noncontiguous_and_bigendian_encode_like_contiguous_native() -> None:
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    reference = encode(env(body={"a": np.ascontiguousarray(base[:, ::2])}))
    assert encode(env(body={"a": base[:, ::2]})) == reference
    assert encode(env(body={"a": base[:, ::2].astype(">f8")})) == reference
    assert encode(env(body={"a": np.asfortranarray(base[:, ::2])})) == reference
    out = decode(reference).body["a"]
    np.testing.assert_array_equal(out, base[:, ::2])


def test_decoded_arrays_are_writable_owned_copies() -> None:
    payload = encode(env(body={"a": np.arange(5, dtype=np.int32), "z": np.array(2.5)}))
    out = decode(payload).body
    for arr in out.values():
        assert arr.flags.writeable
        assert arr.flags.owndata
        assert arr.flags.c_contiguous
        assert arr.dtype.isnative
    out["a"][0] = 99
    assert decode(payload).body["a"][0] == 0
    assert out["z"].shape == ()


def test_max_ndim_roundtrips() -> None:
    arr = np.ones((1,) * MAX_NDIM, dtype=np.int8)
    assert same(decode(encode(env(body={"a": arr}))).body["a"], arr)


def test_numpy_scalars_become_python_scalars() -> None:
    body = {
        "b": np.bool_(True),
        "i": np.int16(-3),
        "u": np.uint64(2**64 - 1),
        "f": np.float32(0.5),
        "h": np.float16(1.5),
        "s": np.str_("x"),
        "y": np.bytes_(b"y"),
    }
    out = decode(encode(env(body=body))).body
    assert same(out, {"b": True, "i": -3, "u": 2**64 - 1, "f": 0.5, "h": 1.5, "s": "x", "y": b"y"})


def test_int_range_edges_roundtrip() -> None:
    body = {"lo": -(2**63), "hi": 2**64 - 1, "round": 2**63 - 1}
    assert same(decode(encode(env(body=body, round=2**63 - 1))).body, body)


# ------------------------------------------------------------------- hypothesis

ALL_DTYPES = [*DTYPE_CODES.values(), *(dt.newbyteorder(">") for dt in DTYPE_CODES.values())]
names = st.text(min_size=1, max_size=12)
arrays = st.sampled_from(ALL_DTYPES).flatmap(
    lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=3))
)
numpy_scalars = st.sampled_from(list(DTYPE_CODES.values())).flatmap(
    lambda dt: hnp.arrays(dt, ()).map(lambda a: a[()])
)
leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=10)
    | st.binary(max_size=16)
    | arrays
    | numpy_scalars
)
values = st.recursive(
    leaves,
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)
envelopes = st.builds(
    Envelope,
    kind=st.sampled_from(sorted(KINDS)),
    run=names,
    round=st.integers(0, 2**63 - 1),
    tier=names,
    sender=names,
    body=st.dictionaries(st.text(max_size=8), values, max_size=5),
)
FAST = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(FAST, max_examples=150)
@given(envelopes)
def test_roundtrip(message: Envelope) -> None:
    payload = encode(message)
    out = decode(payload)
    expected = Envelope(
        kind=message.kind,
        run=message.run,
        round=message.round,
        tier=message.tier,
        sender=message.sender,
        body=canonical(message.body),
    )
    assert same_env(out, expected)
    assert encode(out) == payload  # decoding then encoding is the identity on bytes


def _decode_or_wire_error(payload: bytes) -> None:
    try:
        out = decode(payload)
    except WireError:
        return
    assert isinstance(out, Envelope)


@settings(FAST, max_examples=300)
@given(st.binary(max_size=200))
def test_fuzz_random_bytes(payload: bytes) -> None:
    _decode_or_wire_error(payload)
    _decode_or_wire_error(CASES[0].values[1][:20] + payload)


@pytest.mark.slow
@settings(FAST, max_examples=200)
@given(envelopes, st.data())
def test_fuzz_truncations_and_bit_flips(message: Envelope, data: st.DataObject) -> None:
    payload = encode(message)
    cut = data.draw(st.integers(0, len(payload) - 1), label="cut")
    with pytest.raises(WireError):
        decode(payload[:cut])
    flips = data.draw(
        st.lists(
            st.tuples(st.integers(0, len(payload) - 1), st.integers(0, 7)), min_size=1, max_size=4
        ),
        label="flips",
    )
    mutated = bytearray(payload)
    for pos, bit in flips:
        mutated[pos] ^= 1 << bit
    _decode_or_wire_error(bytes(mutated))


ext_junk = st.builds(
    lambda code, dtype, ndim, dims, tail: msgpack.ExtType(
        code, bytes([dtype, ndim]) + b"".join(struct.pack("<I", d) for d in dims) + tail
    ),
    st.sampled_from([EXT_NDARRAY, EXT_NDARRAY, EXT_NDARRAY, 0, 2, 127]),
    st.integers(0, 255),
    st.integers(0, 10),
    st.lists(st.sampled_from([0, 1, 2, 3, 2**31, 2**32 - 1]), max_size=10),
    st.binary(max_size=24),
)
junk = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=4)
    | st.binary(max_size=4)
    | ext_junk,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(max_size=3) | st.binary(max_size=2), children, max_size=3)
    ),
    max_leaves=8,
)
GOOD_FIELDS: dict[str, Any] = {
    "v": 1,
    "kind": "update",
    "run": "r",
    "round": 1,
    "tier": "edge",
    "sender": "c",
    "body": {},
}


@settings(FAST, max_examples=200)
@given(st.dictionaries(st.sampled_from([*GOOD_FIELDS, "sig"]), junk, max_size=8))
def test_fuzz_structured(fields: dict[str, Any]) -> None:
    _decode_or_wire_error(msgpack.packb({**GOOD_FIELDS, **fields}, use_bin_type=True))
    _decode_or_wire_error(msgpack.packb({**GOOD_FIELDS, "body": fields}, use_bin_type=True))


# ------------------------------------------------------------ strict decoding

# The head of a valid envelope up to and including the "body" key, written by hand;
# HEAD + b"\x80" is valid, so each bad body below fails for its own reason only.
HEAD = (
    b"\x87\xa1v\x01\xa4kind\xa6update\xa3run\xa1r\xa5round\x01"
    b"\xa4tier\xa4edge\xa6sender\xa1c\xa4body"
)
VALID = HEAD + b"\x80"


def packed(drop: tuple[str, ...] = (), **changes: Any) -> bytes:
    fields = {**GOOD_FIELDS, **changes}
    for key in drop:
        del fields[key]
    return msgpack.packb(fields, use_bin_type=True)


def with_ext(data: bytes, code: int = EXT_NDARRAY) -> bytes:
    return packed(body={"a": msgpack.ExtType(code, data)})


def test_helpers_build_valid_messages() -> None:
    assert same_env(decode(VALID), env())
    assert same_env(decode(packed()), env())
    good = with_ext(b"\x0b\x01\x01\x00\x00\x00" + struct.pack("<d", 2.5))
    assert same(decode(good).body["a"], np.array([2.5]))


F64_1 = b"\x0b\x01\x01\x00\x00\x00"  # float64, ndim 1, shape (1,)
BAD_PAYLOADS = [
    # framing
    pytest.param(b"", "malformed", id="empty"),
    pytest.param(b"\xc1", "malformed", id="reserved-byte"),
    pytest.param(b"not msgpack at all", "malformed", id="garbage"),
    pytest.param(VALID[:-1], "malformed", id="truncated"),
    pytest.param(VALID[:5], "malformed", id="truncated-early"),
    pytest.param(VALID + b"\x00", "malformed", id="trailing-bytes"),
    pytest.param(VALID + VALID, "malformed", id="two-messages"),
    pytest.param(msgpack.packb([1, 2]), "must be a map", id="not-a-map-array"),
    pytest.param(b"\x01", "must be a map", id="not-a-map-int"),
    # envelope keys
    pytest.param(packed(drop=("sender",)), "missing", id="missing-key"),
    pytest.param(packed(drop=("body",)), "missing", id="missing-body"),
    pytest.param(packed(drop=("v",)), "missing key 'v'", id="missing-version"),
    pytest.param(packed(sig=b"\x00" * 64), "unknown keys", id="extra-key-sig"),
    pytest.param(packed(extra=1), "unknown keys", id="extra-key"),
    pytest.param(b"\x88" + VALID[1:] + b"\xa1v\x01", "duplicate", id="duplicate-envelope-key"),
    pytest.param(msgpack.packb({1: 2}), "map key", id="non-str-top-key"),
    # envelope field types and values
    pytest.param(packed(v=2), "version 2", id="version-2"),
    pytest.param(packed(v=0), "version 0", id="version-0"),
    pytest.param(packed(v=2, sig=b""), "version 2", id="version-2-reported-first"),
    pytest.param(packed(v="1"), "'v' must be an int", id="version-str"),
    pytest.param(packed(v=True), "'v' must be an int", id="version-bool"),
    pytest.param(packed(v=1.0), "'v' must be an int", id="version-float"),
    pytest.param(packed(kind="gossip"), "unknown message kind", id="unknown-kind"),
    pytest.param(packed(kind=1), "'kind' must be a str", id="kind-int"),
    pytest.param(packed(kind=b"update"), "'kind' must be a str", id="kind-bytes"),
    pytest.param(packed(run=b"r"), "'run' must be a str", id="run-bytes"),
    pytest.param(packed(run=""), "'run' must not be empty", id="run-empty"),
    pytest.param(packed(tier=5), "'tier' must be a str", id="tier-int"),
    pytest.param(packed(tier=""), "'tier' must not be empty", id="tier-empty"),
    pytest.param(packed(sender=None), "'sender' must be a str", id="sender-none"),
    pytest.param(packed(sender=""), "'sender' must not be empty", id="sender-empty"),
    pytest.param(packed(round=float("nan")), "'round' must be an int", id="round-nan"),
    pytest.param(packed(round=1.0), "'round' must be an int", id="round-float"),
    pytest.param(packed(round=True), "'round' must be an int", id="round-bool"),
    pytest.param(packed(round=None), "'round' must be an int", id="round-none"),
    pytest.param(packed(round=-1), r"'round' must be in", id="round-negative"),
    pytest.param(packed(round=2**63), r"'round' must be in", id="round-too-big"),
    pytest.param(packed(body=[]), "'body' must be a dict", id="body-list"),
    pytest.param(packed(body=None), "'body' must be a dict", id="body-none"),
    # body maps and values
    pytest.param(HEAD + b"\x81\x01\x02", "map key", id="int-key"),
    pytest.param(HEAD + b"\x81\xc4\x01k\x01", "map key", id="bytes-key"),
    pytest.param(HEAD + b"\x81\xa1a\x81\xc3\x01", "map key", id="nested-bool-key"),
    pytest.param(HEAD + b"\x82\xa1a\x01\xa1a\x02", "duplicate", id="duplicate-body-key"),
    pytest.param(HEAD + b"\x81\xa1a\xa1\xff", "malformed", id="invalid-utf8"),
    pytest.param(HEAD + b"\x81\xa1t\xd6\xff\x00\x00\x00\x01", "Timestamp", id="timestamp-ext"),
    pytest.param(HEAD + b"\x81\xa1a" + b"\x91" * MAX_DEPTH + b"\xc0", "deeper", id="too-deep"),
    pytest.param(HEAD + b"\x81\xa1a" + b"\x91" * 5000 + b"\xc0", "malformed", id="msgpack-stack"),
    # array ext
    pytest.param(with_ext(F64_1 + bytes(8), code=2), "ext type code 2", id="unknown-ext-code"),
    pytest.param(HEAD + b"\x81\xa1a\xd4\xfb\x00", "ext type code -5", id="negative-ext-code"),
    pytest.param(with_ext(b""), "truncated array header", id="ext-empty"),
    pytest.param(with_ext(b"\x0b"), "truncated array header", id="ext-one-byte"),
    pytest.param(with_ext(b"\x00\x00\x00"), "dtype code 0", id="dtype-code-0"),
    pytest.param(with_ext(b"\x0c\x00" + bytes(8)), "dtype code 12", id="dtype-code-12"),
    pytest.param(with_ext(b"\xff\x00" + bytes(8)), "dtype code 255", id="dtype-code-255"),
    pytest.param(
        with_ext(b"\x0b\x09" + b"\x01\x00\x00\x00" * 9 + bytes(8)), "9 dimensions", id="ndim-9"
    ),
    pytest.param(with_ext(b"\x0b\x02\x01\x00\x00\x00"), "truncated array header", id="dims-cut"),
    pytest.param(
        with_ext(b"\x0b\x01\x02\x00\x00\x00" + bytes(8)), "data is 8 bytes", id="data-short"
    ),
    pytest.param(with_ext(F64_1 + bytes(16)), "data is 16 bytes", id="data-long"),
    pytest.param(with_ext(F64_1), "data is 0 bytes", id="data-missing"),
    pytest.param(
        with_ext(b"\x0b\x01" + b"\xff\xff\xff\xff" + bytes(8)), "needs 34359738360", id="dim-max"
    ),
    pytest.param(
        with_ext(b"\x0b\x08" + b"\xff\xff\xff\xff" * 8 + bytes(8)),
        "data is 8 bytes",
        id="huge-dims",
    ),
    pytest.param(
        with_ext(b"\x0b\x08" + b"\x00" * 4 + b"\xff\xff\xff\xff" * 7),
        "cannot build array",
        id="zero-size-overflowing-dims",
    ),
    pytest.param(with_ext(b"\x01\x01\x01\x00\x00\x00\x02"), "bool array", id="bool-byte-2"),
]


@pytest.mark.parametrize(("payload", "match"), BAD_PAYLOADS)
def test_decode_rejects(payload: bytes, match: str) -> None:
    with pytest.raises(WireError, match=match):
        decode(payload)


def test_decode_rejects_oversized() -> None:
    with pytest.raises(WireError, match="over the limit"):
        decode(VALID, max_size=len(VALID) - 1)
    assert same_env(decode(VALID, max_size=len(VALID)), env())


def test_decode_rejects_non_contiguous_buffer() -> None:
    with pytest.raises(WireError):
        decode(memoryview(VALID + VALID)[::2])


@pytest.mark.parametrize("payload", ["text", None, 3, [1]], ids=repr)
def test_decode_rejects_non_bytes(payload: Any) -> None:
    with pytest.raises(WireError, match="payload must be bytes"):
        decode(payload)


# ------------------------------------------------------------- strict encoding


def _self_referential() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


def _nested(depth: int) -> Any:
    value: Any = None
    for _ in range(depth):
        value = [value]
    return value


BAD_BODIES = [
    pytest.param(np.array([object()]), "dtype object", id="object-array"),
    pytest.param(np.zeros(2, dtype=np.complex128), "dtype complex128", id="complex-array"),
    pytest.param(np.zeros(2, dtype=[("a", "<i4")]), "cannot encode array", id="structured-array"),
    pytest.param(np.zeros(2, dtype=np.float16), "dtype float16", id="float16-array"),
    pytest.param(np.zeros(2, dtype="M8[s]"), "cannot encode array", id="datetime-array"),
    pytest.param(np.array(["abc"]), "cannot encode array", id="str-array"),
    pytest.param(np.zeros((1,) * (MAX_NDIM + 1)), "9 dimensions", id="ndim-9"),
    pytest.param(np.ma.masked_array([1, 2]), "subclass", id="masked-array"),
    pytest.param({1: "a"}, "keys must be str", id="int-key"),
    pytest.param({"a": {b"k": 1}}, "keys must be str", id="nested-bytes-key"),
    pytest.param({1, 2}, "type set", id="set"),
    pytest.param(1j, "type complex", id="complex"),
    pytest.param(np.complex64(1), "numpy scalar", id="numpy-complex"),
    pytest.param(np.datetime64("2020-01-01"), "numpy scalar", id="numpy-datetime"),
    pytest.param(np.timedelta64(5, "ns"), "numpy scalar", id="numpy-timedelta"),
    pytest.param(2**64, "64-bit range", id="int-too-big"),
    pytest.param(-(2**63) - 1, "64-bit range", id="int-too-small"),
    pytest.param("\ud800", "cannot encode message", id="lone-surrogate"),
    pytest.param(bytearray(b"x"), "type bytearray", id="bytearray"),
    pytest.param(object(), "type object", id="object"),
    pytest.param(_self_referential(), "deeper", id="self-referential"),
    pytest.param(_nested(MAX_DEPTH), "deeper", id="too-deep"),
]
if np.dtype(np.longdouble).itemsize > 8:
    BAD_BODIES.append(pytest.param(np.longdouble(1), "numpy scalar", id="longdouble"))


@pytest.mark.parametrize(("value", "match"), BAD_BODIES)
def test_encode_rejects(value: Any, match: str) -> None:
    with pytest.raises(WireError, match=match):
        encode(env(body={"x": value}))


def test_depth_limit_is_the_same_both_ways() -> None:
    deepest_ok = _nested(MAX_DEPTH - 1)  # the body itself is level 1
    payload = encode(env(body={"x": deepest_ok}))
    assert same(decode(payload).body["x"], deepest_ok)
    assert payload == HEAD[:-5] + b"\xa4body\x81\xa1x" + b"\x91" * (MAX_DEPTH - 1) + b"\xc0"


def test_encode_rejects_non_envelope_and_oversized() -> None:
    with pytest.raises(WireError, match="needs an Envelope"):
        encode({"kind": "update"})  # type: ignore[arg-type]
    with pytest.raises(WireError, match="over the limit"):
        encode(env(body={"a": bytes(100)}), max_size=100)


def test_subclasses_encode_as_base_types() -> None:
    from collections import OrderedDict
    from enum import IntEnum

    class Color(IntEnum):
        RED = 1

    body = {"c": Color.RED, "o": OrderedDict([("b", 1), ("a", (2, 3))])}
    assert encode(env(body=body)) == encode(env(body={"c": 1, "o": {"a": [2, 3], "b": 1}}))


BAD_ENVELOPES = [
    pytest.param({"v": 2}, "version 2", id="v-2"),
    pytest.param({"v": "1"}, "'v' must be an int", id="v-str"),
    pytest.param({"v": True}, "'v' must be an int", id="v-bool"),
    pytest.param({"kind": "gossip"}, "unknown message kind", id="kind-unknown"),
    pytest.param({"kind": None}, "'kind' must be a str", id="kind-none"),
    pytest.param({"run": ""}, "'run' must not be empty", id="run-empty"),
    pytest.param({"run": b"r"}, "'run' must be a str", id="run-bytes"),
    pytest.param({"tier": ""}, "'tier' must not be empty", id="tier-empty"),
    pytest.param({"sender": None}, "'sender' must be a str", id="sender-none"),
    pytest.param({"round": -1}, "'round' must be in", id="round-negative"),
    pytest.param({"round": 2**63}, "'round' must be in", id="round-too-big"),
    pytest.param({"round": 1.0}, "'round' must be an int", id="round-float"),
    pytest.param({"round": math.nan}, "'round' must be an int", id="round-nan"),
    pytest.param({"round": True}, "'round' must be an int", id="round-bool"),
    pytest.param({"round": np.int64(1)}, "'round' must be an int", id="round-numpy"),
    pytest.param({"body": []}, "'body' must be a dict", id="body-list"),
    pytest.param({"body": None}, "'body' must be a dict", id="body-none"),
]


@pytest.mark.parametrize(("fields", "match"), BAD_ENVELOPES)
def test_envelope_validates_on_construction(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(WireError, match=match):
        env(**fields)


def test_envelope_is_frozen() -> None:
    message = env()
    with pytest.raises(AttributeError):
        message.round = 2  # type: ignore[misc]
    assert message.v == VERSION
    default = Envelope(kind="control", run="r", round=0, tier="cloud", sender="s")
    assert default.body == {}


# ------------------------------------------------------------------ determinism


def test_dict_insertion_order_does_not_matter() -> None:
    arr = np.arange(4.0)
    a = {"z": 1, "a": {"y": [1, {"q": 1, "p": 2}], "b": arr}, "m": None}
    b = {"m": None, "a": {"b": arr.copy(), "y": [1, {"p": 2, "q": 1}]}, "z": 1}
    assert list(a) != list(b)
    assert encode(env(body=a)) == encode(env(body=b))


def test_byte_identical_across_processes() -> None:
    script = (
        "import numpy as np; from fedstrata.wire import Envelope, encode; "
        "b = {k: [k, {k * 2: np.arange(3, dtype=np.int16)}] for k in 'qwertyuiop'}; "
        "e = Envelope(kind='update', run='r', round=1, tier='t', sender='s', body=b); "
        "print(encode(e).hex())"
    )
    body = {k: [k, {k * 2: np.arange(3, dtype=np.int16)}] for k in "qwertyuiop"}
    expected = encode(Envelope(kind="update", run="r", round=1, tier="t", sender="s", body=body))
    for seed in ("0", "12345"):
        out = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        )
        assert bytes.fromhex(out.stdout.strip()) == expected


@settings(max_examples=200, deadline=None)
@given(
    dtype=st.sampled_from(["<f8", ">f8", "<f4", ">i4", "|u1", "|b1", "<i8", ">u2"]),
    shape=st.lists(st.integers(0, 4), min_size=0, max_size=3),
    transpose=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_a_remembered_array_header_packs_the_bytes_of_the_checked_path(
    dtype, shape, transpose, seed
):
    from fedstrata import wire as w

    a = (np.random.default_rng(seed).random(shape) * 100).astype(dtype)
    if transpose:
        a = a.T  # not C-contiguous
    w._HEADERS.clear()
    first, again = w._pack_array(a), w._pack_array(a)  # the second from the remembered header
    want = w._pack_array_checked(a)
    assert first == want and again == want and type(again) is type(want)
