"""An API field is declared once, on the query result it comes from.

Why: a field written in the result, its ``as_api()`` and a hand-written schema drifted (a
renamed field documented under its old name, a number documented as a string). Response
schemas built by ``ettweb.api.schemas.schema_of`` take their fields from the result; this
checks they still do, and that no hand-written schema repeats the fields of a result that
has one built.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

from ninja import Schema

import ettweb.api
import ettweb.queries
from ettweb.api.schemas import DERIVED
from ettweb.queries.exposed import exposed_fields

#: Hand-written schemas that still repeat a result's fields, until they are built from it
#: too (issue 29): this list only shrinks.
NOT_YET_DERIVED = {
    "ettweb.api.changes.ChangeOut",
    "ettweb.api.collectors.CollectorOut",
    "ettweb.api.collectors.CollectorsOut",
    "ettweb.api.collectors.RejectedOut",
    "ettweb.api.fleet.ComponentOut",
    "ettweb.api.fleet.ComponentRolloutOut",
    "ettweb.api.fleet.FilterOut",
    "ettweb.api.fleet.FilterParams",
    "ettweb.api.fleet.LostTrendOut",
    "ettweb.api.fleet.MarkerOut",
    "ettweb.api.fleet.PreviousTrendOut",
    "ettweb.api.fleet.RolloutsOutsideOut",
    "ettweb.api.fleet.TrendBodyOut",
    "ettweb.api.fleet.TrendOut",
    "ettweb.api.job_detail.JobComputingOut",
    "ettweb.api.job_detail.JobDetailOut",
    "ettweb.api.job_detail.JobRecoveryOut",
    "ettweb.api.job_detail.JobTimelineOut",
    "ettweb.api.job_list.JobOut",
    "ettweb.api.job_list.JobsFilterOut",
    "ettweb.api.reports.ComponentWeekOut",
    "ettweb.api.reports.FleetSummaryOut",
    "ettweb.api.reports.PeriodOut",
    "ettweb.api.reports.RolloutWeekOut",
    "ettweb.api.rollouts.GroupOut",
    "ettweb.api.rollouts.RolloutOut",
    "ettweb.api.rollouts.RolloutRefOut",
}


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
    assert len(DERIVED) >= 8
    for schema, result in DERIVED.items():
        assert list(schema.model_fields) == [f.name for f in exposed_fields(result)], schema


def query_results() -> list[type]:
    """Every dataclass the query modules define (queries, results and their rows)."""
    found = []
    for module in pkgutil.iter_modules(ettweb.queries.__path__):
        loaded = importlib.import_module(f"ettweb.queries.{module.name}")
        found += [value for value in vars(loaded).values()
                  if isinstance(value, type) and dataclasses.is_dataclass(value)
                  and value.__module__ == loaded.__name__]
    return found


def test_no_hand_written_schema_repeats_a_results_fields() -> None:
    api_schemas()
    results = {frozenset(f.name for f in exposed_fields(result)): result
               for result in query_results()}
    repeats = []
    for schema in api_schemas():
        if schema in DERIVED or f"{schema.__module__}.{schema.__name__}" in NOT_YET_DERIVED:
            continue
        names = frozenset(schema.model_fields)
        for fields, result in results.items():
            if len(fields) >= 3 and fields <= names:
                repeats.append(f"{schema.__module__}.{schema.__name__} repeats "
                               f"{result.__name__}'s fields: build it with schema_of")
    assert not repeats, "\n".join(repeats)
