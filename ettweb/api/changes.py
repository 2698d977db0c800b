"""``GET /api/v1/changes``: detected level shifts in the components' lost shares (ETT_SPEC §6.3).

The same query as the ``/changes/`` page (``ettweb.queries.changes``), so the two list the
same changes matched to the same rollouts. A bad parameter is a 400 ``{"error":
"<parameter>: <problem>"}``: a date that is not ``YYYY-MM-DD`` (ninja's validation, folded
into 400 by ``ettweb.api.errors``), a range that ends before it starts, a component nobody owns
time under, a team no job carries.

Auth: a bearer token (``manage.py ett_api_token``) or the browser's session, as for every
endpoint (mounted by ``ettweb.api.v1``'s ``api.add_router``; ``ettweb.api.errors`` words
its errors).
"""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Any, TypeAlias

from django.http import HttpRequest
from ninja import Router, Schema
from ninja.errors import HttpError

from ettweb.api.schemas import schema_of
from ettweb.queries import ChangesQuery, FilterChoicesQuery, calculate
from ettweb.queries.changes import ChangesResult, DetectedChange
from ettweb.queries.components import component_names

#: No ``auth`` here: the API's (a bearer token or the CSRF-checked session) applies.
router = Router(tags=["changes"])


#: Built from the query's result (``ettweb.api.schemas``), under the name clients know.
if TYPE_CHECKING:  # built at run time, so mypy sees only that they are schemas
    ChangeOut: TypeAlias = Schema

    class ChangesBodyOut(Schema): ...  # a base of the answer: a class, for mypy
else:
    ChangeOut = schema_of(DetectedChange, "ChangeOut")
    ChangesBodyOut = schema_of(ChangesResult, "ChangesBodyOut")


class ChangesFilterOut(Schema):
    component: str
    team: str


class ChangesScopeOut(Schema):
    """The days (null: open) and filter a list of changes applied."""

    date_from: str | None
    date_to: str | None
    filter: ChangesFilterOut


class ChangesOut(ChangesBodyOut, ChangesScopeOut):
    """The changes found, with the days (null: open) and filter the answer applied."""


class ChangesErrorOut(Schema):
    error: str


def unknown_name(parameter: str, value: str, known: list[str] | tuple[str, ...]) -> str | None:
    """The 400 message for a component or team that is not one of ``known``; None if it is
    (or is empty: any)."""
    if not value or value in known:
        return None
    listed = ", ".join(known[:20]) + (", …" if len(known) > 20 else "")
    return f"{parameter}: unknown {parameter} {value!r} (known: {listed or 'none yet'})"


@router.get("/changes", response={200: ChangesOut, 400: ChangesErrorOut, 401: ChangesErrorOut},
            summary="Level shifts in the components' daily lost shares")
def changes(request: HttpRequest, date_from: date | None = None, date_to: date | None = None,
            component: str = "", team: str = "") -> dict[str, Any]:
    """Detected changes whose day is in ``date_from``..``date_to`` (inclusive UTC days,
    either open), of one ``component`` and one ``team`` (empty: any), newest first, each
    with the rollout that explains it (``rollout_id``; null: unrecorded). Percentages are
    points of the group's wall time, unrounded."""
    for problem in (unknown_name("component", component, component_names()),
                    unknown_name("team", team, calculate(FilterChoicesQuery()).team)):
        if problem:
            raise HttpError(400, problem)
    try:
        query = ChangesQuery(date_from=date_from, date_to=date_to, component=component,
                             team=team)
    except ValueError as exc:
        raise HttpError(400, f"{str(exc).split(' ', 1)[0]}: {exc}") from None
    return {"date_from": date_from.isoformat() if date_from else None,
            "date_to": date_to.isoformat() if date_to else None,
            "filter": {"component": component, "team": team}, **calculate(query).as_api()}
