"""Broker tests start a real Mosquitto on 127.0.0.1 and a free port.

When mosquitto is missing they are skipped, except under CI (``CI`` set), where a
missing broker is a failure: the transport must be tested there.
"""

import os
import shutil

import pytest

from fedstrata.broker.launcher import PrivateBroker, find_mosquitto
from fedstrata.errors import TransportError


def _need_mosquitto() -> None:
    try:
        find_mosquitto()
    except TransportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {exc}")
        pytest.skip(str(exc))


def need_tool(name: str) -> str:
    """Path of a Mosquitto command-line tool; skip without it, fail under CI."""
    found = shutil.which(name) or (
        f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}") else None
    )
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(
                f"CI is set but {name} is not installed (apt-get install mosquitto-clients)"
            )
        pytest.skip(f"{name} is not installed (apt-get install mosquitto-clients)")
    return found


@pytest.fixture(scope="session")
def mosquitto():
    """One private broker for the whole session: (host, port)."""
    _need_mosquitto()
    with PrivateBroker() as broker:
        yield broker


def default_sigint() -> None:
    """``preexec_fn`` of a run a test interrupts: SIGINT as a terminal would deliver it.

    A disposition or mask the test worker inherited or picked up (an ignored SIGINT
    survives exec) must not decide whether the spawned run hears Ctrl-C.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
