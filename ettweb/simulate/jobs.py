"""One simulated job's draw: its labels, size, training plan, failure rate and phase times.

Why low-discrepancy sequences for size, team and cluster: a fleet's GPU-hours are dominated
by its few largest jobs, and independent draws leave some fortnights with several times the
big jobs of the next, a swing in fleet ETT% larger than any one rollout's effect
(``draw_job`` says how). Everything else about a job comes from its own generator
(``job_rng``), so any one job can be drawn alone.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from ettweb.simulate.fleet import (
    BASE_FAILURES_PER_H,
    BIG_JOB_CLUSTER,
    BIG_JOB_GPUS,
    BIG_JOB_TEAMS,
    CHECKPOINT_EVERY_MIN,
    CLUSTER_WEIGHTS,
    CLUSTERS,
    DAY_S,
    FAILURE_STEEPNESS,
    GPU_SIZES,
    HALTON_BASES,
    HOUR_S,
    MAX_EXTRA_FAILURES_PER_H,
    MINUTE_S,
    MODEL_COMPLEXITY,
    SHARE_CANCELLED,
    SHARE_PUBLISHING,
    TEAM_WEIGHTS,
    TEAMS,
    TRAIN_SPREAD,
    FleetPlan,
)

Picked = TypeVar("Picked")


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
