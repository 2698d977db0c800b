"""One job's page: its headline numbers, attempts, recoveries, timeline and rank lanes.

Everything comes from the rollup tables, which the refresh keeps equal to the engine's
numbers: a page load reads a few rows per attempt, never the job's events, so a job of
millions of events opens as fast as a small one. A job whose rollup is missing (its events
predate rollups, or its first refresh has not run yet) or predates the stored chunks is not
refreshed here: a read never writes. The worker is asked to refresh it
(``ett.refresh_outdated_rollups``) and the result says it is being computed
(:class:`JobComputing`), with what is known meanwhile.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any, ClassVar, Final, Literal

from ettweb.attribution.completeness import Finding
from ettweb.ingest.models import Event, Job, QuarantinedEvent
from ettweb.platform.deferred import send_once
from ettweb.queries import liveness
from ettweb.queries.base import by_component, phase_components, quarantined_lines
from ettweb.queries.exposed import as_api, doc, hidden, inline
from ettweb.queries.registry import Query, runner_for
from ettweb.rollups.chunk_store import chunk_index, chunk_lanes, chunk_s
from ettweb.rollups.marks import rollup_outdated
from ettweb.rollups.models import JobRollup, ParkedRefresh

Piece = tuple[str, float, float]  # (category or state, start, end), epoch seconds
#: The job page's tables that export as CSV (``?format=csv&table=…``).
TABLES: Final = ("attempts", "recoveries")
#: The worker's task that refreshes a job a page found without a current rollup.
REFRESH_TASK: Final = "ett.refresh_outdated_rollups"
#: Seconds before another view of the same job asks the worker again (a refresh lost with a
#: broker restart is asked for again by the next view after this).
ASK_AGAIN_S: Final = 30.0
#: Seconds a client is told to wait before asking again for a job being computed.
RETRY_AFTER_S: Final = 5
#: Findings of the completeness check the job page lists, largest first: a job restarted a
#: hundred times without a checkpoint_load span needs a few lines, not a hundred (the API
#: lists them all).
SHOWN_FINDINGS: Final = 8
#: What ``refresh_parked`` says, in the API's schema.
PARKED_DOC: Final = ("Why the job's refresh is parked: it failed the same way twice, and its "
                     "numbers stay as last stored until an admin retries it; null when not")

# --------------------------------------------------------------------------- one job

@dataclass(frozen=True)
class JobMeta:
    """What ingestion learnt about a job from its ``attempt_start`` attrs."""

    model: str = ""
    team: str = ""
    cluster: str = ""

    @property
    def summary(self) -> str:
        """``model dlrm · team ads`` — only the parts that are known."""
        parts = (("model", self.model), ("team", self.team), ("cluster", self.cluster))
        return " · ".join(f"{label} {value}" for label, value in parts if value)


@dataclass(frozen=True)
class JobQuery(Query["JobResult | JobComputing | None"]):
    """One job's numbers; ``components`` overrides the edited phase→component map.

    ``lanes_at`` (epoch seconds) picks the chunk of the timeline whose per-rank lanes are
    shown; ``None`` shows each attempt's first chunk (where its ranks started up).
    ``now`` is the moment staleness is judged at (default: the clock's)."""

    job: str
    components: Mapping[str, str] | None = None
    lanes_at: float | None = None
    now: datetime | None = None


@dataclass(frozen=True)
class AttemptRow:
    """One attempt window and the steps its train spans trained a second time."""

    API_ORDER: ClassVar[tuple[str, ...]] = ("attempt", "status", "gpus", "start", "end",
                                            "duration_s", "repeated_steps", "stale")

    attempt: int
    status: str
    gpus: int
    duration_s: float
    start: float = 0.0
    end: float = 0.0
    repeated_steps: int = 0
    #: Seconds from the job's start (its first attempt's) to this attempt's start.
    offset_s: float = field(default=0.0, metadata=hidden())
    stale: bool = field(default=False, metadata=doc(
        "running, but nothing heard from the job for ETT_STALE_AFTER_S: its process is "
        "probably gone without an end (status stays running, its numbers do not change)"))


@dataclass(frozen=True)
class RecoveryRow:
    """One time to recover (§3.8) and its parts, category -> seconds."""

    API_ORDER: ClassVar[tuple[str, ...]] = ("attempt", "start", "end", "seconds", "by_category")

    attempt: int
    seconds: float
    by_category: dict[str, float]
    start: float = 0.0
    end: float = 0.0

    @property
    def parts(self) -> list[tuple[str, float]]:
        """What the recovery went to, largest first, none that took no time (a page lists
        these; ``by_category`` keeps every stored key for the API)."""
        return sorted(((c, s) for c, s in self.by_category.items() if s > 0),
                      key=lambda part: (-part[1], part[0]))


@dataclass(frozen=True)
class TimelineRow:
    """One attempt's category timeline: ``[category, start, end]`` pieces (epoch s);
    ``bin_s`` > 0 when cut into a grid."""

    API_ORDER: ClassVar[tuple[str, ...]] = ("attempt", "bin_s", "pieces")

    attempt: int
    pieces: tuple[Piece, ...]
    bin_s: float


@dataclass(frozen=True)
class LaneRow:
    """Ranks of one attempt that agreed throughout one chunk of the timeline, and what
    they did (idle left out) as ``[state, start, end]`` runs; ``start``/``end``: that chunk
    inside the attempt's window (the page's, not the API's)."""

    API_ORDER: ClassVar[tuple[str, ...]] = ("attempt", "ranks", "rank_count", "bin_s", "runs")

    attempt: int
    ranks: str
    rank_count: int
    runs: tuple[Piece, ...]
    bin_s: float
    start: float = field(default=0.0, metadata=hidden())
    end: float = field(default=0.0, metadata=hidden())


@dataclass(frozen=True)
class FindingRow:
    """One thing that looks missing from an attempt's events (the completeness check,
    ``ettweb.attribution.completeness``): its kind, the seconds involved, the step training
    resumed at (a restart) or the phases around a gap, and what to instrument."""

    API_ORDER: ClassVar[tuple[str, ...]] = ("kind", "attempt", "seconds", "step", "before",
                                            "after", "message", "advice")

    kind: str
    attempt: int
    seconds: float
    step: int | None
    before: str
    after: str
    message: str
    advice: str

    @classmethod
    def of(cls, finding: Finding) -> FindingRow:
        return cls(finding.kind, finding.attempt, finding.seconds, finding.step,
                   finding.before, finding.after, finding.message, finding.advice)


@dataclass(frozen=True)
class JobHeadline:
    """The numbers a job page shows: exactly the job's rollup row."""

    ett_pct: float
    wall_s: float
    productive_s: float
    wall_gpu_s: float
    productive_gpu_s: float
    time_to_start_s: float | None
    time_to_recover_s: list[float]
    failures: int
    repeated_steps: int
    attempts: list[AttemptRow]
    anomalies: dict[str, int]
    recoveries: list[RecoveryRow]
    #: Lost seconds per category (non-zero only): the waterfall's steps.
    lost_s: dict[str, float]

    @property
    def anomaly_count(self) -> int:
        return sum(self.anomalies.values())

    @property
    def lost_gpu_s(self) -> float:
        """Wall GPU-seconds that were not productive: what the fleet pages call lost."""
        return max(0.0, self.wall_gpu_s - self.productive_gpu_s)


@dataclass(frozen=True)
class JobResult:
    """The job page's numbers: headline, attempts, recoveries with their parts, lost time by
    category and component, the category timeline and the rank lanes. Seconds unrounded."""

    API_PROPERTIES: ClassVar[tuple[str, ...]] = ("status",)
    API_ORDER: ClassVar[tuple[str, ...]] = (
        "job", "status", "model", "team", "cluster", "ett_pct", "wall_s", "productive_s",
        "wall_gpu_s", "productive_gpu_s", "time_to_start_s", "time_to_recover_s", "failures",
        "repeated_steps", "anomalies", "quarantined", "lost_s", "lost_by_component_s",
        "lost_by_component_gpu_s", "attempts", "recoveries", "timeline", "lanes",
        "instrumentation", "refresh_parked", "last_heard", "stale")

    job: str
    headline: JobHeadline = field(metadata=inline())
    lost_by_component_s: dict[str, float]
    #: The same lost time in GPU-seconds: the unit every list and the fleet pages use.
    lost_by_component_gpu_s: dict[str, float]
    quarantined: int
    meta: JobMeta = field(metadata=inline())
    timeline: tuple[TimelineRow, ...]
    lanes: tuple[LaneRow, ...]
    #: The chunk ``lanes`` come from when one was asked for (its start), else ``None``.
    lanes_at: float | None = field(default=None, metadata=hidden())
    #: Starts of the chunks before and after it that hold events (``None``: none); with
    #: none asked for, ``lanes_later`` is the job's first chunk.
    lanes_earlier: float | None = field(default=None, metadata=hidden())
    lanes_later: float | None = field(default=None, metadata=hidden())
    instrumentation: tuple[FindingRow, ...] | None = field(default=None, metadata=doc(
        "What looks missing from the job's events, largest first within each attempt "
        "([] when nothing does; null when the job was rolled up before the check existed)"))
    refresh_parked: str | None = field(default=None, metadata=doc(PARKED_DOC))
    last_heard: datetime | None = field(default=None, metadata=doc(
        "the job's latest event time (UTC); null when unknown"))
    stale: bool = field(default=False, metadata=doc(
        "its last attempt is running but nothing was heard from the job for "
        "ETT_STALE_AFTER_S; that attempt is marked stale too"))
    #: The moment staleness was judged at (the page's "last heard … ago" counts from it).
    judged_at: datetime | None = field(default=None, metadata=hidden())

    @property
    def status(self) -> Literal["ready"]:
        """Ready: its numbers are stored (a job being computed is a :class:`JobComputing`)."""
        return "ready"

    @property
    def job_start(self) -> float:
        """Where the job's clock starts: its first attempt's start."""
        attempts = self.headline.attempts
        return attempts[0].start if attempts else 0.0

    @property
    def shown_findings(self) -> list[FindingRow]:
        """The completeness check's largest findings (``SHOWN_FINDINGS`` at most)."""
        found = sorted(self.instrumentation or (), key=lambda f: (-f.seconds, f.attempt))
        return found[:SHOWN_FINDINGS]

    @property
    def more_findings(self) -> int:
        """How many findings the page leaves out (the API lists them)."""
        return max(0, len(self.instrumentation or ()) - SHOWN_FINDINGS)

    def lanes_of(self, attempt: int) -> list[LaneRow]:
        """One attempt's lanes, lowest rank first."""
        return self._lanes_by_attempt.get(attempt, [])

    @cached_property
    def _lanes_by_attempt(self) -> dict[int, list[LaneRow]]:
        grouped: dict[int, list[LaneRow]] = {}
        for lane in self.lanes:
            grouped.setdefault(lane.attempt, []).append(lane)
        return grouped

    def table(self, name: str) -> tuple[list[str], list[list[object]]]:
        """A page table as a header and rows (``name`` in ``TABLES``), for the CSV export."""
        if name == "attempts":
            return (["job", "attempt", "status", "gpus", "start_utc", "end_utc", "duration_s",
                     "repeated_steps"],
                    [[self.job, a.attempt, a.status, a.gpus, _utc(a.start), _utc(a.end),
                      a.duration_s, a.repeated_steps] for a in self.headline.attempts])
        if name == "recoveries":
            recoveries = self.headline.recoveries
            categories = sorted({c for r in recoveries for c in r.by_category})
            return (["job", "failed_attempt", "start_utc", "end_utc", "time_to_recover_s",
                     *(f"{category}_s" for category in categories)],
                    [[self.job, r.attempt, _utc(r.start), _utc(r.end), r.seconds,
                      *(r.by_category.get(category, 0.0) for category in categories)]
                     for r in recoveries])
        raise ValueError(f"table: must be one of {', '.join(TABLES)}, not {name!r}")

    def as_api(self) -> dict[str, Any]:
        """``GET /api/v1/jobs/{job}``: the page's numbers, seconds unrounded."""
        return as_api(self)


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


def _pieces(rows: Sequence[Sequence[Any]]) -> tuple[Piece, ...]:
    return tuple((str(name), float(start), float(end)) for name, start, end in rows)


def _headline(rollup: JobRollup, stale: bool) -> JobHeadline:
    """The rollup's numbers; ``stale``: the job is, so its running attempt is marked."""
    recoveries = [RecoveryRow(r.attempt, r.seconds, r.by_category, r.start, r.end)
                  for r in rollup.recovery_rows.order_by("attempt")]
    rows = list(rollup.attempt_rows.order_by("attempt"))
    attempts = [AttemptRow(a.attempt, a.status, a.gpus, a.end - a.start, a.start, a.end,
                           a.repeated_steps, a.start - rows[0].start,
                           stale and a.status == liveness.RUNNING) for a in rows]
    return JobHeadline(
        ett_pct=rollup.ett_pct, wall_s=rollup.wall_s, productive_s=rollup.productive_s,
        wall_gpu_s=rollup.wall_gpu_s, productive_gpu_s=rollup.productive_gpu_s,
        time_to_start_s=rollup.time_to_start_s,
        time_to_recover_s=[r.seconds for r in recoveries], failures=rollup.failures,
        repeated_steps=rollup.repeated_steps, attempts=attempts,
        anomalies={k: int(v) for k, v in rollup.anomalies.items() if v},
        recoveries=recoveries,
        lost_s={k: float(v) for k, v in rollup.lost_s.items() if v},
    )


@dataclass(frozen=True)
class JobComputing:
    """A job with stored events whose rollup is missing, or predates its stored chunks: the
    worker has been asked to compute it, and this is what is known until it has. Ask again
    after ``retry_after_s`` seconds (the API's ``Retry-After`` header)."""

    API_PROPERTIES: ClassVar[tuple[str, ...]] = ("status", "retry_after_s")
    API_ORDER: ClassVar[tuple[str, ...]] = ("job", "status", "model", "team", "cluster",
                                            "events", "last_event_time", "retry_after_s",
                                            "refresh_parked")

    job: str
    events: int
    meta: JobMeta = field(metadata=inline())
    #: The latest event time ingestion saw (epoch seconds), if it recorded the job.
    last_event_time: float | None = None
    refresh_parked: str | None = field(default=None, metadata=doc(PARKED_DOC))

    @property
    def status(self) -> Literal["computing"]:
        """Computing: the worker has been asked for its numbers."""
        return "computing"

    @property
    def retry_after_s(self) -> int:
        return RETRY_AFTER_S

    def as_api(self) -> dict[str, Any]:
        """``GET /api/v1/jobs/{job}`` while the job is being computed (a 202)."""
        return as_api(self)


def _computing(job: str, rollup: JobRollup | None) -> JobComputing | None:
    """What is known of a job whose rollup cannot be shown, once the worker has been asked
    to refresh it; ``None`` when it has no stored events (nothing to compute)."""
    events = Event.objects.filter(job=job).count()
    if not events:
        return None
    parked = _parked_error(job)
    if parked is None:  # a parked job's refresh waits for an admin: asking again is no use
        send_once(REFRESH_TASK, [[job]], within_s=ASK_AGAIN_S)
    row = Job.objects.filter(job_id=job).values_list("model", "team", "cluster",
                                                     "last_event_time").first()
    if row is None:  # ingestion keeps a row per job; an older rollup may still know labels
        meta = JobMeta() if rollup is None else JobMeta(rollup.model, rollup.team, rollup.cluster)
        return JobComputing(job, events, meta, refresh_parked=parked)
    model, team, cluster, last = row
    return JobComputing(job, events, JobMeta(model, team, cluster), last, parked)


@runner_for(JobQuery)
class JobQueryRunner:
    """Runs a :class:`JobQuery`; ``calculate()`` is ``None`` for a job with no stored events,
    and :class:`JobComputing` for one whose rollup the worker has yet to compute."""

    def __init__(self, query: JobQuery) -> None:
        self.query = query

    def calculate(self) -> JobResult | JobComputing | None:
        rollup = JobRollup.objects.filter(job=self.query.job).first()
        if rollup_outdated(rollup):
            computing = _computing(self.query.job, rollup)
            if computing is not None:
                return computing
        if rollup is None:
            return None
        mapping = self.query.components or phase_components()
        timeline = tuple(TimelineRow(t.attempt, _pieces(t.pieces), t.bin_s)
                         for t in rollup.timeline_rows.order_by("attempt"))
        job_row = _job_row(self.query.job)
        at = liveness.judged_at(self.query.now)
        heard = liveness.last_heard(job_row.get("last_event_time"), rollup.window_end)
        stale = liveness.is_stale(rollup.status, heard, at)
        headline = _headline(rollup, stale)
        lanes = _lanes(self.query.job, headline.attempts, self.query.lanes_at)
        return JobResult(
            job=self.query.job, headline=headline,
            lost_by_component_s=by_component(rollup.lost_s, mapping),
            lost_by_component_gpu_s=by_component(rollup.lost_gpu_s, mapping),
            quarantined=quarantined_lines(QuarantinedEvent.objects.filter(job=self.query.job)),
            meta=_job_meta(job_row, rollup), timeline=timeline, lanes=lanes.rows,
            lanes_at=lanes.at, lanes_earlier=lanes.earlier, lanes_later=lanes.later,
            instrumentation=_findings(rollup), refresh_parked=_parked_error(self.query.job),
            last_heard=liveness.as_time(heard), stale=stale, judged_at=at,
        )


def _parked_error(job: str) -> str | None:
    """The error that parked the job's refresh (``rollups.parking``), if it is parked."""
    return (ParkedRefresh.objects.filter(job=job, parked_at__isnull=False)
            .values_list("error", flat=True).first())


def _findings(rollup: JobRollup) -> tuple[FindingRow, ...] | None:
    """The completeness check's findings stored with the rollup (``None``: not checked)."""
    stored = rollup.instrumentation
    if not isinstance(stored, dict):
        return None
    return tuple(FindingRow.of(Finding.from_json(raw)) for raw in stored.get("findings", []))


@dataclass(frozen=True)
class _Lanes:
    rows: tuple[LaneRow, ...]
    at: float | None = None
    earlier: float | None = None
    later: float | None = None


def _lanes(job: str, attempts: Sequence[AttemptRow], at: float | None) -> _Lanes:
    """The rank lanes the page shows: of the chunk holding ``at``, or of the chunk where
    each attempt starts. Read from that chunk's row alone, however long the job. A chunk
    runs from its first fine chunk to the next chunk's start."""
    size = chunk_s()
    occupied = chunk_index(job)
    if not occupied:
        return _Lanes(())

    def extent(i: int) -> tuple[float, float]:
        end = occupied[i + 1] * size if i + 1 < len(occupied) else math.inf
        return occupied[i] * size, end

    def holding(t: float) -> int:
        return max(0, bisect_right(occupied, math.floor(t / size)) - 1)

    wanted: dict[int, list[AttemptRow]] = {}
    if at is None:
        for attempt in attempts:
            wanted.setdefault(holding(attempt.start), []).append(attempt)
    else:
        shown = holding(at)
        lo, hi = extent(shown)
        wanted[shown] = [a for a in attempts if a.start < hi and a.end > lo]
    stored = chunk_lanes(job, [occupied[i] for i in wanted])
    rows: list[LaneRow] = []
    for i, chosen in sorted(wanted.items()):
        lo, hi = extent(i)
        windows = {a.attempt: (max(a.start, lo), min(a.end, hi)) for a in chosen}
        for attempt, _, ranks, count, bin_s, runs in stored.get(occupied[i], []):
            if attempt in windows:
                rows.append(LaneRow(int(attempt), str(ranks), int(count), _pieces(runs),
                                    float(bin_s), *windows[attempt]))
    rows.sort(key=lambda lane: lane.attempt)
    if at is None:  # "later" starts the walk through the job at its first chunk
        return _Lanes(tuple(rows), later=occupied[0] * size)
    earlier = occupied[shown - 1] * size if shown > 0 else None
    later = occupied[shown + 1] * size if shown + 1 < len(occupied) else None
    return _Lanes(tuple(rows), occupied[shown] * size, earlier, later)


def _job_row(job: str) -> dict[str, Any]:
    """Ingestion's row of the job (labels, latest event time); empty when it has none."""
    row = Job.objects.filter(job_id=job).values(
        "model", "team", "cluster", "last_event_time").first()
    return dict(row) if row else {}


def _job_meta(row: Mapping[str, Any], rollup: JobRollup) -> JobMeta:
    if row:
        return JobMeta(row["model"], row["team"], row["cluster"])
    return JobMeta(model=rollup.model, team=rollup.team, cluster=rollup.cluster)
