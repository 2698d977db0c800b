"""What the agent says and does about the server's verdict on its credential, without a Django
server: no ``--server-url`` is said at start, with where to set it; a server that cannot be
heard is a warning, never a rejection; a verdict is logged once per change, not at every
check; a rejection holds the spool (nothing published, nothing committed, nothing retired)
until an accepted check, and nothing else holds it. Here the verdicts are handed to the real
agent's watcher (as its checks would); the agent against the real server (revoked, wrong and
good credentials) is in tests/ettweb/ingest/test_credential_verdict.py."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from collector_brokers import BrokerQueue, PrivateRedis, Shipped, free_port

from collector import Reporter
from collector.agent import Agent
from collector.config import STATE_FILE_NAME, AgentConfig
from collector.health import MetricsServer
from collector.schema import parse_event
from collector.spool import frame, is_sealed
from collector.spool_reader import read_records
from collector.verdict import (
    OK,
    REJECTED,
    UNREACHABLE,
    UNVERIFIED,
    Verdict,
    VerdictWatcher,
    check_credential,
)

ID, SECRET = "col-verdict", "ab" * 32


def cfg(spool: Path, broker: BrokerQueue, **overrides: object) -> AgentConfig:
    base = AgentConfig(broker_url=broker.url, spool_dir=spool,
                       state_file=spool / STATE_FILE_NAME, source="node-v", queue=broker.name,
                       batch_wait_s=0.05, poll_interval_s=0.05, publish_timeout_s=2.0,
                       once=True, collector_id=ID, collector_secret=SECRET)
    return replace(base, **overrides)  # type: ignore[arg-type]


@pytest.fixture
def spool(tmp_path: Path) -> Path:
    path = tmp_path / "spool"
    path.mkdir()
    (path / "a.jsonl").write_text(frame('{"v": 1}') + "\n")
    return path


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "ett.collector" and r.levelno == level]


@pytest.mark.integration
def test_without_a_server_url_the_agent_says_it_cannot_hear_the_verdict(
        spool: Path, broker: BrokerQueue, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "ett.collector")
    assert Agent(cfg(spool, broker)).run() == 0
    (warning,) = _messages(caplog, logging.WARNING)
    assert warning.startswith(f"no --server-url (ETT_SERVER_URL): this agent cannot hear "
                              f"whether the server accepts credential {ID!r}")
    assert "the dashboard's address (e.g. http://web:8000)" in warning
    assert _messages(caplog, logging.INFO)[-1].startswith("shipped 1 events")
    broker.receive(lines=1)


@pytest.mark.integration
def test_an_unsigned_agent_asks_nothing_and_warns_of_nothing(
        spool: Path, broker: BrokerQueue, caplog: pytest.LogCaptureFixture) -> None:
    agent = Agent(cfg(spool, broker, collector_id=None, collector_secret=None,
                      server_url=f"http://127.0.0.1:{free_port()}"))
    assert agent.run() == 0
    assert agent.verdict is None and _messages(caplog, logging.WARNING) == []
    broker.receive(lines=1)


@pytest.mark.integration
def test_a_server_that_cannot_be_heard_is_a_warning_not_a_rejection(
        spool: Path, broker: BrokerQueue, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "ett.collector")
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    agent = Agent(cfg(spool, broker, server_url=url))
    assert agent.run() == 0
    (warning,) = _messages(caplog, logging.WARNING)
    assert warning.startswith(f"cannot hear whether the server accepts credential {ID!r}: "
                              f"{url}/api/v1/collectors/self")
    assert "Connection refused" in warning
    assert _messages(caplog, logging.ERROR) == []
    assert agent.verdict is not None and not agent.verdict.rejected
    assert _messages(caplog, logging.INFO)[-1].startswith("shipped 1 events")
    broker.receive(lines=1)


def test_a_server_that_is_not_ett_is_not_taken_for_a_verdict() -> None:
    """A real HTTP server that is something else (here the agent's own metrics endpoint,
    which serves only GET /metrics): its 501 to the check's POST says nothing about the
    credential."""
    other = MetricsServer("127.0.0.1", 0, lambda: "x 1\n").start()
    try:
        url = f"http://127.0.0.1:{other.port}"
        verdict = check_credential(url, ID, SECRET, "node-v")
        assert verdict.state == UNREACHABLE and not verdict.is_final
        assert verdict.reason.startswith(f"{url}/api/v1/collectors/self?source=node-v "
                                         "answered HTTP 501")
    finally:
        other.close()


def test_a_server_that_does_not_speak_http_is_not_heard() -> None:
    """Something else on that port (an SSH banner here): no verdict, and no exception out of
    the check, which runs on the agent's thread at start."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        def answer() -> None:
            connection, _ = server.accept()
            with connection:
                connection.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        verdict = check_credential(url, ID, SECRET, "node-v")
        thread.join(5)
    assert verdict.state == UNREACHABLE and "BadStatusLine" in verdict.reason, verdict


