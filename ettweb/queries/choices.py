"""The values the model, team and cluster filters can take."""

from __future__ import annotations

from dataclasses import dataclass

from ettweb.queries.base import (
    LABELS,
)
from ettweb.queries.registry import Query, runner_for
from ettweb.rollups.models import (
    JobRollup,
)


@dataclass(frozen=True)
class FilterChoicesQuery(Query["FilterChoicesResult"]):
    """The values the model, team and cluster filters can take: every label a job has."""


@dataclass(frozen=True)
class FilterChoicesResult:
    model: tuple[str, ...]
    team: tuple[str, ...]
    cluster: tuple[str, ...]


@runner_for(FilterChoicesQuery)
class FilterChoicesQueryRunner:
    """Distinct labels of the per-job rollups (a fleet has tens of each, not thousands)."""

    def __init__(self, query: FilterChoicesQuery) -> None:
        self.query = query

    def calculate(self) -> FilterChoicesResult:
        # One pass over the job rollups for every label at once (their combinations are
        # few), rather than one DISTINCT sort per label.
        combos = list(JobRollup.objects.values_list(*LABELS).distinct().order_by())
        values = {name: tuple(sorted({combo[i] for combo in combos if combo[i]}))
                  for i, name in enumerate(LABELS)}
        return FilterChoicesResult(**values)
