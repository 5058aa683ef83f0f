"""t-of-n Shamir secret sharing of 32-byte secrets over the Mersenne prime field GF(2**31 - 1).

Field and layout
----------------
The field is GF(p) with p = 2**31 - 1 (the Mersenne prime M31). A 32-byte secret is
cut into 16 little-endian 16-bit chunks. Every chunk is below p, so each one is a
field element. Each chunk is shared with its own independent random polynomial of
degree ``t - 1`` whose constant term is the chunk ("Shamir, How to share a secret",
CACM 1979, applied chunk-wise). A share is the 16 evaluations at the holder's id,
written as little-endian uint32: :data:`SHARE_BYTES` = 64 bytes.

Why this prime: products of two field elements stay below 2**62, so sharing and
reconstruction are vectorised int64 numpy, with no Python big integers. Splitting
among 1,000 holders with t = 500 takes a few tens of milliseconds. Share ids are
ints in ``1 .. p - 1``, more than any aggregation group needs.

Security
--------
Each chunk is shared with a fresh uniform polynomial, so any ``t - 1`` shares are
uniformly distributed whatever the secret is (perfect hiding, chunk by chunk). That
is the whole claim. Shares carry no authentication: a holder who lies about its
share changes the reconstructed secret. :func:`combine` notices when a result chunk
is not a 16-bit value. Shares that do not lie on one polynomial almost always
produce such a chunk, but a careful liar can avoid it. Callers that need integrity
must check the result against a commitment, as the SecAgg server does with a hash of
``b`` and the public key of ``s``.

Randomness comes from :func:`os.urandom`. Coefficients are drawn by rejection
sampling, so they are exactly uniform in ``[0, p)``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Final

import numpy as np
from numpy.typing import NDArray

from fedstrata.errors import PrivacyError, ValidationError

__all__ = [
    "CHUNKS",
    "PRIME",
    "SECRET_BYTES",
    "SHARE_BYTES",
    "InsufficientSharesError",
    "InvalidShareError",
    "combine",
    "split",
]

PRIME: Final = 2**31 - 1
"""The field modulus p, the Mersenne prime 2**31 - 1."""

SECRET_BYTES: Final = 32
"""The length of a secret in bytes."""

CHUNKS: Final = SECRET_BYTES // 2
"""Field elements per secret: one per 16-bit chunk."""

SHARE_BYTES: Final = 4 * CHUNKS
"""The length of one share in bytes (16 uint32)."""

_P = np.int64(PRIME)


class InsufficientSharesError(PrivacyError):
    """Fewer shares than the threshold were given."""


class InvalidShareError(PrivacyError, ValueError):
    """A share is malformed, or the shares do not reconstruct a valid secret."""


def _check_id(share_id: object) -> int:
    if type(share_id) is int and 0 < share_id < PRIME:  # the common case, fast
        return share_id
    if isinstance(share_id, bool) or not isinstance(share_id, int | np.integer):
        raise ValidationError(f"a share id must be an int, got {share_id!r}")
    if not 1 <= share_id < PRIME:
        raise ValidationError(f"a share id must be in 1..{PRIME - 1}, got {share_id}")
    return int(share_id)


def _check_threshold(t: object) -> int:
    if isinstance(t, bool) or not isinstance(t, int | np.integer) or t < 1:
        raise ValidationError(f"the threshold must be a positive int, got {t!r}")
    return int(t)


def _random_field(shape: tuple[int, ...]) -> NDArray[np.int64]:
    """Uniform field elements from os.urandom (31 random bits, the value p rejected)."""
    size = int(np.prod(shape))
    out = np.frombuffer(os.urandom(4 * size), dtype="<u4").astype(np.int64) & 0x7FFFFFFF
    bad = out == _P
    while bad.any():
        fresh = np.frombuffer(os.urandom(4 * int(bad.sum())), dtype="<u4").astype(np.int64)
        out[bad] = fresh & 0x7FFFFFFF
        bad = out == _P
    return out.reshape(shape)


def _prod_mod(matrix: NDArray[np.int64]) -> NDArray[np.int64]:
    """Row products modulo p by pairwise (tree) reduction."""
    while matrix.shape[1] > 1:
        if matrix.shape[1] % 2:
            matrix = np.concatenate([matrix, np.ones((matrix.shape[0], 1), np.int64)], axis=1)
        matrix = matrix[:, 0::2] * matrix[:, 1::2] % _P
    return matrix[:, 0]


def _inv_mod(values: NDArray[np.int64]) -> NDArray[np.int64]:
    """Inverses modulo p by Fermat (values**(p-2)), vectorised square-and-multiply."""
    result = np.ones_like(values)
    base = values % _P
    exponent = PRIME - 2
    while exponent:
        if exponent & 1:
            result = result * base % _P
        base = base * base % _P
        exponent >>= 1
    return result


@lru_cache(maxsize=4096)
def _lagrange_at_zero(ids: tuple[int, ...]) -> NDArray[np.int64]:
    """Coefficients λ_i with f(0) = Σ λ_i f(x_i) for distinct nonzero ``ids``."""
    x = np.asarray(ids, dtype=np.int64)
    diff = (x[None, :] - x[:, None]) % _P  # diff[i, j] = x_j - x_i
    np.fill_diagonal(diff, 1)
    den = _prod_mod(diff)  # Π_{j≠i} (x_j - x_i)
    total = _prod_mod(x[None, :])[0]  # Π_j x_j
    lam = total * _inv_mod(x * den % _P) % _P  # Π_{j≠i} x_j / Π_{j≠i} (x_j - x_i)
    lam.setflags(write=False)
    return lam


def split(secret: bytes, t: int, share_ids: Iterable[int]) -> dict[int, bytes]:
    """Split a 32-byte secret into shares; any ``t`` of them recover it.

    Parameters
    ----------
    secret
        Exactly :data:`SECRET_BYTES` bytes.
    t
        The threshold, ``1 <= t <= len(share_ids)``. Fewer than ``t`` shares reveal
        nothing about the secret. With ``t = 1`` every share *is* the secret.
    share_ids
        Distinct ints in ``1 .. PRIME - 1``, the x-coordinates of the holders.

    Returns
    -------
    dict
        ``{share_id: share}``, each share :data:`SHARE_BYTES` bytes, in the order of
        ``share_ids``.

    Raises
    ------
    ValidationError
        Wrong secret length, invalid or duplicate ids, or an invalid threshold.
    """
    if not isinstance(secret, bytes | bytearray) or len(secret) != SECRET_BYTES:
        raise ValidationError(f"a secret must be {SECRET_BYTES} bytes")
    t = _check_threshold(t)
    ids = [_check_id(i) for i in share_ids]
    if len(set(ids)) != len(ids):
        raise ValidationError("share ids must be distinct")
    if t > len(ids):
        raise ValidationError(f"threshold {t} exceeds the number of shares {len(ids)}")
    chunks = np.frombuffer(bytes(secret), dtype="<u2").astype(np.int64)
    coefs = _random_field((t - 1, CHUNKS))  # degree 1 .. t-1
    x = np.asarray(ids, dtype=np.int64)[:, None]
    acc = np.zeros((len(ids), CHUNKS), dtype=np.int64)
    for row in coefs[::-1]:  # Horner: acc = (acc + c_j) * x, for j = t-1 .. 1
        acc += row
        acc *= x
        acc %= _P
    acc += chunks
    acc %= _P
    raw = acc.astype("<u4")
    return {i: raw[k].tobytes() for k, i in enumerate(ids)}


def _parse_shares(shares: list[object]) -> NDArray[np.int64]:
    if not all(isinstance(s, bytes | bytearray) and len(s) == SHARE_BYTES for s in shares):
        raise InvalidShareError(f"a share must be {SHARE_BYTES} bytes")
    raw = np.frombuffer(b"".join(shares), dtype="<u4")  # type: ignore[arg-type]
    values = raw.reshape(len(shares), CHUNKS).astype(np.int64)
    if (values >= _P).any():
        raise InvalidShareError("a share holds a value outside the field")
    return values


def combine(shares: Mapping[int, bytes], t: int) -> bytes:
    """Recover the secret from at least ``t`` shares made by :func:`split` with ``t``.

    The ``t`` shares with the smallest ids are used; any others are ignored (not
    checked against the polynomial).

    Raises
    ------
    InsufficientSharesError
        Fewer than ``t`` shares.
    ValidationError
        An invalid id or threshold.
    InvalidShareError
        A malformed share, or shares that reconstruct a value that is not a secret
        (they were not made together, or one was altered).
    """
    t = _check_threshold(t)
    ids = sorted(_check_id(i) for i in shares)
    if len(ids) < t:
        raise InsufficientSharesError(f"{len(ids)} share(s) given, {t} needed")
    used = tuple(ids[:t])
    ys = _parse_shares([shares[i] for i in used])
    lam = _lagrange_at_zero(used)
    chunks = (lam[:, None] * ys % _P).sum(axis=0) % _P  # t * 2**31 < 2**63 for t < 2**32
    if (chunks >= 1 << 16).any():
        raise InvalidShareError("the shares are inconsistent: they do not encode a secret")
    return chunks.astype("<u2").tobytes()
