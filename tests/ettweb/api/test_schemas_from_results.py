"""An API field is declared once, on the query result it comes from.

Why: a field written in the result, its ``as_api()`` and a hand-written schema drifted (a
renamed field documented under its old name, a number documented as a string). Response
schemas built by ``ettweb.api.schemas.schema_of`` take their fields from the result; this
checks they still do, that no result writes its ``as_api()`` by hand (a dict of keys of its
own, which the schema built from its declared fields would not match: ninja cuts what the
schema leaves out, and documents what the dict never sends), and that no hand-written
response schema repeats the fields of a result. Two kinds of hand-written schema are no
repeat: an operation's input (a query-string or body model such as ``FilterParams``: it says
what a client may send, with its limits and defaults, not what a result holds), and the
fields a schema inherits from a built one (an answer that wraps a result's schema in the
request's scope declares only the scope).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import textwrap
import types
import typing
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import pytest
from ninja import Schema

import ettweb.api
import ettweb.queries
from ettweb.api.changes import ChangeOut
from ettweb.api.fleet import OwnerOut, ScopeOut
from ettweb.api.job_list import JobOut, JobsFilterOut
from ettweb.api.reports import ComponentWeekOut, JobLossOut, PeriodOut, RolloutWeekOut
from ettweb.api.schemas import DERIVED, schema_of
from ettweb.api.v1 import api
from ettweb.queries import (
    ComponentsIndexResult,
    DateRange,
    FleetHeadlineResult,
    JobsResult,
    WeeklyReportResult,
)
from ettweb.queries.exposed import as_api, exposed_fields
from ettweb.queries.impact.result import ImpactResult
from ettweb.queries.registry import Query
from ettweb.queries.top_jobs import TopJob
from tests.subclasses import subclasses_in


def api_schemas() -> list[type[Schema]]:
    return subclasses_in(ettweb.api, Schema)


def test_every_built_schema_has_its_results_fields() -> None:
    api_schemas()  # imports every API module, which builds its schemas
    assert len(DERIVED) >= 40
    for schema, result in DERIVED.items():
        assert list(schema.model_fields) == [f.name for f in exposed_fields(result)], schema


def input_schemas() -> set[type[Schema]]:
    """The schemas operations take as query-string, path or body parameters."""
    found: set[type[Schema]] = set()
    for _, router in api._routers:
        for path_operation in router.path_operations.values():
            for operation in path_operation.operations:
                for model in operation.models:
                    found.update(field.annotation for field in model.model_fields.values()
                                 if isinstance(field.annotation, type)
                                 and issubclass(field.annotation, Schema))
    return found


def declared_fields(schema: type[Schema]) -> frozenset[str]:
    """The fields ``schema`` declares itself or inherits from hand-written bases: those a
    built base gives it are the result's own."""
    inherited = {name for base in schema.__mro__[1:] if base in DERIVED
                 for name in base.model_fields}  # type: ignore[attr-defined]
    return frozenset(schema.model_fields) - inherited


def test_input_schemas_are_found() -> None:
    """Guards the exemption: the fleet's filter is an input, and no input is a response."""
    names = {f"{schema.__module__}.{schema.__name__}" for schema in input_schemas()}
    assert {"ettweb.api.fleet.FilterParams", "ettweb.api.rollouts.RolloutIn"} <= names
    assert not input_schemas() & set(DERIVED)


def query_results() -> list[type]:
    """Every result and row the query modules define (dataclasses that are no query), those
    of the packages' modules (``ettweb.queries.impact.result``) included."""
    found = []
    for module in pkgutil.walk_packages(ettweb.queries.__path__, "ettweb.queries."):
        loaded = importlib.import_module(module.name)
        found += [value for value in vars(loaded).values()
                  if isinstance(value, type) and dataclasses.is_dataclass(value)
                  and value.__module__ == loaded.__name__ and not issubclass(value, Query)]
    return found


#: The whole body of an ``as_api()`` that writes what its result declares (a docstring aside).
_DECLARED = ast.dump(ast.parse("return as_api(self)").body[0])


