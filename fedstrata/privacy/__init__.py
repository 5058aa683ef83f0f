"""Secure aggregation and differential privacy (sans-IO).

Secure aggregation (numpy, PyNaCl and the standard library only; no I/O):

* :mod:`fedstrata.privacy.fixedpoint`: floats ↔ integers modulo 2**k, with a headroom
  rule so that sums never wrap silently.
* :mod:`fedstrata.privacy.shamir`: t-of-n Shamir sharing of 32-byte secrets over
  GF(2**31 - 1).
* :mod:`fedstrata.privacy.prg`: seed → ``uint64`` mask vector (libsodium's ChaCha20).
* :mod:`fedstrata.privacy.secagg`: SecAgg (Bonawitz et al., 2017) and SecAgg+ (Bell
  et al., 2020) client and server state machines for one aggregation group.
"""