def test_a_verdict_is_logged_once_per_change(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "ett.collector")
    watcher = VerdictWatcher(lambda: Verdict(OK), ID)
    revoked = Verdict(REJECTED, f"revoked collector {ID!r}")
    down = Verdict(UNREACHABLE, "http://web:8000: ConnectionRefusedError")
    for verdict in (revoked, revoked, down, down, revoked, revoked):
        watcher.take(verdict)
        assert watcher.rejected and watcher.reason == revoked.reason  # down changes nothing
    assert [r.levelname for r in caplog.records] == ["ERROR", "WARNING", "INFO"]
    error, warning, back = (r.getMessage() for r in caplog.records)
    assert error.startswith(f"the server rejected this collector's credential {ID!r}: "
                            f"revoked collector {ID!r}. The worker would quarantine its "
                            "batches, so none is sent")
    assert "ett_collector create NAME" in error
    assert warning.endswith("http://web:8000: ConnectionRefusedError")
    assert back == f"the server answers again: credential {ID!r} is still rejected"

    caplog.clear()
    skewed = Verdict(UNVERIFIED, "header X-ETT-Timestamp is +412 s from the server's clock")
    for verdict in (Verdict(OK), Verdict(OK), skewed, Verdict(REJECTED, "bad signature")):
        watcher.take(verdict)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", f"the server accepts credential {ID!r} again"),
        ("WARNING", f"cannot hear whether the server accepts credential {ID!r}: "
                    f"{skewed.reason}"),
        ("ERROR", caplog.records[-1].getMessage())]
    assert "bad signature" in caplog.records[-1].getMessage() and watcher.rejected


# --------------------------------------------------------------------------- the hold
REVOKED = f"revoked collector {ID!r}"
SKEWED = Verdict(UNVERIFIED, "header X-ETT-Timestamp is +412 s from the server's clock")
DOWN = Verdict(UNREACHABLE, "http://web:8000: ConnectionRefusedError")


def _spool_events(spool: Path, count: int, job: str) -> list[str]:
    """``count`` events of ``job`` from a real Reporter, its segment sealed; their ids."""
    reporter = Reporter(job=job, spool_dir=spool, heartbeat_s=0)
    for n in range(count):
        reporter.span("eval", float(n), float(n) + 1)
    assert reporter.shutdown()
    ids = [parse_event(payload)["id"] for path in sorted(spool.glob(f"{job}.*.jsonl"))
           for _end, payload, _problem in read_records(path) if payload]
    assert len(ids) == count
    return ids


def _ids(shipped: list[Shipped]) -> list[str]:
    return sorted(parse_event(line)["id"] for message in shipped for line in message.lines)


