"""What every query shares: date ranges, the phase→component map, percentages, GPU buckets.

The query layer (``ettweb.queries``) is the ONE place numbers come from: dashboard pages, the
JSON API and (soon) the e-mail reports run a typed query through ``calculate()`` and render
the dataclass it returns, so no two of them can disagree. Views never touch models or the
engine directly.

Fleet numbers come from the rollup tables (``ettweb.rollups``), never from an event scan.
Rollups store time by *category*; categories are mapped to owning components at query time,
from the editable :class:`PhaseComponent` table, so an owner's edit shows on the next load.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final, Literal

from django.db import connection, transaction
from django.db.models import DateField, F, Max, Q, Sum
from django.db.models.functions import Cast, Coalesce, TruncWeek

from ettweb.attribution.components import DEFAULT_PHASE_COMPONENTS, component_of
from ettweb.platform.text import unstorable
from ettweb.queries.exposed import as_api
from ettweb.rollups.buckets import GPU_BUCKET_LABELS as GPU_BUCKET_LABELS
from ettweb.rollups.buckets import GPU_BUCKETS as GPU_BUCKETS
from ettweb.rollups.buckets import gpu_bucket as gpu_bucket
from ettweb.rollups.models import (
    DailyCategoryRollup,
    FleetDayRollup,
    LabelDayRollup,
    PhaseComponent,
)

HOUR_S: Final = 3600.0
DAY_S: Final = 86400.0
Interval = Literal["day", "week"]
Grouping = Literal["none", "model", "team", "cluster", "gpus"]
INTERVALS: Final[tuple[Interval, ...]] = ("day", "week")
GROUPINGS: Final[tuple[Grouping, ...]] = ("none", "model", "team", "cluster", "gpus")
#: The label of the single series when nothing is grouped.
ALL: Final = "all"
#: Longest range a query accepts: bounds the rows a page can ask Postgres for.
MAX_RANGE_DAYS: Final = 3 * 366
#: Days a page shows when no range is given.
DEFAULT_DAYS: Final = 30
#: Longest model, team or cluster a filter names: job labels are stored in 200 characters.
MAX_LABEL_CHARS: Final = 200


def phase_components() -> dict[str, str]:
    """The phase→component map as owners edited it (read on every query: no cache).

    An empty table is never a deliberate map (it would send every second to ``unknown``):
    it means the seed was wiped (a test flush, a restore), so ETT_SPEC §4's defaults apply.
    """
    mapping = dict(PhaseComponent.objects.values_list("phase", "component"))
    return mapping or dict(DEFAULT_PHASE_COMPONENTS)


def pct(part: float, whole: float) -> float:
    return 0.0 if whole <= 0.0 else min(100.0, max(0.0, 100.0 * part / whole))


#: The days a range may name: the day after ``date_to`` must still be a date (``date.max`` +
#: 1 day overflows). Events carry epoch seconds, but a default range of 30 days ending on a
#: day of 1970 reaches back into 1969, so the first day is a round one well before that.
FIRST_DAY: Final = date(1900, 1, 1)
LAST_DAY: Final = date(9999, 12, 30)


def epoch(day: date) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()


def day_of(ts: float) -> date:
    return datetime.fromtimestamp(ts, UTC).date()


@dataclass(frozen=True)
class DateRange:
    """Inclusive range of UTC days; rejects an inverted or oversized range with a reason."""

    date_from: date
    date_to: date

    def __post_init__(self) -> None:
        for name in ("date_from", "date_to"):
            day = getattr(self, name)
            if not FIRST_DAY <= day <= LAST_DAY:
                raise ValueError(f"{name} {day} is outside {FIRST_DAY} to {LAST_DAY}")
        if self.date_from > self.date_to:
            raise ValueError(f"date_from {self.date_from} is after date_to {self.date_to}")
        if (self.date_to - self.date_from).days >= MAX_RANGE_DAYS:
            raise ValueError(f"range longer than {MAX_RANGE_DAYS} days")

    @property
    def epoch_bounds(self) -> tuple[float, float]:
        """[start, end) in epoch seconds."""
        return epoch(self.date_from), epoch(self.date_to + timedelta(days=1))

    def period_of(self, day: date, interval: Interval) -> date:
        """The first day of the period ``day`` falls in (weeks start on Monday, as ISO)."""
        return day - timedelta(days=day.weekday()) if interval == "week" else day

    @property
    def days(self) -> int:
        return (self.date_to - self.date_from).days + 1

    def last_days(self, count: int) -> DateRange:
        """The range's last ``count`` days (all of it when it is shorter)."""
        return DateRange(max(self.date_from, self.date_to - timedelta(days=count - 1)),
                         self.date_to)

    def days_before(self, count: int) -> DateRange | None:
        """``count`` days ending the day before this range starts; None when they would
        start before the first day a range may name."""
        end = self.date_from - timedelta(days=1)
        if end < FIRST_DAY + timedelta(days=count - 1):
            return None
        return DateRange(end - timedelta(days=count - 1), end)

    def previous(self) -> DateRange | None:
        """As many days again, ending the day before this range starts: the period a trend
        is compared with. None when it would start before the first day a range may name."""
        return self.days_before(self.days)


