"""The process groups ``make demo`` starts: how it tells whether one still runs, stops them,
and records them (``var/demo/processes.json``) for ``make stop``.

Why apart from ``ettweb.platform.demo``: these are the pieces that outlive one demo (``--stop``
reads another demo's table) and they need nothing of its steps. Imports no Django.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

#: How long a process group has to stop after SIGTERM before it is killed.
STOP_TIMEOUT_S = 20.0


def started_at(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22),
    None once it is gone: with the pid, it names one process, so a pid reused after a reboot
    or a long pause is never signalled by ``--stop``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs. Zombies do not count: they are dead,
    waiting for a parent to collect them (a killed demo's children are collected by init)."""
    proc = Path("/proc")
    if not proc.is_dir():  # no procfs: ask the kernel, zombies included
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for stat in proc.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            state, _, group = stat.read_text().rpartition(")")[2].split()[:3]
            if int(group) == pgid and state not in ("Z", "X"):
                return True
    return False


def stop_groups(groups: list[tuple[str, int]], timeout: float = STOP_TIMEOUT_S,
                reap: Callable[[], object] = lambda: None) -> list[str]:
    """SIGTERM every process group, wait up to ``timeout`` for all of them, SIGKILL what is
    left; returns what was stopped, in words ("worker (pid 123)", "beat (pid 124, killed)").
    ``reap`` collects the leaders when they are our children: an unreaped leader is a
    zombie, and a zombie still counts as a member of its group."""
    for _, pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reap()
        if not any(group_alive(pgid) for _, pgid in groups):
            break
        time.sleep(0.1)
    stopped = []
    for name, pgid in groups:
        killed = group_alive(pgid)
        if killed:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        stopped.append(f"{name} (pid {pgid}{', killed' if killed else ''})")
    return stopped


class ProcessTable:
    """``var/demo/processes.json``: the groups a running demo started, so ``make stop``
    (``python -m ettweb.platform.demo --stop``) can stop whatever a demo that was killed outright
    (SIGKILL, a closed terminal) left running."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, groups: list[tuple[str, int]]) -> None:
        rows = [{"name": name, "pid": pid, "started": started_at(pid)} for name, pid in groups]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(rows))

    def alive(self) -> list[tuple[str, int]]:
        """The recorded groups whose leader is still the process the demo started."""
        try:
            rows = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return []
        return [(row["name"], row["pid"]) for row in rows
                if row.get("started") and started_at(row["pid"]) == row["started"]]

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)
