"""Import schema-v1 events from files into the database, without a worker or a broker.

Why this exists: a team brings its history on day one (months of JSONL, gzipped archives,
spool segments a collector never shipped), and a simulator feeds millions of lines. Both
must land exactly as the worker would store them, so every batch goes through the worker's
own ``ingest_lines`` (validation, quarantine with reasons, id dedup) — only the partitions
differ: an import gives every day its events fall on a partition of its own, however old
(``any_age_partitions``), while the worker keeps its window around now.

The rollups are refreshed once at the end (``refresh_imported``) rather than per batch: a
refresh recomputes whole jobs, so refreshing per batch would recompute a job once for every
batch it appears in.

``manage.py ett_import`` is the command line; ``import_lines`` is what other code calls with
any iterable of lines (a generator of millions is fine: it is consumed batch by batch).
"""

from __future__ import annotations

import gzip
import io
import itertools
import multiprocessing
import os
import signal
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, replace
from multiprocessing.util import Finalize
from pathlib import Path
from typing import TypeVar

from django.db import connection, connections

from ettweb.attribution.engine import gc_paused
from ettweb.ingest import retention
from ettweb.ingest.batches import IngestResult, ingest_lines
from ettweb.ingest.models import Job, QuarantinedEvent
from ettweb.rollups.models import (
    AttemptRollup,
    AttemptTimeline,
    AttributionChunk,
    DailyCategoryRollup,
    DirtyChunk,
    DirtyJob,
    FleetDayRollup,
    JobDayRollup,
    JobLostRollup,
    JobRollup,
    LabelDayRollup,
    RecoveryPartRollup,
    RecoveryRollup,
    ScopeTotalRollup,
)
from ettweb.rollups.refresh import JOBS_PER_TRANSACTION, RefreshStats, refresh_jobs

DEFAULT_BATCH_LINES = 5000
#: Most worker processes by default: Postgres works on the same machine's cores (over 40%
#: of an import's CPU), so more processes than cores only take turns.
MAX_WORKERS = 4
GZIP_MAGIC = b"\x1f\x8b"
#: Bytes read at a time when a gzip file is verified before anything is imported.
_VERIFY_CHUNK = 1 << 20
Progress = Callable[[int], None]


def counted(count: int, noun: str) -> str:
    """``1 job``, ``2 jobs``, ``1,234 jobs``."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


class ImportFileError(Exception):
    """A file that cannot be read (missing, a directory, no permission, a corrupt gzip)."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(path, reason)
        self.path, self.reason = path, " ".join(reason.split())  # one line, always

    def __str__(self) -> str:
        return f"cannot read {self.path}: {self.reason}"


@dataclass(frozen=True)
class ImportSummary:
    """What an import did; every line given is in exactly one of the four counts. Lines of
    days retention has dropped (``expired``, by day in ``expired_days``) are refused by
    policy and never quarantined: one sentence says how many, which days and why."""

    stored: int
    duplicates: int
    rejected: int
    reasons: dict[str, int]  # rejection reason -> count
    jobs: tuple[str, ...]  # every job a valid line belonged to, sorted
    expired: int = 0
    expired_days: tuple[str, ...] = ()

    def line(self) -> str:
        """``1,234 stored, 0 duplicates, 2 rejected (span end before start: 1; ...)``, and
        the expired events' sentence when there are any."""
        text = (f"{self.stored:,} stored, {counted(self.duplicates, 'duplicate')}, "
                f"{self.rejected:,} rejected")
        ranked = sorted(self.reasons.items(), key=lambda item: (-item[1], item[0]))
        if ranked:
            text += " (" + "; ".join(f"{reason}: {count:,}" for reason, count in ranked) + ")"
        if self.expired:
            text += "; " + retention.expired_line(self.expired, self.expired_days)
        return text

    def __add__(self, other: ImportSummary) -> ImportSummary:
        """Two imports as one (the command imports several files)."""
        return ImportSummary(stored=self.stored + other.stored,
                             duplicates=self.duplicates + other.duplicates,
                             rejected=self.rejected + other.rejected,
                             reasons=dict(Counter(self.reasons) + Counter(other.reasons)),
                             jobs=tuple(sorted({*self.jobs, *other.jobs})),
                             expired=self.expired + other.expired,
                             expired_days=tuple(sorted({*self.expired_days,
                                                        *other.expired_days})))


