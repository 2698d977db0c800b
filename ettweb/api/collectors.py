"""``GET /api/v1/collectors``: every collector agent's health and the quarantine, as JSON.

The collectors page's numbers (``ettweb.queries.collectors``): which agents the server
refuses or has not heard from, their backlogs and losses, and the newest lines the server
quarantined with the reasons' totals, so monitoring can alert on what the page shows. The
agents' own credential check (``POST /api/v1/collectors/self``) is
``ettweb.api.collector_check``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from django.http import HttpRequest
from ninja import Router, Schema
from ninja.errors import HttpError

from ettweb.api.errors import ErrorOut
from ettweb.api.schemas import schema_of
from ettweb.queries import CollectorsQuery, calculate
from ettweb.queries.collectors import (
    DEFAULT_SILENT_AFTER_S,
    CollectorRow,
    CollectorsResult,
    RefusalReason,
    RejectedRow,
    RejectionReason,
)

#: No tags and the operation id this endpoint had when ``ettweb.api.v1`` held it, so
#: clients generated from the OpenAPI document keep their names.
router = Router()


#: Built from the query's results (``ettweb.api.schemas``), under the names clients know.
if TYPE_CHECKING:  # built at run time, so mypy sees only that they are schemas
    CollectorOut: TypeAlias = Schema
    RejectedOut: TypeAlias = Schema
    CollectorsOut: TypeAlias = Schema
else:
    CollectorOut = schema_of(CollectorRow, "CollectorOut")
    RejectedOut = schema_of(RejectedRow, "RejectedOut")
    schema_of(RejectionReason, "ReasonOut")
    schema_of(RefusalReason, "RefusalReasonOut")
    CollectorsOut = schema_of(CollectorsResult, "CollectorsOut")


@router.get("/collectors", response={200: CollectorsOut, 400: ErrorOut, 401: ErrorOut},
            summary="Every collector's latest health and the newest rejected lines",
            operation_id="ettweb_api_v1_collectors")
def collectors(request: HttpRequest, silent_after_s: int = DEFAULT_SILENT_AFTER_S,
               rejected: int = 50, source: str = "") -> dict[str, Any]:
    """The collectors page's numbers: each agent's last report (those whose credential the
    server refuses first, then the longest silent; ``silent`` past ``silent_after_s``),
    backlog, dropped and corrupted counts, and the ``rejected`` newest quarantined lines with
    the reasons' totals (optionally one ``source``'s). Refused credentials are listed for the
    newest ``rejections_kept`` sources and counted for all (``refusals``, ``refused_sources``,
    ``refusal_reasons``, fleet-wide whatever ``source`` says)."""
    try:
        query = CollectorsQuery(silent_after_s=silent_after_s, rejected=rejected,
                                source=source.strip())
    except ValueError as exc:
        name = str(exc).split(" ", 1)[0]
        raise HttpError(400, f"{name}: {exc}") from None
    return calculate(query).as_api()
