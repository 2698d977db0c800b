"""The Celery tasks the collector sends by name (``ett.ingest_batch``, ``ett.collector_health``)
and the periodic upkeep beat runs; the logic lives in logic.py, credentials.py, partitions.py.

Connection errors are retried without limit (ettweb.platform.retry): with ``task_acks_late``
a task that raised would otherwise be acknowledged and its batch lost during a database outage.
Any other error that fails a batch as a whole (a line's own errors are isolated beneath, in
``batches``) is tried ``STORE_TRIES`` times in place, then the batch is parked whole in the
quarantine (``quarantine.park_batch``): never acknowledged with its events lost, never retried
forever.
After storing, the task schedules ``ett.refresh_rollups`` for the jobs the batch newly marked
dirty (ettweb.rollups); batches arriving before that refresh runs share it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from typing import Any

from celery import shared_task
from celery._state import get_current_worker_task
from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import Q
from django.utils import timezone

from collector.auth import health_body
from ettweb.ingest import fairness, partitions, retention
from ettweb.ingest.batches import (
    IngestResult,
    Nonce,
    ReplayedBatch,
    claim_nonce,
    ingest_lines,
    reject_batch,
)
from ettweb.ingest.credentials import (
    BATCH,
    HEALTH_REPORT,
    BatchRejected,
    claimed_id,
    prune_nonces,
    prune_rejections,
    record_rejection,
    verify_batch,
)
from ettweb.ingest.models import CollectorHealth
from ettweb.ingest.quarantine import park_batch
from ettweb.platform.retry import DATABASE_ERRORS, waits_for_database
from ettweb.rollups.marks import refresh_delay_s
from ettweb.rollups.refresh import refresh_jobs
from ettweb.rollups.tasks import refresh_rollups

logger = logging.getLogger(__name__)
HEALTH_FIELDS = ("backlog_bytes", "backlog_events", "shipped_events", "dropped_events",
                 "corrupted_records", "spool_files")
#: Jobs per scheduled refresh task (a batch spanning a whole fleet is split).
REFRESH_JOBS_PER_TASK = 200
#: Tries of a batch whose storing fails as a whole with an error that is no lost connection,
#: and the waits between them; then it is parked (``quarantine.park_batch``). A transient
#: failure gets two more chances; a batch that fails every time costs 5 s of a worker.
STORE_TRIES = 3
STORE_RETRY_WAITS_S = (1.0, 4.0)


def _authenticate(auth: Any, lines: list[Any], *, in_process: bool = False) -> Nonce | None:
    """The batch's nonce when signed, None when unsigned and auth is not required.

    Auth guards what crosses the broker; a task called as a plain function (``in_process``,
    e.g. a management command or a test in the server's own process) is trusted code.
    """
    if auth is None and (in_process or not settings.ETT_INGEST_REQUIRE_AUTH):
        return None
    return verify_batch(auth, lines)


def _in_process(task: Any) -> bool:
    """Whether trusted code in this process called the task as a plain function.

    Celery marks a task called from inside another task as called directly too, and
    ``celery.map``, ``celery.starmap`` and ``celery.chunks`` call theirs that way: a message
    may ask for them, naming ``ett.ingest_batch`` and any lines. So a call made while the
    worker runs a task from the broker is no in-process call, and is authenticated.
    """
    return bool(task.request.called_directly) and get_current_worker_task() is None


def _redelivered(task: Any) -> bool:
    """Whether this delivery repeats one that may have committed: our retry or a broker
    redelivery (a signed replay needs write access to the broker, which already is trust)."""
    request = task.request
    return bool(request.retries) or bool((request.delivery_info or {}).get("redelivered"))


@shared_task(name="ett.ingest_batch", bind=True)
@waits_for_database
def ingest_batch(self: Any, lines: list[str], source: str = "",
                 auth: dict[str, Any] | None = None) -> dict[str, int]:
    """Verify and ingest one batch of raw JSONL lines, then schedule its jobs' rollup refresh.

    A batch failing authentication is quarantined whole with the reason, and the refusal is
    recorded against its source and claimed collector (the collectors page shows it). The
    refresh runs ``ETT_ROLLUP_REFRESH_DELAY_S`` after the events committed (inline when
    called in-process), so running jobs show live numbers a few seconds behind.
    Events older than the retention horizon are refused with one warning naming their days,
    not quarantined (``retention``). A batch over its source's rate is put back once at the
    queue's tail instead (``fairness``; ``"deferred": 1``). Returns ``{"stored",
    "duplicates", "rejected", "expired"}``.
    """
    batch: list[Any] = lines if isinstance(lines, list) else [lines]
    source = str(source)
    # Over its source's rate: put back once at the queue's tail, so a flood waits behind the
    # other nodes' batches instead of ahead of them (ettweb.ingest.fairness).
    if fairness.should_defer(self, source, len(batch)) \
            and fairness.defer(self, batch, source, auth):
        return {"stored": 0, "duplicates": 0, "rejected": 0, "expired": 0, "deferred": 1}
    try:
        nonce = _authenticate(auth, batch, in_process=_in_process(self))
    except BatchRejected as exc:
        with transaction.atomic():
            record_rejection(source, claimed_id(auth), str(exc), BATCH)
            return reject_batch(batch, source, str(exc)).as_dict()
    result = _ingest_or_park(batch, source, nonce)
    if result.expired:
        logger.warning("batch from %r: %s", source,
                       retention.expired_line(result.expired, result.expired_days))
    redelivered = _redelivered(self) or result.seen_before
    if self.request.called_directly:  # in-process caller: rollups current when we return
        refresh_jobs(result.jobs)
    else:  # a redelivery may follow a commit whose refresh was never scheduled: all its jobs
        _schedule_refresh(result.jobs if redelivered else result.refresh,
                          (self.request.delivery_info or {}).get("routing_key"))
    return result.as_dict()


def _ingest_or_park(batch: list[Any], source: str, nonce: Nonce | None) -> IngestResult:
    """``ingest_lines``, tried ``STORE_TRIES`` times in place on an error that is not a lost
    connection (those go to ``waits_for_database``, without limit), then parked.

    Why in place: the message stays unacknowledged meanwhile (a worker killed now leaves it
    to be redelivered), and a raise would acknowledge it with its events lost.
    """
    for tries in range(1, STORE_TRIES + 1):
        try:
            return ingest_lines(batch, source, nonce=nonce)
        except DATABASE_ERRORS:
            raise
        except Exception as exc:
            logger.warning("batch from %r (%d lines) failed to store, try %d of %d",
                           source, len(batch), tries, STORE_TRIES, exc_info=True)
            if tries == STORE_TRIES:
                park_batch(batch, source, exc, tries)
                return IngestResult(stored=0, duplicates=0, rejected=len(batch))
            time.sleep(STORE_RETRY_WAITS_S[tries - 1])
    raise AssertionError("unreachable")  # pragma: no cover


def _schedule_refresh(jobs: tuple[str, ...], queue: str | None) -> None:
    """Send ``ett.refresh_rollups`` to the queue the batch came from, after the debounce delay
    (``ETT_ROLLUP_REFRESH_DELAY_S``, stretched while many big jobs wait: ``refresh_delay_s``).

    The batch is already committed: if the broker refuses now, the jobs keep their marks and
    the next batch of the job, or beat's ``ett.refresh_stale_rollups``, schedules them again.
    """
    if not jobs:
        return
    base = settings.ETT_ROLLUP_REFRESH_DELAY_S
    try:
        countdown = refresh_delay_s(base)
    except DatabaseError:  # the events are stored; only the wait is a guess now
        logger.warning("could not size the refresh delay; using %.1f s", base, exc_info=True)
        countdown = base
    for at in range(0, len(jobs), REFRESH_JOBS_PER_TASK):
        chunk = list(jobs[at:at + REFRESH_JOBS_PER_TASK])
        try:
            options: dict[str, Any] = {"queue": queue} if queue else {}
            refresh_rollups.apply_async(args=(chunk,), countdown=countdown, **options)
        except Exception:  # the marks make this recoverable: never fail a stored batch
            logger.warning("could not schedule the rollup refresh of %d job(s); the stale-mark "
                           "sweep will", len(chunk), exc_info=True)


def _health_values(stats: Any) -> dict[str, Any]:
    """The known stats keys as numbers; a malformed report is refused, not half-stored."""
    if not isinstance(stats, dict):
        raise BatchRejected("health stats must be an object")
    values: dict[str, Any] = {}
    for key in HEALTH_FIELDS:
        value = stats.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BatchRejected(f"health stat {key!r} must be an integer >= 0")
        values[key] = value
    last = stats.get("last_success_ts")
    if last is not None and (isinstance(last, bool) or not isinstance(last, int | float)):
        raise BatchRejected("health stat 'last_success_ts' must be a number or null")
    values["last_success_ts"] = None if last is None else float(last)
    epoch, seq = stats.get("report_epoch"), stats.get("report_seq")
    if (epoch is None) != (seq is None):
        raise BatchRejected("health stats 'report_epoch' and 'report_seq' come together")
    if epoch is not None:
        if isinstance(epoch, bool) or not isinstance(epoch, int | float) or not epoch >= 0:
            raise BatchRejected("health stat 'report_epoch' must be a number >= 0")
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise BatchRejected("health stat 'report_seq' must be an integer >= 0")
        values.update(report_epoch=float(epoch), report_seq=seq)
    return values


def store_health(source: str, values: dict[str, Any]) -> bool:
    """Keep ``values`` as ``source``'s latest report unless a newer one is stored already.

    Reports of agents that give no order (no ``report_epoch``) replace whatever is stored.
    Returns whether this report was kept.
    """
    if "report_epoch" not in values:
        CollectorHealth.objects.update_or_create(source=source, defaults=values)
        return True
    _, created = CollectorHealth.objects.get_or_create(source=source, defaults=values)
    if created:
        return True
    epoch, seq = values["report_epoch"], values["report_seq"]
    older = Q(report_epoch__lt=epoch) | Q(report_epoch=epoch, report_seq__lt=seq)
    return bool(CollectorHealth.objects.filter(older, source=source)
                .update(**values, updated_at=timezone.now()))


@shared_task(name="ett.collector_health")
@waits_for_database
def collector_health(source: str, stats: dict[str, Any],
                     auth: dict[str, Any] | None = None) -> None:
    """Store a collector's latest health report (signed like a batch over the stats JSON).

    The signature covers the source as well as the stats (``collector.auth.health_body``),
    so a report cannot be relabelled as another collector's, and its nonce is recorded with
    the report, so it cannot be stored twice. A rejected report is logged with its reason and
    dropped: it carries counters, not events, and the next report (every few seconds)
    replaces it anyway. A report refused for its credential is also recorded against its
    source, so a collector whose every report is refused still shows (as rejected). One older
    than the stored report (by its ``report_epoch``/``report_seq``: a redelivery after a
    newer one) is dropped too.
    """
    try:
        nonce = _authenticate(auth, [health_body(str(source), stats)])
    except BatchRejected as exc:
        reason = _health_reason(exc, auth, stats)
        logger.warning("health report from %r rejected: %s", source, reason)
        record_rejection(str(source), claimed_id(auth), reason, HEALTH_REPORT)
        return
    try:
        values = _health_values(stats)
    except BatchRejected as exc:
        logger.warning("health report from %r rejected: %s", source, exc)
        return
    try:
        with transaction.atomic():
            if nonce is not None:
                claim_nonce(nonce)
            kept = store_health(str(source)[:200],
                                {**values, "collector_id": nonce.collector_id if nonce else ""})
    except ReplayedBatch:
        logger.warning("health report from %r rejected: replayed (its nonce was seen)", source)
        return
    if not kept:
        logger.info("health report %s/%s from %r is older than the one stored: kept the newer",
                    values["report_epoch"], values["report_seq"], source)


def _health_reason(exc: BatchRejected, auth: Any, stats: Any) -> str:
    """Why a report was refused; a report signed over its stats alone (an agent from before
    the source was signed) is told apart from a forgery, so its operator knows to update."""
    if str(exc) == "bad signature" and isinstance(stats, dict):
        with contextlib.suppress(BatchRejected):
            verify_batch(auth, [json.dumps(stats, sort_keys=True)])
            return ("signed over its stats but not its source: a collector older than this "
                    "server; update it")
    return str(exc)


@shared_task(name="ett.ensure_event_partitions")
@waits_for_database
def ensure_event_partitions() -> list[str]:
    """Beat: create today's and the coming days' event partitions; returns the new ones."""
    partitions.forget_known()
    return partitions.ensure_ahead(time.time())


@shared_task(name="ett.prune_batch_nonces")
@waits_for_database
def prune_batch_nonces() -> int:
    """Beat: forget nonces too old to be replayed (their timestamp fails the skew check),
    and refused sources past ``ETT_COLLECTOR_REJECTIONS_DAYS`` even when no new refusal
    comes to prune them."""
    return prune_nonces() + prune_rejections()


@shared_task(name="ett.drop_expired_events")
@waits_for_database
def drop_expired_events() -> int:
    """Beat: drop raw events older than ``ETT_EVENT_RETENTION_DAYS`` once their chunks are
    final (``ettweb.ingest.retention``); returns how many were dropped."""
    return retention.drop_expired().events
