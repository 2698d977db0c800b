"""The wrapper's watcher thread: torchrun's workers come and go, the job starts reporting.

Why a thread with pidfds: a worker is torchrun's child, not the wrapper's, so the wrapper
cannot ``wait`` for it. A pidfd (``os.pidfd_open``, Linux 5.3+) becomes readable the moment
the process exits, while it is still a zombie, so the exit is timed exactly and its status
is read from ``/proc/PID/stat`` before torchrun reaps it (torchrun polls its workers every
``--monitor-interval``, 0.1 s by default). Where pidfds are missing, an exit is noticed by the
next scan (``SCAN_S``) and its status is usually lost. The same loop closes the current
attempt's ``launch`` span once the job's own Reporter has written (``SPOOL_S``). Nothing here
raises into the wrapper: an error is logged once and the loop goes on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time

from collector.run_attempts import Attempts, Generations
from collector.run_procs import ProcessTree, Worker, available, exit_status

__all__ = ["SCAN_S", "SPOOL_S", "Watcher"]

log = logging.getLogger("ett.run")

#: Seconds between two looks for new processes (a worker's start time is exact anyway).
SCAN_S = 0.1
#: Seconds between two looks for the job's first event (its time comes from the event).
SPOOL_S = 0.2


class Watcher(threading.Thread):
    """Watches the command started as ``root_pid`` until :meth:`stop`."""

    def __init__(self, root_pid: int, attempts: Attempts, generations: Generations, *,
                 scan_s: float = SCAN_S, spool_s: float = SPOOL_S) -> None:
        super().__init__(name="ett-run-watch", daemon=True)
        self.tree = ProcessTree(root_pid)
        self.attempts = attempts
        self.generations = generations
        self.scan_s, self.spool_s = scan_s, spool_s
        self._procs = available()
        self._poller = select.poll()
        self._pidfds: dict[int, Worker] = {}
        self._stop_r, self._stop_w = os.pipe()
        self._poller.register(self._stop_r, select.POLLIN)
        self._stopping = False
        self._errors = 0

    def stop(self, timeout: float = 5.0) -> None:
        """Finish: note the exits already there, then end the thread."""
        self._stopping = True
        with contextlib.suppress(OSError):
            os.write(self._stop_w, b"x")
        self.join(timeout)
        for fd in (self._stop_r, self._stop_w, *self._pidfds):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._pidfds.clear()

    def run(self) -> None:
        next_scan = next_spool = 0.0
        while True:
            try:
                wait_s = max(0.0, min(next_scan, next_spool) - time.monotonic())
                ready = self._poller.poll(wait_s * 1000.0)
                self._exits([fd for fd, _ in ready if fd != self._stop_r])
                if self._stopping:
                    self._exits(list(self._pidfds))  # exits already signalled
                    return
                now = time.monotonic()
                if now >= next_scan:
                    next_scan = now + self.scan_s
                    self._scan()
                if now >= next_spool:
                    next_spool = now + self.spool_s
                    self.attempts.look_for_first_event()
            except Exception as exc:  # never let watching stop the command
                self._errors += 1
                self.attempts.warn_once("watch", "the watcher failed (%s); it goes on", exc)
                if self._errors > 100:
                    log.warning("the watcher stops after 100 errors; attempts end at exit")
                    return
                time.sleep(self.scan_s)

    def _exits(self, fds: list[int]) -> None:
        """Workers whose pidfd became readable: they exited just now."""
        if not fds:
            return
        readable = {fd for fd, _ in self._poller.poll(0)} if self._stopping else set(fds)
        now = time.time()
        for fd in fds:
            if fd not in readable:
                continue
            worker = self._pidfds.pop(fd)
            self._poller.unregister(fd)
            os.close(fd)
            self.generations.exited(worker, now, exit_status(worker.pid, worker.start_ticks))

    def _scan(self) -> None:
        if not self._procs:
            return
        for worker in self.generations.workers:  # exits no pidfd reports (none, or lost)
            if not worker.exited and worker not in self._pidfds.values() and \
                    not self.tree.alive(worker):
                self.generations.exited(worker, time.time(),
                                        exit_status(worker.pid, worker.start_ticks))
        for worker in self.tree.scan():
            self._watch_exit(worker)
            self.generations.seen(worker)

    def _watch_exit(self, worker: Worker) -> None:
        opener = getattr(os, "pidfd_open", None)
        if opener is None:
            return
        try:
            fd = opener(worker.pid)
        except OSError:  # gone already, or no pidfd on this kernel: the next scan sees it
            return
        if not self.tree.alive(worker):  # the pid was reused, or it died meanwhile
            with contextlib.suppress(OSError):
                os.close(fd)
            return
        self._pidfds[fd] = worker
        self._poller.register(fd, select.POLLIN)
