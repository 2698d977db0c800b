"""How a wrapped command's attempt ended, told from the outside: ETT's status and a reason.

Why a module of its own: ``collector.run`` reports the end of attempts that the job itself
could not report (a SIGKILL leaves its Reporter no time to write), so the reason must come
from what another process can see: the exit status, and for a SIGKILL whether the kernel's
OOM killer sent it. The OOM killer leaves two traces a process can read without privileges
on most machines: its cgroup's ``oom_kill`` counter (cgroup v2 ``memory.events``, v1
``memory.oom_control``) and the kernel log (``/dev/kmsg``, ``Killed process PID``). The
counter is asked first; the log only when no counter can be read; when neither can, the
reason says so (``SIGKILL (possibly OOM)``) rather than guess.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["OOM", "POSSIBLY_OOM", "Ending", "OomEvidence", "ending_of", "failure_reason",
           "find_oom_counter", "read_oom_kills", "shell_exit_code", "signal_name"]

#: The reason of an attempt the OOM killer ended.
OOM = "oom"
#: The reason of a SIGKILL when neither the cgroup nor the kernel log can say who sent it.
POSSIBLY_OOM = "SIGKILL (possibly OOM)"
PROC_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")
KMSG = Path("/dev/kmsg")
#: Kernel log records read at most when looking for an OOM kill (the ring holds far fewer).
_MAX_KMSG_RECORDS = 200_000
_KILLED = re.compile(r"Killed process (\d+)|oom-kill:.*\bpid=(\d+)")


def signal_name(signum: int) -> str:
    """``SIGKILL`` for 9; ``signal 64`` for a number with no name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def shell_exit_code(returncode: int) -> int:
    """A ``subprocess`` return code as a shell reports it: ``128 + N`` for signal N."""
    return returncode if returncode >= 0 else 128 - returncode


@dataclass(frozen=True)
class Ending:
    """How an attempt ended: ETT's ``attempt_end`` status, its reason, the exit code."""

    status: str
    reason: str | None
    #: The exit code as a shell shows it (``128 + N`` for signal N); None when unknown.
    exit_code: int | None

    def attrs(self) -> dict[str, object]:
        """The ``attempt_end`` attrs besides its status."""
        attrs: dict[str, object] = {}
        if self.reason is not None:
            attrs["reason"] = self.reason
        if self.exit_code is not None:
            attrs["exit_code"] = self.exit_code
        return attrs


def failure_reason(returncode: int, oom_killed: Callable[[], bool | None]) -> str:
    """``exit N``, a signal's name, or for a SIGKILL ``oom``, ``SIGKILL`` or
    :data:`POSSIBLY_OOM` as ``oom_killed()`` says yes, no, or cannot tell."""
    if returncode >= 0:
        return f"exit {returncode}"
    if -returncode != signal.SIGKILL:
        return signal_name(-returncode)
    verdict = oom_killed()
    if verdict is None:
        return POSSIBLY_OOM
    return OOM if verdict else "SIGKILL"


def ending_of(returncode: int, *, received: int | None = None, sigterm_preempts: bool = False,
              oom_killed: Callable[[], bool | None] = lambda: None) -> Ending:
    """The attempt's end from the command's return code (negative: killed by that signal).

    ``received``: the stop signal the wrapper itself got (and passed on). Then the attempt
    was stopped from outside, whatever the command made of it: ``cancelled``, or
    ``preempted`` for a SIGTERM when the scheduler is known to preempt with SIGTERM.
    """
    code = shell_exit_code(returncode)
    if received is not None:
        preempted = sigterm_preempts and received == signal.SIGTERM
        return Ending("preempted" if preempted else "cancelled", signal_name(received), code)
    if returncode == 0:
        return Ending("completed", None, 0)
    return Ending("failed", failure_reason(returncode, oom_killed), code)


# --------------------------------------------------------------------------- OOM evidence

