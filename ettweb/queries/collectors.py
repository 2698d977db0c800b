"""The collectors: is every node's agent alive and shipping, and what did ingestion refuse?

An infra owner trusts the fleet's numbers only while every collector keeps reporting: a node
whose agent died stops adding wall time *and* failures, so its jobs simply vanish from the
charts. Each agent sends a health report every ``--health-interval`` (30 s by default,
``ett.collector_health``); a collector whose last report is older than ``silent_after_s`` is
flagged silent. Beside them: the lines ingestion quarantined, newest first, with their reasons
(the sum of ``lines``, as the jobs page counts them, not a row count).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from django.db.models import Max, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from ettweb.ingest.models import CollectorHealth, QuarantinedEvent

#: Ten missed reports at the agent's default 30 s interval.
DEFAULT_SILENT_AFTER_S: Final = 300
#: Longest silence threshold a query accepts (a week).
MAX_SILENT_AFTER_S: Final = 7 * 86400
#: Characters of a rejected line shown (the quarantine keeps up to 4,096).
RAW_PREVIEW_CHARS: Final = 160


@dataclass(frozen=True)
class CollectorsQuery:
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
    source: str
    collector_id: str
    last_seen: datetime
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

    def as_api(self) -> dict[str, Any]:
        return {"source": self.source, "collector_id": self.collector_id,
                "last_seen": self.last_seen.isoformat(), "silent_for_s": self.silent_for_s,
                "silent": self.silent, "backlog_events": self.backlog_events,
                "backlog_bytes": self.backlog_bytes, "shipped_events": self.shipped_events,
                "dropped_events": self.dropped_events,
                "corrupted_records": self.corrupted_records, "spool_files": self.spool_files,
                "last_success": self.last_success.isoformat() if self.last_success else None,
                "rejected_lines": self.rejected_lines}


@dataclass(frozen=True)
class RejectedRow:
    received_at: datetime
    source: str
    job: str
    reason: str
    lines: int
    raw_preview: str
    raw_bytes: int

    def as_api(self) -> dict[str, Any]:
        return {"received_at": self.received_at.isoformat(), "source": self.source,
                "job": self.job, "reason": self.reason, "lines": self.lines,
                "raw_preview": self.raw_preview, "raw_bytes": self.raw_bytes}


@dataclass(frozen=True)
class CollectorsResult:
    silent_after_s: int
    collectors: tuple[CollectorRow, ...]
    rejected: tuple[RejectedRow, ...]
    rejected_lines: int
    reasons: tuple[tuple[str, int], ...]

    @property
    def silent(self) -> int:
        return sum(1 for row in self.collectors if row.silent)

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
        return {"silent_after_s": self.silent_after_s, "silent": self.silent,
                "backlog_events": self.backlog_events, "dropped_events": self.dropped_events,
                "corrupted_records": self.corrupted_records,
                "rejected_lines": self.rejected_lines,
                "reasons": [{"reason": r, "lines": n} for r, n in self.reasons],
                "collectors": [row.as_api() for row in self.collectors],
                "rejected": [row.as_api() for row in self.rejected]}


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
            collectors=tuple(self._row(health, now, per_source.get(health.source, 0))
                             for health in self._health()),
            rejected=tuple(_rejected(row) for row in
                           quarantine.order_by("-received_at", "-id")[:self.query.rejected]),
            rejected_lines=int(quarantine.aggregate(n=Coalesce(Sum("lines"), 0))["n"]),
            reasons=tuple((r["reason"], int(r["n"])) for r in reasons))

    def _health(self) -> Any:
        rows = CollectorHealth.objects.all()
        if self.query.source:
            rows = rows.filter(source=self.query.source)
        return rows.order_by("updated_at", "source")  # the longest silent first

    def _row(self, health: CollectorHealth, now: datetime, rejected: int) -> CollectorRow:
        silent_for = max(0.0, (now - health.updated_at).total_seconds())
        last_success = (None if not health.last_success_ts else
                        datetime.fromtimestamp(health.last_success_ts, tz=now.tzinfo))
        return CollectorRow(
            source=health.source, collector_id=health.collector_id,
            last_seen=health.updated_at, silent_for_s=silent_for,
            silent=silent_for > self.query.silent_after_s,
            backlog_events=health.backlog_events, backlog_bytes=health.backlog_bytes,
            shipped_events=health.shipped_events, dropped_events=health.dropped_events,
            corrupted_records=health.corrupted_records, spool_files=health.spool_files,
            last_success=last_success, rejected_lines=int(rejected))


def _rejected(row: QuarantinedEvent) -> RejectedRow:
    preview = row.raw if len(row.raw) <= RAW_PREVIEW_CHARS else row.raw[:RAW_PREVIEW_CHARS] + "…"
    return RejectedRow(received_at=row.received_at, source=row.source, job=row.job,
                       reason=row.reason, lines=row.lines, raw_preview=preview,
                       raw_bytes=row.raw_bytes or len(row.raw.encode()))