def one_sided_range(date_from: date | None, date_to: date | None) -> DateRange | None:
    """None without bounds; with one bound alone, the longest range a query allows."""
    span = timedelta(days=MAX_RANGE_DAYS - 1)
    if date_from is None and date_to is None:
        return None
    if date_from is None:
        assert date_to is not None
        date_from = max(FIRST_DAY, date_to - span)
    if date_to is None:
        date_to = min(LAST_DAY, date_from + span)
    return DateRange(date_from, date_to)


def default_range(days: int = DEFAULT_DAYS) -> DateRange:
    """The last ``days`` days that have data (a demo's data may be years old), else today's."""
    latest = DailyCategoryRollup.objects.aggregate(latest=Max("day"))["latest"]
    end = latest or datetime.now(UTC).date()
    return DateRange(end - timedelta(days=days - 1), end)


def range_or_default(date_from: date | None, date_to: date | None,
                     days: int = DEFAULT_DAYS) -> DateRange:
    """The range a page (and its API twin) shows: the days given, a missing end being the
    last day with data and a missing start ``days`` days before the end. Raises ValueError
    naming the parameter, so the page and the API refuse a bad range in the same words."""
    for name, day in (("date_from", date_from), ("date_to", date_to)):
        if day is not None and not FIRST_DAY <= day <= LAST_DAY:
            raise ValueError(f"{name} {day} is outside {FIRST_DAY} to {LAST_DAY}")
    end = date_to or default_range(days).date_to
    start = date_from or max(FIRST_DAY, end - timedelta(days=days - 1))
    return DateRange(start, end)


#: The job labels a filter names, each the :class:`JobRollup` field it is matched against.
LABELS: Final = ("model", "team", "cluster")


