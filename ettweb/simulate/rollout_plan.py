"""The optimizations the simulated fleet receives, and the stages that roll them out.

Why in stages: a rollout's impact is measured by comparing jobs it reached with jobs it had
not reached yet, so each optimization lands on one team or cluster first (the pilot) and on
the whole fleet weeks later. Beside them one change nobody recorded (slower evaluation for
one team) changes the jobs but is never stored as a rollout, so only the change detection
can find it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ettweb.rollouts.scope import Scope, parse_scope
from ettweb.simulate.fleet import DAY_S, HOUR_S, FleetPlan


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
