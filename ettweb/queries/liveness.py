"""Whether a running job is still heard from: the *stale* status shown on top of ``running``.

ETT_SPEC §3.1 calls an attempt with no ``attempt_end`` and no later attempt ``running``, and
its numbers are attributed so. An attempt whose process is gone without an end (SIGKILL, a
lost node, its supervisor killed too) would then show as running forever; so pages and the
API also say when the job was last heard from, and call a running job *stale* once nothing
has been heard from it for ``ETT_STALE_AFTER_S`` seconds, until its end arrives. Staleness
changes no number.

Last heard is the job's latest event time, read from rows already kept per job, never from
its events: ingestion's job row (``ingest.Job.last_event_time``, moved forward by every
batch, so it is current before the rollup refresh has run) or, for a job without one, its
rollup's window end (a running attempt's window ends at its latest event). "Now" is the
query's ``now`` when given (tests), else the clock.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.conf import settings
from django.db.models import F, FloatField, OuterRef, Subquery
from django.db.models.functions import Greatest
from django.utils import timezone

from ettweb.ingest.models import Job

RUNNING = "running"


def judged_at(now: datetime | None) -> datetime:
    """The moment staleness is judged at: ``now``, else the clock's."""
    return timezone.now() if now is None else now


def stale_after_s() -> float:
    """Seconds without an event after which a running job is stale (``ETT_STALE_AFTER_S``)."""
    return float(settings.ETT_STALE_AFTER_S)


def stale_before(at: datetime) -> float:
    """Epoch seconds: a running job last heard before this, judged at ``at``, is stale."""
    return at.timestamp() - stale_after_s()


def last_heard_sql() -> Greatest:
    """A job rollup row's last-heard time in SQL (epoch seconds; see the module's note):
    the later of its ingestion row's latest event time and its window end. Postgres'
    ``GREATEST`` skips a NULL, so a job missing either still has one."""
    latest = Job.objects.filter(job_id=OuterRef("job")).values("last_event_time")[:1]
    return Greatest(Subquery(latest, output_field=FloatField()), F("window_end"),
                    output_field=FloatField())


def last_heard(job_row_time: float | None, window_end: float | None) -> float | None:
    """The same as :func:`last_heard_sql`, for values already read."""
    known = [t for t in (job_row_time, window_end) if t is not None]
    return max(known) if known else None


def is_stale(status: str, heard: float | None, at: datetime) -> bool:
    """Whether a job (or attempt) of ``status`` last heard at ``heard`` is stale at ``at``."""
    return status == RUNNING and heard is not None and heard < stale_before(at)


def as_time(epoch: float | None) -> datetime | None:
    """Epoch seconds as a UTC datetime; None for None and for a time no datetime can hold
    (a job whose events lie past year 9999 is shown, never a 500: it is then parked)."""
    if epoch is None:
        return None
    try:
        return datetime.fromtimestamp(epoch, UTC)
    except (ValueError, OverflowError, OSError):
        return None
