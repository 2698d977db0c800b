"""A fleet of two teams, two models, two clusters and three GPU-size buckets, for the filters.

Every job lives inside UTC days of March 2026 (Mar 2 is a Monday), phases in whole or half
hours, so each filtered number is a sum of a few jobs' GPU-hours:

============================  ====  =====  =======  ====  ===============================
job                           team  model  cluster  GPUs  Mar day: phases (hours)
============================  ====  =====  =======  ====  ===============================
``ads-m1-east``               ads   m1     east        2  2: compile 1, train 5
``ads-m2-west``               ads   m2     west       16  3: ckpt load 1, train 3, *fails*;
                                                          gap 0.5, ckpt load 0.5, train 4
``feed-m1-east``              feed  m1     east       16  2: compile 2, train 6
``feed-m2-west``              feed  m2     west        1  4: train 2, ckpt save 1, train 3
``=HYPERLINK("x")``           ads   m1     east        1  5: compile 0.5, train 1.5
============================  ====  =====  =======  ====  ===============================

The last job's name starts a spreadsheet formula: every CSV export must neutralize it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, date, datetime
from typing import Any, Final

from ettweb.ingest.tasks import ingest_batch
from ettweb.queries import DateRange
from ettweb.rollups.models import JobRollup
from ettweb.rollups.removal import remove_jobs
from tests.conftest import mark, span

H: Final = 3600.0
FORMULA_JOB: Final = '=HYPERLINK("x")'
MARCH: Final = DateRange(date(2026, 3, 1), date(2026, 3, 31))
#: The pages' parameters for the whole of March.
MARCH_PARAMS: Final = {"date_from": "2026-03-01", "date_to": "2026-03-31"}
#: job -> (team, model, cluster, GPUs, day of March, attempts: (phases, status, gap before)).
JOBS: Final[dict[str, tuple[str, str, str, int, int, list[Any]]]] = {
    "ads-m1-east": ("ads", "m1", "east", 2, 2, [([("compile", 1), ("train", 5)], "completed",
                                                 0)]),
    "ads-m2-west": ("ads", "m2", "west", 16, 3, [
        ([("checkpoint_load", 1), ("train", 3)], "failed", 0),
        ([("checkpoint_load", 0.5), ("train", 4)], "completed", 0.5)]),
    "feed-m1-east": ("feed", "m1", "east", 16, 2, [([("compile", 2), ("train", 6)], "completed",
                                                   0)]),
    "feed-m2-west": ("feed", "m2", "west", 1, 4, [
        ([("train", 2), ("checkpoint_save", 1), ("train", 3)], "completed", 0)]),
    FORMULA_JOB: ("ads", "m1", "east", 1, 5, [([("compile", 0.5), ("train", 1.5)], "completed",
                                               0)]),
}


def _day(d: int) -> float:
    return datetime(2026, 3, d, tzinfo=UTC).timestamp()


def job_events(job: str) -> list[dict[str, Any]]:
    """One job's events: contiguous phases per attempt, steps carrying on across attempts."""
    team, model, cluster, gpus, day, attempts = JOBS[job]
    cursor, step, events = _day(day), 0, []
    for number, (phases, status, gap) in enumerate(attempts):
        cursor += gap * H
        attrs = {"gpus": gpus, "team": team, "model": model, "cluster": cluster}
        events.append(mark(job, number, "attempt_start", cursor, attrs=attrs))
        for phase, hours in phases:
            extra = ({"step_start": step, "step_end": step + int(hours * 100)}
                     if phase == "train" else {})
            events.append(span(job, number, phase, cursor, cursor + hours * H, **extra))
            cursor += hours * H
            step += int(hours * 100) if phase == "train" else 0
        if status == "failed":
            events.append(mark(job, number, "heartbeat", cursor, step=step))
        events.append(mark(job, number, "attempt_end", cursor, attrs={"status": status}))
    return events


def ingest(jobs: Sequence[str] = tuple(JOBS)) -> None:
    lines = [json.dumps({"v": 1, "id": f"sf-{job}-{i}", **event})
             for job in jobs for i, event in enumerate(job_events(job))]
    ingest_batch(lines)


def matching(team: str = "", model: str = "", cluster: str = "", gpus: str = "") -> set[str]:
    """The jobs a filter keeps, worked out from the table above (not by the code under test)."""
    low, high = {"": (0, 10**6), "1": (1, 1), "2-8": (2, 8), "9-64": (9, 64)}[gpus]
    return {job for job, (t, m, c, g, _, _) in JOBS.items()
            if (not team or t == team) and (not model or m == model)
            and (not cluster or c == cluster) and low <= g <= high}


def keep_only(jobs: set[str]) -> None:
    """Delete every other job's rollups (their day, attempt and recovery rows go with them):
    what the unfiltered queries then answer is the filtered subset's truth."""
    remove_jobs(set(JobRollup.objects.values_list("job", flat=True)) - jobs)
