"""Decoded model messages shared by the clients of one federation.

In a simulation or an in-process MQTT run, every client under an aggregator receives
the same model payload: a :class:`SharedDecoder`, made once per federation by the
builder and handed to each of its clients, parses it once and gives each client its
own copy of the body. A client given none decodes every payload itself; nothing is
shared between federations or through module state.
"""

from __future__ import annotations

import threading
from typing import Any

from fedstrata import wire

__all__ = ["SharedDecoder"]


class SharedDecoder:
    """``wire.decode`` with the small payloads parsed once (per instance).

    ``entries``: payloads remembered (more than the groups broadcasting at once in a
    large run); ``max_bytes``: larger payloads are parsed each time (their parsing is
    dominated by copying anyway).
    """

    def __init__(self, *, entries: int = 512, max_bytes: int = 16 * 1024) -> None:
        self.entries = entries
        self.max_bytes = max_bytes
        self._envelopes: dict[bytes, wire.Envelope] = {}
        self._lock = threading.Lock()  # the clients of an MQTT run decode from threads

    def __reduce__(self) -> tuple[Any, ...]:
        """A copy (a pickled node, a snapshot) starts with nothing remembered."""
        return _new_decoder, (self.entries, self.max_bytes)

    def decode(self, payload: bytes | wire.Unpacked) -> wire.Envelope:
        """``wire.decode(payload)``, parsed once for small payloads.

        The envelope returned is the caller's own: its body's dicts, lists and arrays
        are fresh copies (as :func:`wire.decode` makes them), so changing it changes
        nothing for the next caller. Payloads that do not decode are not remembered
        (WireError each time). An :class:`~fedstrata.wire.Unpacked` message is never
        parsed: :func:`wire.decode` copies it.
        """
        if type(payload) is not bytes or len(payload) > self.max_bytes:
            return wire.decode(payload)
        env = self._envelopes.get(payload)
        if env is None:
            env = wire.decode(payload)
            with self._lock:
                if len(self._envelopes) >= self.entries:  # oldest first: one delivery's together
                    del self._envelopes[next(iter(self._envelopes))]
                self._envelopes[payload] = env
        return wire.Envelope(
            v=env.v,
            kind=env.kind,
            run=env.run,
            round=env.round,
            tier=env.tier,
            sender=env.sender,
            body=wire.copy_body(env.body),
        )


def _new_decoder(entries: int, max_bytes: int) -> SharedDecoder:
    """An empty decoder with these settings (what a copy of one starts as)."""
    return SharedDecoder(entries=entries, max_bytes=max_bytes)
