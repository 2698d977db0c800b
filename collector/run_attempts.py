"""The attempts of one wrapped command, written as schema-v1 marks and ``launch`` spans.

Why a class of its own: attempt boundaries come from two threads (the main thread sees the
command exit; the watcher sees torchrun restart its workers), and ETT attributes the time
between a failed attempt and the next as ``restart_gap`` from exactly these marks (ETT_SPEC
§3.2), so one lock orders them and every boundary carries the time it happened, not the time
it was noticed. Each attempt has its own Reporter (its spool segments are named by attempt),
with no heartbeat: the failure time of a crashed attempt runs from the *job's* last event
(§3.4.4), which a heartbeat of the wrapper's would hide. When an attempt ends, the progress
files its processes left (a process killed outright cannot close its train slice) become
their final heartbeats (``collector.final_heartbeats``), in their own names: the job's last
step, not the wrapper's. :class:`Generations` turns torchrun's worker groups into attempts:
a group with a higher restart count is a new one.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.final_heartbeats import write_final_heartbeats
from collector.reporter import Reporter
from collector.run_exits import Ending, OomEvidence, failure_reason, shell_exit_code
from collector.run_procs import Worker
from collector.run_spool import FirstEvent, FirstEvents

__all__ = ["LAUNCH_PHASE", "Attempts", "Generations", "RunIdentity"]

log = logging.getLogger("ett.run")

#: The phase from the start of an attempt's processes to the job's own first event.
LAUNCH_PHASE = "launch"
#: Seconds the launch span waits, once the job's first event is seen, for earlier ones.
SETTLE_S = 1.0
#: Why torchrun restarted a worker group when no worker's exit status could be read.
UNSEEN_CAUSE = "workers restarted by torchrun"


@dataclass(frozen=True)
class RunIdentity:
    """What every attempt of this run is reported as."""

    job: str
    rank: int
    spool_dir: Path
    gpus: int
    attrs: dict[str, Any] = field(default_factory=dict)


class Attempts:
    """The current attempt: its start mark, its launch span and its end mark.

    Never raises: a failure to report is logged once and the command runs on.
    """

    def __init__(self, identity: RunIdentity, oom: OomEvidence) -> None:
        self.identity = identity
        self.oom = oom
        self._lock = threading.RLock()
        self._first = FirstEvents(identity.spool_dir, identity.job)
        self.number: int | None = None
        self.start = 0.0
        self._reporter: Reporter | None = None
        self._launch_pending = False
        self._first_seen: FirstEvent | None = None
        self._settle_at: float | None = None
        self._warned: set[str] = set()

    def warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, *args)

    def begin(self, number: int, start: float) -> None:
        """Attempt ``number`` began at ``start`` (epoch seconds)."""
        with self._lock:
            self.number, self.start = number, start
            self._launch_pending = True
            self._first_seen, self._settle_at = None, None
            self.oom.mark()
            try:
                self._reporter = Reporter(
                    self.identity.job, attempt=number, rank=self.identity.rank,
                    spool_dir=self.identity.spool_dir, heartbeat_s=0,
                    install_signal_handlers=False)
                self._reporter.attempt_start(gpus=self.identity.gpus, ts=start,
                                             **self.identity.attrs)
            except Exception as exc:  # never let reporting stop the command
                self._reporter = None
                self.warn_once("begin", "cannot report attempt %s: %s", number, exc)
            log.info("attempt %s started", number)

    def look_for_first_event(self, *, final: bool = False) -> None:
        """Close the launch span once the job's own Reporter has written an event.

        The span is emitted :data:`SETTLE_S` after the first event is seen, ending at the
        earliest start among the events written by then: ranks that leave a collective
        set-up together write their spans a flush or two apart, and the one that started
        first may be written last. ``final``: the attempt ends, emit what is known.
        """
        with self._lock:
            if not self._launch_pending or self.number is None:
                return
            try:
                found = self._first.find(self.number, self.start)
            except Exception as exc:
                self.warn_once("spool", "cannot read the spool for the job's events: %s", exc)
                return
            if found is not None and (self._first_seen is None or
                                      found.time < self._first_seen.time):
                self._first_seen = found
            if self._first_seen is None:
                return
            if self._settle_at is None:
                self._settle_at = time.monotonic() + SETTLE_S
            if not final and time.monotonic() < self._settle_at:
                return
            self._emit_launch(self._first_seen)

    def _emit_launch(self, found: FirstEvent) -> None:
        self._launch_pending = False
        end = max(found.time, self.start)
        if end > self.start and self._reporter is not None:
            self._reporter.span(LAUNCH_PHASE, self.start, end,
                                attrs={"until": found.what, "until_rank": found.rank})
        log.info("attempt %s: the job reported first at +%.3f s (%s, rank %s)",
                 self.number, end - self.start, found.what, found.rank)

    def end(self, ts: float, ending: Ending, **attrs: Any) -> None:
        """The current attempt ended at ``ts``; its Reporter is flushed and shut down."""
        with self._lock:
            if self.number is None:
                return
            self.look_for_first_event(final=True)
            if self._launch_pending:
                log.info("attempt %s: no event from the job's own Reporter, no launch span",
                         self.number)
            reporter, self._reporter = self._reporter, None
            number, self.number = self.number, None
            write_final_heartbeats(self.identity.spool_dir, job=self.identity.job)
            if reporter is None:
                return
            try:
                reporter.attempt_end(ending.status, ts=max(ts, self.start),
                                     **ending.attrs(), **attrs)
                reporter.shutdown(timeout=5.0)
            except Exception as exc:
                self.warn_once("end", "cannot report the end of attempt %s: %s", number, exc)
            log.info("attempt %s %s (%s)", number, ending.status,
                     ending.reason or f"exit {ending.exit_code}")

    def restart(self, end_ts: float, ending: Ending, attrs: dict[str, Any], number: int,
                start: float) -> None:
        """One attempt ended at ``end_ts`` and attempt ``number`` began at ``start``."""
        with self._lock:
            self.end(min(end_ts, start), ending, **attrs)
            self.begin(number, start)


class Generations:
    """torchrun's worker groups as attempts: a higher restart count is a new attempt.

    The failed attempt ends when the last worker of its group exited (the watcher's exit
    times, exact with pidfd) and the next begins when the first worker of the new group
    started (from /proc, to the clock tick); the time between is the restart gap. The
    attempt's reason is the first worker that exited with a failure, and its rank.
    """

    def __init__(self, attempts: Attempts) -> None:
        self.attempts = attempts
        self.count: int | None = None  # restart count of the current group
        self.workers: list[Worker] = []

    def seen(self, worker: Worker) -> None:
        """A worker started (the watcher found it)."""
        self.workers.append(worker)
        if self.count is None:
            self.count = worker.restart_count
        elif worker.restart_count > self.count:
            self._restart(worker)
        self._check_identity(worker)

    def _check_identity(self, worker: Worker) -> None:
        attempts = self.attempts
        if worker.restart_count != self.count or attempts.number is None:
            return
        if worker.reports_job != attempts.identity.job:
            attempts.warn_once("job", "rank %s reports as job %r, not %r: its events land in "
                               "another job", worker.rank, worker.reports_job,
                               attempts.identity.job)
        if worker.reports_attempt != attempts.number:
            attempts.warn_once(
                "attempt", "rank %s reports as attempt %s (from %s) while the wrapper "
                "records attempt %s: with torchrun --max-restarts, let torchrun number the "
                "attempts (unset ETT_ATTEMPT and outer restart counts)", worker.rank,
                worker.reports_attempt, worker.reports_attempt_source, attempts.number)

    def exited(self, worker: Worker, ts: float, returncode: int | None) -> None:
        worker.exit_ts, worker.returncode = ts, returncode

    def group(self) -> list[Worker]:
        return [w for w in self.workers if w.restart_count == self.count]

    def first_failure(self, workers: list[Worker]) -> Worker | None:
        """The worker that exited first other than cleanly (its status may be unknown:
        then the cause is unknown, not the SIGTERM torchrun sent the others after it)."""
        failed = [w for w in workers if w.exited and w.returncode != 0]
        return min(failed, key=lambda w: (w.exit_ts or 0.0, w.rank), default=None)

    def failure(self, workers: list[Worker]) -> tuple[Ending, dict[str, Any]]:
        """How a group failed: the first worker that exited with a failure, and its rank."""
        first = self.first_failure(workers)
        if first is None or first.returncode is None:
            return Ending("failed", UNSEEN_CAUSE, None), {}
        check = self.attempts.oom.checker([first.pid])
        reason = failure_reason(first.returncode, check)
        return Ending("failed", reason, shell_exit_code(first.returncode)), {"rank": first.rank}

    def _restart(self, new: Worker) -> None:
        old = self.group()
        exits = [w.exit_ts for w in old if w.exit_ts is not None]
        end = max(exits) if exits and len(exits) == len(old) else min(time.time(), new.start)
        ending, attrs = self.failure(old)
        attrs = {**attrs, "restarted_by": "torchrun", "restart_count": self.count}
        current = self.attempts.number if self.attempts.number is not None else 0
        number = current + new.restart_count - (self.count or 0)
        self.count = new.restart_count
        self.attempts.restart(end, ending, attrs, number, new.start)

    def final_attrs(self) -> dict[str, Any]:
        """For the last attempt: the worker that failed first in the last group, if any."""
        ending, attrs = self.failure(self.group())
        if not attrs:
            return {}
        return {"worker_reason": ending.reason, "worker_rank": attrs["rank"]}
