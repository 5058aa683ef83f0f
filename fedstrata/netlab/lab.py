"""A lab: network namespaces joined by shaped veth pairs, removed on every exit path.

>>> with Lab() as lab:                                  # doctest: +SKIP
...     up, down = lab.namespace("cloud"), lab.namespace("client-0")
...     link = lab.link(up, down)
...     lab.shape(link, mbps=10, loss=0.02)
...     proc = lab.spawn(down, ["ping", "-c", "1", link.upper_ip])

Cleanup runs when the ``with`` block ends, at interpreter exit (:mod:`atexit`) and on
SIGTERM or SIGINT (the handler cleans up, then raises ``SystemExit``/``KeyboardInterrupt``
as the default would); it kills the processes the lab started, then every process left
in its namespaces, then deletes the namespaces (their veth ends and nft tables go with
them). :func:`~fedstrata.netlab.cleanup.remove_leftovers` removes what a lab killed by
SIGKILL left.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

from fedstrata.netlab import commands as cmd
from fedstrata.netlab.cleanup import list_namespaces, remove_namespace
from fedstrata.netlab.counters import DeviceCounters, device_counters
from fedstrata.netlab.names import link_addresses, namespace_name, prefix_for, veth_names
from fedstrata.netlab.runner import Runner, SubprocessRunner

__all__ = ["Lab", "VethLink"]


@dataclass(frozen=True, slots=True)
class VethLink:
    """One veth pair: the upper end (the parent's side) and the lower end, with addresses."""

    index: int
    upper_ns: str
    lower_ns: str
    upper_dev: str
    lower_dev: str
    upper_ip: str
    lower_ip: str


class Lab:
    """Namespaces and links of one experiment, all named ``fsl-<pid>-...``.

    Parameters
    ----------
    runner : Runner, optional
        Runs the commands (default: :class:`SubprocessRunner`).
    prefix : str, optional
        The name prefix (default: ``fsl-<this pid>-``).
    """

    def __init__(self, runner: Runner | None = None, prefix: str | None = None) -> None:
        self.run: Runner = runner or SubprocessRunner()
        self.prefix = prefix or prefix_for()
        self.namespaces: list[str] = []
        self.links: list[VethLink] = []
        self.procs: list[subprocess.Popen[Any]] = []
        self.loss: dict[int, float] = {}
        self._lock = threading.Lock()
        self._old_handlers: dict[int, Any] = {}

    # ------------------------------------------------------------------ building

    def namespace(self, name: str) -> str:
        """Create the namespace of ``name`` with its loopback up and the lab's nft table."""
        ns = namespace_name(self.prefix, name)
        self.run(cmd.netns_add(ns))
        self.namespaces.append(ns)
        self.run(cmd.link_set(ns, "lo", True))
        self.run(cmd.exec_in(ns, ["nft", "-f", "-"]), input=cmd.nft_table())
        return ns

    def link(self, upper_ns: str, lower_ns: str) -> VethLink:
        """A veth pair between two of the lab's namespaces, addressed and up, unshaped."""
        k = len(self.links)
        up_dev, low_dev = veth_names(self.prefix, k)
        up_cidr, low_cidr = link_addresses(k)
        self.run(cmd.veth_add(up_dev, upper_ns, low_dev, lower_ns))
        link = VethLink(k, upper_ns, lower_ns, up_dev, low_dev, *_ips(up_cidr, low_cidr))
        self.links.append(link)
        for ns, dev, cidr in ((upper_ns, up_dev, up_cidr), (lower_ns, low_dev, low_cidr)):
            self.run(cmd.addr_add(ns, dev, cidr))
            self.run(cmd.gso_off(ns, dev))
            self.run(cmd.exec_in(ns, ["nft", "-f", "-"]), input=cmd.nft_device(dev))
            self.run(cmd.link_set(ns, dev, True))
        return link

    def _ends(self, link: VethLink) -> tuple[tuple[str, str], tuple[str, str]]:
        return (link.upper_ns, link.upper_dev), (link.lower_ns, link.lower_dev)

    def shape(self, link: VethLink, mbps: float | None, loss: float = 0.0) -> None:
        """Limit both directions of ``link`` to ``mbps`` and drop ``loss`` of the packets.

        Each end shapes what it sends (a token bucket) and drops at random what it
        receives, so each direction sees the rate and the loss once.
        """
        for ns, dev in self._ends(link):
            self.run(cmd.tbf(ns, dev, mbps))
        self.set_loss(link, loss)

    def set_loss(self, link: VethLink, loss: float) -> None:
        """Drop each packet arriving at either end of ``link`` with probability ``loss``."""
        for ns, dev in self._ends(link):
            self.run(cmd.exec_in(ns, ["nft", "-f", "-"]), input=cmd.loss_rules(dev, loss))
        self.loss[link.index] = loss

    def partition(self, link: VethLink, cut: bool) -> None:
        """Drop every packet on ``link`` (``cut``), or go back to its shaped loss.

        The interfaces stay up: the endpoints see silence, as behind a broken router,
        not an unreachable network.
        """
        keep = self.loss.get(link.index, 0.0)
        for ns, dev in self._ends(link):
            rules = cmd.loss_rules(dev, 1.0 if cut else keep)
            self.run(cmd.exec_in(ns, ["nft", "-f", "-"]), input=rules)

    # ------------------------------------------------------------------ reading

    def counters(self) -> dict[str, DeviceCounters]:
        """The nft counters of every veth end of the lab, by interface name."""
        out: dict[str, DeviceCounters] = {}
        for ns in self.namespaces:
            devs = [d for ln in self.links for n, d in self._ends(ln) if n == ns]
            if devs:
                out.update(device_counters(self.run(cmd.nft_counters(ns)), devs))
        return out

    # ------------------------------------------------------------------ processes

    def spawn(self, ns: str, argv: list[str], **popen: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside ``ns`` (``ip netns exec``); the lab kills it at cleanup."""
        proc = subprocess.Popen(cmd.exec_in(ns, argv), **popen)
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[Any], sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (default SIGKILL: a crash) to a process the lab started."""
        if proc not in self.procs:
            raise ValueError("not a process of this lab")
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)

    # ------------------------------------------------------------------ cleanup

    def close(self) -> list[str]:
        """Kill the lab's processes and delete its namespaces; return what went wrong."""
        problems: list[str] = []
        with self._lock:
            for proc in self.procs:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=10)
            for ns in reversed(self.namespaces):
                try:
                    remove_namespace(self.run, ns)
                except Exception as exc:  # every namespace gets its chance
                    problems.append(f"{ns}: {exc}")
            self.namespaces.clear()
            self.links.clear()
            self.procs.clear()
        return problems

    def leftovers(self) -> list[str]:
        """The namespaces carrying this lab's prefix that still exist (empty after close)."""
        return [ns for ns in list_namespaces(self.run) if ns.startswith(self.prefix)]

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.close()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    def __enter__(self) -> Lab:
        atexit.register(self.close)
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._old_handlers[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.close()
        finally:
            atexit.unregister(self.close)
            for sig, old in self._old_handlers.items():
                signal.signal(sig, old)
            self._old_handlers.clear()


def _ips(*cidrs: str) -> tuple[str, ...]:
    return tuple(c.split("/")[0] for c in cidrs)


def euid_is_root() -> bool:
    """Whether this process runs as root (a lab needs CAP_NET_ADMIN and CAP_SYS_ADMIN)."""
    return os.geteuid() == 0
