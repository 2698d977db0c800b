"""A signed agent whose credential the server rejects says so, and holds its spool (issue 27,
item 7 and its follow-up).

Everything real: the agent is ``python -m collector`` in a process of its own, on a private
queue of the test broker; a Celery worker stores (or refuses) what it sends in the test
database; the web server is pytest-django's live server, which the agent asks over HTTP
(``--server-url``). The problems found: an agent with a bad credential logged "shipped 1
events" while the worker quarantined every batch, and the node never appeared on
``/collectors/``; then, once it said so, it still sent and committed every batch, so each
event it sent while rejected was lost (a quarantined batch keeps only a sample of its lines).
Now a revoked or wrong credential is logged once as an ERROR with the server's reason, the
agent holds its spool (nothing sent, nothing committed, nothing retired: "holding N
events"), its metrics say ``ett_collector_rejected 1``, its refused health reports show the
node as rejected on the page and in the API, and once the server accepts a credential
(re-enabled, or a good one given to the restarted agent) every held event is stored once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from celery import Celery
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils.html import escape
from pytest_django.live_server_helper import LiveServer

from collector import Reporter
from collector.config import STATE_FILE_NAME
from ettweb.access.tokens import issue_token
from ettweb.ingest.credentials import new_credential
from ettweb.ingest.models import (
    CollectorCredential,
    CollectorHealth,
    CollectorRejection,
    Event,
    QuarantinedEvent,
)
from ettweb.settings.env import database_url
from tests.collector.collector_brokers import free_port
from tests.ettweb.broker_queues import delete_queue
from tests.ettweb.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[3]
EVENTS = 3
REJECTED_LOG = "the server rejected this collector's credential"
HOLDING_LOG = "holding the spool:"


@dataclass
class Rig:
    """A worker on a private queue, and where the agents it serves keep their files."""

    queue: str
    tmp_path: Path
    worker_log: Path
    server_url: str

    def spool(self, name: str) -> Path:
        """A spool holding ``EVENTS`` events of a job of its own, as a trainer leaves it."""
        spool = self.tmp_path / name / "spool"
        reporter = Reporter(job=f"verdict-{name}-{uuid.uuid4().hex[:6]}", spool_dir=spool,
                            heartbeat_s=0)
        start = time.time() - 3600
        for n in range(EVENTS):
            reporter.span("eval", start + n, start + n + 1)
        reporter.shutdown()
        return spool

    def agent(self, name: str, credential: CollectorCredential, secret: str,
              *flags: str, spool: Path | None = None) -> tuple[list[str], Path]:
        """The command line of an agent on ``name``'s spool (a new one unless given), and
        the file it logs to (``name``/agent.log, beside the spool)."""
        spool = self.spool(name) if spool is None else spool
        secret_file = self.tmp_path / name / "collector.secret"
        secret_file.write_text(secret + "\n")
        argv = [sys.executable, "-m", "collector", "--broker", str(settings.CELERY_BROKER_URL),
                "--queue", self.queue, "--spool-dir", str(spool), "--source", name,
                "--collector-id", credential.collector_id, "--collector-secret-file",
                str(secret_file), "--batch-wait", "0", "--poll-interval", "0.05", *flags]
        return argv, self.tmp_path / name / "agent.log"

    def logs(self) -> str:
        return "\n".join(path.read_text(errors="replace")[-3000:]
                         for path in self.tmp_path.glob("**/*.log"))


def _env() -> dict[str, str]:
    """The agent's environment: ETT_SERVER_URL is the live server's, nothing else of ours."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("ETT_", "CELERY_"))}


@pytest.fixture
def rig(tmp_path: Path, live_server: LiveServer) -> Iterator[Rig]:
    queue = f"ett-verdict-{uuid.uuid4().hex[:8]}"
    worker_log = tmp_path / "worker.log"
    environ = dict(os.environ, DJANGO_SETTINGS_MODULE="ettweb.settings.test",
                   PYTHONUNBUFFERED="1", DATABASE_URL=database_url(connection.settings_dict),
                   CELERY_BROKER_URL=str(settings.CELERY_BROKER_URL))
    with open(worker_log, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "ettweb.celery", "worker", "-Q", queue,
             "-n", f"verdict-{queue}@%h", "--concurrency", "1", "--pool", "solo",
             "--loglevel", "INFO", "--without-heartbeat", "--without-mingle",
             "--without-gossip"], cwd=ROOT, env=environ, stdout=out, stderr=subprocess.STDOUT)
    try:
        # On RabbitMQ the worker declares the queue's exchange; an agent that publishes
        # before that is refused (404 NOT_FOUND) and its health report is lost.
        wait_until(lambda: " ready." in worker_log.read_text(errors="replace"), 90,
                   lambda: worker_log.read_text(errors="replace"))
        yield Rig(queue, tmp_path, worker_log, live_server.url)
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
        delete_queue(Celery(broker=settings.CELERY_BROKER_URL), queue)