def hand_written_as_api(results: list[type]) -> list[str]:
    """The results whose own ``as_api()`` is anything but ``return as_api(self)``: a dict
    (or a declared one with keys added) written by hand beside the declared fields."""
    found = []
    for result in results:
        method = vars(result).get("as_api")
        if method is None:
            continue
        [definition] = ast.parse(textwrap.dedent(inspect.getsource(method))).body
        assert isinstance(definition, ast.FunctionDef)
        body = definition.body[1:] if ast.get_docstring(definition) else definition.body
        if [ast.dump(statement) for statement in body] != [_DECLARED]:
            found.append(f"{result.__module__}.{result.__name__}.as_api() writes its answer "
                         "by hand: declare its fields (ettweb.queries.exposed)")
    return found


def test_no_result_writes_its_answer_by_hand() -> None:
    results = query_results()
    # Guards the walk: it reaches results of plain modules and of the packages' alike.
    assert {FleetHeadlineResult, ComponentsIndexResult, JobsResult, WeeklyReportResult,
            ImpactResult} <= set(results)
    found = hand_written_as_api(results)
    assert not found, "\n".join(found)


def restated(schema: type[Schema], results: list[type]) -> list[str]:
    """The results whose every exposed field ``schema`` declares itself (same name, same
    type), however few: a wrapper that restates a result instead of building it from it."""
    declared = declared_fields(schema)
    found = []
    for result in results:
        fields = {f.name: f.hint for f in exposed_fields(result)}
        same = {name for name, hint in fields.items() if name in declared
                and shape(schema.model_fields[name].annotation) == shape(hint)}
        if fields and same == set(fields):
            found.append(f"{schema.__module__}.{schema.__name__} restates "
                         f"{result.__name__}'s {sorted(same)}: build it with schema_of")
    return found


def shape(hint: Any) -> Any:
    """What a client sees of a type, for a result's hint and a schema's alike: a result or
    a schema as the names of its fields (so a hand-written copy of a nested result's schema
    is the same), days and times as strings, tuples as lists, ``Literal``s as their type."""
    if isinstance(hint, type) and issubclass(hint, Schema):
        return tuple(hint.model_fields)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return tuple(f.name for f in exposed_fields(hint))
    if hint in (date, datetime):
        return str
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return type(args[0])
    if origin in (types.UnionType, typing.Union):
        return ("|", frozenset(shape(arg) for arg in args))
    if origin in (list, tuple):
        return ("[]", frozenset(shape(arg) for arg in args if arg is not Ellipsis))
    if origin is dict:
        return ("{}", shape(args[0]), shape(args[1]))
    return hint


def hand_written_responses() -> list[type[Schema]]:
    inputs = input_schemas()
    return [schema for schema in api_schemas() if schema not in DERIVED and schema not in inputs]


def test_no_hand_written_schema_repeats_a_results_fields() -> None:
    results = query_results()
    repeats = [line for schema in hand_written_responses()
               for line in restated(schema, results)]
    assert not repeats, "\n".join(repeats)


class _GroupCopyOut(Schema):
    """GroupImpact's seven fields written out again (the impact answer's groups once were)."""

    jobs_before: int
    jobs_after: int
    before_ett_pct: float | None
    after_ett_pct: float | None
    change_pts: float | None
    change_rel: float | None
    ci95_pts: list[float] | None


class _TopJobsCopyOut(Schema):
    """A wrapper restating a result of one field (TopJobsResult's ``jobs``) beside its own."""

    date_from: str
    jobs: list[schema_of(TopJob)]  # type: ignore[valid-type]


class _LossCopyOut(Schema):
    component: str
    gpu_s: float
    categories: dict[str, float]


class _LostCopyOut(Schema):
    """Nested: LostByComponentResult restated around a hand-written copy of its rows."""

    lost_gpu_s: float
    components: list[_LossCopyOut]


class _NotACopyOut(Schema):
    """Shares GroupImpact's names, not its types: no restatement."""

    jobs_before: str
    jobs_after: str
    before_ett_pct: str
    after_ett_pct: str
    change_pts: str
    change_rel: str
    ci95_pts: str


def test_the_rule_can_fail() -> None:
    """Hand-written copies the rule must catch: a whole result, one of a single field inside
    a wrapper, and one whose rows are a hand-written copy too; and a lookalike it must not."""
    results = query_results()
    assert any(" GroupImpact's" in line for line in restated(_GroupCopyOut, results))
    assert any(" TopJobsResult's" in line for line in restated(_TopJobsCopyOut, results))
    assert any(" LostByComponentResult's" in line for line in restated(_LostCopyOut, results))
    assert any(" ComponentLoss's" in line for line in restated(_LossCopyOut, results))
    assert not restated(_NotACopyOut, results)


