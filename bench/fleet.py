"""A seeded synthetic training fleet: schema-v1 events shaped like real DLRM jobs.

Benchmarks need a fleet big enough to show where time goes in the engine (millions of events,
thousands of jobs) and realistic enough to exercise every rule of ETT_SPEC §3: many ranks
whose span boundaries disagree by a fraction of a second, init phases, checkpoints saved
synchronously and uploaded in the background, evals, in-process rollbacks, failed /
preempted / lost attempts with failure tails, restarts from the last checkpoint that train
the same steps again, restart gaps, GPU counts from 1 to 64 and model/team/cluster attrs.

Events come out already normalized (what ``collector.schema.validate_event`` returns), so
the engine can be timed without parsing; ``write_jsonl`` produces the file form for the
offline report. The same seed always gives the same events, byte for byte.

``python -m bench.fleet [--jobs N] [--seed S] [--out PATH]`` writes a fleet as JSONL
(default: 200 jobs to ``var/bench/fleet.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from collector.schema import dump_event

Event = dict[str, Any]

#: 2025-01-01T00:00:00Z: jobs start over the following ``days`` so rollups span UTC days.
FLEET_EPOCH: Final = 1_735_689_600.0
GPU_COUNTS: Final = (1, 2, 4, 8, 8, 16, 16, 32, 64)
MODELS: Final = ("dlrm-ctr", "dlrm-cvr", "two-tower", "seq-rec")
TEAMS: Final = ("ads", "feed", "search", "commerce")
CLUSTERS: Final = ("east-1", "west-2", "north-3")
FAILED: Final = ("failed", "preempted", "lost")
#: Init phases every rank runs at each attempt start, with (min, max) seconds.
INIT_PHASES: Final = (
    ("rendezvous", 1.0, 10.0),
    ("process_group_init", 2.0, 20.0),
    ("model_init", 5.0, 40.0),
    ("sharding_plan", 1.0, 10.0),
    ("data_init", 2.0, 15.0),
    ("compile", 10.0, 120.0),
)
DEFAULT_JOBS: Final = 2000
CLI_JOBS: Final = 200  # `make bench` runs this module too: keep its file small
DEFAULT_MIN_RANKS: Final = 4
DEFAULT_MAX_RANKS: Final = 16
SLICE_S: Final = 60.0  # the Reporter closes train spans every 60 s (ETT_SPEC §2)


@dataclass(frozen=True, slots=True)
class FleetPlan:
    """The knobs of a synthetic fleet; the defaults give >= 2,000 jobs and >= 1M events."""

    jobs: int = DEFAULT_JOBS
    seed: int = 0
    min_ranks: int = DEFAULT_MIN_RANKS
    max_ranks: int = DEFAULT_MAX_RANKS
    min_slices: int = 15  # 60-s slices of new training per job, across its attempts
    max_slices: int = 50
    days: int = 14


def fleet_events(seed: int = 0, jobs: int = DEFAULT_JOBS, *,
                 min_ranks: int = DEFAULT_MIN_RANKS, max_ranks: int = DEFAULT_MAX_RANKS,
                 min_slices: int = 15, max_slices: int = 50,
                 days: int = 14) -> Iterator[Event]:
    """Yield the fleet's normalized events, job after job (each job's in emission order).

    Each job draws from its own ``Random(f"{seed}:{index}")``, so a job's events do not
    depend on how many jobs come before it.
    """
    plan = FleetPlan(jobs=jobs, seed=seed, min_ranks=min_ranks, max_ranks=max_ranks,
                     min_slices=min_slices, max_slices=max_slices, days=days)
    for index in range(plan.jobs):
        yield from _JobSimulation(plan, index).run()


def write_jsonl(events: Iterable[Event], stream: IO[str]) -> int:
    """Write events as schema-v1 JSONL; returns how many were written."""
    count = 0
    for event in events:
        stream.write(dump_event(event))
        stream.write("\n")
        count += 1
    return count


class _JobSimulation:
    """One job's life: attempts that init, train in slices, checkpoint, fail and restart."""

    def __init__(self, plan: FleetPlan, index: int) -> None:
        self.rng = random.Random(f"{plan.seed}:{index}")
        self.job = f"job-{index:05d}"
        self.events: list[Event] = []
        self.serial = 0
        rng = self.rng
        self.ranks = rng.randint(plan.min_ranks, plan.max_ranks)
        self.gpus = rng.choice(GPU_COUNTS)
        self.attrs = {"model": rng.choice(MODELS), "team": rng.choice(TEAMS),
                      "cluster": rng.choice(CLUSTERS)}
        self.t = FLEET_EPOCH + rng.uniform(0.0, plan.days * 86400.0)
        self.steps_per_slice = int(SLICE_S) * rng.choice((5, 10, 20, 50))
        self.goal = rng.randint(plan.min_slices, plan.max_slices) * self.steps_per_slice
        self.ckpt_every = rng.randint(3, 8)
        self.failures = rng.choices((0, 1, 2, 3, 4), weights=(25, 35, 20, 12, 8))[0]
        self.step = 0
        self.ckpt_step = 0
        self.attempt = 0

    def run(self) -> list[Event]:
        for attempt in range(self.failures + 1):
            self.attempt = attempt
            self._attempt(failing=attempt < self.failures)
            self.t += self.rng.uniform(20.0, 600.0)  # restart gap: rescheduling
        return self.events

    # --- event builders -------------------------------------------------------------------

    def _base(self, kind: str, rank: int) -> Event:
        self.serial += 1
        return {"v": 1, "id": f"{self.job}:{self.serial}", "job": self.job,
                "attempt": self.attempt, "kind": kind, "rank": rank,
                "host": f"{self.job}-node{rank // 8}", "blocking": True, "attrs": {}}

    def _span(self, phase: str, start: float, end: float, rank: int = 0, *,
              steps: tuple[int, int] | None = None, blocking: bool = True) -> None:
        event = self._base("span", rank)
        event["blocking"] = blocking
        event["phase"], event["start"], event["end"] = phase, start, end
        if steps is not None:
            event["step_start"], event["step_end"] = steps
        self.events.append(event)

    def _mark(self, mark: str, ts: float, attrs: dict[str, Any] | None = None,
              step: int | None = None) -> None:
        event = self._base("mark", 0)
        event["mark"], event["ts"] = mark, ts
        if attrs:
            event["attrs"] = attrs
        if step is not None:
            event["step"] = step
        self.events.append(event)

    # --- one attempt ----------------------------------------------------------------------

    def _attempt(self, *, failing: bool) -> None:
        rng = self.rng
        start_attrs: dict[str, Any] = dict(self.attrs)
        if self.attempt == 0 or rng.random() < 0.5:  # else: gpus default to the previous
            start_attrs["gpus"] = self.gpus
        self._mark("attempt_start", self.t, start_attrs)
        if self.attempt == 0:
            self._serial_phase("scheduling", 1.0, 30.0)
        self._serial_phase("container_start", 5.0, 30.0)
        for phase, low, high in INIT_PHASES:
            self._rank_phase(phase, low, high)
        if self.ckpt_step > 0:
            self._rank_phase("checkpoint_load", 5.0, 60.0)
            self.step = self.ckpt_step
        fail_at = rng.randint(1, max(1, self._slices_left())) if failing else None
        self._train(fail_at)
        self._finish(failing)

    def _slices_left(self) -> int:
        return max(1, (self.goal - self.step) // self.steps_per_slice)

    def _serial_phase(self, phase: str, low: float, high: float) -> None:
        """A phase only the supervisor (rank 0) reports: the others wait on it."""
        end = self.t + self.rng.uniform(low, high)
        self._span(phase, self.t, end)
        self.t = end

    def _rank_phase(self, phase: str, low: float, high: float) -> None:
        """A phase every rank runs; ranks start together and the slowest sets the pace."""
        base = self.rng.uniform(low, high)
        ends = []
        for rank in range(self.ranks):
            end = self.t + base + self.rng.uniform(0.0, 0.5)
            self._span(phase, self.t, end, rank)
            ends.append(end)
        self.t = max(ends)

    def _train(self, fail_at: int | None) -> None:
        """60-s train slices on every rank; checkpoints, evals, rollbacks; maybe a crash."""
        rng = self.rng
        offsets = [rng.uniform(0.0, 0.3) for _ in range(self.ranks)]
        done = 0
        while self.step < self.goal:
            done += 1
            crash = fail_at is not None and done >= fail_at
            length = SLICE_S * (rng.uniform(0.1, 0.9) if crash else 1.0)
            steps = max(1, int(self.steps_per_slice * length / SLICE_S))
            for rank, offset in enumerate(offsets):
                self._span("train", self.t + offset, self.t + offset + length, rank,
                           steps=(self.step, self.step + steps))
            self.t += length + max(offsets)
            self.step += steps
            if crash:
                return
            self._mark("heartbeat", self.t, step=self.step)
            if done % self.ckpt_every == 0:
                self._checkpoint()
            elif rng.random() < 0.08:
                self._rank_phase("eval", 10.0, 60.0)
            elif rng.random() < 0.03 and self.step > self.ckpt_step:
                self.step = self.ckpt_step  # in-process rollback (e.g. NaN loss): redo steps

    def _checkpoint(self) -> None:
        """A synchronous save on every rank, then rank 0 uploads it in the background."""
        self._rank_phase("checkpoint_save", 2.0, 30.0)
        self.ckpt_step = self.step
        self._span("checkpoint_save", self.t, self.t + self.rng.uniform(10.0, 120.0),
                   blocking=False)

    def _finish(self, failing: bool) -> None:
        rng = self.rng
        if failing:
            status = rng.choice(FAILED)
            if status != "lost":  # a lost attempt never reports its end
                self._mark("attempt_end", self.t + rng.uniform(5.0, 300.0), {"status": status})
            return
        status = rng.choices(("completed", "cancelled", "running"), weights=(85, 5, 10))[0]
        if status == "running":
            return
        self._rank_phase("shutdown", 2.0, 10.0)
        if status == "completed":
            self._span("publish", self.t, self.t + rng.uniform(30.0, 300.0), blocking=False)
            self.t += rng.uniform(1.0, 20.0)
        self._mark("attempt_end", self.t, {"status": status})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fleet",
        description="Write a seeded synthetic fleet as schema-v1 JSONL.")
    parser.add_argument("--jobs", type=int, default=CLI_JOBS,
                        help=f"number of jobs (default {CLI_JOBS}: a file to try the offline "
                             f"report on; the benchmark's fleet has {DEFAULT_JOBS})")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--out", type=Path, default=Path("var/bench/fleet.jsonl"),
                        help="output file ('-' for standard output)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Write the fleet; the last line on stdout is a JSON summary (bench convention)."""
    args = _parser().parse_args(argv)
    events = fleet_events(args.seed, args.jobs)
    if str(args.out) == "-":
        count = write_jsonl(events, sys.stdout)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w", encoding="utf-8") as stream:
            count = write_jsonl(events, stream)
        print(json.dumps({"events": count, "jobs": args.jobs, "seed": args.seed,
                          "out": str(args.out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
