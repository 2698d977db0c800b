"""Where the chunked attribution (``ettweb.attribution.chunk_*``) keeps its chunks.

Ingestion marks the chunks a batch's events land in (:class:`DirtyChunk`), in the
transaction that stores them; a refresh claims the marks of its jobs, reads those chunks'
home events (one index range on ``(job, coalesce(start, ts))``, the partition key, so old
partitions are never visited), recomputes what changed and writes the recomputed chunks
back. Everything here is plain SQL on the two tables; the logic lives in the engine side.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import orjson
from django.conf import settings
from django.db import connection
from django.utils import timezone

from ettweb.attribution.chunk_summary import chunk_of, home_time
from ettweb.attribution.chunk_sweep import ChunkState, segments_from_json, segments_to_json
from ettweb.attribution.engine import Event, Segment
from ettweb.attribution.lanes import Lane, Timeline
from ettweb.ingest.models import Event as StoredEvent
from ettweb.ingest.models import Job
from ettweb.platform.bulk import server_cursor
from ettweb.rollups.models import AttributionChunk, DirtyChunk

CHUNKS: Final = AttributionChunk._meta.db_table
DIRTY: Final = DirtyChunk._meta.db_table
EVENTS: Final = StoredEvent._meta.db_table
JOBS: Final = Job._meta.db_table
#: Bytes of chunk JSON a refresh buffers before it writes them (one COPY): bounds what it
#: holds in memory, whatever the chunks' size (a thousand-rank chunk's lanes and carry are
#: megabytes, a small job's chunk a few kilobytes).
WRITE_BYTES: Final = 4 << 20
_HOME: Final = 'coalesce("start", "ts")'
_COLUMNS: Final = ("job", "chunk", "chunk_s", "summary", "state", "carry", "segments",
                   "timelines", "lanes", "final", "written_at")


#: The columns a refresh reads of each event (host is not needed).
EVENT_COLUMNS: Final = ("event_id", "job", "attempt", "kind", "phase", "mark", "start", "end",
                        "ts", "rank", "step_start", "step_end", "step", "blocking", "attrs")


def select_events(where: str) -> str:
    """``SELECT`` of the columns :func:`as_event` reads, from the events table."""
    columns = ", ".join(connection.ops.quote_name(name) for name in EVENT_COLUMNS)
    return f"SELECT {columns} FROM {EVENTS} {where}"


def as_event(row: Sequence[Any]) -> Event:
    """A stored row as the normalized schema-v1 dict the engine reads (host is not needed)."""
    (event_id, job, attempt, kind, phase, mark, start, end, ts, rank,
     step_start, step_end, step, blocking, attrs) = row
    if isinstance(attrs, str):  # Django's psycopg setup hands jsonb over as text
        attrs = {} if attrs == "{}" else json.loads(attrs)
    event: Event = {"v": 1, "id": event_id, "job": job, "attempt": attempt, "kind": kind,
                    "rank": rank, "blocking": blocking, "attrs": attrs}
    if kind == "span":
        event["phase"], event["start"], event["end"] = phase, start, end
        if step_start is not None:
            event["step_start"], event["step_end"] = step_start, step_end
    else:
        event["mark"], event["ts"] = mark, ts
        if step is not None:
            event["step"] = step
    return event


def chunk_s() -> float:
    """The configured chunk length (``ETT_CHUNK_S``)."""
    return float(settings.ETT_CHUNK_S)


def _loads(value: Any) -> Any:
    """A jsonb cell as Python (Django's psycopg setup hands jsonb over as text)."""
    return orjson.loads(value) if isinstance(value, str | bytes) else value


# --------------------------------------------------------------------------- marks

def mark_chunks(events: Iterable[Event]) -> None:
    """Mark the chunks ``events`` land in; call in the transaction that stores them.

    Over-marking is harmless (a repeated event's chunk is recomputed to the same numbers);
    under-marking would leave a chunk stale, so every event of the batch is marked, stored
    or not. One row per job (its chunks as an array): the table has no unique key, so two
    batches marking the same job never wait for each other.
    """
    size = chunk_s()
    by_job: dict[str, set[int]] = {}
    for event in events:
        by_job.setdefault(event["job"], set()).add(chunk_of(home_time(event), size))
    if not by_job:
        return
    jobs = sorted(by_job)
    with server_cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {DIRTY} (job, chunks) SELECT job, array_agg(chunk ORDER BY chunk) "
            "FROM unnest(%b::text[], %b::int8[]) AS m(job, chunk) GROUP BY job",
            [[job for job in jobs for _ in by_job[job]],
             [k for job in jobs for k in sorted(by_job[job])]])


