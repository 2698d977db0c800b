"""The collectors: is every node's agent alive and shipping, and what did ingestion refuse?

An infra owner trusts the fleet's numbers only while every collector keeps reporting: a node
whose agent died stops adding wall time *and* failures, so its jobs simply vanish from the
charts. Each agent sends a health report every ``--health-interval`` (30 s by default,
``ett.collector_health``); a collector whose last report is older than ``silent_after_s`` is
flagged silent. A collector whose credential the server refused more recently than it accepted
a report from it is *rejected*, with the reason and when: its agent holds its events on the
node (with ``--server-url``) or its batches are quarantined, not stored, and it shows even if
no report of it was ever accepted. Refusals are kept per source for the newest
``ETT_COLLECTOR_REJECTIONS_KEPT`` sources only (whoever can publish to the broker chooses the
sources), and counted exactly per reason (``refusal_reasons``, ``refusals``,
``refused_sources``). Beside them: the lines
ingestion quarantined, newest first, with their reasons (the sum of ``lines``, as the jobs
page counts them, not a row count).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Final

from django.conf import settings
from django.db.models import Max, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from ettweb.ingest.models import (
    CollectorHealth,
    CollectorRejection,
    QuarantinedEvent,
    RejectionTally,
)
from ettweb.queries.exposed import as_api, doc
from ettweb.queries.registry import Query, runner_for

#: Ten missed reports at the agent's default 30 s interval.
DEFAULT_SILENT_AFTER_S: Final = 300
#: Longest silence threshold a query accepts (a week).
MAX_SILENT_AFTER_S: Final = 7 * 86400
#: Characters of a rejected line shown (the quarantine keeps up to 4,096).
RAW_PREVIEW_CHARS: Final = 160
#: A collector's status: its newest word was refused, it fell silent, or it reports.
REJECTED, SILENT, REPORTING = "rejected", "silent", "reporting"


@dataclass(frozen=True)
class CollectorsQuery(Query["CollectorsResult"]):
    """Every collector's latest health, the silent ones flagged; the newest ``rejected``
    quarantined lines, optionally of one ``source``."""

    silent_after_s: int = DEFAULT_SILENT_AFTER_S
    rejected: int = 50
    source: str = ""

    def __post_init__(self) -> None:
        if not 10 <= self.silent_after_s <= MAX_SILENT_AFTER_S:
            raise ValueError(f"silent_after_s must be between 10 and {MAX_SILENT_AFTER_S}, "
                             f"not {self.silent_after_s}")
        if not 1 <= self.rejected <= 500:
            raise ValueError(f"rejected must be between 1 and 500, not {self.rejected}")


@dataclass(frozen=True)
class CollectorRow:
    """One source: its latest accepted report (zeros when none was) and its latest refusal.

    ``last_seen`` is when the server last heard from it, accepted or refused; ``status`` is
    ``rejected`` when the newest word was refused, else ``silent`` when that was longer ago
    than the threshold (``silent`` says the same), else ``reporting``."""

    source: str
    collector_id: str
    status: str = field(default=REPORTING, kw_only=True, metadata=doc(
        "rejected (its newest word was a refused credential), silent (nothing heard past "
        "silent_after_s) or reporting"))
    last_seen: datetime = field(metadata=doc("when the server last heard from it, accepted or "
                                             "refused"))
    silent_for_s: float
    silent: bool
    backlog_events: int
    backlog_bytes: int
    shipped_events: int
    dropped_events: int
    corrupted_records: int
    spool_files: int
    last_success: datetime | None
    rejected_lines: int
    rejection_reason: str = field(default="", kw_only=True, metadata=doc(
        "why its credential was last refused (empty: never)"))
    last_rejected: datetime | None = field(default=None, kw_only=True)

    @property
    def rejected(self) -> bool:
        return self.status == REJECTED


@dataclass(frozen=True)
class RejectedRow:
    """One quarantined line (its start, ``raw_preview``), newest first."""

    received_at: datetime
    source: str
    job: str
    reason: str
    lines: int
    raw_preview: str
    raw_bytes: int


@dataclass(frozen=True)
class RejectionReason:
    """A reason ingestion refused lines for, and how many lines it refused for it."""

    reason: str
    lines: int


@dataclass(frozen=True)
class RefusalReason:
    """A kind of credential refusal (what the sender chose cut off, e.g. ``unknown collector
    …``), counted over every source, the pruned ones included."""

    reason: str
    refusals: int = field(metadata=doc("refused messages (batches, health reports, checks)"))
    sources: int = field(metadata=doc("(source, claimed id) pairs first refused for it"))
    first_at: datetime
    last_at: datetime


@dataclass(frozen=True)
class CollectorsResult:
    """Every collector's health with the fleet's totals, and the newest quarantined lines
    with the reasons' totals."""

    API_PROPERTIES: ClassVar[tuple[str, ...]] = (
        "silent", "rejected_collectors", "backlog_events", "dropped_events", "corrupted_records")
    API_ORDER: ClassVar[tuple[str, ...]] = (
        "silent_after_s", *API_PROPERTIES, "refusals", "refused_sources", "rejections_kept",
        "refusal_reasons", "rejected_lines", "reasons", "collectors", "rejected")

    silent_after_s: int
    collectors: tuple[CollectorRow, ...]
    rejected: tuple[RejectedRow, ...]
    rejected_lines: int
    reasons: tuple[RejectionReason, ...]
    refusals: int = field(default=0, kw_only=True, metadata=doc(
        "credential refusals ever counted, every source (not only those listed)"))
    refused_sources: int = field(default=0, kw_only=True, metadata=doc(
        "(source, claimed id) pairs ever refused, every source; a pair pruned and refused "
        "again counts again"))
    rejections_kept: int = field(default=0, kw_only=True, metadata=doc(
        "at most this many refused sources are kept and listed, the newest "
        "(ETT_COLLECTOR_REJECTIONS_KEPT)"))
    refusal_reasons: tuple[RefusalReason, ...] = field(default=(), kw_only=True, metadata=doc(
        "the refusals by reason, every source, the most frequent first"))

    @property
    def silent(self) -> int:
        return sum(1 for row in self.collectors if row.silent)

    @property
    def rejected_collectors(self) -> int:
        return sum(1 for row in self.collectors if row.rejected)

    @property
    def backlog_events(self) -> int:
        return sum(row.backlog_events for row in self.collectors)

    @property
    def dropped_events(self) -> int:
        return sum(row.dropped_events for row in self.collectors)

    @property
    def corrupted_records(self) -> int:
        return sum(row.corrupted_records for row in self.collectors)

    def as_api(self) -> dict[str, Any]:
        return as_api(self)


