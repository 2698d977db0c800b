"""The whole path, with real processes: Reporter → spool → collector agent → broker →
Celery worker → Postgres → query runner. The job's numbers read back from the database must be
the offline report's numbers on the same spool file (ETT_SPEC §5)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from collector import Reporter
from ettweb.ingest.credentials import new_credential
from ettweb.ingest.models import BatchNonce, Event, QuarantinedEvent
from ettweb.queries import JobQuery, JobQueryRunner, JobResult
from ettweb.settings.env import database_url

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parent.parent
T0 = 1_795_000_000.0  # a fixed epoch so the timeline is the same on every run


def _write_lifecycle(spool: Path, job: str) -> int:
    """Two attempts of one job through the real Reporter; returns the events written."""
    first = Reporter(job, attempt=0, spool_dir=spool, heartbeat_s=0)
    first.attempt_start(gpus=2, ts=T0, model="dlrm", team="ads")
    first.span("process_group_init", T0, T0 + 3)
    first.span("compile", T0 + 3, T0 + 12, attrs={"fxgraph_cache_miss": 3})
    first.span("train", T0 + 12, T0 + 72, step_start=0, step_end=600)
    first.span("checkpoint_save", T0 + 72, T0 + 74)
    first.span("checkpoint_save", T0 + 74, T0 + 80, blocking=False)
    first.span("train", T0 + 74, T0 + 90, step_start=600, step_end=760)
    first.mark("heartbeat", T0 + 90, step=760)
    first.attempt_end("failed", ts=T0 + 95)
    second = Reporter(job, attempt=1, spool_dir=spool, heartbeat_s=0)
    second.attempt_start(ts=T0 + 105)
    second.span("checkpoint_load", T0 + 105, T0 + 108)
    second.span("train", T0 + 108, T0 + 148, step_start=600, step_end=1000)
    second.attempt_end("completed", ts=T0 + 150)
    for reporter in (first, second):
        assert reporter.shutdown(timeout=10)
        assert reporter.dropped_invalid == reporter.dropped_full == 0
    return sum(len(p.read_text().splitlines()) for p in spool.glob("*.jsonl"))


@pytest.fixture
def worker_env(tmp_path: Path) -> dict[str, str]:
    """Environment for the worker and the agent; the agent signs with a real credential."""
    credential = new_credential(f"e2e-{uuid.uuid4().hex[:8]}")
    env = dict(os.environ)
    env.update(DJANGO_SETTINGS_MODULE="ettweb.settings.test",
               DATABASE_URL=database_url(connection.settings_dict),
               CELERY_BROKER_URL=str(settings.CELERY_BROKER_URL), PYTHONUNBUFFERED="1",
               ETT_COLLECTOR_ID=credential.collector_id,
               ETT_COLLECTOR_SECRET=credential.secret)
    return env


@pytest.fixture
def queue() -> str:
    """A queue of this test's own, so nothing else on a shared broker takes its batches."""
    return f"ett-e2e-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def worker(worker_env: dict[str, str], queue: str, tmp_path: Path) -> Iterator[Path]:
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "ettweb.celery", "worker", "-Q", queue,
             "-n", f"e2e-{queue}@%h", "--concurrency", "1", "--pool", "solo", "--loglevel", "INFO",
             "--without-heartbeat", "--without-mingle", "--without-gossip"],
            cwd=ROOT, env=worker_env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield log
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _wait_for(predicate: object, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.25)
    pytest.fail(f"timed out; worker log:\n{log.read_text()[-3000:]}")


def test_reporter_events_reach_postgres_with_the_offline_reports_numbers(
    tmp_path: Path, worker_env: dict[str, str], queue: str, worker: Path
) -> None:
    spool, job = tmp_path / "spool", f"e2e-{uuid.uuid4().hex[:6]}"
    written = _write_lifecycle(spool, job)
    assert written == 13
    spool_file = next(spool.glob("*.jsonl"))
    with spool_file.open("a") as handle:  # one malformed line beside the valid ones
        handle.write(json.dumps({"v": 1, "id": "bad-1", "job": job, "kind": "span"}) + "\n")

    agent = subprocess.run(
        [sys.executable, "-m", "collector", "--once", "--spool-dir", str(spool),
         "--queue", queue, "--broker", worker_env["CELERY_BROKER_URL"]],
        cwd=ROOT, env=worker_env, capture_output=True, text=True, timeout=120)
    assert agent.returncode == 0, agent.stderr

    _wait_for(lambda: Event.objects.filter(job=job).count() == written
              and QuarantinedEvent.objects.filter(raw__contains="bad-1").exists(), 90, worker)
    reason = QuarantinedEvent.objects.get(raw__contains="bad-1").reason
    assert "missing required field" in reason

    offline = subprocess.run(
        [sys.executable, "-m", "ettweb.attribution", *map(str, sorted(spool.glob("*.jsonl")))],
        cwd=ROOT, capture_output=True, text=True, check=True)
    report = json.loads(offline.stdout)
    (offline_job,) = report["jobs"]
    assert [r["reason"] for r in report["rejected"]] == [reason]

    # The worker refreshes the job's rollups once its debounce passed; until then the job
    # is being computed (a read never refreshes it).
    _wait_for(lambda: isinstance(JobQueryRunner(JobQuery(job=job)).calculate(), JobResult),
              60, worker)
    result = JobQueryRunner(JobQuery(job=job)).calculate()
    assert isinstance(result, JobResult)
    online = result.headline  # the stored rollup, what the job page shows
    assert online.ett_pct == pytest.approx(offline_job["ett_pct"], abs=0.005)
    assert online.wall_gpu_s == pytest.approx(offline_job["wall_gpu_s"])
    assert online.productive_gpu_s == pytest.approx(offline_job["productive_gpu_s"])
    assert dict(online.lost_s) == pytest.approx(offline_job["lost_s"])
    assert online.repeated_steps == offline_job["repeated_steps"] == 160
    assert len(online.attempts) == offline_job["attempts"] == 2
    # Independent arithmetic: wall 150 s; productive 60 + 16 + 40 * (1 - 160/400) = 100 s.
    assert offline_job["ett_pct"] == pytest.approx(100 * 100 / 150, abs=0.005)


def test_a_batch_published_three_times_is_stored_once(
    tmp_path: Path, worker_env: dict[str, str], queue: str, worker: Path
) -> None:
    spool, job = tmp_path / "spool", f"e2e-dup-{uuid.uuid4().hex[:6]}"
    written = _write_lifecycle(spool, job)
    for _ in range(3):  # a fresh state file each time: the agent re-ships everything
        agent = subprocess.run(
            [sys.executable, "-m", "collector", "--once", "--spool-dir", str(spool),
             "--queue", queue, "--broker", worker_env["CELERY_BROKER_URL"],
             "--state-file", str(tmp_path / f"state-{uuid.uuid4().hex}.json")],
            cwd=ROOT, env=worker_env, capture_output=True, text=True, timeout=120)
        assert agent.returncode == 0, agent.stderr
    _wait_for(lambda: Event.objects.filter(job=job).count() == written
              and BatchNonce.objects.count() >= 3, 90, worker)
    time.sleep(2.0)  # let the duplicate batches drain too, then check nothing was added
    assert Event.objects.filter(job=job).count() == written
    assert not QuarantinedEvent.objects.exists()  # signed anew each time: not replays
