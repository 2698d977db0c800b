"""A seeded synthetic fleet: months of training jobs and the optimizations rolled out to them.

Why: ETT's pages — the trend, lost time by component, a rollout's impact — only say
something with months of a fleet behind them, and a fresh install holds one demo job. This
module draws such a fleet, shaped after the paper ETT follows: jobs of 1 to thousands of
GPUs (a long tail; big jobs train longer and fail more often), models, teams and clusters,
attempts that go through every lifecycle phase, fail, wait, restart from their last
checkpoint and train the same steps again. Seven optimizations reach it in stages — one team
or cluster first, the whole fleet weeks later — and a phase's duration depends on which of
them had reached THAT job when THAT attempt started, so ETT's own attribution, not this
module, finds the fleet going from about 80% to above 90% and the largest jobs from 50-60%
to about 85%.

Only rank 0 is emitted and a ``train`` span covers one checkpoint interval, so a job is
about fifty events (20,000 jobs: ~1M). Every ``attempt_start`` carries the real GPU count,
the model, team and cluster, ``"simulated": true`` (what ``--clear`` looks for) and the
``optimizations`` that had reached the attempt (for whoever reads a job's timeline).
Each job draws from its own ``Random(f"{seed}:{index}")`` and its event ids are
``sim-{seed}-{index}-{n}``: the same plan gives the same events byte for byte, and any one
job can be drawn alone. A job's timeline never depends on ``FleetPlan.until``: the cut-off
only hides what has not happened yet, so a later run of the same plan adds the events since
and changes none.

Pure Python, no Django: the command stores what this yields, tests read it directly.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final, TypeVar

from ettweb.rollouts.scope import Scope, parse_scope

Event = dict[str, Any]
Picked = TypeVar("Picked")

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


# --------------------------------------------------------------------------- the plan

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


# --------------------------------------------------------------------------- rollouts

@dataclass(frozen=True, slots=True)
class Optimization:
    """One of the paper's optimizations: the component it speeds up and where it lands first."""

    key: str
    title: str
    component: str
    pilot: Mapping[str, list[str]]
    notes: str


OPTIMIZATIONS: Final = (
    Optimization("init_overlap", "Init overlap", "trainer_init", {"teams": ["search"]},
                 "Model init on the meta device runs while rendezvous, process-group init and "
                 "the data loaders start, and sharding plans are cached: only the remainder "
                 "blocks."),
    Optimization("autotune_pruning", "Autotune pruning", "pt2_compiler",
                 {"clusters": ["west-2"]},
                 "max-autotune benchmarks only the kernel configs likely to win."),
    Optimization("dynamic_shapes", "Dynamic shapes", "pt2_compiler", {"teams": ["commerce"]},
                 "The batch dimension is marked dynamic: evaluation batches no longer "
                 "recompile the model."),
    Optimization("compile_cache", "Compile caches", "pt2_compiler", {"clusters": ["east-1"]},
                 "PT2 caches (FX graphs, Inductor kernels, autotune results) kept beside the "
                 "checkpoints and shared per model: restarts and reruns skip most compiling."),
    Optimization("async_checkpoint", "Async checkpointing", "checkpointing",
                 {"teams": ["search"]},
                 "Checkpoints are staged in host memory and uploaded in the background: "
                 "training blocks only for the snapshot."),
    Optimization("oob_publish", "Out-of-band publishing", "model_publishing",
                 {"clusters": ["west-2"]},
                 "Export and publishing run in a separate job from the saved checkpoint, not "
                 "in the trainer."),
    Optimization("recovery", "Cheaper recovery", "reliability", {"clusters": ["north-3"]},
                 "Faster failure detection, and restarts from in-memory snapshots minutes old "
                 "instead of the last durable checkpoint."),
)


