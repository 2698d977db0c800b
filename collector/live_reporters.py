"""Every live Reporter in this process, and what happens to them at fork, exit and SIGTERM.

Why the process needs hooks: a Reporter writes from a background thread, and a process can
end or split without asking it. A forked child inherits no threads, so each Reporter starts
a fresh pipeline there; at interpreter exit each is flushed and shut down; and a SIGTERM
(how schedulers preempt) flushes them before the signal takes its course, since its default
action skips ``atexit``.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
import weakref
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collector.reporter import Reporter

_live_reporters: weakref.WeakSet[Reporter] = weakref.WeakSet()


def register(reporter: Reporter) -> None:
    """Count ``reporter`` among the live ones until it is garbage."""
    _live_reporters.add(reporter)


def _reinit_after_fork() -> None:
    for reporter in list(_live_reporters):
        reporter._after_fork_in_child()


def _shutdown_all() -> None:
    for reporter in list(_live_reporters):
        reporter.shutdown(timeout=5.0)


_sigterm_installed = False


def flush_on_sigterm() -> None:
    """Install (once per process) a SIGTERM handler that flushes every live Reporter, then
    hands the signal on: to the handler that was there before, or to the default action
    (terminate), re-raised so the exit status still says SIGTERM.

    Why: schedulers preempt with SIGTERM, and the default action skips ``atexit``, so the
    last phase of a preempted attempt would be lost exactly where it matters. Only the main
    thread may install handlers; elsewhere this does nothing (atexit still flushes).
    """
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: FrameType | None) -> None:
        for reporter in list(_live_reporters):
            reporter.flush(timeout=2.0)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    try:
        signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):  # not the main interpreter, or an embedded runtime
        return
    _sigterm_installed = True


os.register_at_fork(after_in_child=_reinit_after_fork)
atexit.register(_shutdown_all)
