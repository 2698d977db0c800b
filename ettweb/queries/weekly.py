"""The weekly report's numbers (ETT_SPEC §7): one ISO week against the week before.

A report covers Monday 00:00 UTC to the next Monday 00:00 UTC — seven UTC days — so every
number in it is a number the dashboard and the API give for the same days. That is why this
runner computes nothing of its own: it runs the fleet, lifecycle, top-jobs, marker, impact
and changes queries over the week's ``DateRange`` and arranges their results. The e-mail (issue
12's templates, beat schedule and send records) renders this result and nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, ClassVar, Final

from ettweb.queries.base import (
    ANY_JOB,
    FIRST_DAY,
    LAST_DAY,
    DateRange,
    JobFilter,
    pct,
    phase_components,
)
from ettweb.queries.changes import ChangesQuery, ChangesQueryRunner, DetectedChange
from ettweb.queries.day_totals import DayTotalsQuery, DayTotalsQueryRunner, DayTotalsResult
from ettweb.queries.exposed import as_api, hidden, inline, shown_as
from ettweb.queries.impact import ImpactQuery, ImpactQueryRunner
from ettweb.queries.lifecycle import LifecycleQuery, LifecycleQueryRunner
from ettweb.queries.lost import lost_by_component_of
from ettweb.queries.markers import (
    Headline,
    RolloutMarker,
    RolloutMarkersQuery,
    RolloutMarkersQueryRunner,
    stored_headlines,
)
from ettweb.queries.registry import Query, runner_for
from ettweb.queries.top_jobs import JobLoss, TopJob, TopJobsQuery, TopJobsQueryRunner
from ettweb.queries.trend import trend_of

_WEEK = re.compile(r"^(\d{4})-W(\d{2})$")
TOP_JOBS: Final = 5
#: Weeks in the report's chart, this one included.
HISTORY_WEEKS: Final = 8


@dataclass(frozen=True, order=True)
class IsoWeek:
    """An ISO 8601 week, ``2026-W47``: Monday to Sunday, UTC days."""

    year: int
    week: int

    def __post_init__(self) -> None:
        # The week before (the comparison) and the week after (its end) must exist too.
        if not FIRST_DAY.year < self.year < LAST_DAY.year:
            raise ValueError(f"year must be between {FIRST_DAY.year + 1} and "
                             f"{LAST_DAY.year - 1}, not {self.year}")
        last = date(self.year, 12, 28).isocalendar().week  # Dec 28 is always in the last week
        if not 1 <= self.week <= last:
            raise ValueError(f"{self.year} has ISO weeks 1 to {last}, not {self.week}")

    @classmethod
    def parse(cls, text: str) -> IsoWeek:
        """``2026-W47`` → the week; anything else is a ValueError naming the expected form."""
        match = _WEEK.match(text.strip())
        if match is None:
            raise ValueError(f"week must look like 2026-W47, not {text!r}")
        return cls(int(match.group(1)), int(match.group(2)))

    @classmethod
    def of(cls, day: date) -> IsoWeek:
        iso = day.isocalendar()
        return cls(iso.year, iso.week)

    @classmethod
    def last_complete(cls, now: datetime) -> IsoWeek:
        """The latest week that has ended at ``now`` (UTC): what Monday's report covers."""
        return cls.of(now.astimezone(UTC).date() - timedelta(days=7))

    @property
    def monday(self) -> date:
        return date.fromisocalendar(self.year, self.week, 1)

    @property
    def range(self) -> DateRange:
        """The seven UTC days, as every other query takes them."""
        return DateRange(self.monday, self.monday + timedelta(days=6))

    @property
    def previous(self) -> IsoWeek:
        return IsoWeek.of(self.monday - timedelta(days=7))

    @property
    def next(self) -> IsoWeek:
        return IsoWeek.of(self.monday + timedelta(days=7))

    @property
    def ends_at(self) -> datetime:
        """The Monday 00:00 UTC after the week: the moment its numbers can be final."""
        return datetime.combine(self.next.monday, time(0), tzinfo=UTC)

    def __str__(self) -> str:
        return f"{self.year}-W{self.week:02d}"


