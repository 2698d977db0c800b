"""ETT_SPEC §3 rule 3 in the stored refresh: each rank's latest heartbeat and its implied span.

A refresh reads again only the chunks new events landed in, but rule 3 looks at a rank's
*latest* stepped heartbeat of an attempt, wherever it lies, and at the rank's spans around
it; its span may start in an earlier chunk than the heartbeat (a late heartbeat extends an
earlier chunk's attempt). So before the chunks are laid out, per job:

1. the stepped heartbeats of the dirty fine chunks are merged into the stored
   :class:`~ettweb.rollups.models.RankProgress` rows (the latest by ``(ts, step, id)`` and
   the highest step before it: maxima, so any arrival order and any re-read gives the same
   row);
2. every rank with a stored or new heartbeat whose heartbeat changed or that has spans in
   the dirty fine chunks (one read of those chunks finds both) asks the events for the
   rule's facts (index probes on ``event_rank_end``, ingest migration 0011, in the days
   around the heartbeat: :func:`_facts`) and gets its span from
   :func:`ettweb.attribution.implied.implied_span`, the function the whole-job engine uses;
3. a span that moved marks the fine chunks of its old and new start dirty; the sweep reads
   every implied span as one more home event of the chunk it starts in.

A job whose events are all in memory (a new job) takes the engine's reading of them instead
(:func:`ettweb.attribution.implied.rank_progress`): no query at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from django.db import connection

from ettweb.attribution.chunk_summary import chunk_of
from ettweb.attribution.engine import Event
from ettweb.attribution.implied import (
    Beat,
    RankFacts,
    implied_span,
    rank_progress,
    span_event,
)
from ettweb.ingest.models import Event as StoredEvent
from ettweb.ingest.models import Job
from ettweb.rollups.models import RankProgress

EVENTS: Final = StoredEvent._meta.db_table
JOBS: Final = Job._meta.db_table
PROGRESS: Final = RankProgress._meta.db_table
_HOME: Final = 'coalesce(e."start", e."ts")'
#: The longest span the schema accepts (§2): where a job's longest span is not known.
MAX_SPAN_S: Final = 30 * 86400.0

Key = tuple[str, int, int]  # job, attempt, rank


@dataclass(slots=True)
class Progress:
    """One rank's row: its latest heartbeat and the start and first step of its span."""

    beat: Beat
    start: float | None = None
    step_start: int | None = None

    def span(self, key: Key) -> Event | None:
        if self.start is None or self.step_start is None:
            return None
        return span_event(*key, self.beat, self.start, self.step_start)


@dataclass(slots=True)
class Implied:
    """What rule 3 gives a refresh: each job's implied spans, the fine chunks they made
    dirty, and how many ranks' latest heartbeat went backwards (the anomaly)."""

    spans: dict[str, list[Event]] = field(default_factory=dict)
    dirty: dict[str, set[int]] = field(default_factory=dict)
    backwards: dict[str, int] = field(default_factory=dict)

    def home(self, job: str, lo: float, hi: float) -> list[Event]:
        """The job's implied spans starting in ``[lo, hi)``."""
        return [span for span in self.spans.get(job, ()) if lo <= span["start"] < hi]


def refresh_implied(job_ids: Sequence[str], dirty: Mapping[str, set[int]], size: float,
                    loaded: Mapping[str, Mapping[int, list[Event]]],
                    whole: bool) -> Implied:
    """Bring the jobs' :class:`RankProgress` rows up to date with the events of their dirty
    fine chunks (``loaded``: every event of a job, by fine chunk) and return what the
    refresh needs (:class:`Implied`). ``whole``: the rows are rebuilt from the events."""
    stored = _read(job_ids)
    old_starts = {key: row.start for key, row in stored.items()}
    rows = {} if whole else {key: replace(row) for key, row in stored.items()}
    for job in loaded:
        for key in [key for key in rows if key[0] == job]:
            del rows[key]
        rows.update(_from_events(job, loaded[job]))
    queried = [job for job in job_ids if job not in loaded]
    beats, span_ranks = _dirty_reads(queried, dirty, size)
    touched = _merged(rows, beats) | span_ranks
    asked = [key for key in sorted(touched) if key in rows and key[0] not in loaded]
    for key, facts in zip(asked, _facts([(key, rows[key].beat.ts) for key in asked]),
                          strict=True):
        span = implied_span(*key, rows[key].beat, facts)
        rows[key].start = None if span is None else float(span["start"])
        rows[key].step_start = None if span is None else int(span["step_start"])
    changed = {key for key in rows if key not in stored or stored[key] != rows[key]}
    gone = set(stored) - set(rows)
    _write({key: rows[key] for key in changed}, gone)
    return _implied(job_ids, rows, changed | gone, old_starts, size)


