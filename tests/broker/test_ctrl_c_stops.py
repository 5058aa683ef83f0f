"""A stopped (cancelled) node ends, whatever its DISCONNECT does, and Ctrl-C ends a run.

A node task is cancelled on Ctrl-C; its session then disconnects. When that
DISCONNECT fails (the broker does not answer in time, the socket breaks) aiomqtt
raises the failure instead of the cancellation: the runner must not take it for a
lost connection and reconnect, or the run goes on after Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from typing import Any

import aiomqtt
import pytest

from fedstrata.broker.runner import NodeRunner
from fedstrata.nodes.events import Event, Started, Subscribe
from tests.broker.conftest import default_sigint

EXE = shutil.which("fedstrata")

LONG = """
name: ctrl-c
seed: 1
data: {dataset: heat-kernel-synthetic, params: {n_per_cluster: 40}, partition: {kind: iid}}
topology: {clients: {count: 3, link: {latency: 0.01, bandwidth_mbps: 10}}}
algorithm: {name: hk-mvfc, n_clusters: 4, center_update: exact}
protocol: {rule: sum, rounds: 100000, tol: 0.0, deadline_s: 30}
"""


class _Listener:
    """Subscribes once, then waits for ever."""

    node_id = "listener"

    def handle(self, event: Event) -> list[Any]:
        return [Subscribe(pattern="fs/ctrl-c/test", qos=1)] if isinstance(event, Started) else []


def test_a_cancelled_node_whose_disconnect_fails_stops_instead_of_reconnecting(
    mosquitto, monkeypatch
):
    real_aexit = aiomqtt.Client.__aexit__

    async def failing_disconnect(self, *exc_info):
        await real_aexit(self, *exc_info)
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            # as aiomqtt does when the DISCONNECT's end is not seen in time
            raise aiomqtt.MqttError("Operation timed out")

    monkeypatch.setattr(aiomqtt.Client, "__aexit__", failing_disconnect)
    runner = NodeRunner(_Listener(), mosquitto.host, mosquitto.port, clear_session=False)

    async def main() -> float:
        task = asyncio.create_task(runner.run())
        async with asyncio.timeout(20):
            while "fs/ctrl-c/test" not in runner._subs:
                await asyncio.sleep(0.02)
        start = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 20)
        return time.monotonic() - start

    took = asyncio.run(main())
    assert took < 2.0
    assert runner.traffic.connects == 1  # no reconnect after the stop
    assert runner.failure is None


@pytest.mark.slow
@pytest.mark.parametrize("delay_s", [0.3, 1.5, 3.0, 5.0])
def test_ctrl_c_at_any_moment_ends_the_run(mosquitto, tmp_path, delay_s):
    """SIGINT during start-up or while the nodes run: the command exits promptly."""
    path = tmp_path / "long.yaml"
    path.write_text(LONG)
    out = tmp_path / "o"
    cmd = [EXE, "run", str(path), "--transport", "mqtt", "--broker", mosquitto.url]
    proc = subprocess.Popen(
        [*cmd, "--out", str(out), "--no-plots"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_sigint,
    )
    try:
        time.sleep(delay_s)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=45)
    finally:
        if proc.poll() is None:  # a stuck run must not publish into later tests
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    summary = out / "summary.json"
    if summary.exists():  # interrupted once the nodes ran: the record says so
        assert json.loads(summary.read_text())["status"] == "interrupted"


class _Deaf:
    """A node runner that ignores cancellation until it is aborted."""

    def __init__(self) -> None:
        self.aborted = False

    async def run(self) -> None:
        while not self.aborted:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue

    def abort(self) -> None:
        self.aborted = True


def test_a_share_stops_even_when_a_node_ignores_its_cancellation(monkeypatch):
    from fedstrata.broker.runner import RunLog
    from fedstrata.scenarios import mqtt_nodes

    monkeypatch.setattr(mqtt_nodes, "STOP_S", 0.2)
    deaf = _Deaf()

    async def main() -> tuple[bool, bool, float]:
        async with asyncio.timeout(10):
            return await mqtt_nodes.run_share({"root": deaf}, "root", RunLog(), 0.1)

    start = time.monotonic()
    timed_out, _, _ = asyncio.run(main())
    assert deaf.aborted and timed_out
    assert time.monotonic() - start < 3.0