@runner_for(CollectorsQuery)
class CollectorsQueryRunner:
    def __init__(self, query: CollectorsQuery) -> None:
        self.query = query

    def calculate(self) -> CollectorsResult:
        now = timezone.now()
        quarantine = QuarantinedEvent.objects.all()
        if self.query.source:
            quarantine = quarantine.filter(source=self.query.source)
        per_source = dict(QuarantinedEvent.objects.values_list("source")
                          .annotate(n=Coalesce(Sum("lines"), 0)).values_list("source", "n"))
        reasons = (quarantine.values("reason").annotate(n=Coalesce(Sum("lines"), 0),
                                                          newest=Max("received_at"))
                   .order_by("-n", "-newest", "reason")[:20])
        return CollectorsResult(
            silent_after_s=self.query.silent_after_s,
            collectors=self._rows(now, per_source),
            rejected=tuple(_rejected(row) for row in
                           quarantine.order_by("-received_at", "-id")[:self.query.rejected]),
            rejected_lines=int(quarantine.aggregate(n=Coalesce(Sum("lines"), 0))["n"]),
            reasons=tuple(RejectionReason(r["reason"], int(r["n"])) for r in reasons),
            **self._refusals())

    @staticmethod
    def _refusals() -> dict[str, Any]:
        """The tally of every refusal: a bounded table (``RejectionTally``), read whole."""
        tallies = tuple(RefusalReason(row.reason, row.refusals, row.sources, row.first_at,
                                      row.last_at)
                        for row in RejectionTally.objects.order_by("-refusals", "reason"))
        return {"refusals": sum(row.refusals for row in tallies),
                "refused_sources": sum(row.sources for row in tallies),
                "rejections_kept": settings.ETT_COLLECTOR_REJECTIONS_KEPT,
                "refusal_reasons": tallies}

    def _rows(self, now: datetime, rejected_lines: dict[str, int]) -> tuple[CollectorRow, ...]:
        """Every source with an accepted report or a refusal: the rejected first, then the
        longest silent."""
        health = {row.source: row for row in self._filtered(CollectorHealth.objects.all())}
        # DISTINCT ON: each source's newest refusal, whichever id it claimed.
        refusals = {row.source: row for row in self._filtered(
            CollectorRejection.objects.order_by("source", "-last_at").distinct("source"))}
        rows = [self._row(source, health.get(source), refusals.get(source), now,
                          rejected_lines.get(source, 0))
                for source in health.keys() | refusals.keys()]
        return tuple(sorted(rows, key=lambda row: (not row.rejected, row.last_seen,
                                                   row.source)))

    def _filtered(self, rows: Any) -> Any:
        return rows.filter(source=self.query.source) if self.query.source else rows

    def _row(self, source: str, health: CollectorHealth | None,
             refusal: CollectorRejection | None, now: datetime, rejected: int) -> CollectorRow:
        report = health or CollectorHealth(source=source)  # never reported: zeros
        heard = [row_at for row_at in (health.updated_at if health else None,
                                       refusal.last_at if refusal else None) if row_at]
        last_seen = max(heard)
        rejected_now = refusal is not None and (health is None
                                                or refusal.last_at > health.updated_at)
        silent_for = max(0.0, (now - last_seen).total_seconds())
        silent = not rejected_now and silent_for > self.query.silent_after_s
        last_success = (None if not report.last_success_ts else
                        datetime.fromtimestamp(report.last_success_ts, tz=now.tzinfo))
        return CollectorRow(
            source=source,
            collector_id=refusal.collector_id if rejected_now and refusal else report.collector_id,
            last_seen=last_seen, silent_for_s=silent_for, silent=silent,
            backlog_events=report.backlog_events, backlog_bytes=report.backlog_bytes,
            shipped_events=report.shipped_events, dropped_events=report.dropped_events,
            corrupted_records=report.corrupted_records, spool_files=report.spool_files,
            last_success=last_success, rejected_lines=int(rejected),
            status=REJECTED if rejected_now else SILENT if silent else REPORTING,
            rejection_reason=refusal.reason if refusal else "",
            last_rejected=refusal.last_at if refusal else None)


def _rejected(row: QuarantinedEvent) -> RejectedRow:
    preview = row.raw if len(row.raw) <= RAW_PREVIEW_CHARS else row.raw[:RAW_PREVIEW_CHARS] + "…"
    return RejectedRow(received_at=row.received_at, source=row.source, job=row.job,
                       reason=row.reason, lines=row.lines, raw_preview=preview,
                       raw_bytes=row.raw_bytes or len(row.raw.encode()))