def _candidates(proc_cgroup: Path, root: Path) -> list[Path]:
    """Where this process's OOM counter may be: its cgroup's file under the mount (host
    view), then the mount's own (a container whose cgroup namespace is its root)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return []
    found: list[Path] = []
    for line in lines:
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        relative = path.strip().lstrip("/")
        if "memory" in controllers.split(","):  # cgroup v1's memory hierarchy
            found += [root / "memory" / relative / "memory.oom_control",
                      root / "memory" / "memory.oom_control"]
        elif controllers == "":  # cgroup v2 (``0::/path``)
            found += [root / relative / "memory.events", root / "memory.events"]
    return found


def read_oom_kills(path: Path | None) -> int | None:
    """The ``oom_kill`` count in a ``memory.events`` or ``memory.oom_control`` file."""
    if path is None:
        return None
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def find_oom_counter(proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT) -> Path | None:
    """The first readable file holding this process's cgroup's ``oom_kill`` count."""
    for candidate in _candidates(proc_cgroup, root):
        if read_oom_kills(candidate) is not None:
            return candidate
    return None


def _kmsg_records(path: Path) -> list[tuple[float, str]] | None:
    """``(seconds since boot, message)`` of each kernel log record; None if unreadable.

    ``/dev/kmsg`` returns one record per read and EAGAIN at the end; a plain file (a test's
    copy of the log) returns chunks, so lines are put back together across reads."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    records: list[tuple[float, str]] = []
    pending = ""
    try:
        for _ in range(_MAX_KMSG_RECORDS):
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break  # /dev/kmsg: no record left
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # a record was overwritten while reading
                    continue
                return records or None
            if not chunk:
                break  # a plain file: its end
            *lines, pending = (pending + chunk.decode("utf-8", errors="replace")).split("\n")
            records += _parsed(lines)
    finally:
        os.close(fd)
    return records + _parsed([pending])


def _parsed(lines: list[str]) -> list[tuple[float, str]]:
    """Kernel log lines ``PRI,SEQ,USEC,FLAGS;MESSAGE`` as ``(seconds, message)``."""
    records = []
    for line in lines:
        prefix, sep, message = line.partition(";")
        fields = prefix.split(",")
        if sep and len(fields) >= 3 and fields[2].isdigit():
            records.append((int(fields[2]) / 1e6, message))
    return records


class OomEvidence:
    """Whether the OOM killer ended one of some processes since :meth:`mark` was called.

    ``counter`` is the cgroup file with the ``oom_kill`` count (None: none readable);
    ``kmsg`` the kernel log, read only when no counter can be read.
    """

    def __init__(self, counter: Path | None, kmsg: Path = KMSG) -> None:
        self.counter = counter
        self.kmsg = kmsg
        self._count: int | None = None
        self._since = 0.0
        self.mark()

    @classmethod
    def of_this_process(cls) -> OomEvidence:
        """Evidence for this process's cgroup, which the commands it starts share."""
        return cls(find_oom_counter())

    def mark(self) -> None:
        """Start counting now (an attempt begins)."""
        self._count = read_oom_kills(self.counter)
        self._since = time.monotonic()

    def killed(self, pids: Iterable[int]) -> bool | None:
        """True when the count went up since :meth:`mark` (or, with no count to read, the
        kernel log names one of ``pids`` since then); None when nothing can be read."""
        now = read_oom_kills(self.counter)
        if now is not None and self._count is not None:
            return now > self._count
        records = _kmsg_records(self.kmsg)
        if records is None:
            return None
        wanted = {str(pid) for pid in pids}
        since = self._since - 1.0  # the log's clock is the monotonic one, at µs resolution
        for seconds, message in records:
            found = _KILLED.search(message)
            if found and seconds >= since and (found.group(1) or found.group(2)) in wanted:
                return True
        return False

    def checker(self, pids: Iterable[int]) -> Callable[[], bool | None]:
        """:meth:`killed` for ``pids``, asked only when a SIGKILL needs it."""
        chosen = list(pids)

        def check() -> bool | None:
            with contextlib.suppress(OSError):
                return self.killed(chosen)
            return None

        return check
