"""The real Postgres server crashes and restarts under a running Celery ingest worker.

test_faults.py cuts the worker's sessions with pg_terminate_backend; here the server process
itself goes away (``pg_ctl stop -m immediate``: no checkpoint, crash recovery on start),
stays down for a few seconds and comes back. The worker must retry its batches in place with backoff
until the server is back (ettweb.ingest.tasks retries connection errors without limit), and
the run must end in an exact count: every event stored once, nothing quarantined.

The server is a private one (tests/ettweb/throwaway_postgres.py) because the shared ones
serve other tests; since nothing else writes to it, whole tables are counted. The broker is
the one the test settings use, with a private queue, as in test_faults.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from celery import Celery
from django.conf import settings
from psycopg import sql

from collector.auth import sign_batch
from ettweb.ingest.models import Event, EventId, QuarantinedEvent
from tests.ettweb.broker_queues import delete_queue
from tests.ettweb.throwaway_postgres import ThrowawayPostgres

pytestmark = [pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]
BATCHES = 30
BATCH_SIZE = 1000
TOTAL = BATCHES * BATCH_SIZE
#: Long enough that the worker fails several attempts (so its backoff really grows), short
#: enough that the last retry delay stays small. Celery's backoff doubles per retry with full
#: jitter (``randrange(2**retries + 1)`` s), so during a short outage a batch can still reach
#: 4-5 retries: a simulation of this outage puts the slowest batch's wait after the restart
#: at ~6 s median, ~25 s at p99, ~60 s at most, hence the 120 s allowance below.
DOWN_S = 2.0
ALL_STORED_TIMEOUT_S = 120
COUNT_ROWS = sql.SQL("*")
DISTINCT_IDS = sql.SQL("DISTINCT event_id")

#: Migrate the fresh database and create the collector credential the batches are signed
#: with, in one Django start-up (the credential must live in the worker's database).
SETUP_SCRIPT = """
import json, sys
import django
django.setup()
from django.core.management import call_command
from ettweb.ingest.credentials import new_credential
call_command("migrate", interactive=False, verbosity=0)
credential = new_credential(sys.argv[1])
print(json.dumps({"collector_id": credential.collector_id, "secret": credential.secret}))
"""


class RestartRig:
    """A private Postgres, one worker process pointed at it, and a signing publisher."""

    def __init__(self, tmp_path: Path, server: ThrowawayPostgres) -> None:
        self.tmp_path = tmp_path
        self.server = server
        self.queue = f"ett-pgrestart-{uuid.uuid4().hex[:8]}"
        self.worker: subprocess.Popen[bytes] | None = None
        self.worker_log = tmp_path / "worker.log"
        self.app = Celery(broker=settings.CELERY_BROKER_URL)
        self.app.conf.update(task_serializer="json", accept_content=["json"])
        self.env = dict(os.environ, DJANGO_SETTINGS_MODULE="ettweb.settings.test",
                        DATABASE_URL=server.url, PYTHONUNBUFFERED="1",
                        CELERY_BROKER_URL=str(settings.CELERY_BROKER_URL))
        self.collector_id = ""
        self.secret = ""

    def migrate_and_credential(self) -> None:
        done = subprocess.run([sys.executable, "-c", SETUP_SCRIPT, f"pgrestart-{self.queue}"],
                              cwd=ROOT, env=self.env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, f"migrate failed:\n{done.stdout}\n{done.stderr}"
        credential = json.loads(done.stdout.strip().splitlines()[-1])
        self.collector_id, self.secret = credential["collector_id"], credential["secret"]

    def start_worker(self) -> None:
        """One prefork worker in its own process group, so cleanup can end its pool too."""
        with open(self.worker_log, "wb") as log:
            self.worker = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "ettweb.celery", "worker",
                 "-Q", self.queue, "-n", f"pgrestart-{self.queue}@%h", "--concurrency", "1",
                 "--pool", "prefork", "--loglevel", "INFO", "--without-heartbeat",
                 "--without-mingle", "--without-gossip"],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)

    def publish(self, lines: list[str]) -> None:
        auth = sign_batch(self.collector_id, self.secret, lines)
        self.app.send_task("ett.ingest_batch", args=(lines, "pgrestart-test", auth),
                           queue=self.queue)

    def count(self, model: type[Event | EventId | QuarantinedEvent],
              what: sql.Composable = COUNT_ROWS) -> int:
        """``count(what)`` over ``model``'s table in the private server; -1 while it is away
        (refusing connections or still in crash recovery)."""
        query = sql.SQL("SELECT count({}) FROM {}").format(what,
                                                          sql.Identifier(model._meta.db_table))
        try:
            return int(self.server.scalar(query))
        except psycopg.OperationalError:
            return -1

    def blocked_writers(self) -> int:
        """Sessions waiting on a lock inside a transaction that already wrote (has an xid)."""
        return int(self.server.scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' "
            "AND backend_xid IS NOT NULL"))

    def diagnostics(self) -> str:
        worker = self.worker_log.read_text(errors="replace") if self.worker_log.exists() else ""
        return (f"worker log (tail):\n{worker[-4000:]}\n"
                f"postgres log (tail):\n{self.server.log_tail()}")

    def wait_until(self, what: str, predicate: Callable[[], bool], timeout: float) -> float:
        """Poll until ``predicate``; returns the seconds it took, fails with both logs."""
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            if predicate():
                return time.monotonic() - began
            if self.worker is not None and self.worker.poll() is not None:
                pytest.fail(f"worker exited ({self.worker.returncode}) while waiting for "
                            f"{what}\n{self.diagnostics()}")
            time.sleep(0.1)
        pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n{self.diagnostics()}")

    def stop_worker(self) -> None:
        """Warm shutdown, then SIGKILL to the worker's whole process group if it lingers."""
        worker = self.worker
        if worker is None or worker.poll() is not None:
            return
        worker.terminate()
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[RestartRig]:
    with ThrowawayPostgres() as server:
        running = RestartRig(tmp_path, server)
        try:
            yield running
        finally:
            running.stop_worker()
            delete_queue(running.app, running.queue)


