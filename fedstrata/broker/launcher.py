"""Start a private Mosquitto broker on 127.0.0.1 for one run (or one test).

>>> with PrivateBroker() as broker:        # doctest: +SKIP
...     print(broker.url)                  # mqtt://127.0.0.1:41873

The broker listens on a free local port, keeps nothing on disk (``persistence
false``, unless ``persistence=True``) and is always terminated when the ``with``
block ends. :meth:`PrivateBroker.stop` and a second :meth:`PrivateBroker.start`
restart it on the same port (with ``persistence=True``, keeping its sessions,
queued QoS 1 messages and retained messages across the restart).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from fedstrata.errors import TransportError

__all__ = ["INSTALL_HINT", "PrivateBroker", "find_mosquitto", "free_port", "wait_for_port"]

#: How to get Mosquitto, in one line.
INSTALL_HINT = (
    "mosquitto is not installed: install it with 'sudo apt-get install mosquitto' "
    "(Debian/Ubuntu) or 'brew install mosquitto' (macOS)"
)

_EXTRA_DIRS = (
    "/usr/sbin",
    "/usr/local/sbin",
    "/opt/homebrew/sbin",
    "/usr/local/opt/mosquitto/sbin",
)


def find_mosquitto() -> str:
    """Return the path of the ``mosquitto`` executable.

    Looks on ``PATH`` first, then in the usual ``sbin`` folders (Debian installs it in
    ``/usr/sbin``, which is often not on a user's ``PATH``).

    Raises
    ------
    TransportError
        If it cannot be found; the message says how to install it.

    """
    found = shutil.which("mosquitto")
    if found:
        return found
    for folder in _EXTRA_DIRS:
        candidate = os.path.join(folder, "mosquitto")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise TransportError(INSTALL_HINT)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listened on a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_for_port(host: str, port: int, timeout_s: float) -> bool:
    """Return whether a TCP connection to ``host:port`` succeeds within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


class PrivateBroker:
    """A Mosquitto process on ``127.0.0.1`` and a free port, as a context manager.

    Parameters
    ----------
    port
        Port to listen on; ``None`` picks a free one.
    startup_timeout_s
        How long to wait for the broker to accept connections.
    log_file
        Where Mosquitto writes its log; ``None`` disables logging.
    persistence
        Keep sessions, queued and retained messages in a file in the broker's
        temporary folder, saved when it stops (``SIGTERM``) and read when it starts.

    Attributes
    ----------
    host, port, url
        Where clients connect (``url`` is ``mqtt://host:port``).

    """

    host = "127.0.0.1"

    def __init__(
        self,
        port: int | None = None,
        *,
        startup_timeout_s: float = 10.0,
        log_file: str | Path | None = None,
        persistence: bool = False,
    ) -> None:
        self.port = port
        self.persistence = persistence
        self.startup_timeout_s = startup_timeout_s
        self.log_file = None if log_file is None else Path(log_file)
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        """``mqtt://127.0.0.1:PORT``."""
        return f"mqtt://{self.host}:{self.port}"

    def start(self) -> PrivateBroker:
        """Start Mosquitto and wait until it accepts connections.

        Raises
        ------
        TransportError
            If Mosquitto is missing, exits at once, or does not listen in time.

        """
        exe = find_mosquitto()
        if self._proc is not None:
            raise TransportError("this broker is already running")
        if self._tmp is None:  # a restart keeps the folder (and the persistence file)
            self._tmp = tempfile.TemporaryDirectory(prefix="fedstrata-mosquitto-")
        persist = (
            f"persistence true\npersistence_location {self._tmp.name}/\nautosave_interval 0\n"
            if self.persistence
            else "persistence false\n"
        )
        for attempt in range(3):  # a free port can be taken between probe and bind
            port = self.port if self.port is not None else free_port(self.host)
            conf = Path(self._tmp.name) / "mosquitto.conf"
            log = (
                f"log_dest file {self.log_file}\nlog_type all\n"
                if self.log_file is not None
                else "log_dest none\n"
            )
            conf.write_text(
                f"listener {port} {self.host}\n"
                "allow_anonymous true\n"
                f"{persist}"
                "sys_interval 1\n"
                "set_tcp_nodelay true\n"
                "max_queued_messages 100000\n" + log,
                encoding="utf-8",
            )
            proc = subprocess.Popen(
                [exe, "-c", str(conf)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            self._proc = proc
            deadline = time.monotonic() + self.startup_timeout_s
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    break
                if wait_for_port(self.host, port, 0.2):
                    self.port = port
                    return self
            stderr = self._stop_process()
            if self.port is not None or attempt == 2:
                detail = stderr.strip().splitlines()[-1] if stderr.strip() else "no output"
                self.close()
                raise TransportError(
                    f"mosquitto did not start listening on {self.host}:{port} within "
                    f"{self.startup_timeout_s:g} s ({detail})"
                )
        raise AssertionError("unreachable")  # pragma: no cover

    def _stop_process(self) -> str:
        proc, self._proc = self._proc, None
        if proc is None:
            return ""
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        err = b""
        if proc.stderr is not None:
            with contextlib.suppress(OSError, ValueError):
                err = proc.stderr.read() or b""
            proc.stderr.close()
        return err.decode("utf-8", "replace")

    def stop(self, *, kill: bool = False) -> None:
        """Stop Mosquitto but keep its folder, so :meth:`start` can restart it.

        ``kill=True`` sends ``SIGKILL`` (nothing is saved); otherwise ``SIGTERM``,
        on which Mosquitto writes its persistence file.
        """
        if kill and self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        self._stop_process()

    def close(self) -> None:
        """Terminate Mosquitto (killing it if it does not stop) and remove its config."""
        self._stop_process()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    @property
    def running(self) -> bool:
        """Whether the Mosquitto process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> PrivateBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