@dataclass(frozen=True, slots=True)
class PlannedRollout:
    """One stage of one optimization: stored as a ``Rollout``, and what changes the jobs."""

    optimization: str
    stage: int  # 1: the pilot team or cluster, 2: the whole fleet
    name: str
    component: str
    at: float  # epoch seconds
    scope: Scope
    notes: str
    #: False for a change nobody recorded (ETT_SPEC §6.3): it changes the jobs, but is never
    #: stored as a ``Rollout``, so only the change detection can find it.
    recorded: bool = True

    def reaches(self, job: str, model: str, team: str, cluster: str) -> bool:
        """Whether a job with these labels is in the stage's scope (whenever it starts)."""
        return self.scope.matches(job, model, team, cluster)


def rollout_schedule(plan: FleetPlan) -> tuple[PlannedRollout, ...]:
    """Every optimization in two stages, spread over the plan's days, in deploy order.

    The stages keep off the first and last ``margin`` days (15 once ``days`` >= 90), so a
    14-day window before and after each one holds data; the fleet stage follows its pilot by
    ``gap`` days (2-5 weeks when the period allows). The first days are thus the fleet before
    any optimization and the last ones the fleet after all of them.
    """
    margin = min(15.0, plan.days / 6)
    span = plan.days - 2 * margin
    gap = min(35.0, max(14.0, 0.2 * plan.days), span / 2)
    spacing = (span - gap) / (len(OPTIMIZATIONS) - 1)
    stages = []
    for order, opt in enumerate(OPTIMIZATIONS):
        pilot_day = margin + order * spacing
        stages.append(_stage(plan, opt, 1, pilot_day, order))
        stages.append(_stage(plan, opt, 2, pilot_day + gap, order))
    stages.append(_unrecorded(plan, margin + (len(OPTIMIZATIONS) - 1.5) * spacing + gap))
    return tuple(sorted(stages, key=lambda stage: (stage.at, stage.name)))


def recorded(schedule: Sequence[PlannedRollout]) -> tuple[PlannedRollout, ...]:
    """The stages somebody recorded as rollouts (what ``simulate_fleet`` stores)."""
    return tuple(stage for stage in schedule if stage.recorded)


#: The change nobody recorded: evaluation grew 2.5 times slower for one team (a new eval
#: set, say) between the last two fleet-wide stages, where it disturbs their windows least.
UNRECORDED_KEY: Final = "eval_regression"
UNRECORDED_SCOPE: Final[Mapping[str, list[str]]] = {"teams": ["ads"]}
EVAL_REGRESSION: Final = 2.5


def _unrecorded(plan: FleetPlan, day: float) -> PlannedRollout:
    at = plan.start_ts + math.floor(day) * DAY_S + 14 * HOUR_S
    scope = parse_scope(dict(UNRECORDED_SCOPE))
    return PlannedRollout(optimization=UNRECORDED_KEY, stage=1,
                          name=f"Slower evaluation — {scope.describe()} (not recorded)",
                          component="evaluation", at=min(at, plan.end_ts - 1.0), scope=scope,
                          notes="Evaluation takes 2.5 times as long. Never stored as a "
                                "rollout. Simulated.", recorded=False)


def _stage(plan: FleetPlan, opt: Optimization, stage: int, day: float,
           order: int) -> PlannedRollout:
    """A stage deployed during a working day (``day`` counts from the first day's midnight).

    Plans shorter than two weeks keep the fraction of the day instead, so their stages still
    come in order.
    """
    if plan.days >= 14:
        at = plan.start_ts + math.floor(day) * DAY_S + (9 + (order * 3 + stage) % 8) * HOUR_S
    else:
        at = plan.start_ts + day * DAY_S
    scope = parse_scope(dict(opt.pilot) if stage == 1 else {})
    where = scope.describe()
    return PlannedRollout(optimization=opt.key, stage=stage, name=f"{opt.title} — {where}",
                          component=opt.component, at=min(at, plan.end_ts - 1.0), scope=scope,
                          notes=f"{opt.notes} Stage {stage} of 2 ({where}). Simulated.")


# --------------------------------------------------------------------------- one job's draw