def _batches(prefix: str) -> list[list[str]]:
    """Heartbeats with unique ids; one job per batch keeps each rollup refresh small."""
    t0 = time.time() - 3600.0
    return [[json.dumps({"v": 1, "id": f"{prefix}-{b}-{i}", "job": f"{prefix}-{b}",
                         "attempt": 0, "kind": "mark", "mark": "heartbeat",
                         "ts": t0 + b + i / BATCH_SIZE})
             for i in range(BATCH_SIZE)] for b in range(BATCHES)]


def test_postgres_server_restart_under_a_running_worker(rig: RestartRig) -> None:
    began = time.monotonic()
    rig.server.init()
    rig.migrate_and_credential()
    rig.start_worker()
    for batch in _batches(f"pgr-{uuid.uuid4().hex[:6]}"):
        rig.publish(batch)
    rig.wait_until("the first stored events", lambda: rig.count(Event) > 0, 60)

    # Crash with a batch half-written, not between batches: a SHARE lock on the events table
    # (reads still pass) stops the worker's insert inside its transaction, after it claimed
    # the batch's nonce; the crash then rolls that transaction back.
    blocker = rig.server.connect()
    blocker.autocommit = False
    blocker.execute(sql.SQL("LOCK TABLE {} IN SHARE MODE").format(
        sql.Identifier(Event._meta.db_table)))
    rig.wait_until("the worker to block inside a batch's transaction",
                   lambda: rig.blocked_writers() > 0, 30)
    stored_before = rig.count(Event)
    first_postmaster = rig.server.postmaster_pid()
    rig.server.stop("immediate")  # a crash: no checkpoint, sessions vanish mid-transaction
    blocker.close()
    assert 0 < stored_before < TOTAL, "the crash must come while batches are still queued"
    assert rig.count(Event) == -1, "the server still answers after pg_ctl stop"
    time.sleep(DOWN_S)
    rig.server.start()
    restarted = time.monotonic()
    assert rig.server.postmaster_pid() not in (None, first_postmaster)
    took = rig.wait_until(f"{TOTAL} stored events", lambda: rig.count(Event) >= TOTAL,
                          ALL_STORED_TIMEOUT_S)
    time.sleep(1.0)  # a late retry of a batch that already committed must add nothing

    assert rig.count(Event) == TOTAL
    assert rig.count(Event, DISTINCT_IDS) == TOTAL
    assert rig.count(EventId) == TOTAL
    assert rig.count(QuarantinedEvent) == 0, rig.diagnostics()
    log = rig.worker_log.read_text(errors="replace")
    # The outage really hit the worker: it retried batches instead of finishing before it.
    assert "database away" in log and "with the message held" in log, rig.diagnostics()
    assert "received immediate shutdown request" in rig.server.log_tail(100_000)
    delays = [float(d) for d in re.findall(r"trying again in ([\d.]+) s", log)]
    print(f"\nall stored {took:.1f} s after the restart ({restarted - began:.1f} s into the "
          f"test, {time.monotonic() - began:.1f} s in all); {len(delays)} retries, "
          f"longest backoff {max(delays)} s")
