"""An API field is declared once, on the query result it comes from.

Why: a field written in the result, its ``as_api()`` and a hand-written schema drifted (a
renamed field documented under its old name, a number documented as a string). Response
schemas built by ``ettweb.api.schemas.schema_of`` take their fields from the result; this
checks they still do, and that no hand-written response schema repeats the fields of a
result. Two kinds of hand-written schema are no repeat: an operation's input (a query-string
or body model such as ``FilterParams``: it says what a client may send, with its limits and
defaults, not what a result holds), and the fields a schema inherits from a built one (an
answer that wraps a result's schema in the request's scope declares only the scope).
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import types
import typing
from datetime import date, datetime
from typing import Any

from ninja import Schema

import ettweb.api
import ettweb.queries
from ettweb.api.schemas import DERIVED, schema_of
from ettweb.api.v1 import api
from ettweb.queries.exposed import exposed_fields
from ettweb.queries.registry import Query
from ettweb.queries.top_jobs import TopJob


def api_schemas() -> list[type[Schema]]:
    for module in pkgutil.iter_modules(ettweb.api.__path__):
        importlib.import_module(f"ettweb.api.{module.name}")
    found: list[type[Schema]] = []
    pending = list(Schema.__subclasses__())
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return [cls for cls in found if cls.__module__.startswith("ettweb.api")]


def test_every_built_schema_has_its_results_fields() -> None:
    api_schemas()  # imports every API module, which builds its schemas
    assert len(DERIVED) >= 34
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
