"""The Reporter: what a trainer calls to describe its lifecycle (ETT_SPEC §2).

Why it is built this way: a trainer must be able to report every phase for free. ``emit`` only
builds and validates a small dict and puts it on a bounded in-memory queue; the spans and marks
a trainer emits as it trains go quicker still: their few caller-given values are checked and a
tuple is queued (``collector.quick_events``). A background thread appends queued events to a
local spool file that the collector agent ships. Nothing here blocks the caller on I/O or
raises into the training loop: a full queue or an invalid event is counted (and logged once
per kind), never thrown. The design follows OpenTelemetry's BatchProcessor
(bounded queue, background flush, ``shutdown(timeout)``, fork-safe) but spools to disk, because
the product must not lose events. Phase and training spans are ``collector.spans``'s; what
happens at fork, exit and SIGTERM is ``collector.live_reporters``'s.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from collector import live_reporters
from collector.identity import ATTEMPT_ENV_VARS, attempt_from_env, rank_from_env
from collector.progress import ProgressWriter
from collector.quick_events import LineTemplate, Record
from collector.schema import (
    EventError,
    check_identity,
    dump_event,
    quick_mark_ok,
    quick_span_ok,
    validate_event,
)
from collector.spans import PhaseSpan, TrainTracker, traced
from collector.spool_writer import DEFAULT_SEGMENT_BYTES, FSYNC_POLICIES, SegmentWriter

__all__ = ["ATTEMPT_ENV_VARS", "DEFAULT_SPOOL_DIR", "PhaseSpan", "Reporter", "TrainTracker",
           "attempt_from_env", "traced"]

log = logging.getLogger("ett.reporter")

DEFAULT_SPOOL_DIR = "var/spool"
#: The heartbeat period when the caller gives none (``heartbeat_s=None``): seconds.
HEARTBEAT_ENV = "ETT_HEARTBEAT_S"
DEFAULT_HEARTBEAT_S = 10.0
_STOP = object()
#: Most events serialized and written in one go by the background thread.
WRITE_BATCH = 4096


def _env_int(name: str) -> int | None:
    """A non-negative integer from the environment, or None when unset or not one."""
    value = os.environ.get(name, "").strip()
    if not value.isascii() or not value.isdigit():  # "²".isdigit() is True: ASCII only
        return None
    return int(value)


def _heartbeat_s(given: float | None) -> float:
    """The heartbeat period: ``given``, else ``ETT_HEARTBEAT_S``, else 10 s."""
    if given is not None:
        return given
    text = os.environ.get(HEARTBEAT_ENV, "").strip()
    try:
        value = float(text) if text else DEFAULT_HEARTBEAT_S
    except ValueError:
        log.warning("ETT reporter: %s=%r is not a number; using %s s", HEARTBEAT_ENV, text,
                    DEFAULT_HEARTBEAT_S)
        return DEFAULT_HEARTBEAT_S
    return value if value >= 0 and value == value else DEFAULT_HEARTBEAT_S


class Reporter:
    """Emits ETT schema-v1 events for one job attempt on one rank.

    Typical use::

        reporter = Reporter(job="dlrm-42")
        reporter.attempt_start(gpus=8, model="dlrm")
        with reporter.phase("compile"):
            ...
        with reporter.train(start_step=0, steps=1000) as train:
            for step in train:  # each step counts once its body completes
                ...
        reporter.attempt_end("completed")
        reporter.shutdown()
    """

    def __init__(
        self,
        job: str,
        *,
        attempt: int | None = None,
        rank: int | None = None,
        host: str | None = None,
        spool_dir: str | os.PathLike[str] | None = None,
        queue_size: int = 65536,
        flush_interval_s: float = 0.2,
        heartbeat_s: float | None = None,
        train_slice_s: float = 60.0,
        fsync: bool | str | None = None,
        fsync_interval_s: float = 1.0,
        segment_bytes: int | None = None,
        max_spool_bytes: int | None = None,
        install_signal_handlers: bool = True,
    ) -> None:
        self._job = job
        self._attempt = attempt_from_env() if attempt is None else attempt
        self._rank = rank_from_env() if rank is None else rank
        self._host = host if host is not None else socket.gethostname()[:200]
        #: The text of quick records (collector.quick_events); None when the identity is
        #: invalid: then every event takes the full checks, which drop and count it.
        self._lines = _line_template(self._job, self._attempt, self._rank, self._host)
        self.spool_dir = Path(spool_dir or os.environ.get("ETT_SPOOL_DIR", DEFAULT_SPOOL_DIR))
        self.heartbeat_s = _heartbeat_s(heartbeat_s)
        self.train_slice_s = train_slice_s
        self._queue_size = queue_size
        # A burst wakes the writer once a batch is queued: events left queued by the tens of
        # thousands take fresh memory pages, and a page fault costs more than an emit.
        self._wake_at = max(1, min(queue_size // 4, WRITE_BATCH))
        self._flush_interval_s = flush_interval_s
        self._fsync = _fsync_policy(fsync)
        self._fsync_interval_s = fsync_interval_s
        self._segment_bytes = segment_bytes or _env_int("ETT_SPOOL_SEGMENT_BYTES") or \
            DEFAULT_SEGMENT_BYTES
        self._max_spool_bytes = max_spool_bytes or _env_int("ETT_SPOOL_MAX_BYTES")
        self._reported_drops = (0, 0)
        self.dropped_full = 0
        self.dropped_invalid = 0
        self._warned: set[str] = set()
        self.last_step: int | None = None
        #: The progress file that outlives a hard kill (``collector.progress``); made when
        #: the first train tracker opens, None before and where it cannot be made.
        self.progress: ProgressWriter | None = None
        self._progress_tried = False
        #: The train tracker of the loop now running (set by :meth:`train`, cleared when it
        #: closes): hooks pause it around blocking work they see (collector.integrations).
        self.tracker: TrainTracker | None = None
        self._heartbeat_stop = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        self._start_pipeline()
        live_reporters.register(self)
        if install_signal_handlers:
            live_reporters.flush_on_sigterm()

    # ---------------------------------------------------------------- pipeline
    def _start_pipeline(self) -> None:
        # A deque, not a queue.Queue: ``append`` is atomic under the GIL and wakes nobody, so
        # the caller pays no lock and no thread switch. The writer wakes every
        # ``flush_interval_s`` (or at once when asked to flush or stop) and drains in batches.
        self._buffer: collections.deque[Any] = collections.deque()
        self._wake = threading.Event()
        # 128 random bits, drawn again in a forked child: the server deduplicates events by
        # id across the fleet, and two streams collide only where their prefixes do, so the
        # prefix gets at least a UUID4's 122 bits. 32 hex digits + the counter's <= 64.
        self._id_prefix = os.urandom(16).hex()
        self._id_counter = itertools.count()
        stem = f"{_safe(self.job)}.a{self.attempt}.r{self.rank}"
        self._writer = SegmentWriter(self.spool_dir, stem, fsync=self._fsync,
                                     fsync_interval_s=self._fsync_interval_s,
                                     segment_bytes=self._segment_bytes,
                                     max_spool_bytes=self._max_spool_bytes)
        self._closed = False
        self._worker = threading.Thread(target=self._drain_forever, name="ett-reporter",
                                        daemon=True)
        self._worker.start()

    def _after_fork_in_child(self) -> None:
        """A forked child inherits no threads: give it a fresh buffer, thread and spool file.

        Events still buffered in the parent belong to the parent, which writes them; the child
        starts empty and writes to a file named with its own pid, so nothing is duplicated.
        A reporter the parent had already shut down stays shut down.
        """
        self._writer.forget_after_fork()
        if self.progress is not None:  # the parent's: the child trains into none
            self.progress.forget_after_fork()
        self.progress, self._progress_tried = None, True
        self._heartbeat_thread = None
        self._heartbeat_stop = threading.Event()  # its lock may have been held at fork time
        self.dropped_full = self.dropped_invalid = 0
        self._reported_drops = (0, 0)
        if not self._closed:
            self._start_pipeline()
        else:
            self._buffer = collections.deque()

    def _drain_forever(self) -> None:
        stopping = False
        while not stopping:
            self._wake.wait(self._flush_interval_s)
            self._wake.clear()
            batch: list[Any] = []
            while self._buffer:
                item = self._buffer.popleft()
                if item is _STOP:
                    stopping = True
                elif isinstance(item, threading.Event):
                    self._write(batch)
                    batch = []
                    item.set()
                else:
                    batch.append(item)
                if len(batch) >= WRITE_BATCH:
                    self._write(batch)
                    batch = []
            self._write(batch)
            self._report_drops()
        self._writer.close()

    def _write(self, batch: list[Any]) -> None:
        if not batch:
            return
        lines = []
        for event in batch:  # serialized here, off the caller's path
            try:
                lines.append(self._line(event))
            except (TypeError, ValueError) as exc:
                self.dropped_invalid += 1
                self._warn_once("serialize", f"event not serializable, dropped: {exc}")
        try:
            written = self._writer.write(lines)
        except OSError as exc:  # disk full, permissions: count, never raise into training
            self.dropped_full += len(lines)
            self._warn_once("spool", f"cannot write spool {self._writer.path}: {exc}")
            return
        if written < len(lines):  # the spool is at max_spool_bytes: drop, never wait
            self.dropped_full += len(lines) - written
            self._warn_once("spool_full", f"spool {self.spool_dir} is full "
                            f"({self._max_spool_bytes} bytes), events dropped")

    def _line(self, event: dict[str, Any] | Record) -> str:
        if isinstance(event, dict):
            return dump_event(event)
        if self._lines is None:  # records are queued only by a Reporter with a template
            raise TypeError("a record without a line template")
        return self._lines.line(event)

    def _report_drops(self) -> None:
        """Keep the sidecar the agent ships in step with the drop counters."""
        drops = (self.dropped_full, self.dropped_invalid)
        if drops == self._reported_drops:
            return
        try:
            self._writer.record_dropped(*drops)
            self._reported_drops = drops
        except OSError as exc:
            self._warn_once("dropped", f"cannot record dropped counts: {exc}")

    # ---------------------------------------------------------------- identity
    # Read-only: checked once (``_lines``) and stamped on every event.
    @property
    def job(self) -> str:
        return self._job

    @property
    def attempt(self) -> int:
        return self._attempt

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def host(self) -> str:
        return self._host

    # ---------------------------------------------------------------- emit
    def _warn_once(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning("ETT reporter: %s (further ones of this kind are only counted)", message)

    def emit(self, kind: str, **fields: Any) -> str | None:
        """Validate and enqueue one event; returns its id, or None when it was dropped."""
        event_id = self._next_id()
        event = {"v": 1, "id": event_id, "job": self._job, "attempt": self._attempt,
                 "kind": kind, "rank": self._rank, "host": self._host}
        event.update(fields)
        if "attrs" in fields and isinstance(fields["attrs"], dict):
            event["attrs"] = dict(fields["attrs"])  # serialized later: take a snapshot now
        try:
            valid = validate_event(event)
        except (EventError, ValueError, TypeError) as exc:
            self.dropped_invalid += 1
            self._warn_once(f"invalid:{str(exc).split(':')[0]}", f"invalid event dropped: {exc}")
            return None
        return self._enqueue(valid, event_id)

    def _next_id(self) -> str:
        # A random prefix per process and a counter: as unique as a UUID4, without drawing
        # random bytes per event.
        return f"{self._id_prefix}{next(self._id_counter):x}"

    def _enqueue(self, event: dict[str, Any] | Record, event_id: str) -> str | None:
        if self._closed:
            self.dropped_full += 1
            self._warn_once("closed", "event emitted after shutdown")
            return None
        queued = len(self._buffer)
        if queued >= self._queue_size:
            self.dropped_full += 1
            self._warn_once("full", "queue full, event dropped")
            return None
        self._buffer.append(event)
        if queued + 1 >= self._wake_at and not self._wake.is_set():
            self._wake.set()  # a burst: write it now rather than at the next interval
        return event_id

    def span(self, phase: str, start: float, end: float, **fields: Any) -> str | None:
        """Emit a closed span measured by the caller.

        A span of float times and plain attrs (a phase, a train slice) is queued as a record
        (collector.quick_events); anything else goes through :meth:`emit` and the full checks.
        """
        if self._lines is None or not quick_span_ok(phase, start, end, fields):
            return self.emit("span", phase=phase, start=start, end=end, **fields)
        event_id = self._next_id()
        get = fields.get
        attrs = get("attrs")  # written later: a copy now (its values are immutable)
        return self._enqueue(("span", event_id, phase, start, end, get("step_start"),
                              get("step_end"), get("blocking", True),
                              dict(attrs) if attrs else None), event_id)

    def mark(self, mark: str, ts: float | None = None, **fields: Any) -> str | None:
        """Emit a mark at ``ts`` (default: now); like :meth:`span`, a heartbeat is queued
        as a record."""
        if ts is None:
            ts = time.time()
        if self._lines is None or not quick_mark_ok(mark, ts, fields):
            return self.emit("mark", mark=mark, ts=ts, **fields)
        event_id = self._next_id()
        return self._enqueue(("mark", event_id, mark, ts, fields.get("step")), event_id)

    # ---------------------------------------------------------------- lifecycle API
    def attempt_start(self, gpus: int = 1, ts: float | None = None, **attrs: Any) -> str | None:
        """Mark the start of this attempt (hardware allocated) and start heartbeats."""
        event_id = self.mark("attempt_start", ts, attrs={"gpus": gpus, **attrs})
        self.start_heartbeat()
        return event_id

    def attempt_end(self, status: str, ts: float | None = None, **attrs: Any) -> str | None:
        self._heartbeat_stop.set()
        return self.mark("attempt_end", ts, attrs={"status": status, **attrs})

    def heartbeat(self, step: int | None = None) -> str | None:
        """A ``heartbeat`` mark now, with ``step``: by default the last completed global
        step (``last_step``, what the train tracker and the adapters' step hooks record)."""
        step = self.last_step if step is None else step
        return self.mark("heartbeat", **({} if step is None else {"step": step}))

    def phase(self, name: str, *, blocking: bool = True, **attrs: Any) -> PhaseSpan:
        """Context manager and decorator timing one lifecycle phase."""
        return PhaseSpan(self, name, blocking, attrs)

    def train(self, start_step: int = 0, *, steps: int | None = None) -> TrainTracker:
        """Track training from global step ``start_step`` (the resumed step after a restart)
        to ``steps`` (the step training stops at, like ``max_steps``; needed only to iterate
        the tracker); slices are closed every ``train_slice_s``. A context manager."""
        return TrainTracker(self, start_step, steps)

    def open_progress(self) -> ProgressWriter | None:
        """The progress file (made on the first call; a train tracker calls this): the last
        completed step and its time, where ``collector.run`` or the node agent find them
        after a hard kill. None when it cannot be made (logged once) or after a fork."""
        if not self._progress_tried and not self._closed:
            self._progress_tried = True
            self.progress = ProgressWriter.open(
                self.spool_dir, self._writer.stream,
                {"job": self._job, "attempt": self._attempt, "rank": self._rank,
                 "host": self._host})
        return self.progress

    def start_heartbeat(self) -> None:
        """Start the heartbeat thread unless one is running; each gets its own stop event so
        an ``attempt_end`` followed at once by an ``attempt_start`` cannot silence the next.
        ``attempt_start`` calls it; an adapter whose supervisor marks the attempt calls it
        itself, so a rank's progress is heard even when the process is killed outright."""
        if self.heartbeat_s <= 0:
            return
        running = self._heartbeat_thread is not None and self._heartbeat_thread.is_alive()
        if running and not self._heartbeat_stop.is_set():
            return
        self._heartbeat_stop = stop = threading.Event()
        thread = threading.Thread(target=self._beat, args=(stop,), name="ett-heartbeat",
                                  daemon=True)
        self._heartbeat_thread = thread
        thread.start()

    def _beat(self, stop: threading.Event) -> None:
        """Beat every ``heartbeat_s`` and have each written at once, not at the writer's next
        interval: a process killed outright loses what is still queued, and its last
        heartbeat is what tells how far it trained (ETT_SPEC §3 rule 3)."""
        while not stop.wait(self.heartbeat_s):
            self.heartbeat()
            self._wake.set()

    # ---------------------------------------------------------------- flushing
    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything emitted so far is in the spool file; False on timeout."""
        if self._closed or not self._worker.is_alive():
            return False
        done = threading.Event()
        self._buffer.append(done)
        self._wake.set()
        return done.wait(timeout)

    def shutdown(self, timeout: float = 5.0) -> bool:
        """Flush and stop the background thread; safe to call twice."""
        self._heartbeat_stop.set()
        if self._closed:
            return True
        self._closed = True
        self._buffer.append(_STOP)
        self._wake.set()
        self._worker.join(timeout)
        drained = not self._worker.is_alive()
        progress, self.progress = self.progress, None
        if progress is not None:  # every span is written: the file has nothing to add
            progress.close(remove=drained)
        return drained

    @property
    def spool_path(self) -> Path:
        return self._writer.path


def _line_template(job: str, attempt: int, rank: int, host: str) -> LineTemplate | None:
    try:
        check_identity(job, attempt, rank, host)
    except EventError:
        return None
    return LineTemplate(job, attempt, rank, host)


def _fsync_policy(fsync: bool | str | None) -> str:
    """``True``/``False`` mean always/never; None reads ETT_SPOOL_FSYNC."""
    if isinstance(fsync, bool):
        return "always" if fsync else "never"
    if fsync is None:
        env = os.environ.get("ETT_SPOOL_FSYNC", "").strip().lower() or "never"
        if env in FSYNC_POLICIES:
            return env
        log.warning("ETT reporter: ETT_SPOOL_FSYNC=%r is not one of %s; using 'never'",
                    env, ", ".join(FSYNC_POLICIES))
        return "never"
    if fsync not in FSYNC_POLICIES:
        raise ValueError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, got {fsync!r}")
    return fsync


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)[:80]
