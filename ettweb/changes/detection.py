"""Detection over the stored rollups: every component's daily lost share, for the fleet and
for each team, through :func:`ettweb.statistics.level_shifts.find_shifts`, stored as
:class:`Change`.

A component's lost share on a day is ETT_SPEC §6's: 100 x its lost GPU-seconds / the wall
GPU-seconds of that day and group (the fleet, or one team's jobs), categories folded into
components by the editable phase map as every page folds them. The fleet's sums come from
``FleetDayRollup`` and each team's from ``LabelDayRollup`` (a few grouped rows a day), never
from the per-job rows, so a run over a year of a 20,000-job fleet is two small reads and a
few milliseconds of numpy per series.

Only complete UTC days are read: today's rows are still filling (a day at 10:00 holds the
jobs that ran since midnight), and a change can only be seen on days that are over.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Final

import numpy as np
from django.db import transaction
from django.db.models import Max, Min, Sum

from ettweb.attribution.components import PRODUCTIVE, component_of
from ettweb.changes.models import Change
from ettweb.queries.base import DateRange, phase_components
from ettweb.rollups.models import FleetDayRollup, LabelDayRollup
from ettweb.statistics.level_shifts import find_shifts

#: Days of history each run reads (complete UTC days ending yesterday): a year, so a page or
#: a report of any range up to a year finds its changes, each judged with a year of context.
DETECT_DAYS: Final = 366
#: Teams with a series of their own, the largest by wall GPU-seconds first: each team adds a
#: series per component, and a fleet of hundreds of tiny teams would make a run slow for
#: series too thin to say anything.
MAX_TEAMS: Final = 100

#: (day, category) -> GPU-seconds of one group.
DaySums = dict[tuple[date, str], float]


@dataclass(frozen=True)
class Series:
    """One component's daily lost share in one group (``team`` None: the fleet), in points,
    from ``first``: NaN on days the group had no wall time."""

    component: str
    team: str | None
    first: date
    shares: np.ndarray


@dataclass(frozen=True)
class Found:
    """A level shift found in one series, as it will be stored."""

    component: str
    team: str | None
    day: date
    before_lost_pct: float
    after_lost_pct: float


@dataclass(frozen=True)
class DetectionStats:
    """What one run did: the days read, the series searched, the changes stored."""

    days: DateRange | None
    series: int
    changes: int
    seconds: float

    def line(self) -> str:
        if self.days is None:
            return "no complete day of rollups yet: nothing to search"
        return (f"{self.changes} change{'s' if self.changes != 1 else ''} in {self.series} "
                f"series ({self.days.date_from} to {self.days.date_to}), "
                f"{self.seconds:.1f} s")


def detection_range(today: date | None = None) -> DateRange | None:
    """The complete UTC days a run reads: the last :data:`DETECT_DAYS` with data before
    ``today`` (UTC), or None when there is none."""
    today = today or datetime.now(UTC).date()
    bounds = FleetDayRollup.objects.filter(day__lt=today).aggregate(first=Min("day"),
                                                                     last=Max("day"))
    if bounds["last"] is None:
        return None
    first = max(bounds["first"], bounds["last"] - timedelta(days=DETECT_DAYS - 1))
    return DateRange(first, bounds["last"])


def lost_share_series(days: DateRange) -> list[Series]:
    """Every component's daily lost share over ``days``, for the fleet and each of the
    :data:`MAX_TEAMS` largest teams (components that lost nothing there left out)."""
    mapping = phase_components()
    fleet: DaySums = {(day, category): float(gpu_s) for day, category, gpu_s in
                      FleetDayRollup.objects.filter(day__gte=days.date_from,
                                                    day__lte=days.date_to)
                      .values_list("day", "category", "gpu_seconds")}
    series = _group_series(None, fleet, days, mapping)
    for team, sums in _team_sums(days).items():
        series += _group_series(team, sums, days, mapping)
    return series


def _team_sums(days: DateRange) -> dict[str, DaySums]:
    """Each team's GPU-seconds per (day, category), the largest teams only."""
    rows = (LabelDayRollup.objects.filter(day__gte=days.date_from, day__lte=days.date_to)
            .exclude(team="").values_list("day", "team", "category")
            .annotate(gpu_s=Sum("gpu_seconds")).order_by())
    sums: dict[str, DaySums] = defaultdict(dict)
    for day, team, category, gpu_s in rows:
        sums[team][(day, category)] = float(gpu_s or 0.0)
    largest = sorted(sums, key=lambda team: (-sum(sums[team].values()), team))[:MAX_TEAMS]
    return {team: sums[team] for team in sorted(largest)}


def _group_series(team: str | None, sums: DaySums, days: DateRange,
                  mapping: Mapping[str, str]) -> list[Series]:
    """One group's lost share per component per day (NaN without wall time)."""
    wall = np.zeros(days.days)
    lost: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(days.days))
    for (day, category), gpu_s in sums.items():
        index = (day - days.date_from).days
        wall[index] += gpu_s
        if category != PRODUCTIVE:
            lost[component_of(category, mapping)][index] += gpu_s
    with np.errstate(divide="ignore", invalid="ignore"):
        shares = {name: np.where(wall > 0.0, 100.0 * values / wall, np.nan)
                  for name, values in lost.items() if values.any()}
    return [Series(name, team, days.date_from, shares[name]) for name in sorted(shares)]


def shifts_of(series: Iterable[Series]) -> list[Found]:
    """The level shifts of each series (:func:`find_shifts`), dated."""
    return [Found(s.component, s.team, s.first + timedelta(days=shift.index),
                  shift.before_pct, shift.after_pct)
            for s in series for shift in find_shifts(s.shares)]


@transaction.atomic
def store_changes(found: list[Found], now: datetime) -> int:
    """Replace the stored changes with ``found``; a change found before (same component,
    team and day) keeps the time it was first detected."""
    first_seen = {(c.component, c.team, c.day): c.detected_at
                  for c in Change.objects.select_for_update()}
    Change.objects.all().delete()
    Change.objects.bulk_create([
        Change(component=f.component, team=f.team, day=f.day,
               before_lost_pct=f.before_lost_pct, after_lost_pct=f.after_lost_pct,
               detected_at=first_seen.get((f.component, f.team, f.day), now))
        for f in found])
    return len(found)


def detect_changes(today: date | None = None) -> DetectionStats:
    """One run: read the complete days' rollups, search every series, replace the stored
    changes (with no complete day yet, the stored ones are left as they are)."""
    began = time.perf_counter()
    days = detection_range(today)
    if days is None:
        return DetectionStats(None, 0, 0, time.perf_counter() - began)
    series = lost_share_series(days)
    stored = store_changes(shifts_of(series), datetime.now(UTC))
    return DetectionStats(days, len(series), stored, time.perf_counter() - began)
