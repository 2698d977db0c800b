"""Issue 40's two repros against a real Celery worker (prefork, a private Redis, the test
database), with the production ingestion window (2000-01-01 to now + 1 day) and the rollup
refresh run at once, so the refresh that ran out of memory runs here too.

- A signed batch of heartbeats at now and ``ts=1e18`` (and the first trigger: -1e18, 0, now,
  2100, 1e18): the ones out of the window are quarantined with their reason, the others
  stored and rolled up, the next batch stored normally, and no process of the worker ever
  holds 500 MB (its peak RSS, ``VmHWM``). The worker runs under a 4 GiB address-space cap,
  so a regression fails this test instead of taking the machine's memory.
- 7 valid events and one line whose job is ``"agentpath-\\ud800"``: 7 stored, 1 quarantined
  with a reason, the next batch stored normally.
"""

from __future__ import annotations

import json
import resource
import subprocess
import time
import uuid
from pathlib import Path

import psutil
import pytest

from ettweb.ingest.models import Event, QuarantinedEvent
from ettweb.rollups.models import DirtyJob, JobRollup
from tests.ettweb.waiting import wait_until
from tests.ettweb.worker_fleet import Workers

pytestmark = [pytest.mark.integration, pytest.mark.slow,
              pytest.mark.django_db(transaction=True)]
#: The issue's bound on a worker's memory, and the cap that keeps a regression from
#: running the machine out of memory before the assertion can fail.
PEAK_RSS_LIMIT = 500 * 2**20
ADDRESS_SPACE_CAP = 4 * 2**30


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))


@pytest.fixture
def fleet(workers: Workers) -> Workers:
    """The suite's real workers with the production ingestion window, an immediate refresh
    and a cap on each worker's address space (inherited by its pool children)."""
    workers.env.update(ETT_INGEST_EARLIEST="2000-01-01", ETT_INGEST_MAX_FUTURE_S="86400",
                       ETT_ROLLUP_REFRESH_DELAY_S="0")
    workers.preexec = _capped
    return workers


def _heartbeat(job: str, ts: float, n: int) -> str:
    return json.dumps({"v": 1, "id": f"{job}-{n}", "job": job, "attempt": 0, "kind": "mark",
                       "mark": "heartbeat", "ts": ts, "step": n})


def _peak_rss(proc: subprocess.Popen[bytes]) -> int:
    """The largest peak resident set (VmHWM) among the worker's processes, in bytes."""
    main = psutil.Process(proc.pid)
    peaks = []
    for process in [main, *main.children(recursive=True)]:
        status = Path(f"/proc/{process.pid}/status").read_text()
        kib = next(line.split()[1] for line in status.splitlines()
                   if line.startswith("VmHWM:"))
        peaks.append(int(kib) * 1024)
    return max(peaks)


def _rolled_up(job: str, events: int) -> bool:
    rollup = JobRollup.objects.filter(job=job).first()
    return (rollup is not None and rollup.events == events
            and not DirtyJob.objects.filter(job=job).exists())


def _next_batch_is_normal(fleet: Workers) -> None:
    job = f"after-{uuid.uuid4().hex[:6]}"
    now = time.time()
    fleet.publish([_heartbeat(job, now - 10 + i, i) for i in range(5)])
    wait_until(lambda: Event.objects.filter(job=job).count() == 5 and _rolled_up(job, 5),
               60, fleet.logs)


def _clean(log: str) -> None:
    assert "Traceback" not in log and "WorkerLostError" not in log, log[-3000:]
    assert "raised unexpected" not in log


def test_far_future_heartbeats_are_quarantined_and_memory_stays_bounded(
        fleet: Workers) -> None:
    worker = fleet.start("far")
    now = time.time()
    lone, first = f"lone-{uuid.uuid4().hex[:6]}", f"first-{uuid.uuid4().hex[:6]}"
    fleet.publish([_heartbeat(lone, now, 0), _heartbeat(lone, 1e18, 1)])
    trigger = (-1e18, 0.0, now, 4102444800.0, 1e18)  # 4102444800: 2100-01-01
    fleet.publish([_heartbeat(first, ts, n) for n, ts in enumerate(trigger)])
    wait_until(lambda: QuarantinedEvent.objects.filter(job__in=[lone, first]).count() == 5
               and _rolled_up(lone, 1) and _rolled_up(first, 1), 90, fleet.logs)
    assert list(Event.objects.filter(job__in=[lone, first]).values_list("ts", flat=True)) \
        == [now, now]
    reasons = QuarantinedEvent.objects.values_list("reason", flat=True)
    assert all(reason.startswith("event.ts: ") and "outside the ingestion window "
               "[2000-01-01T00:00:00Z, " in reason for reason in reasons)
    rollup = JobRollup.objects.get(job=first)
    assert rollup.window_end is not None and rollup.window_end <= now + 86400
    _next_batch_is_normal(fleet)
    peak = _peak_rss(worker)
    print(f"issue 40 far-future repro: worker peak RSS {peak / 2**20:.0f} MiB")
    assert peak < PEAK_RSS_LIMIT, f"peak RSS {peak / 2**20:.0f} MiB"
    _clean(fleet.log("far"))
    assert worker.poll() is None


def test_a_surrogate_job_loses_nothing_on_a_real_worker(fleet: Workers) -> None:
    worker = fleet.start("surrogate")
    jobs = (f"agentpath-{uuid.uuid4().hex[:6]}", f"other-{uuid.uuid4().hex[:6]}")
    now = time.time()
    valid = [_heartbeat(jobs[i % 2], now - 100 + i, i) for i in range(7)]
    bad = json.dumps({"v": 1, "id": "bad-1", "job": "agentpath-SURROGATE", "attempt": 0,
                      "kind": "mark", "mark": "heartbeat", "ts": now}).replace(
                          "SURROGATE", "\\ud800")
    assert "\\ud800" in bad  # the escape as the spool line holds it
    fleet.publish([*valid[:4], bad, *valid[4:]])
    wait_until(lambda: Event.objects.filter(job__in=jobs).count() == 7
               and QuarantinedEvent.objects.count() == 1, 60, fleet.logs)
    row = QuarantinedEvent.objects.get()
    assert row.reason == "event.job: invalid unicode (lone surrogate)"
    assert (row.raw, row.job) == (bad, "agentpath-\\ud800")
    _next_batch_is_normal(fleet)
    peak = _peak_rss(worker)
    assert peak < PEAK_RSS_LIMIT, f"peak RSS {peak / 2**20:.0f} MiB"
    _clean(fleet.log("surrogate"))
    assert worker.poll() is None
