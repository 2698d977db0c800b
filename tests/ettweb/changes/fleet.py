"""A fleet of 40 UTC days whose ``evaluation`` lost share steps up for team ads on one day.

Each day (Feb 1 - Mar 12, 2026) holds two one-attempt jobs that live inside the day: one of
team ads (2 GPUs) and one of team feed (1 GPU), each an ``eval`` span then ``train``. Team
feed evaluates 1 h and trains 9-10 h all along; team ads the same until :data:`STEP_DAY`,
then evaluates 3 h: its evaluation lost share goes from ~10% to ~25% of its wall time, and
the fleet's (ads holds two thirds of the GPU-hours) from ~10% to ~20%. Training time wobbles
by day (``_train_h``), so no series is perfectly flat.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final

from ettweb.ingest.tasks import ingest_batch
from tests.conftest import mark, span

H: Final = 3600.0
FIRST: Final = date(2026, 2, 1)
DAYS: Final = 40
#: The first day at the new level: Feb 21, 2026.
STEP_DAY: Final = FIRST + timedelta(days=20)
_ids = itertools.count()


def _train_h(index: int) -> float:
    return 9.0 + 0.1 * (index * 7 % 11)


def day_job(job: str, day: date, gpus: int, team: str, eval_h: float,
            train_h: float) -> list[dict[str, Any]]:
    """One completed attempt from 01:00 on ``day``: ``eval`` then ``train``."""
    t0 = datetime(day.year, day.month, day.day, 1, tzinfo=UTC).timestamp()
    t1, t2 = t0 + eval_h * H, t0 + (eval_h + train_h) * H
    return [mark(job, 0, "attempt_start", t0, attrs={"gpus": gpus, "team": team,
                                                      "model": "dlrm", "cluster": "east"}),
            span(job, 0, "eval", t0, t1),
            span(job, 0, "train", t1, t2, step_start=0, step_end=100),
            mark(job, 0, "attempt_end", t2, attrs={"status": "completed"})]


def events() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for index in range(DAYS):
        day = FIRST + timedelta(days=index)
        out += day_job(f"ads-{index}", day, 2, "ads", 3.0 if day >= STEP_DAY else 1.0,
                       _train_h(index))
        out += day_job(f"feed-{index}", day, 1, "feed", 1.0, _train_h(index + 2))
    return out


def ingest_fleet() -> None:
    ingest_batch([json.dumps({"v": 1, "id": f"chg{next(_ids)}", **event})
                  for event in events()])
