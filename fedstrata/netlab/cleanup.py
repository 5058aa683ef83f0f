"""Remove what a lab left behind: its processes and namespaces, found by their prefix.

A namespace dies with its veth ends and nftables tables; the processes running in it
are killed first (a namespace whose name is deleted while a process still runs in it
lives on, unnamed). Only namespaces whose name carries the lab prefix are touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable

from fedstrata.netlab import commands as cmd
from fedstrata.netlab.names import PREFIX, owner_pid
from fedstrata.netlab.runner import Runner

__all__ = ["list_namespaces", "pid_alive", "remove_leftovers", "remove_namespace"]


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def list_namespaces(run: Runner) -> list[str]:
    """The names of every namespace (``ip -j netns list``; no output when there is none)."""
    text = run(cmd.netns_list()).strip()
    return [entry["name"] for entry in json.loads(text)] if text else []


def remove_namespace(run: Runner, ns: str, kill: Callable[[int], None] = _kill) -> None:
    """Kill every process inside ``ns``, then delete it."""
    for line in run(cmd.netns_pids(ns)).split():
        kill(int(line))
    run(cmd.netns_delete(ns))


def remove_leftovers(
    run: Runner,
    prefix: str = PREFIX,
    *,
    alive: Callable[[int], bool] = pid_alive,
    kill: Callable[[int], None] = _kill,
) -> list[str]:
    """Remove the namespaces named ``prefix...`` whose lab process is gone; return them.

    With the default prefix ``fsl-``, a namespace of a lab still running (its
    ``fsl-<pid>-`` names a live process) is left alone; a longer prefix such as a
    lab's own ``fsl-<pid>-`` removes that lab's namespaces whether it runs or not.
    """
    removed = []
    for ns in list_namespaces(run):
        if not ns.startswith(prefix):
            continue
        pid = owner_pid(ns)
        if pid is None or (prefix == PREFIX and alive(pid)):
            continue
        remove_namespace(run, ns, kill)
        removed.append(ns)
    return removed
