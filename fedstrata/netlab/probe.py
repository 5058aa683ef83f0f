"""Time single messages over one real TCP connection: what one lost segment costs.

``python -m fedstrata.netlab.probe serve PORT [CC]`` answers every message (a 4-byte length
and a body) with one byte; ``python -m fedstrata.netlab.probe send HOST PORT SIZE N [CC]``
sends ``N`` messages of ``SIZE`` bytes one after another, each after the previous
answer, and prints one line of JSON: the round-trip time of each, in seconds. Run in
two namespaces of a lab (``CC``: a congestion control for the socket, e.g. ``cubic``)
 whose link drops packets, the distribution shows the
retransmission delays of the kernel's TCP (tail loss probe, RTO, their backoff).
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import time

__all__ = ["send", "serve"]


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed")
        buf += chunk
    return bytes(buf)


def _tune(conn: socket.socket, congestion: str | None) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if congestion:  # root may pick any loaded algorithm for its own socket
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion.encode())


def serve(port: int, congestion: str | None = None) -> None:
    """Answer each length-prefixed message on one connection with one byte, until it closes."""
    with socket.create_server(("0.0.0.0", port)) as srv:
        conn, _ = srv.accept()
        with conn:
            _tune(conn, congestion)
            try:
                while True:
                    (n,) = struct.unpack("!I", _recv_exact(conn, 4))
                    _recv_exact(conn, n)
                    conn.sendall(b"k")
            except ConnectionError:
                return


def send(host: str, port: int, size: int, count: int, congestion: str | None = None) -> list[float]:
    """Round-trip times of ``count`` messages of ``size`` bytes, one at a time."""
    deadline = time.monotonic() + 10
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=60)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    body = struct.pack("!I", size) + b"x" * size
    times = []
    with conn:
        _tune(conn, congestion)
        for _ in range(count):
            t0 = time.perf_counter()
            conn.sendall(body)
            _recv_exact(conn, 1)
            times.append(time.perf_counter() - t0)
    return times


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]), *sys.argv[3:4])
    else:
        host, port, size, count = sys.argv[2], *map(int, sys.argv[3:6])
        print(json.dumps(send(host, port, size, count, *sys.argv[6:7])))