def _wait(predicate: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@contextlib.contextmanager
def _following(agent: Agent) -> Iterator[VerdictWatcher]:
    """Run ``agent`` in follow mode on a thread; yield its verdict watcher once it has one.
    The agent is stopped on the way out and must exit 0."""
    status: list[int] = []
    thread = threading.Thread(target=lambda: status.append(agent.run()), daemon=True)
    thread.start()
    try:
        _wait(lambda: agent.verdict is not None or not thread.is_alive())
        assert agent.verdict is not None
        yield agent.verdict
    finally:
        agent.stop()
        thread.join(30)
    assert status == [0]


def _holding_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [m for m in _messages(caplog, logging.WARNING) if m.startswith("holding the spool")]


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return str(answer.read().decode())


@pytest.mark.integration
def test_a_rejection_holds_the_spool_until_the_server_accepts_the_credential(
        tmp_path: Path, broker: BrokerQueue, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "ett.collector")
    spool = tmp_path / "spool"
    spool.mkdir()
    port = free_port()
    agent = Agent(cfg(spool, broker, once=False, keep_shipped_s=0.0, health_interval_s=0.2,
                      stats_interval_s=0.2, metrics_port=port,
                      server_url=f"http://127.0.0.1:{free_port()}"))  # its checks: unheard
    with _following(agent) as watcher:
        watcher.take(SKEWED)  # a check the server could not judge is no verdict: it ships
        before = _spool_events(spool, 2, "before")
        assert _ids(broker.receive(lines=2)) == sorted(before)

        watcher.take(Verdict(REJECTED, REVOKED))
        _wait(lambda: _holding_logged(caplog) != [])
        held = _spool_events(spool, 3, "held")
        _wait(lambda: agent.health.backlog_events == 3)
        for unheard in (DOWN, SKEWED):  # the last verdict stands until the server gives one
            watcher.take(unheard)
        broker.receive(lines=0, settle=0.3)  # the reports sent before the events were seen
        broker.health.clear()
        assert broker.receive(lines=1, timeout=2.5) == []  # nothing published while held
        assert len(broker.health) >= 2  # but health reports go on, each with the backlog
        assert all(r.stats["backlog_events"] == 3 and r.stats["shipped_events"] == 2
                   for r in broker.health)
        metrics = _scrape(port)
        assert 'ett_collector_rejected{source="node-v"} 1' in metrics
        assert 'ett_collector_backlog_events{source="node-v"} 3' in metrics
        segments = list(spool.glob("held.*.jsonl"))  # sealed, unshipped: never retired
        assert segments and all(is_sealed(path.stat()) for path in segments)
        assert all(agent.state.files[path.name].offset == 0 for path in segments)

        watcher.take(Verdict(OK))
        assert _ids(broker.receive(lines=3)) == sorted(held)  # each held event, once
        _wait(lambda: list(spool.glob("*.jsonl")) == [])  # shipped to its end, then retired
        _wait(lambda: 'ett_collector_rejected{source="node-v"} 0' in _scrape(port))
    (holding,) = _holding_logged(caplog)  # once, when the hold began
    assert f"the server rejected credential {ID!r} ({REVOKED}), so a batch sent now would " \
           "be quarantined" in holding
    assert "asking the server again every 0.2s (--health-interval)" in holding
    infos = _messages(caplog, logging.INFO)
    assert any(f"server rejected the credential: {REVOKED}; holding 3 events" in m
               for m in infos)
    assert f"the server accepts credential {ID!r} again: shipping the 3 held events from " \
           "where this agent stopped" in infos
    assert json.loads((spool / STATE_FILE_NAME).read_text())["totals"]["lines"] == 5


@pytest.mark.integration
def test_a_rejection_heard_while_the_broker_is_down_holds_the_batch_in_hand(
        tmp_path: Path, private_redis: PrivateRedis, caplog: pytest.LogCaptureFixture) -> None:
    """The verdict may come while the agent retries a broker outage: it stops retrying, and
    once the broker is back it still publishes nothing until the credential is accepted."""
    caplog.set_level(logging.INFO, "ett.collector")
    private_redis.start()
    queue = BrokerQueue(private_redis.url, f"ett-test-{uuid.uuid4().hex[:12]}")
    queue.declare()
    private_redis.stop()
    spool = tmp_path / "spool"
    spool.mkdir()
    ids = _spool_events(spool, 3, "outage")
    agent = Agent(cfg(spool, queue, once=False, retry_initial_s=0.05, retry_max_s=0.2,
                      health_interval_s=0.2, publish_timeout_s=1.0,
                      server_url=f"http://127.0.0.1:{free_port()}"))
    with _following(agent) as watcher:
        _wait(lambda: any("retrying in" in m for m in _messages(caplog, logging.WARNING)))
        watcher.take(Verdict(REJECTED, REVOKED))
        _wait(lambda: _holding_logged(caplog) != [])
        retries = sum("retrying in" in m for m in _messages(caplog, logging.WARNING))
        private_redis.start()
        assert queue.receive(lines=1, timeout=1.5) == []
        assert sum("retrying in" in m for m in _messages(caplog, logging.WARNING)) == retries
        watcher.take(Verdict(OK))
        assert _ids(queue.receive(lines=3)) == sorted(ids)
    assert json.loads((spool / STATE_FILE_NAME).read_text())["totals"]["lines"] == 3
