"""What the agent says about the server's verdict on its credential, without a Django server:
no ``--server-url`` is said at start, with where to set it; a server that cannot be heard is
a warning, never a rejection; a verdict is logged once per change, not at every check.
The agent against the real server (revoked, wrong and good credentials) is in
tests/ettweb/ingest/test_credential_verdict.py."""

from __future__ import annotations

import logging
import socket
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from collector_brokers import BrokerQueue, free_port

from collector.agent import Agent
from collector.config import STATE_FILE_NAME, AgentConfig
from collector.health import MetricsServer
from collector.spool import frame
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
                            f"revoked collector {ID!r}. Its batches are quarantined")
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