EMPTY = ImportSummary(stored=0, duplicates=0, rejected=0, reasons={}, jobs=())


# --------------------------------------------------------------------------- reading files

def _is_gzip(path: Path) -> bool:
    """By name (so a corrupt ``.gz`` is an error, not a file of bad lines), else by magic."""
    if path.name.endswith(".gz"):
        return True
    with path.open("rb") as stream:
        return stream.read(len(GZIP_MAGIC)) == GZIP_MAGIC


def _open(path: Path) -> io.BufferedIOBase:
    if _is_gzip(path):
        return gzip.GzipFile(path, "rb")
    return path.open("rb")


def _reason(exc: BaseException) -> str:
    """The short human reason: the OS's words for OSError, the codec's for a bad gzip."""
    if isinstance(exc, gzip.BadGzipFile | EOFError | zlib.error):
        return f"corrupt gzip file ({exc})"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def read_lines(path: Path) -> Iterator[bytes]:
    """The event lines of a plain JSONL file, a ``.gz`` of one, or a spool segment.

    Lines are yielded as raw bytes without their newline; a spool record keeps its
    ``\\t<crc32>`` (``parse_event`` verifies and strips it, and quarantine keeps the record as
    it was). Blank lines are skipped, as the offline report skips them: an editor's trailing
    empty line is not an event. Raises ImportFileError when the file cannot be read.
    """
    try:
        with _open(path) as stream:
            for raw in stream:
                line = raw.rstrip(b"\r\n")
                if line.strip():
                    yield line
    except (OSError, EOFError, zlib.error) as exc:
        raise ImportFileError(path, _reason(exc)) from None


def check_readable(path: Path) -> None:
    """Raise ImportFileError unless ``path`` can be read to its end.

    Called for every path before anything is imported, so a bad second file cannot leave
    the first one half imported. A gzip file is decompressed through (its CRC and length
    are at the end: a truncated archive fails only there); a plain file's first byte is
    enough to know it opens (a directory or missing permission fails at once).
    """
    try:
        with _open(path) as stream:
            if isinstance(stream, gzip.GzipFile):
                while stream.read(_VERIFY_CHUNK):
                    pass
            else:
                stream.read(1)
    except (OSError, EOFError, zlib.error) as exc:
        raise ImportFileError(path, _reason(exc)) from None


# --------------------------------------------------------------------------- worker processes

Task = TypeVar("Task")
Result = TypeVar("Result")


def default_workers() -> int:
    """One worker process per core, at most ``MAX_WORKERS``."""
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS))