@dataclass(frozen=True, slots=True)
class PhaseTimes:
    """A job's typical seconds per phase; each attempt jitters them."""

    scheduling: float
    container_start: float
    rendezvous: float
    process_group_init: float
    model_init: float
    sharding_plan: float
    data_init: float
    trace: float  # compile: tracing and code generation
    autotune: float  # compile: max-autotune benchmarking
    checkpoint_save: float  # a synchronous save
    checkpoint_load: float
    eval: float
    publish_snapshot: float
    publish_final: float
    shutdown: float
    failure_tail: float  # detecting a failure and tearing the attempt down
    restart_gap: float


def phase_times(gpus: int, complexity: float) -> PhaseTimes:
    """Typical phase seconds: collective set-up grows with log(GPUs), model work with size.

    ``hosts`` ~ log2(GPUs) drives what talks to every host (gang scheduling, rendezvous,
    process groups, failure detection); ``size`` ~ GPUs ** 0.25 what grows with the model
    (init, sharding plans, checkpoints, publishing).
    """
    hosts = math.log2(gpus + 1)
    size = gpus ** 0.25
    minutes = {
        "scheduling": 1.0 + 0.8 * hosts, "container_start": 0.7 + 0.15 * hosts,
        "rendezvous": 0.2 + 0.15 * hosts, "process_group_init": 0.1 + 0.2 * hosts,
        "model_init": 5.0 * size * complexity, "sharding_plan": 1.5 * size,
        "data_init": 0.8 + 0.2 * size, "trace": 10.0 * complexity,
        "autotune": 15.0 * complexity, "checkpoint_save": 1.6 * size,
        "checkpoint_load": 0.5 * size, "eval": 4.0 + 1.0 * size,
        "publish_snapshot": 7.0 + 2.2 * size, "publish_final": 8.0 + 2.5 * size,
        "shutdown": 0.5 + 0.1 * hosts, "failure_tail": 5.0 + 1.0 * hosts,
        "restart_gap": 1.5 + 0.35 * hosts,
    }
    return PhaseTimes(**{name: value * MINUTE_S for name, value in minutes.items()})


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What one job is: labels, size, how much it trains and how often it fails."""

    index: int
    job: str
    gpus: int
    team: str
    model: str
    cluster: str
    start: float
    steps_per_s: int
    goal_steps: int  # new steps to train; fewer for a job that gets cancelled
    cancelled: bool
    checkpoint_every_s: float
    eval_every: int  # evaluate after this many checkpoint intervals
    publishes: bool  # publishes snapshots for serving while it trains
    warm_cache: bool  # another run of the model filled the shared compile cache
    failures_per_s: float  # per second of training
    times: PhaseTimes

    @property
    def attrs(self) -> dict[str, Any]:
        return {"gpus": self.gpus, "model": self.model, "team": self.team,
                "cluster": self.cluster, "simulated": True}


def failures_per_hour(gpus: int) -> float:
    """How often a job of ``gpus`` GPUs fails, per hour of training."""
    x = (gpus / BIG_JOB_GPUS) ** FAILURE_STEEPNESS
    return BASE_FAILURES_PER_H + MAX_EXTRA_FAILURES_PER_H * x / (1.0 + x)


def job_rng(seed: int, index: int) -> random.Random:
    """The job's own generator: its draws do not depend on any other job's."""
    return random.Random(f"{seed}:{index}")


@functools.lru_cache(maxsize=64)
def _offsets(seed: int) -> tuple[float, ...]:
    """The seed's rotation of the (size, team, cluster) sequence (Cranley-Patterson)."""
    rng = random.Random(f"{seed}:fleet")
    return tuple(rng.random() for _ in HALTON_BASES)


def _radical_inverse(index: int, base: int) -> float:
    """``index``'s digits in ``base`` mirrored behind the point: the van der Corput sequence."""
    value, scale = 0.0, 1.0 / base
    while index:
        index, digit = divmod(index, base)
        value += digit * scale
        scale /= base
    return value


def _quantiles(seed: int, index: int) -> tuple[float, ...]:
    """The job's (size, team, cluster) quantiles: the rotated Halton sequence's point."""
    return tuple((offset + _radical_inverse(index + 1, base)) % 1.0
                 for offset, base in zip(_offsets(seed), HALTON_BASES, strict=True))