@dataclass(frozen=True)
class WeeklyReportQuery(Query["WeeklyReportResult"]):
    """One week's report; ``components`` are the subscriber's, listed before the rest."""

    week: IsoWeek
    components: tuple[str, ...] = ()
    top: int = TOP_JOBS
    history_weeks: int = HISTORY_WEEKS

    def __post_init__(self) -> None:
        if not 1 <= self.top <= 50:
            raise ValueError(f"top must be between 1 and 50, not {self.top}")
        if not 2 <= self.history_weeks <= 52:
            raise ValueError(f"history_weeks must be between 2 and 52, not {self.history_weeks}")


@dataclass(frozen=True)
class WeekNumbers:
    """One week's fleet numbers, each from the query the dashboard uses for it."""

    API_PROPERTIES: ClassVar[tuple[str, ...]] = ("ett_pct",)
    API_ORDER: ClassVar[tuple[str, ...]] = (
        "wall_gpu_s", "productive_gpu_s", "ett_pct", "lost_by_component_gpu_s", "failures",
        "mean_time_to_start_s", "mean_time_to_recover_s")

    wall_gpu_s: float
    productive_gpu_s: float
    lost_by_component_gpu_s: dict[str, float]
    failures: int
    mean_time_to_start_s: float | None
    mean_time_to_recover_s: float | None

    @property
    def has_data(self) -> bool:
        return self.wall_gpu_s > 0

    @property
    def ett_pct(self) -> float | None:
        return pct(self.productive_gpu_s, self.wall_gpu_s) if self.has_data else None


@dataclass(frozen=True)
class ComponentWeek:
    """A component's lost GPU-seconds this week and the week before."""

    API_PROPERTIES: ClassVar[tuple[str, ...]] = ("change_gpu_s",)
    API_ORDER: ClassVar[tuple[str, ...]] = ("component", "lost_gpu_s", "previous_lost_gpu_s",
                                            "change_gpu_s", "subscribed")

    component: str
    lost_gpu_s: float
    previous_lost_gpu_s: float
    subscribed: bool

    @property
    def change_gpu_s(self) -> float:
        return self.lost_gpu_s - self.previous_lost_gpu_s


@dataclass(frozen=True)
class RolloutWeek:
    """A rollout deployed this week, with its impact so far (None: too early to tell)."""

    API_PROPERTIES: ClassVar[tuple[str, ...]] = ("too_early",)

    #: The component and adjusted ETT% verdicts, worded as ``/rollouts/`` words them.
    headline: Headline | None = field(default=None, kw_only=True, metadata=inline())
    rollout: RolloutMarker = field(metadata=inline("id", "name", "component", "at"))
    change_pts: float | None
    ci95_pts: tuple[float, float] | None
    verdict: str

    @property
    def too_early(self) -> bool:
        return self.change_pts is None


@dataclass(frozen=True)
class HistoryWeek:
    """One week of the report's chart; ``ett_pct`` is None for a week without data."""

    week: IsoWeek = field(metadata=shown_as(str, str))
    ett_pct: float | None


def _losses(jobs: list[TopJob]) -> list[dict[str, Any]]:
    """A report's top jobs as the API lists them: what each lost, without its labels."""
    return [as_api(job.loss) for job in jobs]


@dataclass(frozen=True)
class WeeklyReportResult:
    """The weekly report's numbers (ETT_SPEC §7), what the e-mail renders."""

    API_PROPERTIES: ClassVar[tuple[str, ...]] = ("days", "subject", "change_pts", "change_rel")
    API_ORDER: ClassVar[tuple[str, ...]] = (
        "week", "days", "subject", "this", "before", "change_pts", "change_rel", "components",
        "top_jobs", "rollouts", "history", "unrecorded_changes")

    week: IsoWeek = field(metadata=shown_as(str, str))
    this: WeekNumbers
    before: WeekNumbers
    components: list[ComponentWeek]
    #: The e-mail names each job's team; the API lists what each lost (``JobLoss``).
    top_jobs: list[TopJob] = field(metadata=shown_as(list[JobLoss], _losses))
    rollouts: list[RolloutWeek] = field(default_factory=list)
    #: The chart: the last weeks up to this one (oldest first) and their rollouts.
    history: list[HistoryWeek] = field(default_factory=list)
    history_markers: list[RolloutMarker] = field(default_factory=list, metadata=hidden())
    #: The warm pass's verdicts on those rollouts (``/rollouts/``'s), by id: the chart's key
    #: says them; a rollout not computed yet is missing.
    history_headlines: dict[int, Headline] = field(default_factory=dict, metadata=hidden())
    #: The week's unrecorded changes (ETT_SPEC §6.3: no rollout explains them), every
    #: component's; the e-mail lists its subscriber's.
    unrecorded_changes: list[DetectedChange] = field(default_factory=list)

    @property
    def days(self) -> list[date]:
        """The week's first and last UTC day: Monday and Sunday."""
        return [self.week.range.date_from, self.week.range.date_to]

    @property
    def change_pts(self) -> float | None:
        now, then = self.this.ett_pct, self.before.ett_pct
        return None if now is None or then is None else now - then

    @property
    def change_rel(self) -> float | None:
        now, then = self.this.ett_pct, self.before.ett_pct
        return None if now is None or not then else now / then - 1.0

    @property
    def subject(self) -> str:
        """``ETT% 2026-W47: 87.3% (+1.2 pts)`` (ETT_SPEC §7); a week without data says so."""
        now = self.this.ett_pct
        if now is None:
            return f"ETT% {self.week}: no training data this week"
        change = self.change_pts
        tail = "" if change is None else f" ({change:+.1f} pts)"
        return f"ETT% {self.week}: {now:.1f}%{tail}"

    def as_api(self) -> dict[str, Any]:
        """The report's numbers as JSON (``/api/v1/reports/weekly``), not rounded."""
        return as_api(self)


