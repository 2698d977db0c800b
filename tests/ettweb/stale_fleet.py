"""Jobs around the real clock for the stale tests of the API and the pages: ``gone`` was last
heard 10 minutes ago and ``live`` 5 seconds ago (both running), ``done`` ended."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from ettweb.ingest.tasks import ingest_batch
from tests.conftest import mark, span

_ids = itertools.count()


def _running(job: str, start: float, last: float) -> list[dict[str, Any]]:
    return [mark(job, 0, "attempt_start", start, attrs={"gpus": 2, "team": "ads"}),
            span(job, 0, "train", start, start + 30, step_start=0, step_end=300),
            mark(job, 0, "heartbeat", last, step=400)]


def store_stale_fleet() -> float:
    """Store the three jobs (their rollups refreshed); returns the time ``gone`` was last heard."""
    now = time.time()
    start = now - 1200
    events = (_running("gone", start, now - 600) + _running("live", start, now - 5) + [
        mark("done", 0, "attempt_start", start, attrs={"gpus": 2, "team": "ads"}),
        span("done", 0, "train", start, start + 60, step_start=0, step_end=600),
        mark("done", 0, "attempt_end", start + 60, attrs={"status": "completed"})])
    ingest_batch([json.dumps({"v": 1, "id": f"live-stale{next(_ids)}", **e}) for e in events])
    return now - 600