def _pick(values: Sequence[Picked], weights: Sequence[float], quantile: float) -> Picked:
    """The value whose share of the cumulative weights holds ``quantile``."""
    bounds = list(itertools.accumulate(weights))
    at = bisect.bisect_right(bounds, quantile * bounds[-1])
    return values[min(at, len(values) - 1)]


_BIG_SIZES: Final = tuple(size for size in GPU_SIZES if size[0] >= BIG_JOB_GPUS)
_OTHER_SIZES: Final = tuple(size for size in GPU_SIZES if size[0] < BIG_JOB_GPUS)
_BIG_WEIGHTS: Final = tuple(weight for _, weight, _ in _BIG_SIZES)
_OTHER_WEIGHTS: Final = tuple(weight for _, weight, _ in _OTHER_SIZES)
_BIG_SHARE: Final = sum(_BIG_WEIGHTS) / (sum(_BIG_WEIGHTS) + sum(_OTHER_WEIGHTS))


def _size(seed: int, index: int, quantile: float) -> tuple[int, float, float]:
    """The job's (GPUs, weight, training hours).

    Big jobs come exactly every 1 / ``_BIG_SHARE`` jobs (a Beatty sequence), their sizes in
    their own van der Corput order: the few jobs that hold a seventh of the GPU-hours then
    arrive like clockwork, and the fleet's mix barely moves from one fortnight to the next.
    """
    offset = _offsets(seed)[0]
    big_before = math.floor(index * _BIG_SHARE + offset)
    if math.floor((index + 1) * _BIG_SHARE + offset) > big_before:
        big_q = (offset + _radical_inverse(big_before + 1, 2)) % 1.0
        return _pick(_BIG_SIZES, _BIG_WEIGHTS, big_q)
    return _pick(_OTHER_SIZES, _OTHER_WEIGHTS, quantile)


def draw_job(plan: FleetPlan, index: int, rng: random.Random) -> JobSpec:
    """Draw the job's labels, size and training plan (the first draws of its generator).

    Jobs start in index order, each at a random moment of its own slice of the period, and
    size, team and cluster follow low-discrepancy sequences (``_size``, Halton) rather than
    independent draws. Why: a fleet's GPU-hours are dominated by its few largest jobs, and
    independent draws leave some fortnights with three times the big jobs of the next — a
    swing in fleet ETT% larger than any one rollout's effect. The big jobs belong to
    ``BIG_JOB_TEAMS`` on ``BIG_JOB_CLUSTER``. Everything else about a job is its own random.
    """
    size_q, team_q, cluster_q = _quantiles(plan.seed, index)
    gpus, _, train_h = _size(plan.seed, index, size_q)
    big = gpus >= BIG_JOB_GPUS
    if big:
        team, cluster = BIG_JOB_TEAMS[int(team_q * len(BIG_JOB_TEAMS))], BIG_JOB_CLUSTER
    else:
        team = _pick(tuple(TEAMS), TEAM_WEIGHTS, team_q)
        cluster = _pick(CLUSTERS, CLUSTER_WEIGHTS, cluster_q)
    model = rng.choice(TEAMS[team])
    start = plan.start_ts + (index + rng.random()) / max(1, plan.jobs) * plan.days * DAY_S
    train_s = train_h * HOUR_S * min(2.0, rng.lognormvariate(0.0, TRAIN_SPREAD[big]))
    steps_per_s = rng.choice((2, 5, 10, 20))
    cancelled = rng.random() < SHARE_CANCELLED and not big  # big runs are seen through
    share = rng.uniform(0.1, 0.9) if cancelled else 1.0
    failures_per_h = failures_per_hour(gpus)
    return JobSpec(
        index=index, job=f"sim-{plan.seed}-{team}-{model}-{index:05d}", gpus=gpus, team=team,
        model=model, cluster=cluster, start=round(start, 3), steps_per_s=steps_per_s,
        goal_steps=max(1, int(train_s * share * steps_per_s)), cancelled=cancelled,
        checkpoint_every_s=rng.choice(CHECKPOINT_EVERY_MIN[big]) * MINUTE_S,
        eval_every=rng.randint(3, 5), publishes=rng.random() < SHARE_PUBLISHING,
        warm_cache=rng.random() < 0.6, failures_per_s=failures_per_h / HOUR_S,
        times=phase_times(gpus, MODEL_COMPLEXITY[model]),
    )