def _implied(job_ids: Sequence[str], rows: Mapping[Key, Progress], changed: set[Key],
             old_starts: Mapping[Key, float | None], size: float) -> Implied:
    found = Implied(spans={job: [] for job in job_ids})
    for key in sorted(rows):
        row = rows[key]
        span = row.span(key)
        if span is not None:
            found.spans[key[0]].append(span)
        found.backwards[key[0]] = found.backwards.get(key[0], 0) + row.beat.backwards
    for key in changed:
        fines = found.dirty.setdefault(key[0], set())
        for start in (old_starts.get(key), rows[key].start if key in rows else None):
            if start is not None:
                fines.add(chunk_of(start, size))
    return found


def _from_events(job: str, by_fine: Mapping[int, list[Event]]) -> dict[Key, Progress]:
    """A job's rows read off all its events (the engine's reading, no query)."""
    attempts: dict[int, tuple[list[Event], list[Event]]] = {}
    for events in by_fine.values():
        for event in events:
            spans, marks = attempts.setdefault(int(event["attempt"]), ([], []))
            (spans if event["kind"] == "span" else marks).append(event)
    rows: dict[Key, Progress] = {}
    for attempt, (spans, marks) in attempts.items():
        for rank, beat, span in rank_progress(job, attempt, spans, marks):
            rows[(job, attempt, rank)] = Progress(
                beat, None if span is None else float(span["start"]),
                None if span is None else int(span["step_start"]))
    return rows


#: A rank's heartbeats of the dirty fine chunks, as Postgres sums them up: the latest by
#: ``(ts, step, id)`` and the highest step of those before its time (``None``: none).
Found = tuple[float, int, str, int | None]


def _merged(rows: dict[Key, Progress], beats: Mapping[Key, Found]) -> set[Key]:
    """Merge each rank's heartbeats read again into its row; the keys whose latest
    heartbeat changed. The latest is the largest ``(ts, step, id)``, as the engine's; the
    highest earlier step is a maximum over both sides (a heartbeat at the latest's time
    that is not the latest has a lower step, so it can never be the highest earlier)."""
    changed: set[Key] = set()
    for key, (ts, step, event_id, below) in beats.items():
        row = rows.get(key)
        latest = (ts, step, event_id)
        earlier = [] if below is None else [below]
        if row is not None:
            stored = (row.beat.ts, row.beat.step, row.beat.event_id)
            latest = max(latest, stored)
            earlier += [] if row.beat.earlier_max is None else [row.beat.earlier_max]
            earlier += [row.beat.step] if row.beat.ts < latest[0] else []
        earlier += [step] if ts < latest[0] else []
        beat = Beat(latest[2], latest[0], latest[1], max(earlier) if earlier else None)
        if row is None or row.beat != beat:
            rows[key] = Progress(beat)
            changed.add(key)
    return changed


def _ranges(dirty: Mapping[str, set[int]], jobs: Iterable[str],
            size: float) -> list[tuple[str, float, float]]:
    """Each job's dirty fine chunks as runs of home times ``[lo, hi)``."""
    found: list[tuple[str, float, float]] = []
    for job in sorted(set(jobs)):
        run: list[int] = []
        for k in sorted(dirty.get(job, ())):
            if run and k == run[-1] + 1:
                run.append(k)
                continue
            if run:
                found.append((job, run[0] * size, (run[-1] + 1) * size))
            run = [k]
        if run:
            found.append((job, run[0] * size, (run[-1] + 1) * size))
    return found