@dataclass(frozen=True)
class JobFilter:
    """Which jobs a fleet or component query counts: exact model, team and cluster labels and
    a GPU-size bucket (``GPU_BUCKETS``' label), each empty for any.

    Why one filter for every query: a page's tiles, charts and tables must describe the same
    jobs, so each query narrows its rollup rows by this one definition, in Postgres (rows
    joined to their job's labels, as the jobs list filters). A job's labels and GPUs are
    its rollup's: those of its last attempt. An unknown label is no error, it matches no job.
    """

    model: str = ""
    team: str = ""
    cluster: str = ""
    gpus: str = ""

    def __post_init__(self) -> None:
        for name in (*LABELS, "gpus"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise ValueError(f"{name} must be text, not {type(value).__name__}")
            if len(value) > MAX_LABEL_CHARS:
                raise ValueError(f"{name} must be at most {MAX_LABEL_CHARS} characters, "
                                 f"not {len(value)}")
            problem = unstorable(value)
            if problem:
                raise ValueError(f"{name} {problem}")
        if self.gpus:
            validated("gpus", self.gpus, GPU_BUCKET_LABELS)

    @property
    def is_any(self) -> bool:
        """True when the filter keeps every job."""
        return not any(getattr(self, name) for name in (*LABELS, "gpus"))

    def q(self, prefix: str = "job__") -> Q:
        """The condition on a row whose job's fields are reached through ``prefix`` (``""``
        for :class:`JobRollup` itself, ``job__`` for rows that point at it)."""
        condition = Q()
        for name in LABELS:
            if getattr(self, name):
                condition &= Q(**{f"{prefix}{name}": getattr(self, name)})
        if self.gpus:
            low, high = next((lo, hi) for lo, hi, label in GPU_BUCKETS if label == self.gpus)
            condition &= Q(**{f"{prefix}gpus__gte": low})
            if high is not None:
                condition &= Q(**{f"{prefix}gpus__lte": high})
        return condition

    def label_q(self) -> Q:
        """The same condition on a :class:`LabelDayRollup` row (its own label fields, and
        its GPU-size bucket by label)."""
        condition = Q(**{name: getattr(self, name) for name in LABELS if getattr(self, name)})
        return condition & Q(gpus=self.gpus) if self.gpus else condition

    def narrow(self, rows: Any, prefix: str = "job__") -> Any:
        """``rows`` kept to the filtered jobs (untouched, so unjoined, for any job)."""
        return rows if self.is_any else rows.filter(self.q(prefix))

    def params(self) -> dict[str, str]:
        """The GET parameters that ask for this filter (empty ones left out)."""
        return {name: getattr(self, name) for name in (*LABELS, "gpus") if getattr(self, name)}

    def describe(self) -> str:
        """``team ads · GPUs 9-64``, or ``all jobs``."""
        parts = [f"{name} {getattr(self, name)}" for name in LABELS if getattr(self, name)]
        if self.gpus:
            parts.append(f"GPUs {self.gpus}")
        return " · ".join(parts) or "all jobs"

    def as_api(self) -> dict[str, str]:
        return as_api(self)


#: The filter that keeps every job.
ANY_JOB: Final = JobFilter()


def validated(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")


def by_component(seconds: Mapping[str, float], mapping: Mapping[str, str]) -> dict[str, float]:
    """Seconds per category folded into seconds per owning component (zeros left out)."""
    grouped: dict[str, float] = defaultdict(float)
    for category, value in seconds.items():
        grouped[component_of(category, mapping)] += value
    return {k: v for k, v in grouped.items() if v}


def quarantined_lines(rows: Any) -> int:
    """Rejected lines in quarantine rows: a batch refused whole keeps a sample whose
    ``lines`` count every line of it, so this is a sum, not a row count."""
    return int(rows.aggregate(n=Coalesce(Sum("lines"), 0))["n"])


def day_rows(query_range: DateRange, jobs: JobFilter = ANY_JOB) -> Any:
    """The per-day rollup rows inside ``query_range`` of the jobs ``jobs`` keeps (a queryset
    to aggregate)."""
    rows = DailyCategoryRollup.objects.filter(day__gte=query_range.date_from,
                                              day__lte=query_range.date_to)
    return jobs.narrow(rows)


def category_rows(query_range: DateRange, jobs: JobFilter = ANY_JOB) -> Any:
    """Rows of ``day``, ``category``, ``seconds`` and ``gpu_seconds`` inside ``query_range``
    whose sums are the kept jobs' sums (a queryset to aggregate by day and category).

    Every job kept: the fleet's day sums (``FleetDayRollup``, ~16 rows a day). A filter:
    the label sums (``LabelDayRollup``) of the label combinations it keeps, which also carry
    ``model``, ``team``, ``cluster`` and ``gpus`` (the bucket) to group by. Both are exactly
    the day rows' sums (``ettweb.rollups.day_sums`` keeps them so), a few rows a day where the
    day rows hold one per job and category.
    """
    if jobs.is_any:
        return FleetDayRollup.objects.filter(day__gte=query_range.date_from,
                                             day__lte=query_range.date_to)
    return label_rows(query_range, jobs)


def label_rows(query_range: DateRange, jobs: JobFilter = ANY_JOB) -> Any:
    """The label sums inside ``query_range`` of the label combinations ``jobs`` keeps."""
    rows = LabelDayRollup.objects.filter(day__gte=query_range.date_from,
                                         day__lte=query_range.date_to)
    return rows if jobs.is_any else rows.filter(jobs.label_q())


def period_of(day: Any, interval: Interval) -> Any:
    """``day`` (a date expression) as its period: itself, or the Monday of its ISO week."""
    return Cast(TruncWeek(day), DateField()) if interval == "week" else day


def periods(rows: Any, interval: Interval) -> Any:
    """``rows`` annotated with ``period``: the day itself, or the Monday of its ISO week."""
    return rows.annotate(period=period_of(F("day"), interval))


def as_date(value: date | datetime) -> date:
    """A period value as a date (``TruncWeek`` hands back datetimes)."""
    return value.date() if isinstance(value, datetime) else value


#: Memory one large grouped read may use before Postgres spills its sort or hash to disk.
AGGREGATE_WORK_MEM: Final = "64MB"


@contextmanager
def aggregating() -> Iterator[Any]:
    """A cursor (in a transaction of its own, or a savepoint) for one large grouped read.

    Why: Postgres's default ``work_mem`` (4 MB) makes a read of a few hundred thousand day
    rows grouped three ways sort on disk (3.5 s measured, against 1.0 s in memory on the same
    busy machine), and JIT compiles such a query for ~60 ms it never wins back at these
    sizes. Both are set for this transaction only (``set_config(..., true)``), so nothing
    else on the connection changes.
    """
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('work_mem', %s, true), set_config('jit', 'off', true)",
                       [AGGREGATE_WORK_MEM])
        yield cursor
