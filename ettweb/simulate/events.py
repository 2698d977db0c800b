"""One simulated job's life as ETT events, and the whole fleet's events job after job.

Why a run per attempt: ETT's numbers come from what attempts do — start up phase by phase,
train in checkpoint intervals, fail, wait, restart from the last durable checkpoint and
train the same steps again — and which optimizations had reached the job when each attempt
started decides how long its phases take.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ettweb.simulate.fleet import (
    FAILURE_REGULARITY,
    MAX_ATTEMPTS,
    PUBLISH_EVERY_S,
    SNAPSHOT_EVERY_S,
    FleetPlan,
)
from ettweb.simulate.jobs import JobSpec, draw_job, job_rng
from ettweb.simulate.rollout_plan import (
    EVAL_REGRESSION,
    UNRECORDED_KEY,
    PlannedRollout,
    rollout_schedule,
)

Event = dict[str, Any]


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