# --------------------------------------------------------------------------- the fleet

def fleet_events(plan: FleetPlan,
                 schedule: Sequence[PlannedRollout] | None = None) -> Iterator[Event]:
    """Every job's events up to ``plan.cutoff``, job after job (each in emission order)."""
    stages = rollout_schedule(plan) if schedule is None else schedule
    for index in range(plan.jobs):
        yield from job_events(plan, index, stages)


def job_events(plan: FleetPlan, index: int, schedule: Sequence[PlannedRollout]) -> list[Event]:
    """One job's events that happened by ``plan.cutoff``."""
    rng = job_rng(plan.seed, index)
    spec = draw_job(plan, index, rng)
    return _JobRun(plan, spec, rng, schedule).run()


def event_time(event: Event) -> float:
    """When an event was emitted: a span when it closes, a mark when it happens."""
    return float(event["end"] if event["kind"] == "span" else event["ts"])


def _reach(spec: JobSpec, schedule: Sequence[PlannedRollout]) -> tuple[tuple[float, str], ...]:
    """(deploy time, optimization) of every stage whose scope holds the job."""
    return tuple(sorted((stage.at, stage.optimization) for stage in schedule
                        if stage.reaches(spec.job, spec.model, spec.team, spec.cluster)))


@dataclass
class _Upload:
    """A background checkpoint upload: emitted only if it finished before a crash."""

    start: float
    end: float
    previous_durable: int  # where a restart resumes if the upload never finished


