"""``GET /api/v1/collectors``: every collector agent's health and the quarantine, as JSON.

The collectors page's numbers (``ettweb.queries.collectors``): which agents the server
refuses or has not heard from, their backlogs and losses, and the newest lines the server
quarantined with the reasons' totals, so monitoring can alert on what the page shows. The
agents' own credential check (``POST /api/v1/collectors/self``) is
``ettweb.api.collector_check``.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.errors import HttpError

from ettweb.api.errors import ErrorOut
from ettweb.queries import CollectorsQuery, calculate
from ettweb.queries.collectors import DEFAULT_SILENT_AFTER_S

#: No tags and the operation id this endpoint had when ``ettweb.api.v1`` held it, so
#: clients generated from the OpenAPI document keep their names.
router = Router()


class CollectorOut(Schema):
    source: str
    collector_id: str
    status: str = Field(description="rejected (its newest word was a refused credential), "
                                    "silent (nothing heard past silent_after_s) or reporting")
    last_seen: str = Field(description="when the server last heard from it, accepted or "
                                       "refused")
    silent_for_s: float
    silent: bool
    backlog_events: int
    backlog_bytes: int
    shipped_events: int
    dropped_events: int
    corrupted_records: int
    spool_files: int
    last_success: str | None
    rejected_lines: int
    rejection_reason: str = Field(description="why its credential was last refused "
                                              "(empty: never)")
    last_rejected: str | None


class ReasonOut(Schema):
    reason: str
    lines: int


class RejectedOut(Schema):
    received_at: str
    source: str
    job: str
    reason: str
    lines: int
    raw_preview: str
    raw_bytes: int


class CollectorsOut(Schema):
    silent_after_s: int
    silent: int
    rejected_collectors: int
    backlog_events: int
    dropped_events: int
    corrupted_records: int
    rejected_lines: int
    reasons: list[ReasonOut]
    collectors: list[CollectorOut]
    rejected: list[RejectedOut]


@router.get("/collectors", response={200: CollectorsOut, 400: ErrorOut, 401: ErrorOut},
            summary="Every collector's latest health and the newest rejected lines",
            operation_id="ettweb_api_v1_collectors")
def collectors(request: HttpRequest, silent_after_s: int = DEFAULT_SILENT_AFTER_S,
               rejected: int = 50, source: str = "") -> dict[str, Any]:
    """The collectors page's numbers: each agent's last report (those whose credential the
    server refuses first, then the longest silent; ``silent`` past ``silent_after_s``),
    backlog, dropped and corrupted counts, and the ``rejected`` newest quarantined lines with
    the reasons' totals (optionally one ``source``'s)."""
    try:
        query = CollectorsQuery(silent_after_s=silent_after_s, rejected=rejected,
                                source=source.strip())
    except ValueError as exc:
        name = str(exc).split(" ", 1)[0]
        raise HttpError(400, f"{name}: {exc}") from None
    return calculate(query).as_api()