@dataclass(frozen=True)
class FleetSummaryQuery(Query["FleetSummaryResult"]):
    """The fleet over any UTC days: what a report shows for a week, and what
    ``/api/v1/fleet/summary`` answers for the same days."""

    range: DateRange
    top: int = TOP_JOBS
    #: The jobs counted: the fleet page's filter (the weekly report counts every job).
    jobs: JobFilter = ANY_JOB

    def __post_init__(self) -> None:
        if not 1 <= self.top <= 50:
            raise ValueError(f"top must be between 1 and 50, not {self.top}")


@dataclass(frozen=True)
class FleetSummaryResult:
    """The fleet (or the jobs a filter keeps) over a range of UTC days, as the fleet page
    shows it; ``days`` repeats ``date_from``/``date_to`` for clients written before them."""

    API_PROPERTIES: ClassVar[tuple[str, ...]] = ("date_from", "date_to", "filter", "days")
    API_ORDER: ClassVar[tuple[str, ...]] = (
        "date_from", "date_to", "filter", "wall_gpu_s", "productive_gpu_s", "ett_pct",
        "lost_by_component_gpu_s", "failures", "mean_time_to_start_s",
        "mean_time_to_recover_s", "days", "top_jobs")

    range: DateRange = field(metadata=hidden())
    numbers: WeekNumbers = field(metadata=inline())
    top_jobs: list[JobLoss]
    jobs: JobFilter = field(default=ANY_JOB, metadata=hidden())

    @property
    def date_from(self) -> date:
        return self.range.date_from

    @property
    def date_to(self) -> date:
        return self.range.date_to

    @property
    def filter(self) -> JobFilter:
        return self.jobs

    @property
    def days(self) -> list[date]:
        return [self.range.date_from, self.range.date_to]

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


@runner_for(FleetSummaryQuery)
class FleetSummaryQueryRunner:
    def __init__(self, query: FleetSummaryQuery) -> None:
        self.query = query

    def calculate(self) -> FleetSummaryResult:
        q = self.query
        top = TopJobsQueryRunner(TopJobsQuery(q.range, q.top, q.jobs)).calculate().jobs
        return FleetSummaryResult(q.range, period_numbers(q.range, jobs=q.jobs),
                                  [job.loss for job in top], q.jobs)


def period_numbers(days: DateRange, totals: DayTotalsResult | None = None,
                   jobs: JobFilter = ANY_JOB) -> WeekNumbers:
    """The numbers of the jobs ``jobs`` keeps over any days, each from the fold the
    dashboard uses for it; ``totals`` holds those jobs' day totals when the caller read them
    for a longer span already."""
    if totals is None:
        totals = DayTotalsQueryRunner(DayTotalsQuery(days, jobs)).calculate()
    else:
        totals = totals.within(days)
    trend = trend_of(totals, days, "week")
    lost = lost_by_component_of(totals, phase_components())
    lifecycle = LifecycleQueryRunner(
        LifecycleQuery(days, "week", jobs, with_restart_tax=False)).calculate()
    return WeekNumbers(
        wall_gpu_s=trend.wall_gpu_s, productive_gpu_s=trend.productive_gpu_s,
        lost_by_component_gpu_s={c.component: c.gpu_s for c in lost.components},
        failures=lifecycle.failures,
        mean_time_to_start_s=lifecycle.mean_time_to_start_s,
        mean_time_to_recover_s=lifecycle.mean_time_to_recover_s)


