"""The fleet's running totals for ``/metrics``: what Prometheus turns into ETT% over time.

Why totals and not percentages: a scraper computes any window itself, ``ETT% =
rate(ett_productive_gpu_seconds_total) / rate(ett_wall_gpu_seconds_total)``, and sums the
series it wants; a percentage cannot be summed or rated. The totals are the rollups summed
over every day (read from each job's whole-life rollup: the same sums), so ``/metrics`` and
the API agree for the same scope (the API's fleet summary over all days has the same wall,
productive, lost and failures). Labels are of low
cardinality only: team, cluster and owning component, never a job.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Final

from django.db.models import Count, Min, Sum

from collector.schema import FAILED_STATUSES
from ettweb.attribution.components import PRODUCTIVE, component_of
from ettweb.queries.base import phase_components
from ettweb.queries.collectors import CollectorsQuery, CollectorsQueryRunner
from ettweb.queries.registry import Query, runner_for
from ettweb.rollups.models import (
    AttemptRollup,
    DirtyJob,
    JobRollup,
    ParkedRefresh,
    ScopeTotalRollup,
)

#: The label value of a job that never said its team or cluster.
NONE: Final = "(none)"


@dataclass(frozen=True)
class FleetTotalsQuery(Query["FleetTotalsResult"]):
    """Every day's rollups summed, per team and cluster (lost time per component too), with
    the pipeline's own health: pending rollup refreshes and the collectors."""


@dataclass(frozen=True)
class ScopeTotals:
    team: str
    cluster: str
    wall_gpu_s: float
    productive_gpu_s: float
    failures: int
    lost_gpu_s: dict[str, float]  # per owning component, zeros left out


@dataclass(frozen=True)
class FleetTotalsResult:
    scopes: tuple[ScopeTotals, ...]
    pending_jobs: int
    oldest_pending_s: float
    #: Jobs whose refresh is parked (``rollups.parking``): left out of the two above, which
    #: measure the refresh pipeline's lag, not one job waiting for an admin.
    parked_jobs: int
    collectors_reporting: int
    collectors_silent: int
    collectors_rejected: int
    backlog_events: int
    dropped_events: int
    corrupted_records: int
    quarantined_lines: int

    @property
    def wall_gpu_s(self) -> float:
        return sum(s.wall_gpu_s for s in self.scopes)

    @property
    def productive_gpu_s(self) -> float:
        return sum(s.productive_gpu_s for s in self.scopes)

    @property
    def failures(self) -> int:
        return sum(s.failures for s in self.scopes)


def _lost_by_scope_and_category() -> list[tuple[str, str, str, float]]:
    """(team, cluster, category, lost GPU-seconds) over every job's whole life, from the
    all-time sums per scope (``ScopeTotalRollup``: the day rows summed per team, cluster and
    category, kept with them): a few hundred rows, however long the history."""
    rows = (ScopeTotalRollup.objects.exclude(category=PRODUCTIVE)
            .values_list("team", "cluster", "category", "gpu_seconds"))
    return [(team, cluster, category, float(gpu_s or 0.0))
            for team, cluster, category, gpu_s in rows]


@runner_for(FleetTotalsQuery)
class FleetTotalsQueryRunner:
    def __init__(self, query: FleetTotalsQuery) -> None:
        self.query = query

    def calculate(self) -> FleetTotalsResult:
        mapping = phase_components()
        wall: dict[tuple[str, str], float] = defaultdict(float)
        productive: dict[tuple[str, str], float] = defaultdict(float)
        lost: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        # Every day's rows summed are each job's whole-life totals, which the job rollup
        # holds: 20,000 rows to sum at fleet scale rather than millions of day rows.
        for row in (JobRollup.objects.values("team", "cluster")
                    .annotate(wall=Sum("wall_gpu_s"), productive=Sum("productive_gpu_s"))
                    .order_by()):
            scope = (row["team"] or NONE, row["cluster"] or NONE)
            wall[scope] += float(row["wall"] or 0.0)
            productive[scope] += float(row["productive"] or 0.0)
        for team, cluster, category, gpu_s in _lost_by_scope_and_category():
            if gpu_s:
                lost[(team or NONE, cluster or NONE)][component_of(category, mapping)] += gpu_s
        failures = {(r["job__team"] or NONE, r["job__cluster"] or NONE): int(r["n"]) for r in
                    AttemptRollup.objects.filter(status__in=FAILED_STATUSES)
                    .values("job__team", "job__cluster").annotate(n=Count("id"))}
        scopes = tuple(
            ScopeTotals(team, cluster, wall[(team, cluster)], productive[(team, cluster)],
                        failures.get((team, cluster), 0),
                        {c: s for c, s in lost[(team, cluster)].items() if s})
            for team, cluster in sorted(set(wall) | set(failures)))
        return self._with_pipeline(scopes)

    def _with_pipeline(self, scopes: tuple[ScopeTotals, ...]) -> FleetTotalsResult:
        parked = ParkedRefresh.objects.filter(parked_at__isnull=False).values("job")
        pending = (DirtyJob.objects.exclude(job__in=parked)
                   .aggregate(n=Count("job"), oldest=Min("marked_at")))
        collectors = CollectorsQueryRunner(CollectorsQuery(rejected=1)).calculate()
        return FleetTotalsResult(
            scopes=scopes, pending_jobs=int(pending["n"]),
            oldest_pending_s=(max(0.0, time.time() - pending["oldest"])
                              if pending["oldest"] is not None else 0.0),
            parked_jobs=parked.count(),
            collectors_reporting=(len(collectors.collectors) - collectors.silent
                                  - collectors.rejected_collectors),
            collectors_silent=collectors.silent,
            collectors_rejected=collectors.rejected_collectors,
            backlog_events=collectors.backlog_events,
            dropped_events=collectors.dropped_events,
            corrupted_records=collectors.corrupted_records,
            quarantined_lines=collectors.rejected_lines)  # every source's: the same sum

