"""``manage.py simulate_fleet``: a seeded fleet that is valid, deterministic, never in the future,
rolled out in stages, better at the end than at the start by ETT's own engine, stored through
the import path and removed again by ``--clear`` without touching a real job."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from io import StringIO
from typing import Any

import orjson
import pytest
from django.core.management import CommandError, call_command

from collector.schema import parse_event, validate_event
from ettweb.attribution.engine import attribute_job
from ettweb.ingest import partitions
from ettweb.ingest.models import Event, EventId, Job
from ettweb.ingest.tasks import ingest_batch
from ettweb.rollouts.models import Rollout
from ettweb.rollouts.scope import parse_scope
from ettweb.rollups.models import DailyCategoryRollup, JobRollup
from ettweb.simulate.events import event_time, fleet_events, job_events
from ettweb.simulate.fleet import BIG_JOB_GPUS, DAY_S, FleetPlan
from ettweb.simulate.jobs import draw_job, job_rng
from ettweb.simulate.rollout_plan import OPTIMIZATIONS, recorded, rollout_schedule
from ettweb.simulate.store import event_lines, simulated_jobs
from tests.conftest import worked_example

END = date(2026, 11, 30)
SMALL = FleetPlan(seed=7, days=30, jobs=60, end=END)


def _events(plan: FleetPlan) -> list[dict[str, Any]]:
    return list(fleet_events(plan))


@pytest.fixture(scope="module")
def small_fleet() -> list[dict[str, Any]]:
    return _events(SMALL)


# --------------------------------------------------------------------------- the generator

def test_same_seed_and_end_give_the_same_events_and_another_seed_others(
        small_fleet: list[dict[str, Any]]) -> None:
    assert _events(SMALL) == small_fleet
    other = _events(FleetPlan(seed=8, days=30, jobs=60, end=END))
    assert other != small_fleet
    assert not {e["id"] for e in other} & {e["id"] for e in small_fleet}
    assert not {e["job"] for e in other} & {e["job"] for e in small_fleet}


def test_each_job_is_drawn_on_its_own(small_fleet: list[dict[str, Any]]) -> None:
    schedule = rollout_schedule(SMALL)
    alone = job_events(SMALL, 17, schedule)
    assert alone and alone == [e for e in small_fleet if e["id"].startswith("sim-7-17-")]


def test_every_event_is_valid_schema_v1(small_fleet: list[dict[str, Any]]) -> None:
    ids = Counter(event["id"] for event in small_fleet)
    assert ids.most_common(1)[0][1] == 1
    for event in small_fleet:
        validate_event(event)
        assert parse_event(orjson.dumps(event)) == validate_event(event)
        assert len(event["id"]) <= 64
    kinds = Counter(event.get("phase") or event["mark"] for event in small_fleet)
    for phase in ("scheduling", "container_start", "rendezvous", "process_group_init",
                  "model_init", "sharding_plan", "data_init", "compile", "checkpoint_load",
                  "checkpoint_save", "eval", "publish", "train", "attempt_start",
                  "attempt_end"):
        assert kinds[phase], phase


def test_attempt_start_carries_the_job_and_the_simulated_marker(
        small_fleet: list[dict[str, Any]]) -> None:
    starts = [e for e in small_fleet if e.get("mark") == "attempt_start"]
    for event in starts:
        attrs = event["attrs"]
        assert attrs["simulated"] is True
        assert attrs["gpus"] >= 1 and attrs["model"] and attrs["team"] and attrs["cluster"]
        assert event["job"].startswith(f"sim-{SMALL.seed}-{attrs['team']}-{attrs['model']}-")
    statuses = Counter(e["attrs"]["status"] for e in small_fleet if e.get("mark") == "attempt_end")
    assert statuses["completed"] and statuses["failed"] + statuses["preempted"]


def test_no_event_is_after_the_cutoff_and_the_cutoff_only_hides() -> None:
    until = datetime(2026, 11, 20, 13, 30, tzinfo=UTC).timestamp()
    cut = _events(FleetPlan(seed=7, days=30, jobs=60, end=END, until=until))
    whole = {event["id"]: event for event in _events(SMALL)}
    assert cut and max(event_time(event) for event in cut) <= until
    assert all(whole[event["id"]] == event for event in cut)  # nothing changes, it is hidden
    assert max(event_time(event) for event in whole.values()) <= SMALL.end_ts
    running = _last_attempts_without_end(cut)
    assert running, "a job still running at the cut-off has no attempt_end"


def _last_attempts_without_end(events: list[dict[str, Any]]) -> list[str]:
    by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        by_job[event["job"]].append(event)
    running = []
    for job, events_of_job in by_job.items():
        last = max(event["attempt"] for event in events_of_job)
        if not any(e.get("mark") == "attempt_end" and e["attempt"] == last
                   for e in events_of_job):
            running.append(job)
    return running


def test_restarts_repeat_steps_and_fail_with_a_tail(small_fleet: list[dict[str, Any]]) -> None:
    by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in small_fleet:
        by_job[event["job"]].append(validate_event(event))
    attributions = [attribute_job(events) for events in by_job.values()]
    assert sum(a.repeated_steps for a in attributions) > 0
    assert sum(a.lost_s.get("failure", 0.0) for a in attributions) > 0
    assert sum(a.lost_s.get("restart_gap", 0.0) for a in attributions) > 0


def test_sizes_have_a_long_tail_and_big_jobs_train_longer_and_fail_more() -> None:
    plan = FleetPlan(seed=0, days=180, jobs=4000, end=END)
    specs = [draw_job(plan, index, job_rng(0, index)) for index in range(plan.jobs)]
    sizes = Counter(spec.gpus for spec in specs)
    assert min(sizes) == 1 and max(sizes) >= 2048
    big_jobs = sum(n for g, n in sizes.items() if g >= BIG_JOB_GPUS)
    assert 0 < 10 * big_jobs < sum(n for g, n in sizes.items() if g <= 64)
    big = [s for s in specs if s.gpus >= BIG_JOB_GPUS]
    small = [s for s in specs if s.gpus <= 64]

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    assert mean([s.goal_steps / s.steps_per_s for s in big]) > \
        1.5 * mean([s.goal_steps / s.steps_per_s for s in small])
    assert min(s.failures_per_s for s in big) > 5 * max(s.failures_per_s for s in small)


# --------------------------------------------------------------------------- the rollouts

@pytest.mark.parametrize("days", [90, 180])
def test_every_optimization_pilots_first_then_reaches_the_fleet(days: int) -> None:
    plan = FleetPlan(seed=0, days=days, jobs=1, end=END)
    everything = rollout_schedule(plan)
    schedule = recorded(everything)
    assert len(schedule) == 2 * len(OPTIMIZATIONS) == len({s.name for s in schedule})
    (unrecorded,) = [s for s in everything if not s.recorded]  # ETT_SPEC §6.3's change
    assert unrecorded.component == "evaluation" and unrecorded.scope.teams == ("ads",)
    fleet_stages = sorted(s.at for s in schedule if s.scope.is_fleet)
    assert fleet_stages[-2] < unrecorded.at < fleet_stages[-1]
    for opt in OPTIMIZATIONS:
        pilot, fleet = sorted((s for s in schedule if s.optimization == opt.key),
                              key=lambda s: s.stage)
        assert pilot.component == fleet.component == opt.component
        assert parse_scope(pilot.scope.as_dict()) == pilot.scope and not pilot.scope.is_fleet
        assert fleet.scope.is_fleet and fleet.scope.as_dict() == {}
        assert 14 * DAY_S <= fleet.at - pilot.at <= 36 * DAY_S
        for stage in (pilot, fleet):  # 14 whole days of data before and after (ETT_SPEC §6)
            day = datetime.fromtimestamp(stage.at, UTC).date()
            assert day - timedelta(days=14) >= plan.end - timedelta(days=days - 1)
            assert day + timedelta(days=14) <= plan.end


def test_a_job_gets_an_optimization_only_in_scope_and_after_it_landed() -> None:
    plan = FleetPlan(seed=1, days=90, jobs=300, end=END)
    schedule = rollout_schedule(plan)
    seen = 0
    for event in fleet_events(plan, schedule):
        if event.get("mark") != "attempt_start":
            continue
        attrs = event["attrs"]
        reached = {s.optimization for s in schedule if s.at <= event["ts"] and s.reaches(
            event["job"], attrs["model"], attrs["team"], attrs["cluster"])}
        assert set(attrs["optimizations"]) == reached
        seen += bool(reached)
    assert seen


def test_the_engine_finds_the_fleet_better_at_the_end() -> None:
    """ETT's attribution, not the generator's arithmetic: last two weeks beat the first."""
    plan = FleetPlan(seed=0, days=60, jobs=200, end=END)
    by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in fleet_events(plan):
        by_job[event["job"]].append(validate_event(event))
    first, last = (plan.end - timedelta(days=59), plan.end - timedelta(days=46)), \
        (plan.end - timedelta(days=13), plan.end)
    totals = {name: [0.0, 0.0] for name in ("first", "last")}
    for events in by_job.values():
        for day, categories in attribute_job(events).per_day_gpu_s().items():
            for name, (low, high) in (("first", first), ("last", last)):
                if low <= day <= high:
                    totals[name][0] += sum(categories.values())
                    totals[name][1] += categories.get("productive", 0.0)
    ett = {name: 100 * productive / wall for name, (wall, productive) in totals.items()}
    assert ett["last"] > ett["first"] + 5, ett


# --------------------------------------------------------------------------- the command

@pytest.fixture(autouse=True)
def fresh_partition_cache() -> Iterator[None]:
    """Partitions made inside a rolled-back test transaction are gone: forget them."""
    partitions.forget_known()
    yield
    partitions.forget_known()


def _simulate(*args: str) -> str:
    out = StringIO()
    call_command("simulate_fleet", *args, "--no-progress", stdout=out)
    return out.getvalue().strip()


PLAN_ARGS = ("--seed", "7", "--days", "30", "--jobs", "60", "--end", END.isoformat())


@pytest.mark.django_db
def test_the_command_stores_the_fleet_once_with_its_rollouts() -> None:
    last_line = _simulate(*PLAN_ARGS).splitlines()[-1]
    lines = list(event_lines(SMALL, rollout_schedule(SMALL)))
    jobs = {json.loads(line)["job"] for line in lines}
    assert f"simulated {len(jobs)} jobs" in last_line
    assert f"{len(lines):,} events ({len(lines):,} stored, 0 duplicates" in last_line
    assert "14 rollouts" in last_line and "fleet ETT% " in last_line and "→" in last_line
    assert Event.objects.count() == len(lines)
    assert set(JobRollup.objects.values_list("job", flat=True)) == jobs == set(simulated_jobs())
    rollouts = Rollout.objects.filter(simulated=True)
    assert rollouts.count() == 14 and not Rollout.objects.filter(simulated=False).exists()
    assert {r.component for r in rollouts} == {opt.component for opt in OPTIMIZATIONS}
    assert all(parse_scope(r.scope) == r.parsed_scope for r in rollouts)

    again = _simulate(*PLAN_ARGS).splitlines()[-1]
    assert f"(0 stored, {len(lines):,} duplicates" in again
    assert Event.objects.count() == len(lines) and Rollout.objects.count() == 14


@pytest.mark.django_db
def test_clear_removes_the_simulation_and_leaves_a_real_job() -> None:
    real = [json.dumps({"v": 1, "id": f"real-{n}", **fields})
            for n, fields in enumerate(worked_example("live-job"))]
    ingest_batch(real)
    Rollout.objects.create(name="a real rollout", component="checkpointing",
                           at=datetime(2026, 11, 1, tzinfo=UTC), scope={})
    _simulate(*PLAN_ARGS)
    sim_jobs = simulated_jobs()
    assert sim_jobs and Event.objects.exclude(job="live-job").exists()

    out = _simulate("--clear")
    assert f"removed {len(sim_jobs)} simulated jobs" in out and "14 simulated rollouts" in out
    assert set(Event.objects.values_list("job", flat=True)) == {"live-job"}
    assert set(EventId.objects.values_list("event_id", flat=True)) == {
        f"real-{n}" for n in range(len(real))}
    assert list(Job.objects.values_list("job_id", flat=True)) == ["live-job"]
    assert list(JobRollup.objects.values_list("job", flat=True)) == ["live-job"]
    assert set(DailyCategoryRollup.objects.values_list("job_id", flat=True)) == {"live-job"}
    assert list(Rollout.objects.values_list("name", flat=True)) == ["a real rollout"]
    assert JobRollup.objects.get(job="live-job").ett_pct == pytest.approx(70.80, abs=0.01)


@pytest.mark.django_db
def test_clear_with_a_plan_clears_then_simulates() -> None:
    _simulate(*PLAN_ARGS)
    other = ("--seed", "8", "--days", "30", "--jobs", "20", "--end", END.isoformat())
    out = _simulate("--clear", *other).splitlines()
    assert out[0].startswith("removed ") and out[-1].startswith("simulated ")
    assert all(job.startswith("sim-8-") for job in simulated_jobs())
    assert Rollout.objects.filter(simulated=True).count() == 14


@pytest.mark.parametrize(("args", "message"), [
    (("--days", "0"), "--days must be between 1 and 3,650"),
    (("--days", "3651"), "--days must be between 1 and 3,650"),
    (("--jobs", "0"), "--jobs must be between 1 and 1,000,000"),
    (("--jobs", "1000001"), "--jobs must be between 1 and 1,000,000"),
    (("--jobs", "many"), "--jobs must be a whole number"),
    (("--seed", "-1"), "--seed must be between 0"),
    (("--end", "2026-02-30"), "--end must be a date YYYY-MM-DD"),
    (("--end", (datetime.now(UTC).date() + timedelta(days=2)).isoformat()),
     "--end must not be after today"),
])
def test_bad_arguments_exit_2_naming_the_option(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError) as exc:
        _simulate(*args)
    assert exc.value.returncode == 2
    assert message in str(exc.value)


def test_the_unrecorded_change_slows_evaluation_for_its_team_only() -> None:
    """Jobs of the team the unrecorded stage reaches spend 2.5 times as long in evaluation
    once it landed; the same jobs without it (or any other team's) do not; and an empty
    schedule (the A/A fleet, ``--no-rollouts``) changes nothing at all."""
    plan = FleetPlan(seed=4, days=90, jobs=400, end=END)
    everything = rollout_schedule(plan)
    (change,) = [s for s in everything if not s.recorded]
    without = [s for s in everything if s.recorded]

    def eval_seconds(schedule: object, team: str) -> float:
        total = 0.0
        for index in range(plan.jobs):
            for event in job_events(plan, index, schedule):  # type: ignore[arg-type]
                if event.get("phase") == "eval" and event["start"] > change.at \
                        and event["job"].startswith(f"sim-4-{team}-"):
                    total += event["end"] - event["start"]
        return total

    assert eval_seconds(everything, "ads") > 2.0 * eval_seconds(without, "ads")
    assert eval_seconds(everything, "feed") == eval_seconds(without, "feed")
    assert all(not e["attrs"]["optimizations"] for index in range(0, plan.jobs, 37)
               for e in job_events(plan, index, ()) if e.get("mark") == "attempt_start")