def _components(this: WeekNumbers, before: WeekNumbers,
                subscribed: Sequence[str]) -> list[ComponentWeek]:
    """Subscribed components first (in the order given), then the rest by lost time."""
    names = set(this.lost_by_component_gpu_s) | set(before.lost_by_component_gpu_s) | \
        set(subscribed)
    rows = [ComponentWeek(name, this.lost_by_component_gpu_s.get(name, 0.0),
                          before.lost_by_component_gpu_s.get(name, 0.0), name in subscribed)
            for name in names]
    order = {name: i for i, name in enumerate(subscribed)}
    return sorted(rows, key=lambda c: (c.component not in order, order.get(c.component, 0),
                                       -c.lost_gpu_s, c.component))


def _rollouts(week: IsoWeek) -> list[RolloutWeek]:
    """The week's rollouts and their impact so far, from the impact query (default window)."""
    markers = RolloutMarkersQueryRunner(RolloutMarkersQuery(week.range)).calculate().markers
    rows, now = [], datetime.now(UTC)
    for marker in markers:
        impact = ImpactQueryRunner(ImpactQuery(marker.id)).calculate()
        treated = impact.treated if impact else None
        rows.append(RolloutWeek(marker, treated.change_pts if treated else None,
                                treated.ci95_pts if treated else None,
                                impact.verdict if impact else "inconclusive",
                                headline=Headline.of(impact, now) if impact else None))
    return rows


def _unrecorded(week: IsoWeek) -> list[DetectedChange]:
    """The changes whose day falls in the week that no recorded rollout explains."""
    days = week.range
    return ChangesQueryRunner(ChangesQuery(days.date_from, days.date_to)).calculate().unrecorded


def _span(week: IsoWeek, weeks: int) -> DateRange:
    """The ``weeks`` weeks ending with ``week`` (the chart's span; it holds the week before)."""
    first = week
    for _ in range(weeks - 1):
        first = first.previous
    return DateRange(first.monday, week.range.date_to)


def _history(span: DateRange,
             totals: DayTotalsResult) -> tuple[list[HistoryWeek], list[RolloutMarker]]:
    """ETT% of each week of ``span`` (whole ISO weeks, :func:`_span`) from the weekly trend,
    and the rollouts inside it."""
    trend = trend_of(totals.within(span), span, "week")
    by_monday = {p.period: p.ett_pct for p in trend.points if p.wall_gpu_s > 0}
    history, current = [], IsoWeek.of(span.date_from)
    while current.monday <= span.date_to:
        history.append(HistoryWeek(current, by_monday.get(current.monday)))
        current = current.next
    markers = RolloutMarkersQueryRunner(RolloutMarkersQuery(span)).calculate().markers
    return history, markers


def report_history(week: IsoWeek, weeks: int = HISTORY_WEEKS,
                   ) -> tuple[list[HistoryWeek], list[RolloutMarker]]:
    """The chart part of ``week``'s report alone (its weeks' ETT% and their rollouts): the
    same fold :class:`WeeklyReportQueryRunner` makes, without the rest of the report."""
    span = _span(week, weeks)
    return _history(span, DayTotalsQueryRunner(DayTotalsQuery(span)).calculate())


@runner_for(WeeklyReportQuery)
class WeeklyReportQueryRunner:
    def __init__(self, query: WeeklyReportQuery) -> None:
        self.query = query

    def calculate(self) -> WeeklyReportResult:
        q = self.query
        # One read of the day rows for the chart's weeks: this week, the week before and
        # the history are all folded from it.
        span = _span(q.week, q.history_weeks)
        totals = DayTotalsQueryRunner(DayTotalsQuery(span)).calculate()
        this = period_numbers(q.week.range, totals)
        before = period_numbers(q.week.previous.range, totals)
        history, markers = _history(span, totals)
        top = TopJobsQueryRunner(TopJobsQuery(q.week.range, q.top)).calculate().jobs
        return WeeklyReportResult(week=q.week, this=this, before=before,
                                  components=_components(this, before, q.components),
                                  top_jobs=top, rollouts=_rollouts(q.week),
                                  history=history, history_markers=markers,
                                  history_headlines=stored_headlines(m.id for m in markers),
                                  unrecorded_changes=_unrecorded(q.week))
