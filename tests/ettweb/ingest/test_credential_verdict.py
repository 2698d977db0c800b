"""A signed agent whose credential the server rejects says so (issue 27, item 7).

Everything real: the agent is ``python -m collector`` in a process of its own, on a private
queue of the test broker; a Celery worker stores (or refuses) what it sends in the test
database; the web server is pytest-django's live server, which the agent asks over HTTP
(``--server-url``). The problem found: an agent with a bad credential logged "shipped 1
events" while the worker quarantined every batch, and the node never appeared on
``/collectors/``. Now a revoked or wrong credential is logged once as an ERROR with the
server's reason, the progress line says "sent …, server rejected the credential", the agent's
metrics say ``ett_collector_rejected 1``, and the node shows as rejected on the page and in
the API; a good credential shows as reporting.
"""

from __future__ import annotations

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
from ettweb.api.tokens import issue_token
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
              *flags: str) -> tuple[list[str], Path]:
        """The command line of an agent on ``name``'s spool, and the file it logs to."""
        spool = self.spool(name)
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


def _refused_by_the_worker(source: str, reason: str) -> bool:
    """The worker quarantined the node's events and recorded the refusal of its batch."""
    return (QuarantinedEvent.objects.filter(source=source, reason=reason).exists()
            and CollectorRejection.objects.filter(source=source, reason=reason,
                                                  refused__in=("batch", "health report"))
            .exists())


def test_a_revoked_agent_logs_the_rejection_once_and_shows_rejected(rig: Rig,
                                                                    client: Client) -> None:
    credential = new_credential("verdict-revoked")
    credential.active = False
    credential.save()
    reason = f"revoked collector {credential.collector_id!r}"
    port = free_port()
    argv, log = rig.agent("node-revoked", credential, credential.secret,
                          "--health-interval", "0.3", "--stats-interval", "0.3",
                          "--metrics-port", str(port))
    with open(log, "wb") as out:
        agent = subprocess.Popen(argv, cwd=ROOT, env={**_env(), "ETT_SERVER_URL": rig.server_url},
                                 stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: f"total {EVENTS} in 1 batches), server rejected" in log.read_text(),
                   60, rig.logs)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            metrics = answer.read().decode()
        assert 'ett_collector_rejected{source="node-revoked"} 1' in metrics
        wait_until(lambda: _refused_by_the_worker("node-revoked", reason), 60, rig.logs)
        time.sleep(1.5)  # several more health reports, each followed by a check
    finally:
        agent.terminate()
        assert agent.wait(30) == 0
    text = log.read_text()
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert len(errors) == 1, text  # once per change of verdict, not at every check
    assert f"{REJECTED_LOG} {credential.collector_id!r}: {reason}." in errors[0]
    assert f"sent {EVENTS} events (total {EVENTS} in 1 batches), server rejected the " \
           f"credential: {reason}; backlog" in text
    assert "shipped" not in text.replace("fully shipped", ""), text
    assert not Event.objects.exists()

    html, api = _collectors(Client())
    row = _row_html(html, "node-revoked")
    assert 'class="rejected"' in row and ">rejected</span>" in row and escape(reason) in row
    assert 'id="collectors-rejected-credentials">1<' in html
    assert (api["node-revoked"]["status"], api["node-revoked"]["rejection_reason"]) == (
        "rejected", reason)
    assert not CollectorHealth.objects.exists()  # it shows though no report was accepted


def test_a_wrong_secret_is_heard_as_a_bad_signature_and_shows_rejected(rig: Rig) -> None:
    credential = new_credential("verdict-wrong")
    argv, log = rig.agent("node-wrong", credential, "0" * 64, "--once",
                          "--server-url", rig.server_url)
    with open(log, "wb") as out:
        assert subprocess.run(argv, cwd=ROOT, env=_env(), stdout=out, stderr=subprocess.STDOUT,
                              timeout=60).returncode == 0
    text = log.read_text()
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and f"{REJECTED_LOG} {credential.collector_id!r}: bad signature" \
        in errors[0], text
    assert f"sent {EVENTS} events (total {EVENTS} in 1 batches), server rejected the " \
           "credential: bad signature" in text
    # The check wrote nothing (anyone can send a bad signature over HTTP): the worker did.
    wait_until(lambda: _refused_by_the_worker("node-wrong", "bad signature"), 60, rig.logs)
    html, api = _collectors(Client())
    row = _row_html(html, "node-wrong")
    assert ">rejected</span>" in row and "bad signature" in row
    assert api["node-wrong"]["status"] == "rejected"
    assert api["node-wrong"]["collector_id"] == credential.collector_id


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