@dataclass(frozen=True)
class _HandWrittenHeadline:
    """A result whose ``as_api()`` writes a range under names it does not declare."""

    week: DateRange
    week_ett_pct: float | None

    def as_api(self) -> dict[str, Any]:
        return {"week_from": self.week.date_from.isoformat(),
                "week_to": self.week.date_to.isoformat(), "week_ett_pct": self.week_ett_pct}


@dataclass(frozen=True)
class _AddsAKey:
    """A result whose ``as_api()`` adds a key by hand to the ones it declares."""

    week: DateRange

    def as_api(self) -> dict[str, Any]:
        """With the week's first day (a key no schema built from this result has)."""
        return {**as_api(self), "days": [self.week.date_from.isoformat()]}


@dataclass(frozen=True)
class _Declared:
    """A result whose ``as_api()`` writes what it declares."""

    week: DateRange

    def as_api(self) -> dict[str, Any]:
        """Its declared fields."""
        return as_api(self)


def test_the_as_api_rule_can_fail() -> None:
    found = hand_written_as_api([_HandWrittenHeadline, _AddsAKey, _Declared, TopJob])
    assert [line.split(".as_api()")[0].rsplit(".", 1)[-1] for line in found] == [
        "_HandWrittenHeadline", "_AddsAKey"]


class _HeadlineCopyOut(ScopeOut):
    """The fleet headline's answer as it was written by hand."""

    interval: str
    week_from: str
    week_to: str
    week_ett_pct: float | None
    week_change_pts: float | None
    week_change_rel_pct: float | None
    lost_gpu_hours: float
    gpus_lost: float
    failures: int
    wall_gpu_hours: float
    failures_per_1k_gpu_hours: float | None
    trend_change_pts: float | None


class _ComponentRowCopyOut(Schema):
    name: str
    owner_team: str
    owners: list[OwnerOut]
    lost_gpu_s: float
    lost_share_pts: float
    share_of_fleet_lost_pct: float
    rollouts: int


class _ComponentsCopyOut(ScopeOut):
    """The components answer as it was written by hand, its rows a hand-written copy too."""

    interval: str
    fleet_wall_gpu_s: float
    fleet_lost_gpu_s: float
    periods: list[str]
    lost_share_pts: dict[str, list[float]]
    components: list[_ComponentRowCopyOut]


class _JobsCopyOut(Schema):
    """The jobs answer as it was written by hand."""

    date_from: str | None
    date_to: str | None
    filter: JobsFilterOut
    sort: str
    page_size: int
    total: int
    page: int
    pages: int
    wall_gpu_s: float
    productive_gpu_s: float
    ett_pct: float
    failures: int
    lost_by_component_gpu_s: dict[str, float]
    jobs: list[JobOut]
    stale_jobs: int
    stale_after_s: float


class _HistoryWeekCopyOut(Schema):
    week: str
    ett_pct: float | None


class _WeeklyReportCopyOut(Schema):
    """The weekly report's answer as it was written by hand."""

    week: str
    days: list[str]
    subject: str
    this: PeriodOut
    before: PeriodOut
    change_pts: float | None
    change_rel: float | None
    components: list[ComponentWeekOut]
    top_jobs: list[JobLossOut]
    rollouts: list[RolloutWeekOut]
    history: list[_HistoryWeekCopyOut]
    unrecorded_changes: list[ChangeOut]


@pytest.mark.parametrize(("schema", "result"), [
    (_HeadlineCopyOut, "FleetHeadlineResult"), (_ComponentsCopyOut, "ComponentsIndexResult"),
    (_ComponentRowCopyOut, "ComponentRow"), (_JobsCopyOut, "JobsResult"),
    (_WeeklyReportCopyOut, "WeeklyReportResult"), (_HistoryWeekCopyOut, "HistoryWeek")])
def test_the_last_hand_written_answers_are_caught_if_written_again(
        schema: type[Schema], result: str) -> None:
    assert any(f" {result}'s" in line for line in restated(schema, query_results()))