def claim_chunks(job_ids: Sequence[str]) -> dict[str, set[int]]:
    """Delete the chunk marks of ``job_ids`` (after their job marks were claimed, so every
    batch those covered has committed) and return them per job."""
    claimed: dict[str, set[int]] = {}
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {DIRTY} WHERE job = ANY(%s) RETURNING job, chunks",
                       [list(job_ids)])
        for job, chunks in cursor.fetchall():
            claimed.setdefault(job, set()).update(int(k) for k in chunks)
    return claimed


def home_chunks(job_ids: Sequence[str], size: float) -> dict[str, set[int]]:
    """Every chunk holding events of ``job_ids``, from the events: for jobs with no stored
    chunks yet (rolled up before chunks existed, or chunked at another length)."""
    found: dict[str, set[int]] = {}
    if not job_ids:
        return found
    with server_cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT e.job, floor(e.home / %b)::int8 "
                       f"FROM {_jobs_events(f'e.job, {_HOME} AS home')}",
                       [size, list(job_ids)])
        for job, k in cursor.fetchall():
            found.setdefault(job, set()).add(int(k))
    return found


def _jobs_events(columns: str) -> str:
    """``FROM`` clause of every stored event of a list of jobs (``%b``, a text array),
    ``columns`` of the events table as ``e``.

    Each job's events are one index range, ``(job, home)`` from the first to the last home
    time its job row has seen (``ingest.Job``; unbounded where not known), read only in the
    daily partitions that range meets (``OFFSET 0`` keeps the read a per-job loop, which
    Postgres prunes partitions for). Why not ``job = ANY(…)``: that probes every daily
    partition for every job, so its cost grows with the days kept times the jobs read,
    where this one grows with the days each job spans.
    """
    return (f"unnest(%b::text[]) AS w(job) LEFT JOIN {JOBS} j ON j.job_id = w.job "
            f"CROSS JOIN LATERAL (SELECT {columns} FROM {EVENTS} e WHERE e.job = w.job "
            f"AND {_HOME} >= coalesce(j.first_home, '-Infinity') "
            f"AND {_HOME} <= coalesce(j.last_home, 'Infinity') OFFSET 0) e")


def read_jobs(job_ids: Sequence[str], limit: int) -> list[Event] | None:
    """Every stored event of ``job_ids``, in one query; ``None`` when they are more than
    ``limit`` (the caller then reads chunk by chunk, in bounded memory)."""
    if not job_ids:
        return []
    columns = ", ".join(f"e.{connection.ops.quote_name(name)}" for name in EVENT_COLUMNS)
    with server_cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {_jobs_events('e.*')} LIMIT %b",
                       [list(job_ids), limit + 1])
        rows = cursor.fetchall()
    return None if len(rows) > limit else [as_event(row) for row in rows]


# --------------------------------------------------------------------------- chunks

def stored_states(job_ids: Sequence[str], size: float,
                  ) -> tuple[dict[str, dict[int, ChunkState]], set[str]]:
    """The small fields of every stored chunk of ``job_ids``, per job; and the jobs whose
    chunks were cut at another length (to be recomputed from their events)."""
    states: dict[str, dict[int, ChunkState]] = {}
    other_size: set[str] = set()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT job, chunk, chunk_s, summary, state, final FROM {CHUNKS} "
                       "WHERE job = ANY(%s)", [list(job_ids)])
        for job, k, length, summary, state, final in cursor.fetchall():
            if length != size:
                other_size.add(job)
                continue
            states.setdefault(job, {})[int(k)] = ChunkState.from_json(
                int(k), _loads(summary), _loads(state), final=bool(final))
    for job in other_size:
        states.pop(job, None)
    return states, other_size


def delete_chunks(job_ids: Sequence[str], *, keep_final: bool = False) -> None:
    """Forget the chunks of ``job_ids`` (``keep_final``: all but the final ones, which
    have no events left to be recomputed from)."""
    keep = " AND NOT final" if keep_final else ""
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {CHUNKS} WHERE job = ANY(%s){keep}", [list(job_ids)])