def _worker_started() -> None:
    """In a forked worker: leave Ctrl-C to the parent (it lets running tasks finish) and
    close this process's database connection when it exits (no EOF noise in the log)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    Finalize(None, connections.close_all, exitpriority=10)


@dataclass(frozen=True)
class _Workers:
    executor: ProcessPoolExecutor
    count: int


@contextmanager
def _pool(workers: int | None) -> Iterator[_Workers | None]:
    """Forked worker processes with a database connection each, or None to work in-process.

    Why processes: parsing, validation and attribution are Python (one core under the GIL),
    and while one process waits for Postgres the other computes. Measured on a 2-core
    machine, 1,056,655 events of 20,000 jobs: 73.5 s with one process, 41.3 s with two.
    In-process whenever the caller holds a transaction (a test, or code that wants the
    import inside its own): workers could neither see nor join it.
    """
    count = default_workers() if workers is None else workers
    if count < 2 or connection.in_atomic_block:
        yield None
        return
    connections.close_all()  # a forked child must not share the parent's socket
    executor = ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("fork"),
                                   initializer=_worker_started)
    try:
        yield _Workers(executor, count)
    finally:
        executor.shutdown(wait=True, cancel_futures=True)  # tasks in flight commit or fail


def _run(pool: _Workers | None, work: Callable[[Task], Result],
         tasks: Iterable[Task]) -> Iterator[tuple[Task, Result]]:
    """``(task, work(task))`` for every task, in completion order.

    At most two tasks per worker are in flight, so a generator of millions of lines is read
    only as fast as it is stored (``Executor.map`` would submit all of it at once).
    """
    if pool is None:
        for task in tasks:
            yield task, work(task)
        return
    pending: dict[Future[Result], Task] = {}
    for task in tasks:
        pending[pool.executor.submit(work, task)] = task
        if len(pending) >= 2 * pool.count:
            yield from _finished(pending)
    while pending:
        yield from _finished(pending)


def _finished(pending: dict[Future[Result], Task]) -> Iterator[tuple[Task, Result]]:
    done, _ = wait(pending, return_when=FIRST_COMPLETED)
    for future in done:
        yield pending.pop(future), future.result()


# --------------------------------------------------------------------------- importing

def _batches(lines: Iterable[str | bytes], size: int) -> Iterator[list[str | bytes]]:
    iterator = iter(lines)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def _last_quarantine_id() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT coalesce(max(id), 0) FROM {QuarantinedEvent._meta.db_table}")
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def _reasons_after(source: str, after_id: int) -> dict[str, int]:
    """Reasons of the lines ``source`` quarantined after row ``after_id``, with counts.

    Read back from the quarantine because ``ingest_lines`` (the worker's logic, unchanged)
    reports counts only. Every row an import inserts gets an id above the mark taken before
    its first batch, so the rows after it with this source are exactly the import's (two
    imports of one file name at the same moment would share their counts).
    """
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT reason, count(*) FROM {QuarantinedEvent._meta.db_table} "
                       "WHERE id > %s AND source = %s GROUP BY reason", [after_id, source[:200]])
        return {str(reason): int(count) for reason, count in cursor.fetchall()}


@dataclass(frozen=True)
class _Batch:
    """One batch of an import: what a worker process needs to store it."""

    lines: list[str | bytes]
    source: str


def _text(line: str | bytes) -> str:
    """A line as the worker receives it: text, decoded as the collector decodes spool records
    (invalid UTF-8 replaced). Why not bytes: quarantine keeps a bytes line as its repr
    (``"b'…'"``), and without the job id a job page counts its rejected lines by."""
    return line if isinstance(line, str) else line.decode("utf-8", errors="replace")


def _ingest(batch: _Batch) -> IngestResult:
    """Store one batch as the worker does, days of any age getting their partitions."""
    with gc_paused():  # thousands of small dicts, no cycles: see engine.gc_paused
        return ingest_lines([_text(line) for line in batch.lines], batch.source,
                            any_age_partitions=True)


def import_lines(lines: Iterable[str | bytes], *, source: str,
                 batch_lines: int = DEFAULT_BATCH_LINES,
                 progress: Progress | None = None,
                 workers: int | None = None) -> ImportSummary:
    """Store ``lines`` through the worker's ingest logic, ``batch_lines`` at a time.

    Each batch commits on its own (a crash loses at most the batches in hand, and importing
    again stores only what is missing: ids dedup). Quarantined lines carry ``source``.
    ``progress(n)`` is called with the number of lines of each finished batch. Batches are
    stored by ``workers`` processes (default: one per core, see ``_pool``). The jobs are
    marked dirty as the worker marks them; call :func:`refresh_imported` with
    ``summary.jobs`` afterwards for current rollups.
    """
    if batch_lines < 1:
        raise ValueError("batch_lines must be >= 1")
    mark = _last_quarantine_id()
    stored = duplicates = rejected = expired = 0
    jobs: set[str] = set()
    expired_days: set[str] = set()
    batches = (_Batch(batch, source) for batch in _batches(lines, batch_lines))
    first = list(itertools.islice(batches, 2))  # one batch: not worth starting processes
    with _pool(workers if len(first) > 1 else 1) as pool:
        for batch, result in _run(pool, _ingest, itertools.chain(first, batches)):
            stored, duplicates = stored + result.stored, duplicates + result.duplicates
            rejected, expired = rejected + result.rejected, expired + result.expired
            jobs.update(result.jobs)
            expired_days.update(result.expired_days)
            if progress is not None:
                progress(len(batch.lines))
    reasons = _reasons_after(source, mark) if rejected else {}
    return ImportSummary(stored=stored, duplicates=duplicates, rejected=rejected,
                         reasons=reasons, jobs=tuple(sorted(jobs)), expired=expired,
                         expired_days=tuple(sorted(expired_days)))


def _plus(a: RefreshStats, b: RefreshStats) -> RefreshStats:
    return RefreshStats(jobs=a.jobs + b.jobs, events=a.events + b.events,
                        day_rows_written=a.day_rows_written + b.day_rows_written,
                        day_rows_deleted=a.day_rows_deleted + b.day_rows_deleted,
                        days_written=tuple(sorted({*a.days_written, *b.days_written})))


def _refresh(chunk: list[str]) -> RefreshStats:
    with gc_paused():
        return refresh_jobs(chunk)


def refresh_imported(jobs: Sequence[str], *, progress: Progress | None = None,
                     workers: int | None = None) -> RefreshStats:
    """Recompute the rollups of the imported jobs (``refresh_jobs``, chunk by chunk).

    Chunks are ``refresh_jobs``' own transaction size, spread over ``workers`` processes
    (as in :func:`import_lines`); ``progress(n)`` gets the number of jobs of each finished
    chunk. The same numbers as one ``refresh_jobs(jobs)``: every job is recomputed whole
    under its own advisory lock, whichever process does it. A bulk refresh keeps the
    planner's statistics current as it fills the tables (:func:`_analyze`).
    """
    began = time.perf_counter()
    ordered = sorted(set(jobs))
    bulk = len(ordered) > ANALYZE_AFTER_JOBS
    if bulk:
        _analyze(_WRITTEN_BY_IMPORT)
    chunks = (ordered[at:at + JOBS_PER_TRANSACTION]
              for at in range(0, len(ordered), JOBS_PER_TRANSACTION))
    total = RefreshStats()
    analyzed = not bulk
    with _pool(workers if len(ordered) > JOBS_PER_TRANSACTION else 1) as pool:
        for chunk, stats in _run(pool, _refresh, chunks):
            total = _plus(total, stats)
            if not analyzed and total.jobs >= ANALYZE_AFTER_JOBS:
                _analyze(_FILLED_BY_REFRESH)
                analyzed = True
            if progress is not None:
                progress(len(chunk))
    if bulk:
        _analyze(_READ_BY_PAGES)
    return replace(total, elapsed_s=time.perf_counter() - began)


#: A refresh of more jobs than this is a bulk load: the planner's statistics are refreshed.
ANALYZE_AFTER_JOBS = 1000
#: (model, the columns its lookups filter on; empty: all) as :func:`_analyze` takes them.
Analyzed = tuple[tuple[type, tuple[str, ...]], ...]
#: What an import writes besides the events, read by job by the refresh that follows.
_WRITTEN_BY_IMPORT: Analyzed = ((Job, ("job_id",)), (DirtyJob, ("job",)),
                                (DirtyChunk, ("job",)))
#: Every table a refresh writes per job and the sums beside them, by the columns it looks
#: them up by (not the chunks' JSON: sampling it would cost more than the refresh saves).
_FILLED_BY_REFRESH: Analyzed = (
    (JobRollup, ("job",)), (AttemptRollup, ("job",)), (RecoveryRollup, ("job",)),
    (RecoveryPartRollup, ("job",)), (JobLostRollup, ("job",)), (AttemptTimeline, ("job",)),
    (DailyCategoryRollup, ("job", "day")), (JobDayRollup, ("job", "day")),
    (FleetDayRollup, ("day", "category")),
    (LabelDayRollup, ("day", "category", "model", "team", "cluster", "gpus")),
    (ScopeTotalRollup, ("team", "cluster", "category")), (AttributionChunk, ("job", "chunk")))
#: What the fleet, rollout and job pages read, every column, once the import is done.
_READ_BY_PAGES: Analyzed = tuple((model, ()) for model in (
    DailyCategoryRollup, JobRollup, AttemptRollup, RecoveryRollup, JobDayRollup,
    FleetDayRollup, LabelDayRollup))


def _analyze(tables: Analyzed) -> None:
    """ANALYZE ``tables`` (of those columns) during and after a bulk load.

    Why: autovacuum analyzes a table only some time after it changed, and until then the
    planner believes a table is as small as it last saw it. Before an import's refresh, its
    marks and job rows look empty, and while it runs, the rollup tables it fills look as
    they were: every lookup by job became a sequential scan of a whole table, once per
    refresh transaction, a cost that grew with the square of the jobs imported. Analyzed
    once with rows in them, the estimates follow the tables' growth (Postgres scales them
    by the pages the tables have now). After the import, reads by rollout windows need the
    day rows' statistics too: seen on a 20,000-job import (EXPLAIN ANALYZE), a rollout's two
    windows were estimated at 771 day rows instead of 72,500, so Postgres chose 72,500 index
    lookups and a sort on disk.
    """
    named = ", ".join(model._meta.db_table  # type: ignore[attr-defined]
                      + (f" ({', '.join(columns)})" if columns else "")
                      for model, columns in tables)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {named}")
