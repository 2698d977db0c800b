"""A simulated fleet as per-job-day sums, computed by the attribution engine without a database.

Why: calibrating the rollout estimators needs hundreds of impacts on a 20,000-job fleet, and
the truth of each planted rollout needs the same jobs simulated again without it. Storing
and refreshing that fleet through Postgres for each world would take most of an hour; the
engine alone attributes a simulated job in about a millisecond. The rollups the web stores
are held equal to the engine by their own tests (``tests/ettweb/rollups``), so the sums
here are the ones an impact query reads: wall, productive and lost GPU-seconds per
component, per job and UTC day (ETT_SPEC §3.6).

Pure Python and numpy, no Django.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Final

import numpy as np

from collector.schema import validate_event
from ettweb.attribution.components import (
    DEFAULT_PHASE_COMPONENTS,
    PRODUCTIVE,
    UNKNOWN_COMPONENT,
    component_of,
)
from ettweb.attribution.engine import attribute_job, per_day
from ettweb.simulate.events import job_events
from ettweb.simulate.fleet import FleetPlan
from ettweb.simulate.jobs import draw_job, job_rng
from ettweb.simulate.rollout_plan import PlannedRollout

#: Every default component, sorted: the columns of :attr:`FleetDays.lost`.
COMPONENTS: Final = tuple(sorted({*DEFAULT_PHASE_COMPONENTS.values(), UNKNOWN_COMPONENT}))
_COLUMN: Final = {name: i for i, name in enumerate(COMPONENTS)}
Progress = Callable[[int], None]


@dataclass(frozen=True)
class FleetDays:
    """Per-job labels and per-(job, UTC day) GPU-second sums; ``day`` counts from ``first``.

    Rows are sorted by job, then day. ``lost[:, k]`` is component ``COMPONENTS[k]``'s lost
    GPU-seconds; a row's wall = productive + the row's lost sum.
    """

    jobs: tuple[str, ...]
    gpus: np.ndarray  # per job
    models: tuple[str, ...]
    teams: tuple[str, ...]
    clusters: tuple[str, ...]
    first: date
    job: np.ndarray  # per row: index into ``jobs``
    day: np.ndarray  # per row: days since ``first``
    wall: np.ndarray
    productive: np.ndarray
    lost: np.ndarray  # (rows, len(COMPONENTS))

    def day_index(self, day: date) -> int:
        return (day - self.first).days


@dataclass(frozen=True)
class _JobDays:
    """One job's labels and its per-day sums (what a worker process sends back)."""

    index: int
    job: str
    gpus: int
    model: str
    team: str
    cluster: str
    days: list[tuple[date, float, float, list[float]]]  # day, wall, productive, lost


def job_days(plan: FleetPlan, index: int, schedule: Sequence[PlannedRollout]) -> _JobDays:
    """Simulate job ``index`` under ``schedule`` and attribute it (§3), summed per UTC day."""
    spec = draw_job(plan, index, job_rng(plan.seed, index))
    events = [validate_event(event) for event in job_events(plan, index, schedule)]
    days: list[tuple[date, float, float, list[float]]] = []
    if events:
        for day, categories in sorted(per_day(attribute_job(events).segments).items()):
            lost = [0.0] * len(COMPONENTS)
            productive = 0.0
            for category, gpu_s in categories.items():
                if category == PRODUCTIVE:
                    productive += gpu_s
                else:
                    lost[_COLUMN[component_of(category)]] += gpu_s
            days.append((day, productive + sum(lost), productive, lost))
    return _JobDays(index, spec.job, spec.gpus, spec.model, spec.team, spec.cluster, days)


def _chunk(args: tuple[FleetPlan, Sequence[int], Sequence[PlannedRollout]]) -> list[_JobDays]:
    plan, indices, schedule = args
    return [job_days(plan, index, schedule) for index in indices]


def fleet_days(plan: FleetPlan, schedule: Sequence[PlannedRollout],
               indices: Iterable[int] | None = None, *, workers: int = 1,
               progress: Progress | None = None) -> FleetDays:
    """The per-job-day sums of ``indices`` (every job by default) under ``schedule``.

    ``workers`` > 1 attributes chunks of jobs in that many processes; the result does not
    depend on it (each job draws from its own generator).
    """
    wanted = list(range(plan.jobs) if indices is None else indices)
    size = 200
    chunks = [(plan, wanted[i:i + size], tuple(schedule)) for i in range(0, len(wanted), size)]
    results: list[_JobDays] = []
    if workers > 1 and len(chunks) > 1:
        with ProcessPoolExecutor(workers) as pool:
            for part in pool.map(_chunk, chunks):
                results.extend(part)
                if progress:
                    progress(len(part))
    else:
        for chunk in chunks:
            part = _chunk(chunk)
            results.extend(part)
            if progress:
                progress(len(part))
    return _assemble(plan, results)


def _assemble(plan: FleetPlan, results: list[_JobDays]) -> FleetDays:
    first = datetime.fromtimestamp(plan.start_ts, UTC).date()
    rows = [(n, (day - first).days, wall, productive, lost)
            for n, result in enumerate(results) for day, wall, productive, lost in result.days]
    width = len(COMPONENTS)
    return FleetDays(
        jobs=tuple(r.job for r in results),
        gpus=np.array([r.gpus for r in results], dtype=np.int64),
        models=tuple(r.model for r in results), teams=tuple(r.team for r in results),
        clusters=tuple(r.cluster for r in results), first=first,
        job=np.array([r[0] for r in rows], dtype=np.int64),
        day=np.array([r[1] for r in rows], dtype=np.int64),
        wall=np.array([r[2] for r in rows], dtype=np.float64),
        productive=np.array([r[3] for r in rows], dtype=np.float64),
        lost=np.array([r[4] for r in rows], dtype=np.float64).reshape(len(rows), width),
    )