def jobs_marked_before(before: float, size: float) -> list[str]:
    """Jobs with a chunk marked for refresh that starts before ``before``."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT job FROM {DIRTY} WHERE %s > ANY(chunks) ORDER BY 1",
                       [before // size])
        return [job for (job,) in cursor.fetchall()]


def finalize_before(before: float) -> int:
    """Mark final every chunk whose home events all lie before ``before`` (retention is
    about to drop them, and an event that old is refused from then on, so none can join
    it); returns how many became final."""
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {CHUNKS} SET final = true WHERE NOT final "
                       "AND ((state ->> 'lf')::int8 + 1) * chunk_s <= %s", [before])
        finalized = int(cursor.rowcount)
        # A carry is read only to recompute the chunk after it: once that one is final too,
        # the spans open at the boundary (one per rank) are dead weight, kept forever.
        cursor.execute(
            f"UPDATE {CHUNKS} c SET carry = '[]'::jsonb FROM (SELECT id, lead(final) OVER "
            f"(PARTITION BY job ORDER BY chunk) AS next_final FROM {CHUNKS}) x "
            "WHERE c.id = x.id AND c.final AND x.next_final AND c.carry <> '[]'::jsonb")
        return finalized


def _bounds(k: int, following: int | None, size: float) -> tuple[float, float]:
    """A chunk's home times: from its first fine chunk to the next chunk's."""
    return k * size, (float("inf") if following is None else following * size)


def read_home(job: str, k: int, following: int | None, size: float) -> list[Event]:
    """The home events of ``job``'s chunk starting at fine chunk ``k`` (spans starting in
    it, marks inside it), up to the next chunk's first fine chunk (``None``: on)."""
    with connection.cursor() as cursor:
        cursor.execute(select_events(f"WHERE job = %s AND {_HOME} >= %s AND {_HOME} < %s"),
                       [job, *_bounds(k, following, size)])
        return [as_event(row) for row in cursor.fetchall()]


def count_home(wanted: Mapping[str, Sequence[tuple[int, int]]],
               size: float) -> dict[str, dict[int, int]]:
    """Events per occupied fine chunk of each job's fine chunk ranges (``[lo, hi)``), in one
    query: what laying out a job's chunks needs (``attribution.chunk_layout``).

    One index range per range asked, read once (``LATERAL``): joining on listed fine chunks
    instead was far slower for a job with a long backlog.
    """
    ranges = [(job, lo, hi) for job, asked in sorted(wanted.items()) for lo, hi in asked]
    counts: dict[str, dict[int, int]] = {}
    if not ranges:
        return counts
    with server_cursor() as cursor:
        cursor.execute(
            f"SELECT c.j, x.f, x.n FROM unnest(%b::text[], %b::float8[], %b::float8[]) "
            f"AS c(j, lo, hi) CROSS JOIN LATERAL (SELECT floor({_HOME} / %b)::int8 AS f, "
            f"count(*) AS n FROM {EVENTS} e WHERE e.job = c.j AND {_HOME} >= c.lo "
            f"AND {_HOME} < c.hi GROUP BY 1) x",
            [[job for job, _, _ in ranges], [lo * size for _, lo, _ in ranges],
             [hi * size for _, _, hi in ranges], size])
        for job, f, n in cursor.fetchall():
            counts.setdefault(job, {})[int(f)] = int(n)
    return counts


def prefetch_home(ranges: Iterable[tuple[str, int, int | None]], size: float,
                  budget: int) -> dict[tuple[str, int, int | None], list[Event]] | None:
    """The home events of many chunks (job, first fine chunk, next chunk's) in one query,
    grouped by chunk (one left out has none); ``None`` when they are more than ``budget``
    events (the caller then reads chunk by chunk, in bounded memory). Why: a refresh of 200
    small jobs read one chunk per query, hundreds of round trips."""
    wanted = sorted(set(ranges), key=lambda r: (r[0], r[1]))
    grouped: dict[tuple[str, int, int | None], list[Event]] = {}
    if not wanted:
        return grouped
    bounds = [_bounds(k, following, size) for _, k, following in wanted]
    columns = ", ".join(f"e.{connection.ops.quote_name(name)}" for name in EVENT_COLUMNS)
    with server_cursor() as cursor:
        cursor.execute(  # LATERAL: one index range per chunk, as in count_home
            f"SELECT {columns}, c.n FROM unnest(%b::text[], %b::float8[], %b::float8[], "
            f"%b::int[]) AS c(j, lo, hi, n) CROSS JOIN LATERAL (SELECT * FROM {EVENTS} e "
            f"WHERE e.job = c.j AND {_HOME} >= c.lo AND {_HOME} < c.hi) e LIMIT %b",
            [[job for job, _, _ in wanted], [lo for lo, _ in bounds], [hi for _, hi in bounds],
             list(range(len(wanted))), budget + 1])
        rows = cursor.fetchall()
    if len(rows) > budget:
        return None
    for row in rows:
        grouped.setdefault(wanted[row[-1]], []).append(as_event(row[:-1]))
    return grouped


