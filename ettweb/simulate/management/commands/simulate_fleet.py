"""``manage.py simulate_fleet --seed S --days D --jobs N``: months of a simulated fleet.

Why: ETT's trend, lost-time and rollout pages only say something with months of a fleet
behind them. This writes one (``ettweb.simulate.fleet``) through the import path, beside the
live jobs: jobs of 1 to thousands of GPUs that fail, restart and repeat work, and seven
optimizations rolled out in stages, each stored as a simulated ``Rollout``. The fleet ends
today (``--end`` for another day) and never holds an event later than now; the same seed
gives the same fleet, and a second run stores nothing new. ``--no-rollouts`` draws the
A/A fleet: the same jobs with nothing rolled out (the calibration's null). ``--clear`` removes every
simulated job and rollout (alone it only clears; with other options it clears, then
simulates). The last line on stdout is the summary.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from ettweb.simulate.fleet import FleetPlan
from ettweb.simulate.rollout_plan import rollout_schedule
from ettweb.simulate.store import (
    clear_simulation,
    fleet_trend,
    refresh,
    store_fleet,
    today_utc,
    upsert_rollouts,
)

EXIT_USAGE = 2
DEFAULT_SEED, DEFAULT_DAYS, DEFAULT_JOBS = 0, 90, 300
MAX_SEED = 2**63 - 1
DAYS_RANGE, JOBS_RANGE = (1, 3650), (1, 1_000_000)
PLAN_OPTIONS = ("seed", "days", "jobs", "end")


def _usage(message: str) -> CommandError:
    return CommandError(message, returncode=EXIT_USAGE)


def _whole(name: str, value: Any, default: int, low: int, high: int) -> int:
    """An option as a whole number in [low, high], or a usage error naming it."""
    if value is None:
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise _usage(f"--{name} must be a whole number, not {value!r}") from None
    if not low <= number <= high:
        raise _usage(f"--{name} must be between {low:,} and {high:,}, not {number:,}")
    return number


def _end(value: Any) -> date:
    """The last day: today (UTC) by default, never later (a fleet holds no future)."""
    today = today_utc()
    if value is None:
        return today
    try:
        end = value if isinstance(value, date) else date.fromisoformat(str(value))
    except ValueError:
        raise _usage(f"--end must be a date YYYY-MM-DD, not {value!r}") from None
    if end > today:
        raise _usage(f"--end must not be after today ({today} UTC), not {end}")
    return end


@dataclass(frozen=True)
class _Request:
    """What the options ask for: clear, simulate, or both."""

    clear: bool
    plan: FleetPlan | None  # None: only clear


def _request(options: dict[str, Any]) -> _Request:
    given = any(options.get(name) is not None for name in PLAN_OPTIONS)
    plan = FleetPlan(
        seed=_whole("seed", options.get("seed"), DEFAULT_SEED, 0, MAX_SEED),
        days=_whole("days", options.get("days"), DEFAULT_DAYS, *DAYS_RANGE),
        jobs=_whole("jobs", options.get("jobs"), DEFAULT_JOBS, *JOBS_RANGE),
        end=_end(options.get("end")), until=time.time())
    clear = bool(options.get("clear"))
    return _Request(clear=clear, plan=None if clear and not given else plan)


class Command(BaseCommand):
    help = ("Simulate months of a training fleet (jobs of 1 to thousands of GPUs, failures, "
            "restarts, staged optimization rollouts) through the import path, ending today.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--seed", default=None, metavar="S",
                            help=f"random seed (default {DEFAULT_SEED}); another seed is "
                                 "another fleet, stored beside this one")
        parser.add_argument("--days", default=None, metavar="D",
                            help=f"UTC days the fleet covers, {DAYS_RANGE[0]}-{DAYS_RANGE[1]} "
                                 f"(default {DEFAULT_DAYS})")
        parser.add_argument("--jobs", default=None, metavar="N",
                            help=f"jobs, {JOBS_RANGE[0]}-{JOBS_RANGE[1]:,} "
                                 f"(default {DEFAULT_JOBS})")
        parser.add_argument("--end", default=None, metavar="YYYY-MM-DD",
                            help="the last day (UTC; default today); no event is later than now")
        parser.add_argument("--clear", action="store_true",
                            help="remove every simulated job and rollout first (alone: only "
                                 "that)")
        parser.add_argument("--no-rollouts", action="store_true",
                            help="the A/A fleet: the same jobs (sizes, labels, failures) with "
                                 "nothing rolled out and no rollout stored, for checking that "
                                 "the estimators see no change where there is none")
        parser.add_argument("--no-progress", action="store_true",
                            help="no progress bars on stderr")

    def handle(self, *args: Any, **options: Any) -> None:
        request = _request(options)
        self.show_progress = not options["no_progress"] and self.stderr.isatty()
        if request.clear:
            self.stdout.write(clear_simulation().line())
        if request.plan is not None:
            self.stdout.write(self._simulate(request.plan,
                                             with_rollouts=not options["no_rollouts"]))

    def _bar(self, description: str, unit: str, total: int | None = None) -> tqdm[Any]:
        return tqdm(desc=description, unit=unit, total=total, file=sys.stderr,
                    disable=not self.show_progress, unit_scale=True, dynamic_ncols=True)

    def _simulate(self, plan: FleetPlan, *, with_rollouts: bool) -> str:
        """Store the rollouts and the events, refresh the rollups; the summary line."""
        began = time.perf_counter()
        schedule = rollout_schedule(plan) if with_rollouts else ()
        rollouts = upsert_rollouts(schedule)
        with self._bar("simulating", " events") as bar:
            summary = store_fleet(plan, schedule, progress=bar.update)
        with self._bar("refreshing rollups", " jobs", total=len(summary.jobs)) as bar:
            refresh(summary.jobs, progress=bar.update)
        lines = summary.stored + summary.duplicates + summary.rejected
        return (f"simulated {len(summary.jobs):,} jobs (seed {plan.seed}, {plan.days} days to "
                f"{plan.end}): {lines:,} events ({summary.line()}), {rollouts} rollouts; "
                f"{fleet_trend(plan).line()}; {time.perf_counter() - began:.1f} s")