class _JobRun:
    """One job's life: attempts that start up, train in checkpoint intervals, fail, restart."""

    def __init__(self, plan: FleetPlan, spec: JobSpec, rng: random.Random,
                 schedule: Sequence[PlannedRollout]) -> None:
        self.plan, self.spec, self.rng = plan, spec, rng
        self.id_prefix = f"sim-{plan.seed}-{spec.index}-"
        self.reach = _reach(spec, schedule)
        self.cutoff = plan.cutoff
        self.events: list[Event] = []
        self.serial = 0
        self.attempt = 0
        self.t = spec.start
        self.step = 0  # the next step to train
        self.durable_step = 0  # where a restart resumes without in-memory snapshots
        self.intervals = 0
        self.trained_s = 0.0
        self.next_publish_s = PUBLISH_EVERY_S
        self.active: frozenset[str] = frozenset()
        self.upload: _Upload | None = None

    def run(self) -> list[Event]:
        """Attempts until the job ends or passes the cut-off; the events emitted by then."""
        while self.t <= self.cutoff and self._attempt():
            self.attempt += 1
            self.t = self._after(self._jitter(self.spec.times.restart_gap))
        return [event for event in self.events if event_time(event) <= self.cutoff]

    # --- event builders -------------------------------------------------------------------

    def _event(self, kind: str) -> Event:
        self.serial += 1
        return {"v": 1, "id": self.id_prefix + str(self.serial), "job": self.spec.job,
                "attempt": self.attempt, "kind": kind}

    def _span(self, phase: str, start: float, end: float, *,
              steps: tuple[int, int] | None = None, blocking: bool = True) -> None:
        event = self._event("span")
        event["phase"], event["start"], event["end"] = phase, start, end
        if steps is not None:
            event["step_start"], event["step_end"] = steps
        if not blocking:
            event["blocking"] = False
        self.events.append(event)

    def _mark(self, mark: str, ts: float, attrs: dict[str, Any]) -> None:
        event = self._event("mark")
        event["mark"], event["ts"], event["attrs"] = mark, ts, attrs
        self.events.append(event)

    def _after(self, seconds: float) -> float:
        """The clock ``seconds`` from now, to the millisecond (short, exact JSON)."""
        return round(self.t + seconds, 3)

    def _phase(self, phase: str, seconds: float) -> None:
        """A blocking phase from now; the clock moves to its end."""
        end = self._after(seconds)
        if end > self.t:
            self._span(phase, self.t, end)
            self.t = end

    def _jitter(self, seconds: float) -> float:
        return seconds * self.rng.uniform(0.75, 1.25)

    def _has(self, optimization: str) -> bool:
        return optimization in self.active

    # --- one attempt ----------------------------------------------------------------------

    def _attempt(self) -> bool:
        """Run one attempt; True when it failed (and the job restarts)."""
        spec = self.spec
        self.active = frozenset(key for at, key in self.reach if at <= self.t)
        self._mark("attempt_start", self.t,
                   {**spec.attrs, "optimizations": sorted(self.active)})
        if self.attempt == 0:
            self._phase("scheduling", self._jitter(spec.times.scheduling))
        self._start_up()
        if self.attempt > 0 and self.step > 0:
            self._phase("checkpoint_load", self._jitter(spec.times.checkpoint_load))
        healthy = self.attempt + 1 >= MAX_ATTEMPTS
        fail_in = math.inf if healthy else self.rng.gammavariate(
            FAILURE_REGULARITY, 1.0 / (FAILURE_REGULARITY * spec.failures_per_s))
        return self._train(fail_in)

    def _start_up(self) -> None:
        """Container, collectives, model, sharding plan, data and compile, in that order."""
        times = self.spec.times
        self._phase("container_start", self._jitter(times.container_start))
        rendezvous = self._jitter(times.rendezvous)
        process_group = self._jitter(times.process_group_init)
        data_init = self._jitter(times.data_init)
        self._phase("rendezvous", rendezvous)
        self._phase("process_group_init", process_group)
        model_init = self._jitter(times.model_init)
        sharding = self._jitter(times.sharding_plan)
        if self._has("init_overlap"):  # behind the collectives, data loaders and compile
            model_init *= 0.2
            sharding *= 0.2
        self._phase("model_init", model_init)
        self._phase("sharding_plan", sharding)
        self._phase("data_init", data_init)
        self._phase("compile", self._compile_s())

    def _compile_s(self) -> float:
        """Tracing + codegen + autotuning, less what the active optimizations save."""
        trace, autotune = self._jitter(self.spec.times.trace), self._jitter(
            self.spec.times.autotune)
        if self._has("autotune_pruning"):
            autotune *= 0.25
        if self._has("dynamic_shapes"):
            trace *= 0.85  # one graph for every batch size
        if self._has("compile_cache") and (self.attempt > 0 or self.spec.warm_cache):
            trace, autotune = 0.12 * trace, 0.0  # cache hits; autotune results are cached too
        return trace + autotune

    def _eval_s(self) -> float:
        slower = EVAL_REGRESSION if self._has(UNRECORDED_KEY) else 1.0
        return slower * self._jitter(self.spec.times.eval)

    def _recompile_s(self) -> float:
        """Evaluation's batch shapes recompile the model, autotuning included: shapes no
        cache has seen (never with dynamic shapes: one graph serves every batch size)."""
        autotune, trace = self._jitter(self.spec.times.autotune), self._jitter(
            self.spec.times.trace)  # drawn either way: see ``_resume_step``
        if self._has("dynamic_shapes"):
            return 0.0
        if self._has("autotune_pruning"):
            autotune *= 0.25
        return 0.6 * (trace + autotune)

    # --- training -------------------------------------------------------------------------

    def _train(self, fail_in: float) -> bool:
        """Checkpoint interval after interval until done, a crash, or the cut-off."""
        spec = self.spec
        while self.t <= self.cutoff:
            remaining = (spec.goal_steps - self.step) / spec.steps_per_s
            length = min(spec.checkpoint_every_s, remaining)
            if fail_in < length:
                self._train_span(fail_in, final=False)
                self._fail()
                return True
            fail_in -= length
            self._train_span(length, final=length >= remaining)
            if self.step >= spec.goal_steps:
                self._finish()
                return False
            self._checkpoint()
            self._between_intervals()
        return False  # still running at the cut-off

    def _train_span(self, seconds: float, *, final: bool) -> None:
        """One train span; a restart's first ones repeat steps (the engine finds which)."""
        start, end = self.t, self._after(seconds)
        steps = self.spec.goal_steps - self.step if final else int(seconds
                                                                   * self.spec.steps_per_s)
        self._span("train", start, end, steps=(self.step, self.step + steps))
        self.t, self.step = end, self.step + steps
        self.trained_s += seconds
        self._settle_upload()

    def _checkpoint(self) -> None:
        """A synchronous save, or (async) a short snapshot and an upload in the background."""
        save = self._jitter(self.spec.times.checkpoint_save)
        if not self._has("async_checkpoint"):
            self._phase("checkpoint_save", save)
            self.durable_step = self.step
            return
        self._phase("checkpoint_save", 0.08 * save)
        self.upload = _Upload(self.t, self._after(1.3 * save), self.durable_step)
        self.durable_step = self.step

    def _settle_upload(self, *, crashed: bool = False, finishing: bool = False) -> None:
        """Emit a finished upload (or one the finishing job waits for); one that a crash cut
        short never closed, so it is never emitted and its checkpoint never became durable."""
        upload = self.upload
        done = upload is not None and upload.end <= self.t
        if upload is None or not (done or crashed or finishing):
            return
        self.upload = None
        if crashed and not done:
            self.durable_step = upload.previous_durable
            return
        self._span("checkpoint_save", upload.start, upload.end, blocking=False)

    def _between_intervals(self) -> None:
        """Evaluation (and its recompile) every few intervals; a snapshot for serving."""
        spec = self.spec
        self.intervals += 1
        if self.intervals % spec.eval_every == 0:
            self._phase("eval", self._eval_s())
            self._phase("compile", self._recompile_s())
        if spec.publishes and self.trained_s >= self.next_publish_s:
            self.next_publish_s += PUBLISH_EVERY_S
            publish = self._jitter(spec.times.publish_snapshot)
            if not self._has("oob_publish"):  # out of band: a publisher job reads the ckpt
                self._phase("publish", publish)

    # --- the end of an attempt ------------------------------------------------------------

    def _fail(self) -> None:
        """A crash: the failure tail, then ``attempt_end`` (unless the attempt was lost)."""
        self._settle_upload(crashed=True)
        recovery = self._has("recovery")
        tail = self.spec.times.failure_tail * (0.15 if recovery else 1.0)
        status = self.rng.choices(("failed", "preempted", "lost"), weights=(70, 22, 8))[0]
        self.t = self._after(self._jitter(tail))
        if status != "lost":  # a lost attempt never reports its end
            self._mark("attempt_end", self.t, {"status": status})
        self.step = self._resume_step(recovery)

    def _resume_step(self, recovery: bool) -> int:
        """The last durable checkpoint — or, with ``recovery``, a snapshot minutes old.

        Every draw is taken whether or not an optimization has reached the job, so the same
        job simulated without one rollout (``ettweb.simulate.truth``) meets the same
        failures and jitters: the two runs differ by that rollout's effect, not by luck.
        """
        snapshot_age = self.rng.uniform(0.0, SNAPSHOT_EVERY_S)
        if not recovery:
            return self.durable_step
        lost_steps = int(snapshot_age * self.spec.steps_per_s)
        return max(self.durable_step, self.step - lost_steps)

    def _finish(self) -> None:
        """The last steps are in: evaluate, publish, shut down (or the user cancelled)."""
        times = self.spec.times
        self._settle_upload(finishing=True)  # it completes while the job evaluates
        if self.spec.cancelled:
            self._phase("shutdown", self._jitter(times.shutdown))
            self._mark("attempt_end", self.t, {"status": "cancelled"})
            return
        self._phase("eval", self._eval_s())
        publish = self._jitter(times.publish_final)
        self._phase("publish", 30.0 if self._has("oob_publish") else publish)  # a hand-off
        self._phase("shutdown", self._jitter(times.shutdown))
        self._mark("attempt_end", self.t, {"status": "completed"})
