"""The processes a wrapped command starts, as ``/proc`` shows them: who is a torchrun worker.

Why ``/proc`` and not torchrun's log: ``collector.run`` passes the command's output through
untouched, so it cannot read torchrun's lines without sitting in the pipe; and log lines
change between torch versions, while the environment torchelastic gives each worker
(``TORCHELASTIC_RESTART_COUNT``, ``RANK``) is its documented interface. A *worker* is the
top-most descendant whose environment holds ``TORCHELASTIC_RESTART_COUNT`` (the processes a
worker starts, data loaders and compile workers, inherit it and are not workers). Each
worker's start is exact (``/proc/PID/stat``'s start time, to the clock tick); its exit is
caught by ``collector.run_watch``.

The scan is incremental: each pass lists ``/proc`` and reads only processes it has not seen,
so a node with thousands of processes costs one directory listing per pass. Linux only;
elsewhere :func:`available` is False and no workers are ever found.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from collector.identity import identity_from_env

__all__ = ["ELASTIC_RESTART_VAR", "ProcStat", "ProcessTree", "Worker", "available",
           "exit_status", "process_start", "read_environ", "read_stat"]

PROC = Path("/proc")
ELASTIC_RESTART_VAR = "TORCHELASTIC_RESTART_COUNT"
#: A process younger than this may not have exec'd yet (its environment is still its
#: parent's): a descendant without the variable is looked at again until it is older.
EXEC_GRACE_S = 2.0
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def available(proc: Path = PROC) -> bool:
    return (proc / "self" / "stat").exists()


@dataclass(frozen=True)
class ProcStat:
    """The few fields of ``/proc/PID/stat`` the wrapper uses."""

    pid: int
    ppid: int
    state: str
    start_ticks: int
    #: The exit status in ``waitpid`` form, kept by the kernel while the process is a zombie
    #: (field 52); None when the kernel does not show it.
    exit_status: int | None


def read_stat(pid: int, proc: Path = PROC) -> ProcStat | None:
    """``/proc/PID/stat``, or None when the process is gone (or unreadable)."""
    try:
        text = (proc / str(pid) / "stat").read_bytes().decode("ascii", errors="replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces and parentheses.
    fields = text[text.rfind(")") + 2:].split()
    try:
        status = int(fields[49]) if len(fields) > 49 else None
        return ProcStat(pid, int(fields[1]), fields[0], int(fields[19]), status)
    except (IndexError, ValueError):
        return None


def process_start(start_ticks: int) -> float:
    """A process's start time as epoch seconds, from its start in clock ticks since boot.

    The boot-based clock is read beside the wall clock rather than using ``btime`` from
    ``/proc/stat``, which is rounded to whole seconds."""
    since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    return time.time() - (since_boot - start_ticks / _TICKS)


def exit_status(pid: int, start_ticks: int, proc: Path = PROC) -> int | None:
    """A zombie's exit status as ``subprocess`` gives a return code (negative: a signal);
    None when it is no longer a zombie of that start time, or the kernel hides it."""
    stat = read_stat(pid, proc)
    if stat is None or stat.start_ticks != start_ticks or stat.state not in ("Z", "X"):
        return None
    if stat.exit_status is None:
        return None
    try:
        return os.waitstatus_to_exitcode(stat.exit_status)
    except ValueError:
        return None


def read_environ(pid: int, proc: Path = PROC) -> dict[str, str] | None:
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


@dataclass
class Worker:
    """One torchelastic worker process, seen from outside."""

    pid: int
    start_ticks: int
    start: float
    restart_count: int
    rank: int
    #: The attempt and job this worker's own Reporter will report under (its identity).
    reports_attempt: int
    reports_attempt_source: str
    reports_job: str
    exit_ts: float | None = None
    #: ``subprocess``-style return code, when it could be read at its exit.
    returncode: int | None = None

    @property
    def exited(self) -> bool:
        return self.exit_ts is not None


def _worker(stat: ProcStat, env: Mapping[str, str]) -> Worker | None:
    count = env.get(ELASTIC_RESTART_VAR, "").strip()
    if not (count.isascii() and count.isdigit()):
        return None
    ident = identity_from_env(env)
    return Worker(pid=stat.pid, start_ticks=stat.start_ticks,
                  start=process_start(stat.start_ticks), restart_count=int(count),
                  rank=ident.rank, reports_attempt=ident.attempt,
                  reports_attempt_source=ident.attempt_source, reports_job=ident.job)


# What a seen process is to the wrapped command.
_OUTSIDE, _DESCENDANT, _PENDING, _WORKER, _UNDER_WORKER = range(5)


class ProcessTree:
    """The wrapped command's descendants and, among them, its torchelastic workers.

    :meth:`scan` returns the workers found since the last scan, oldest first. A process is
    known by its pid and start time, so a reused pid is a new process.
    """

    def __init__(self, root_pid: int, proc: Path = PROC) -> None:
        self.root_pid = root_pid
        self.proc = proc
        self._seen: dict[int, tuple[int, int]] = {}  # pid -> (start ticks, kind)
        self._pending: dict[int, ProcStat] = {}
        self.workers: dict[tuple[int, int], Worker] = {}

    def scan(self) -> list[Worker]:
        try:
            names = os.listdir(self.proc)
        except OSError:
            return []
        pids = {int(name) for name in names if name.isdigit()}
        for gone in self._seen.keys() - pids:
            del self._seen[gone]
            self._pending.pop(gone, None)
        fresh = [stat for pid in pids - self._seen.keys()
                 if (stat := read_stat(pid, self.proc)) is not None]
        found: list[Worker] = []
        # Settle the processes that may have exec'd since, then the new ones, parents
        # first (a parent starts before its children): a child is judged by its parent.
        for pid, stat in list(self._pending.items()):
            found += self._recheck(pid, stat)
        for stat in sorted(fresh, key=lambda s: (s.start_ticks, s.pid)):
            found += self._classify(stat)
        return sorted(found, key=lambda w: (w.start_ticks, w.rank))

    def _kind_of_parent(self, stat: ProcStat) -> int:
        parent = self._seen.get(stat.ppid)
        if parent is None or parent[0] > stat.start_ticks:
            return _OUTSIDE
        return parent[1]

    def _classify(self, stat: ProcStat) -> list[Worker]:
        parent = _DESCENDANT if stat.pid == self.root_pid else self._kind_of_parent(stat)
        if parent == _OUTSIDE:
            self._seen[stat.pid] = (stat.start_ticks, _OUTSIDE)
            return []
        if parent in (_WORKER, _UNDER_WORKER):
            self._seen[stat.pid] = (stat.start_ticks, _UNDER_WORKER)
            return []
        self._seen[stat.pid] = (stat.start_ticks, _PENDING)
        self._pending[stat.pid] = stat
        return self._recheck(stat.pid, stat)

    def _recheck(self, pid: int, stat: ProcStat) -> list[Worker]:
        """A descendant not yet known to be a worker: read its environment (again)."""
        env = read_environ(pid, self.proc)
        worker = None if env is None else _worker(stat, env)
        if worker is not None:
            self._seen[pid] = (stat.start_ticks, _WORKER)
            self._pending.pop(pid, None)
            self.workers[(pid, stat.start_ticks)] = worker
            return [worker]
        if env is None or time.time() - process_start(stat.start_ticks) > EXEC_GRACE_S:
            self._seen[pid] = (stat.start_ticks, _DESCENDANT)  # settled: not a worker
            self._pending.pop(pid, None)
        return []

    def alive(self, worker: Worker) -> bool:
        """Whether ``worker`` is still running (not gone, not a zombie)."""
        stat = read_stat(worker.pid, self.proc)
        return stat is not None and stat.start_ticks == worker.start_ticks and \
            stat.state not in ("Z", "X")