def _collectors(client: Client) -> tuple[str, dict[str, dict[str, object]]]:
    """The collectors page's HTML, and the API's rows by source."""
    client.force_login(User.objects.get_or_create(username="viewer")[0])
    html = client.get("/collectors/").content.decode()
    token = issue_token(User.objects.get_or_create(username="reader")[0], "verdict test")
    body = client.get("/api/v1/collectors", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    return html, {row["source"]: row for row in body["collectors"]}


def _row_html(html: str, source: str) -> str:
    """The page's table row of ``source``."""
    return next(row.split("</tr>")[0] for row in html.split("<tr")[1:]
                if f">{source}</a>" in row)


def _nothing_quarantined(source: str) -> bool:
    return not QuarantinedEvent.objects.filter(source=source).exists()


def _committed(spool: Path) -> dict[str, int]:
    """The agent's committed offset per spool file (its state file, written atomically)."""
    state = json.loads((spool / STATE_FILE_NAME).read_text())
    return {name: cursor["offset"] for name, cursor in state["files"].items()}


def _metric(port: int, name: str, source: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        metrics = answer.read().decode()
    prefix = f'{name}{{source="{source}"}} '
    return next(line.removeprefix(prefix) for line in metrics.splitlines()
                if line.startswith(prefix))


def test_a_revoked_agent_holds_its_spool_until_the_credential_is_re_enabled(
        rig: Rig, client: Client) -> None:
    """Revoked: the agent says so once, sends no batch and commits nothing (the worker
    quarantines nothing), keeps reporting (refused, so the node shows rejected) and checking;
    re-enabled: every held event is stored once, and the node shows reporting."""
    credential = new_credential("verdict-revoked")
    credential.active = False
    credential.save()
    reason = f"revoked collector {credential.collector_id!r}"
    port = free_port()
    argv, log = rig.agent("node-revoked", credential, credential.secret,
                          "--health-interval", "0.3", "--stats-interval", "0.3",
                          "--keep-shipped", "0", "--metrics-port", str(port))
    spool = log.parent / "spool"
    segments = sorted(path.name for path in spool.glob("*.jsonl"))
    with open(log, "wb") as out:
        agent = subprocess.Popen(argv, cwd=ROOT, env={**_env(), "ETT_SERVER_URL": rig.server_url},
                                 stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: f"total 0 in 0 batches), server rejected the credential: {reason}; "
                           f"holding {EVENTS} events" in log.read_text(), 60, rig.logs)
        assert _metric(port, "ett_collector_rejected", "node-revoked") == "1"
        assert _metric(port, "ett_collector_backlog_events", "node-revoked") == str(EVENTS)
        wait_until(lambda: CollectorRejection.objects.filter(
            source="node-revoked", reason=reason).exists(), 60, rig.logs)
        time.sleep(1.5)  # several more health reports, each followed by a check
        assert not Event.objects.exists() and _nothing_quarantined("node-revoked")
        assert sorted(path.name for path in spool.glob("*.jsonl")) == segments  # all kept
        html, api = _collectors(Client())
        row = _row_html(html, "node-revoked")
        assert 'class="rejected"' in row and ">rejected</span>" in row and escape(reason) in row
        assert 'id="collectors-rejected-credentials">1<' in html
        assert (api["node-revoked"]["status"], api["node-revoked"]["rejection_reason"]) == (
            "rejected", reason)
        assert not CollectorHealth.objects.exists()  # it shows though no report was accepted

        credential.active = True  # an admin re-enables it
        credential.save()
        wait_until(lambda: Event.objects.count() == EVENTS, 60, rig.logs)
        wait_until(lambda: _collectors(Client())[1]["node-revoked"]["status"] == "reporting",
                   60, rig.logs)
        wait_until(lambda: not list(spool.glob("*.jsonl")), 60, rig.logs)  # shipped, retired
    finally:
        agent.terminate()
        assert agent.wait(30) == 0
    assert Event.objects.count() == EVENTS and _nothing_quarantined("node-revoked")
    assert _committed(spool) == {}  # every held segment shipped to its end, then retired
    text = log.read_text()
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert len(errors) == 1, text  # once per change of verdict, not at every check
    assert f"{REJECTED_LOG} {credential.collector_id!r}: {reason}." in errors[0]
    assert text.count(HOLDING_LOG) == 1, text
    assert f"{HOLDING_LOG} the server rejected credential {credential.collector_id!r} " \
           f"({reason}), so a batch sent now would be quarantined, not stored. {EVENTS} " \
           "events" in text
    assert f"the server accepts credential {credential.collector_id!r} again: shipping the " \
           f"{EVENTS} held events" in text
    assert f"shipped {EVENTS} events (total {EVENTS} in 1 batches)" in text


def test_a_wrong_secret_holds_the_spool_and_a_restart_with_a_good_one_ships_it(
        rig: Rig) -> None:
    """A wrong secret (``--once``): the agent holds its events and exits 1, its health
    report refused (the check itself writes nothing); restarted on the same spool with a
    good credential, it ships every held event, stored once, nothing quarantined."""
    credential = new_credential("verdict-wrong")
    argv, log = rig.agent("node-wrong", credential, "0" * 64, "--once",
                          "--server-url", rig.server_url)
    spool = log.parent / "spool"
    with open(log, "wb") as out:
        assert subprocess.run(argv, cwd=ROOT, env=_env(), stdout=out, stderr=subprocess.STDOUT,
                              timeout=60).returncode == 1  # asked for all, shipped none
    text = log.read_text()
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and f"{REJECTED_LOG} {credential.collector_id!r}: bad signature" \
        in errors[0], text
    assert text.count(HOLDING_LOG) == 1, text
    assert "sent 0 events (total 0 in 0 batches), server rejected the credential: bad " \
           f"signature; holding {EVENTS} events" in text
    assert set(_committed(spool).values()) == {0}
    # The check wrote nothing (anyone can send a bad signature over HTTP): the worker did.
    wait_until(lambda: CollectorRejection.objects.filter(
        source="node-wrong", reason="bad signature", refused="health report").exists(),
        60, rig.logs)
    html, api = _collectors(Client())
    row = _row_html(html, "node-wrong")
    assert ">rejected</span>" in row and "bad signature" in row
    assert api["node-wrong"]["status"] == "rejected"
    assert api["node-wrong"]["collector_id"] == credential.collector_id

    fixed = new_credential("verdict-fixed")  # 'ett_collector create', given to the node
    argv, log = rig.agent("node-wrong", fixed, fixed.secret, "--once",
                          "--server-url", rig.server_url, spool=spool)
    with open(log, "wb") as out:
        assert subprocess.run(argv, cwd=ROOT, env=_env(), stdout=out, stderr=subprocess.STDOUT,
                              timeout=60).returncode == 0
    assert f"shipped {EVENTS} events (total {EVENTS} in 1 batches)" in log.read_text()
    wait_until(lambda: Event.objects.count() == EVENTS and CollectorHealth.objects.filter(
        source="node-wrong").exists(), 60, rig.logs)
    assert Event.objects.filter(job__startswith="verdict-node-wrong-").count() == EVENTS
    assert _nothing_quarantined("node-wrong")
    assert _collectors(Client())[1]["node-wrong"]["status"] == "reporting"


def test_a_good_credential_is_heard_as_accepted_and_shows_reporting(rig: Rig) -> None:
    credential = new_credential("verdict-good")
    argv, log = rig.agent("node-good", credential, credential.secret, "--once",
                          "--server-url", rig.server_url)
    with open(log, "wb") as out:
        assert subprocess.run(argv, cwd=ROOT, env=_env(), stdout=out, stderr=subprocess.STDOUT,
                              timeout=60).returncode == 0
    text = log.read_text()
    assert f"the server accepts credential {credential.collector_id!r}" in text
    assert " ERROR " not in text and " WARNING " not in text, text
    assert f"shipped {EVENTS} events (total {EVENTS} in 1 batches)" in text
    wait_until(lambda: CollectorHealth.objects.filter(source="node-good").exists()
               and Event.objects.count() == EVENTS, 60, rig.logs)
    assert not CollectorRejection.objects.exists()
    html, api = _collectors(Client())
    row = _row_html(html, "node-good")
    assert ">reporting</span>" in row and 'class="rejected"' not in row
    assert (api["node-good"]["status"], api["node-good"]["rejection_reason"]) == (
        "reporting", "")
