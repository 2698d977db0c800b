"""``/api/v1/rollouts…``: deploy pipelines record what they shipped and read its impact.

A deploy job creates a rollout right after it ships a change (``POST /api/v1/rollouts``) and
can read its measured impact later (``GET /api/v1/rollouts/<id>/impact?window=14``). The
impact comes from the same query runner as the rollout page, so the two always agree.
Recording asks the caller's role (``ettweb.api.auth.ROLLOUT_WRITERS``) before the body is
read, and the component once it is known; reading is open to every role.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias

from django.http import HttpRequest
from ninja import Router, Schema, Status
from ninja.errors import HttpError
from pydantic import ConfigDict

from ettweb.access.roles import can_edit_component, refusal
from ettweb.api.auth import ROLLOUT_WRITERS
from ettweb.api.errors import ErrorOut
from ettweb.api.schemas import schema_of
from ettweb.components.known import known_components
from ettweb.queries import ImpactQuery, calculate
from ettweb.queries.exposed import as_api
from ettweb.queries.impact import (
    DEFAULT_WINDOW_DAYS,
    ComponentShift,
    GroupImpact,
    ImpactResult,
    RolloutInfo,
)
from ettweb.queries.markers import RolloutRecord
from ettweb.rollouts.models import Rollout
from ettweb.rollouts.validation import clean_rollout, save_rollout

#: No tags and the operation ids these endpoints had when ``ettweb.api.v1`` held them, so
#: clients generated from the OpenAPI document keep their names.
router = Router()

MAX_LIST = 500


class RolloutIn(Schema):
    """What a deploy pipeline sends; unknown fields are refused, not ignored."""

    model_config = ConfigDict(extra="forbid")

    name: str
    component: str
    at: datetime
    scope: dict[str, Any]
    notes: str | None = None
    link: str | None = None


#: The schemas built from the results they answer (``ettweb.api.schemas``), under the names
#: clients know: a stored rollout, and its impact with the rollout it is of, the treated and
#: control groups and each component's shift.
if TYPE_CHECKING:  # built at run time, so mypy sees only that they are schemas
    RolloutOut: TypeAlias = Schema
    ImpactOut: TypeAlias = Schema
else:
    RolloutOut = schema_of(RolloutRecord, "RolloutOut")
    schema_of(RolloutInfo, "RolloutRefOut")
    schema_of(GroupImpact, "GroupOut")
    schema_of(ComponentShift, "ComponentShiftOut")
    ImpactOut = schema_of(ImpactResult, "ImpactOut")


def _rollout(rollout_id: int) -> Rollout:
    rollout = Rollout.objects.select_related("created_by").filter(pk=rollout_id).first()
    if rollout is None:
        raise HttpError(404, f"no rollout {rollout_id}")
    return rollout


@router.post("/rollouts", response={201: RolloutOut, 400: ErrorOut, 401: ErrorOut,
                                     403: ErrorOut}, summary="Record a rollout",
             auth=ROLLOUT_WRITERS, operation_id="ettweb_api_v1_create_rollout")
def create_rollout(request: HttpRequest, payload: RolloutIn) -> Status[dict[str, Any]]:
    """Store one rollout (ETT_SPEC §6); answers 201 with it, ``id`` included. The caller
    (the token's user) must own the rollout's component or be an admin: 403 otherwise."""
    fields = clean_rollout(payload.model_dump(), known_components())
    if not can_edit_component(request.user, fields.component):
        raise HttpError(403, refusal(request.user, f"record a rollout of {fields.component}"))
    rollout = save_rollout(fields, created_by=request.user)
    return Status(201, as_api(RolloutRecord.of(rollout)))


@router.get("/rollouts", response={200: list[RolloutOut], 400: ErrorOut, 401: ErrorOut},
            summary="List rollouts, newest first", operation_id="ettweb_api_v1_list_rollouts")
def list_rollouts(request: HttpRequest, component: str | None = None,
                  limit: int = 100) -> list[dict[str, Any]]:
    if not 1 <= limit <= MAX_LIST:
        raise HttpError(400, f"limit: must be between 1 and {MAX_LIST}, not {limit}")
    rows = Rollout.objects.select_related("created_by").order_by("-at", "-id")
    if component:
        rows = rows.filter(component=component)
    return [as_api(RolloutRecord.of(rollout)) for rollout in rows[:limit]]


@router.get("/rollouts/{rollout_id}",
            response={200: RolloutOut, 401: ErrorOut, 404: ErrorOut},
            summary="One rollout", operation_id="ettweb_api_v1_get_rollout")
def get_rollout(request: HttpRequest, rollout_id: int) -> dict[str, Any]:
    return as_api(RolloutRecord.of(_rollout(rollout_id)))


@router.get("/rollouts/{rollout_id}/impact",
            response={200: ImpactOut, 400: ErrorOut, 401: ErrorOut, 404: ErrorOut},
            summary="A rollout's measured impact (ETT_SPEC §6)",
            operation_id="ettweb_api_v1_get_impact")
def get_impact(request: HttpRequest, rollout_id: int,
               window: int = DEFAULT_WINDOW_DAYS) -> dict[str, Any]:
    """ETT% before and after over ``window`` UTC days (1-90), treated vs control, DiD, the
    bootstrap interval and the verdict; percentages are not rounded."""
    query = ImpactQuery(rollout_id, window)  # WindowError -> 400 before any read
    result = calculate(query)
    if result is None:
        raise HttpError(404, f"no rollout {rollout_id}")
    return result.as_api()
