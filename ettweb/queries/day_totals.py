"""The fleet's GPU-seconds per (UTC day, category): the one read of the per-day sums that
the ungrouped trend, lost time by component and the headline tiles are folded from."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date

from django.db.models import FloatField, Sum
from django.db.models.functions import Cast

from ettweb.queries.base import (
    ALL,
    ANY_JOB,
    DateRange,
    JobFilter,
    aggregating,
    category_rows,
)
from ettweb.queries.registry import Query, runner_for


@dataclass(frozen=True)
class DayTotalsQuery(Query["DayTotalsResult"]):
    """GPU-seconds per (UTC day, category) of the jobs ``jobs`` keeps over a range: the one
    read of the per-day sums that the ungrouped trend, the lost time by component, the lost
    time over time and the headline tiles are all folded from.

    Why one query under several: the overview asks all of them for the same days and
    filter; a pass over the range's day rows each would read the same rows several times.
    Inside one request
    (``ettweb.queries.memoized``) this runs once and the folds cost microseconds. A grouped
    trend reads its own sums (``ettweb.queries.trend``): it needs no category.
    """

    range: DateRange
    jobs: JobFilter = ANY_JOB


@dataclass(frozen=True)
class DayTotalsResult:
    """``cells[(day, group, category)]`` = GPU-seconds; ``group`` is always ``ALL`` (the
    key has the trend's shape, so one fold serves grouped and ungrouped sums)."""

    cells: dict[tuple[date, str, str], float]

    def within(self, days: DateRange) -> DayTotalsResult:
        """The cells of the days inside ``days`` (a sub-range of this one's)."""
        return DayTotalsResult({key: value for key, value in self.cells.items()
                                if days.date_from <= key[0] <= days.date_to})


@runner_for(DayTotalsQuery)
class DayTotalsQueryRunner:
    def __init__(self, query: DayTotalsQuery) -> None:
        self.query = query

    def calculate(self) -> DayTotalsResult:
        q = self.query
        # Summed as float8: the stored sums are exact numerics, but adding them for a chart
        # needs no exactness and numeric addition costs 2-3x. Read as tuples: the ORM's row
        # dicts cost more than the read.
        with aggregating():
            rows = list(category_rows(q.range, q.jobs).values_list("day", "category")
                        .annotate(gpu_s=Sum(Cast("gpu_seconds", FloatField()))).order_by())
        cells: dict[tuple[date, str, str], float] = defaultdict(float)
        for day, category, gpu_s in rows:
            cells[(day, ALL, category)] += gpu_s or 0.0
        return DayTotalsResult(dict(cells))


def read_day_totals(days: DateRange, jobs: JobFilter) -> DayTotalsResult:
    from ettweb.queries import calculate  # the package's memo: shared by the page's queries

    return calculate(DayTotalsQuery(days, jobs))