def _dirty_reads(job_ids: Sequence[str], dirty: Mapping[str, set[int]], size: float,
                 ) -> tuple[dict[Key, Found], set[Key]]:
    """The stepped heartbeats of the jobs' dirty fine chunks per attempt and rank, summed
    up (:data:`Found`: a row per rank, so a backlog of days costs no memory here), and the
    attempts and ranks with spans there: one read of each run of fine chunks (the (job,
    home) index; ``OFFSET 0`` keeps the kind filter out of the scan, which would otherwise
    take the spans-only ``event_rank_end`` index and read every span of the job)."""
    ranges = _ranges(dirty, job_ids, size)
    beats: dict[Key, Found] = {}
    ranks: set[Key] = set()
    if not ranges:
        return beats, ranks
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH ranged AS MATERIALIZED (SELECT e.* FROM unnest(%s::text[], %s::float8[], "
            "%s::float8[]) AS c(j, lo, hi) CROSS JOIN LATERAL (SELECT e.job, e.attempt, "
            f"e.rank, e.kind, e.mark, e.ts, e.step, e.event_id FROM {EVENTS} e "
            f"WHERE e.job = c.j AND {_HOME} >= c.lo AND {_HOME} < c.hi OFFSET 0) e), "
            "beats AS (SELECT job, attempt, rank, ts, step, event_id, max(ts) OVER w AS top "
            "FROM ranged WHERE kind = 'mark' AND mark = 'heartbeat' AND step IS NOT NULL "
            "WINDOW w AS (PARTITION BY job, attempt, rank)) "
            "SELECT * FROM (SELECT DISTINCT ON (job, attempt, rank) job, attempt, rank, ts, "
            "step, event_id, max(step) FILTER (WHERE ts < top) OVER (PARTITION BY job, "
            "attempt, rank) FROM beats ORDER BY job, attempt, rank, ts DESC, step DESC, "
            "event_id DESC) b UNION ALL SELECT DISTINCT job, attempt, rank, NULL::float8, "
            "NULL::int8, NULL::text, NULL::int8 FROM ranged WHERE kind = 'span'",
            _range_args(ranges))
        for job, attempt, rank, ts, step, event_id, below in cursor.fetchall():
            if step is None:
                ranks.add((job, int(attempt), int(rank)))
            else:
                beats[(job, int(attempt), int(rank))] = (
                    ts, int(step), event_id, None if below is None else int(below))
    return beats, ranks


def _range_args(ranges: list[tuple[str, float, float]]) -> list[list[object]]:
    return [[job for job, _, _ in ranges], [lo for _, lo, _ in ranges],
            [hi for _, _, hi in ranges]]


#: How far before a heartbeat the first look for its rank's spans reaches, beyond twice the
#: job's longest span: a span that ended this long before it still settles the facts.
REACH_MARGIN_S: Final = 3600.0


def _facts(asked: list[tuple[Key, float]]) -> list[RankFacts]:
    """Rule 3's facts of each (attempt and rank, latest heartbeat time ``t``).

    Two looks, so a refresh probes the days around the heartbeat, not every day the job
    has lived: first the spans that started in the last ``2 x longest + REACH_MARGIN_S``
    before ``t`` (``longest``: the job's longest span, ``ingest.Job.longest_span_s``; 30
    days where unknown). A train span open across ``t`` started inside that reach, so
    *active* is settled; the latest ends by ``t`` are settled when they lie at least
    ``longest`` after the reach's start (no span starting before it can end later). The
    ranks left unsettled (a rank whose last span is older, or that has none) are looked
    up again from the job's first event on."""
    longest = _longest({key[0] for key, _ in asked})
    los = [t - 2 * longest[key[0]] - REACH_MARGIN_S for key, t in asked]
    found = _query_facts(asked, los)
    again = [i for i, (facts, lo, (key, _)) in enumerate(zip(found, los, asked, strict=True))
             if not _settled(facts, lo + longest[key[0]])]
    for i, facts in zip(again, _query_facts([asked[i] for i in again], None), strict=True):
        found[i] = facts
    return found


def _settled(facts: RankFacts, after: float) -> bool:
    return (facts.active or (facts.train_end is not None and facts.train_end >= after
                             and facts.last_end is not None and facts.last_end >= after))


def _longest(jobs: set[str]) -> dict[str, float]:
    """Each job's longest span (30 days, the schema's limit, where not known)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT job_id, longest_span_s FROM {JOBS} WHERE job_id = ANY(%s)",
                       [sorted(jobs)])
        known = {job: value for job, value in cursor.fetchall() if value is not None}
    return {job: float(known.get(job, MAX_SPAN_S)) for job in jobs}


def _query_facts(asked: list[tuple[Key, float]], los: list[float] | None) -> list[RankFacts]:
    """The facts in one query: spans started from ``los`` (``None``: from the job's first
    event) up to ``t``: the latest train span ended by ``t``, the latest end of any span
    ended by ``t``, whether a train span is open across ``t``."""
    if not asked:
        return []
    lo = ("w.lo" if los is not None else
          f"(SELECT coalesce(j.first_home, '-Infinity') FROM {JOBS} j WHERE j.job_id = w.job)")
    rank = ("e.job = w.job AND e.attempt = w.attempt AND e.rank = w.rank AND e.kind = 'span' "
            f"AND {_HOME} >= {lo} AND {_HOME} <= w.t")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT w.i, tr.e, ts.s, le.e, ac.x FROM unnest(%s::int[], %s::text[], %s::int8[], "
            "%s::int8[], %s::float8[], %s::float8[]) AS w(i, job, attempt, rank, t, lo) "
            f'LEFT JOIN LATERAL (SELECT e."end" AS e FROM {EVENTS} e WHERE {rank} '
            "AND e.phase = 'train' AND e.\"end\" <= w.t ORDER BY e.\"end\" DESC LIMIT 1) tr "
            f"ON true LEFT JOIN LATERAL (SELECT max(e.step_end) AS s FROM {EVENTS} e "
            f"WHERE {rank} AND e.phase = 'train' AND e.\"end\" = tr.e) ts ON true "
            f'LEFT JOIN LATERAL (SELECT e."end" AS e FROM {EVENTS} e WHERE {rank} '
            'AND e."end" <= w.t ORDER BY e."end" DESC LIMIT 1) le ON true '
            f"LEFT JOIN LATERAL (SELECT true AS x FROM {EVENTS} e WHERE {rank} "
            "AND e.phase = 'train' AND e.\"end\" > w.t LIMIT 1) ac ON true ORDER BY w.i",
            [list(range(len(asked))), [key[0] for key, _ in asked],
             [key[1] for key, _ in asked], [key[2] for key, _ in asked],
             [t for _, t in asked], los if los is not None else [0.0] * len(asked)])
        return [RankFacts(train_end, None if step is None else int(step), last_end,
                          bool(active))
                for _, train_end, step, last_end, active in cursor.fetchall()]


def _read(job_ids: Sequence[str]) -> dict[Key, Progress]:
    rows: dict[Key, Progress] = {}
    if not job_ids:
        return rows
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT job, attempt, rank, beat_id, beat_ts, beat_step, earlier_max, "
                       f"start, step_start FROM {PROGRESS} WHERE job = ANY(%s)",
                       [list(job_ids)])
        for job, attempt, rank, beat_id, ts, step, earlier, start, step_start in (
                cursor.fetchall()):
            rows[(job, attempt, rank)] = Progress(
                Beat(beat_id, ts, int(step), None if earlier is None else int(earlier)),
                start, None if step_start is None else int(step_start))
    return rows


def _write(rows: Mapping[Key, Progress], gone: set[Key]) -> None:
    """Replace the changed rows and delete the gone ones (a whole refresh's leftovers)."""
    keys = sorted(set(rows) | gone)
    if not keys:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {PROGRESS} p USING unnest(%s::text[], %s::int8[], %s::int8[]) "
            "AS k(job, attempt, rank) WHERE p.job = k.job AND p.attempt = k.attempt "
            "AND p.rank = k.rank",
            [[k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]])
        if not rows:
            return
        ordered = sorted(rows)
        cursor.execute(
            f"INSERT INTO {PROGRESS} (job, attempt, rank, beat_id, beat_ts, beat_step, "
            "earlier_max, start, step_start) SELECT * FROM unnest(%s::text[], %s::int8[], "
            "%s::int8[], %s::text[], %s::float8[], %s::int8[], %s::int8[], %s::float8[], "
            "%s::int8[])",
            [[k[0] for k in ordered], [k[1] for k in ordered], [k[2] for k in ordered],
             [rows[k].beat.event_id for k in ordered], [rows[k].beat.ts for k in ordered],
             [rows[k].beat.step for k in ordered],
             [rows[k].beat.earlier_max for k in ordered],
             [rows[k].start for k in ordered], [rows[k].step_start for k in ordered]])


def forget(job_ids: Sequence[str]) -> None:
    """Drop the rows of jobs whose rollups are gone."""
    RankProgress.objects.filter(job__in=list(job_ids)).delete()
