"""A seeded synthetic fleet: months of training jobs and the optimizations rolled out to them.

Why: ETT's pages — the trend, lost time by component, a rollout's impact — only say
something with months of a fleet behind them, and a fresh install holds one demo job. This
package draws such a fleet, shaped after the paper ETT follows: jobs of 1 to thousands of
GPUs (a long tail; big jobs train longer and fail more often), models, teams and clusters,
attempts that go through every lifecycle phase, fail, wait, restart from their last
checkpoint and train the same steps again. Seven optimizations reach it in stages — one team
or cluster first, the whole fleet weeks later — and a phase's duration depends on which of
them had reached THAT job when THAT attempt started, so ETT's own attribution, not this
package, finds the fleet's ETT% rising as they land, the largest jobs' most.

This module is the fleet's model: which fleet to draw (``FleetPlan``) and the parameters
that shape it. The rest is one module per job of the generator:

- ``ettweb.simulate.rollout_plan``: the optimizations and the stages that roll them out;
- ``ettweb.simulate.jobs``: one job's draw (labels, size, phase times, failure rate);
- ``ettweb.simulate.events``: one job's life as events, and the whole fleet's events.

Only rank 0 is emitted and a ``train`` span covers one checkpoint interval, so a job is
about fifty events. Every ``attempt_start`` carries the real GPU count, the model, team and
cluster, ``"simulated": true`` (what ``--clear`` looks for) and the ``optimizations`` that
had reached the attempt (for whoever reads a job's timeline). Each job draws from its own
``Random(f"{seed}:{index}")`` and its event ids are ``sim-{seed}-{index}-{n}``: the same plan
gives the same events byte for byte, and any one job can be drawn alone. A job's timeline
never depends on ``FleetPlan.until``: the cut-off only hides what has not happened yet, so a
later run of the same plan adds the events since and changes none.

Pure Python, no Django: the command stores what this yields, tests read it directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Final

DAY_S: Final = 86_400.0
HOUR_S: Final = 3_600.0
MINUTE_S: Final = 60.0
#: Teams, the models each trains, and their share of the fleet's jobs.
TEAMS: Final[Mapping[str, tuple[str, ...]]] = {
    "ads": ("ads-ctr", "ads-cvr"),
    "feed": ("feed-ranker", "feed-retrieval"),
    "search": ("search-ltr", "query-tower"),
    "commerce": ("shop-rec", "seq-rec"),
}
TEAM_WEIGHTS: Final = (35, 30, 20, 15)
CLUSTERS: Final = ("east-1", "west-2", "north-3")
CLUSTER_WEIGHTS: Final = (45, 35, 20)
#: Jobs of this many GPUs and more train the flagship models of these teams, on the one
#: cluster with fabric enough for them: a pilot elsewhere is measured on comparable jobs.
BIG_JOB_GPUS: Final = 1024
BIG_JOB_TEAMS: Final = ("ads", "feed")
BIG_JOB_CLUSTER: Final = "north-3"
#: How much harder than average a model is to compile and initialize.
MODEL_COMPLEXITY: Final[Mapping[str, float]] = {
    "ads-ctr": 1.2, "ads-cvr": 1.0, "feed-ranker": 1.3, "feed-retrieval": 0.8,
    "search-ltr": 0.9, "query-tower": 0.7, "shop-rec": 1.0, "seq-rec": 1.4,
}
#: (GPUs, relative number of jobs, median hours of training): most jobs are small, most
#: GPU-hours are mid-sized, and the jobs of 1,000+ GPUs — a few in a hundred — train longest
#: and hold about a seventh of them.
GPU_SIZES: Final = (
    (1, 3.0, 12.0), (2, 2.0, 14.0), (4, 3.0, 16.0), (8, 6.0, 18.0), (16, 5.0, 21.0),
    (32, 6.0, 24.0), (64, 8.0, 27.0), (128, 12.0, 32.0), (256, 18.0, 36.0),
    (512, 24.0, 42.0), (1024, 0.85, 48.0), (1536, 0.2, 52.0), (2048, 0.1, 56.0),
    (3072, 0.02, 60.0),
)
#: Spread (log-normal sigma) of how long a job trains: the big jobs are planned runs of a
#: known length, so their share of the fleet stays steady from one fortnight to the next.
TRAIN_SPREAD: Final = {False: 0.3, True: 0.1}
#: Shape of the gamma distribution of training time between failures: 1 would be memoryless;
#: 4 keeps a big job's failure count close to its rate, so one unlucky job cannot swing a
#: fortnight of the fleet.
FAILURE_REGULARITY: Final = 4.0
#: Failures per hour of training: a floor (preemptions, bad hosts) plus a part that rises
#: steeply around ``BIG_JOB_GPUS`` — past it a job spans enough hosts that one of them fails
#: every few hours — towards ``MAX_EXTRA_FAILURES_PER_H``.
BASE_FAILURES_PER_H: Final = 0.02
MAX_EXTRA_FAILURES_PER_H: Final = 0.31
FAILURE_STEEPNESS: Final = 5
#: Minutes of training between checkpoints: jobs that fail often checkpoint more often.
CHECKPOINT_EVERY_MIN: Final = {False: (120, 180, 240), True: (60, 90)}
#: Bases of the Halton sequence that picks (size, team, cluster): see ``draw_job``.
HALTON_BASES: Final = (2, 3, 5)
#: A job's last attempt is never past this (a job failing forever is a bug, not a fleet).
MAX_ATTEMPTS: Final = 500
SHARE_CANCELLED: Final = 0.04
#: Most recommendation models are published for serving every few hours of training.
SHARE_PUBLISHING: Final = 0.8
PUBLISH_EVERY_S: Final = 8 * HOUR_S
#: ``recovery``: in-memory snapshots this often, so a restart repeats little.
SNAPSHOT_EVERY_S: Final = 2 * MINUTE_S


@dataclass(frozen=True, slots=True)
class FleetPlan:
    """Which fleet to draw: ``jobs`` starting over the ``days`` UTC days ending ``end``.

    ``until`` (epoch seconds) hides what would happen after it — the command passes now, so
    a fleet ending today never holds events in the future; by default the end day's last
    second. It never changes a job's timeline, only how much of it is emitted.
    """

    seed: int
    days: int
    jobs: int
    end: date
    until: float | None = None

    def __post_init__(self) -> None:
        if self.days < 1:
            raise ValueError("days must be at least 1")
        if self.jobs < 0:
            raise ValueError("jobs must not be negative")

    @property
    def start_ts(self) -> float:
        """Midnight (UTC) starting the first day."""
        return _midnight(self.end - timedelta(days=self.days - 1))

    @property
    def end_ts(self) -> float:
        """Midnight (UTC) ending the last day."""
        return _midnight(self.end + timedelta(days=1))

    @property
    def cutoff(self) -> float:
        """No event is later than this."""
        return self.end_ts if self.until is None else min(self.end_ts, self.until)


def _midnight(day: date) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()
