"""``python -m bench.soak.reaper PID REGISTRY``: clean up after a soak that was killed.

Why a process of its own: every process the soak starts runs in a session of its own (so
a fault can kill it whole), which also means nothing ends them when the soak itself is
``kill -9``-ed — by a test timeout, say. This reaper outlives the soak, and once the soak's
pid is gone it acts on the registry the soak kept: kills the recorded process groups and
server pids, unmounts the tmpfs, removes the directories. After a normal end the soak has
done all that itself and tells the reaper to stop (``done`` in the registry).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap(registry: Path) -> None:
    """Act on every line of the registry: ``pgid N``, ``pidfile PATH``, ``umount PATH``,
    ``rmtree PATH``."""
    try:
        lines = registry.read_text().splitlines()
    except OSError:
        return
    if "done" in lines:  # the soak cleaned up after itself
        with contextlib.suppress(OSError):
            registry.unlink()
        return
    entries = [line.split(" ", 1) for line in lines if " " in line]
    for kind, value in entries:
        if kind == "pgid":
            with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                os.killpg(int(value), signal.SIGKILL)
        elif kind == "pidfile":
            with contextlib.suppress(OSError, ValueError):
                pid = int(Path(value).read_text().split("\n", 1)[0])
                os.kill(pid, signal.SIGKILL)
    time.sleep(1.0)
    for kind, value in entries:
        if kind == "umount" and subprocess.run(["umount", value],
                                               capture_output=True).returncode:
            subprocess.run(["umount", "-l", value], capture_output=True)
    for kind, value in entries:
        if kind == "rmtree":
            shutil.rmtree(value, ignore_errors=True)
    with contextlib.suppress(OSError):
        registry.unlink()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    pid, registry = int(args[0]), Path(args[1])
    while _alive(pid):
        time.sleep(1.0)
    reap(registry)
    return 0


if __name__ == "__main__":
    sys.exit(main())
