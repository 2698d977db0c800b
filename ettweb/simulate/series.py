"""A simulated fleet's daily lost share per component, for the fleet and for each team.

The series change detection searches (ETT_SPEC §6.3): ``ettweb.changes.detection`` reads them
from the rollups, the calibration (``bench.calibration``) from :class:`FleetDays`, so the
detector is held to its targets on the numbers it sees in production. A day's share is
100 x the component's lost GPU-seconds / the wall GPU-seconds of that day and group; NaN on
a day the group had no wall time.

The sums are kept apart from the shares so a counterfactual (a stage's treated jobs
simulated without it) can be swapped in by subtracting and adding sums, never shares.
Pure numpy, no Django.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ettweb.simulate.days import COMPONENTS, FleetDays

#: A series' key: (component, team); team None is the fleet's own series.
SeriesKey = tuple[str, str | None]


@dataclass(frozen=True)
class DaySums:
    """GPU-seconds per group and day: ``groups[0]`` is the fleet (None), then each team;
    ``wall`` is (groups, days), ``lost`` (groups, days, components)."""

    groups: tuple[str | None, ...]
    wall: np.ndarray
    lost: np.ndarray

    def __sub__(self, other: DaySums) -> DaySums:
        return DaySums(self.groups, self.wall - other.wall, self.lost - other.lost)

    def __add__(self, other: DaySums) -> DaySums:
        return DaySums(self.groups, self.wall + other.wall, self.lost + other.lost)


def day_sums(days: FleetDays, n_days: int, teams: tuple[str, ...] | None = None,
             jobs: np.ndarray | None = None) -> DaySums:
    """The sums of ``days``' rows (of ``jobs`` only, indices into ``days.jobs``, when
    given) over days 0..``n_days`` - 1, for the fleet and each of ``teams`` (default: the
    teams of ``days``, sorted)."""
    teams = tuple(sorted(set(days.teams))) if teams is None else teams
    groups: tuple[str | None, ...] = (None, *teams)
    position = {team: n + 1 for n, team in enumerate(teams)}
    rows = (days.day >= 0) & (days.day < n_days)
    if jobs is not None:
        rows &= np.isin(days.job, jobs)
    team_of_job = np.array([position.get(team, -1) for team in days.teams], dtype=np.int64)
    wall = np.zeros((len(groups), n_days))
    lost = np.zeros((len(groups), n_days, len(COMPONENTS)))
    day, group = days.day[rows], team_of_job[days.job[rows]]
    for target in (np.zeros_like(group), group):
        keep = target >= 0
        np.add.at(wall, (target[keep], day[keep]), days.wall[rows][keep])
        np.add.at(lost, (target[keep], day[keep]), days.lost[rows][keep])
    return DaySums(groups, wall, lost)


def lost_shares(sums: DaySums) -> dict[SeriesKey, np.ndarray]:
    """Every component's daily lost share per group, in points (components that lost
    nothing in a group left out, as the beat task leaves them out)."""
    out: dict[SeriesKey, np.ndarray] = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        for g, team in enumerate(sums.groups):
            wall = sums.wall[g]
            for k, component in enumerate(COMPONENTS):
                lost = sums.lost[g, :, k]
                if lost.any():
                    out[(component, team)] = np.where(wall > 0.0, 100.0 * lost / wall, np.nan)
    return out
