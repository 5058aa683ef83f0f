"""The lean per-message lane under the runner: buffered reads, full sockets, ordering."""

from __future__ import annotations

import asyncio
import socket

import pytest

pytest.importorskip("aiomqtt")

import aiomqtt

from fedstrata.broker.lane import Lane, ReadAhead

pytestmark = pytest.mark.broker


def test_read_ahead_serves_pahos_small_reads_from_one_recv():
    a, b = socket.socketpair()
    with a, b:
        b.sendall(b"\x30\x05hello\x40\x02\x00\x01")  # a PUBLISH and a PUBACK, as paho reads them
        ra = ReadAhead(a)
        assert ra.recv(1) == b"\x30"
        assert ra.pending() == 10
        assert [ra.recv(1), ra.recv(5), ra.recv(1), ra.recv(3)] == [
            b"\x05",
            b"hello",
            b"\x40",
            b"\x02\x00\x01",
        ]
        assert ra.pending() == 0
        a.setblocking(False)
        with pytest.raises(BlockingIOError):  # nothing buffered, nothing on the socket
            ra.recv(1)
        b.close()
        a.setblocking(True)
        assert ra.recv(1) == b""  # end of stream reaches paho as before
        assert ra.fileno() == a.fileno()


def test_large_messages_cross_a_full_socket_in_order(mosquitto):
    """8 MiB messages overflow the socket buffers: writes wait for the socket, reads span chunks."""
    big = [bytes([i]) * (8 << 20) for i in range(3)]

    async def go() -> list[tuple[str, bytes, int]]:
        got: list[tuple[str, bytes, int]] = []
        lost: list[BaseException] = []
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, identifier="lane-big") as raw:
            lane = Lane(raw, lambda t, p, q: got.append((t, p, q)), lost.append)
            try:
                await lane.subscribe("lane/#", 1, timeout=10)
                for i, payload in enumerate(big):
                    await lane.publish(f"lane/{i}", payload, qos=1, retain=False, timeout=30)
                await lane.publish("lane/end", b"", qos=0, retain=False, timeout=30)
                async with asyncio.timeout(30):
                    while len(got) < len(big) + 1:
                        await asyncio.sleep(0.01)
            finally:
                lane.close()
        assert not lost
        return got

    got = asyncio.run(go())
    assert [(t, q) for t, _, q in got] == [
        ("lane/0", 1),
        ("lane/1", 1),
        ("lane/2", 1),
        ("lane/end", 0),
    ]
    assert [p for _, p, _ in got[:3]] == big  # every byte, in order