def read_carry(job: str, k: int) -> list[Event]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT carry FROM {CHUNKS} WHERE job = %s AND chunk = %s", [job, k])
        row = cursor.fetchone()
    return list(_loads(row[0])) if row else []


def read_segments(job: str, ks: Sequence[int]) -> dict[int, list[Segment]]:
    if not ks:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT chunk, segments FROM {CHUNKS} WHERE job = %s "
                       "AND chunk = ANY(%s)", [job, list(ks)])
        return {int(k): segments_from_json(_loads(raw)) for k, raw in cursor.fetchall()}


def read_timelines(job_ids: Sequence[str]) -> dict[str, dict[int, list[Timeline]]]:
    """Every chunk's category timeline pieces of ``job_ids`` (small: merged per category),
    per job, in one query."""
    found: dict[str, dict[int, list[Timeline]]] = {}
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT job, chunk, timelines FROM {CHUNKS} WHERE job = ANY(%s)",
                       [list(job_ids)])
        for job, k, raw in cursor.fetchall():
            found.setdefault(job, {})[int(k)] = [
                Timeline(int(a), tuple((str(c), float(s), float(e)) for c, s, e in pieces),
                         float(bin_s)) for a, bin_s, pieces in _loads(raw)]
    return found


def chunk_lanes(job: str, ks: Sequence[int]) -> dict[int, list[list[Any]]]:
    """The rank lanes stored with the chunks ``ks`` of ``job``, per chunk (one query; a
    chunk not stored is left out)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT chunk, lanes FROM {CHUNKS} WHERE job = %s AND chunk = ANY(%s)",
                       [job, list(ks)])
        return {int(k): list(_loads(raw)) for k, raw in cursor.fetchall()}


def chunk_index(job: str) -> list[int]:
    """The occupied chunks of ``job``, in time order."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT chunk FROM {CHUNKS} WHERE job = %s ORDER BY chunk", [job])
        return [int(k) for (k,) in cursor.fetchall()]


class ChunkWriter:
    """Writes recomputed chunks, of any number of jobs, in groups (delete, then COPY): a
    refresh holds about ``WRITE_BYTES`` of chunks' big fields at once, whatever the jobs'
    length, and a refresh of many small jobs writes them in a few statements. ``fresh``:
    jobs with no chunk stored, whose chunks need no delete before they are written."""

    def __init__(self, size: float, fresh: Iterable[str] = ()) -> None:
        self.size = size
        self.fresh = set(fresh)
        self.rows: list[tuple[Any, ...]] = []
        self.gone: list[tuple[str, int]] = []
        self.buffered = 0
        self.now = timezone.now()

    def add(self, job: str, state: ChunkState) -> None:
        big = (_text(state.carry or []), _text(segments_to_json(state.segments or [])),
               _text([[t.attempt, t.bin_s, [list(p) for p in t.pieces]]
                      for t in state.timelines or []]),
               _text([_lane_row(lane) for lane in state.lanes or []]))
        self.rows.append((job, state.chunk, self.size, _text(state.summary_json()),
                          _text(state.state_json()), *big, False, self.now))
        self.buffered += sum(map(len, big))
        if self.buffered >= WRITE_BYTES:
            self.flush()

    def delete(self, job: str, chunks: Iterable[int]) -> None:
        """Delete these chunks of ``job`` at the next flush (they are no longer occupied)."""
        self.gone += [(job, k) for k in chunks]

    def flush(self) -> None:
        """Write what is buffered and delete what was asked."""
        gone = [(row[0], row[1]) for row in self.rows if row[0] not in self.fresh] + self.gone
        raw = connection.connection
        assert raw is not None  # the caller holds a transaction, hence a connection
        with raw.cursor() as cursor:
            if gone:
                cursor.execute(f"DELETE FROM {CHUNKS} c USING unnest(%s::text[], %s::int8[]) "
                               "AS g(job, chunk) WHERE c.job = g.job AND c.chunk = g.chunk",
                               [[job for job, _ in gone], [k for _, k in gone]])
            if self.rows:
                with cursor.copy(f"COPY {CHUNKS} ({', '.join(_COLUMNS)}) FROM STDIN") as copy:
                    for row in self.rows:
                        copy.write_row(row)
        self.rows, self.gone, self.buffered = [], [], 0


def _text(value: Any) -> str:
    return orjson.dumps(value).decode()


def _lane_row(lane: Lane) -> list[Any]:
    return [lane.attempt, lane.ranks[0], lane.label, len(lane.ranks), lane.bin_s,
            [list(run) for run in lane.runs]]
