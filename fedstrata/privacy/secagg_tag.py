"""The check tag of a SecAgg masked input: one word that exposes a garbage masking.

Each client appends one word to its encoded input ``q`` before masking it:
``tag = 1 + Σ_j c_j q_j mod 2**k``, with public odd coefficients ``c`` derived from
the session id (:func:`check_tag`). The tag is masked with the input, so the server
sees only the survivors' sum, ``|U3| + Σ_j c_j Q_j``, where ``Q`` is the unmasked sum,
and :meth:`SecAggServer.finish` refuses a sum whose tag differs
(:class:`CheckTagError`). A masked vector that is not the masking of an encoded input
(uniformly random words, a corrupted or truncated vector, masks of another session)
changes the unmasked tag word by a uniformly random amount given the other words, so
it passes with probability exactly ``2**-k`` (``k = 64``: about 5e-20). Then
:func:`fedstrata.privacy.fixedpoint.decode` checks the range of the sum. What neither
check catches: a client that knows the protocol can mask any vector it likes, with a
matching tag (the coefficients are public to the members); only the range of the
*sum* bounds what it adds. A range proof per client would be needed to stop that.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

from fedstrata.privacy import prg

__all__ = ["check_tag"]

_CHECK_LABEL: Final = b"fedstrata.sa.ck"


def _check_coefficients(session: bytes, length: int) -> NDArray[np.uint64]:
    """The check tag's public coefficients: ``length`` odd words derived from the session."""
    seed = prg.derive_seed(session, label=_CHECK_LABEL)
    return prg.expand(seed, length) | np.uint64(1)


def check_tag(encoded: NDArray[np.uint64], session: bytes, modulus_bits: int) -> np.uint64:
    """One member's check tag: ``1 + Σ_j c_j q_j mod 2**k`` over its encoded input ``q``.

    The tag is linear in ``q``, so the tags of the survivors add up to
    ``|U3| + Σ_j c_j Q_j`` where ``Q`` is the unmasked sum: :meth:`SecAggServer.finish`
    checks exactly that (see "Check tag" in the module docstring).
    """
    c = _check_coefficients(session, encoded.shape[0])
    with np.errstate(over="ignore"):
        tag = np.uint64(1) + np.sum(c * encoded, dtype=np.uint64)
    return tag & np.uint64((1 << modulus_bits) - 1)
