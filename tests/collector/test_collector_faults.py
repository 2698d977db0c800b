"""Fault tests with real processes and real brokers, each ending in an exact count: every event
a Reporter spooled reaches the broker (at least once, each id present) or is counted as
dropped or corrupted. Bounded in time: small spools, short waits, hard timeouts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from collector_brokers import BrokerQueue, PrivateRedis, Shipped, free_port

from collector import Reporter
from collector.agent import Agent
from collector.auth import constant_time_equal, expected_signature, health_body
from collector.config import STATE_FILE_NAME, AgentConfig
from collector.schema import parse_event
from collector.spool_reader import read_records

REPO = Path(__file__).resolve().parents[2]
SECRET = "f" * 64

pytestmark = pytest.mark.integration


def agent_config(spool: Path, url: str, queue: str, **overrides: Any) -> AgentConfig:
    base = AgentConfig(broker_url=url, spool_dir=spool, state_file=spool / STATE_FILE_NAME,
                       source="node-f", queue=queue, batch_wait_s=0.1, poll_interval_s=0.05,
                       retry_initial_s=0.05, retry_max_s=0.2, publish_timeout_s=2.0,
                       keep_shipped_s=0.0, collector_id="c-test", collector_secret=SECRET)
    return replace(base, **overrides)


def agent_cmd(spool: Path, broker: BrokerQueue, *extra: str) -> list[str]:
    return [sys.executable, "-m", "collector", "--broker", broker.url, "--spool-dir",
            str(spool), "--queue", broker.name, "--source", "node-f", "--keep-shipped", "0",
            "--collector-id", "c-test", "--collector-secret", SECRET, *extra]


def agent_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k != "CELERY_BROKER_URL" and not k.startswith("ETT_")}


def spool_events(spool: Path, count: int, job: str = "fault", **kwargs: Any) -> Reporter:
    """A Reporter that spooled ``count`` spans and was shut down (its segments sealed)."""
    reporter = Reporter(job=job, spool_dir=spool, heartbeat_s=0, **kwargs)
    for i in range(count):
        reporter.span("eval", float(i), float(i) + 1)
    assert reporter.shutdown()
    return reporter


def ids_on_disk(spool: Path) -> list[str]:
    return [parse_event(payload)["id"] for path in sorted(spool.glob("*.jsonl"))
            for _end, payload, _problem in read_records(path) if payload]


def shipped_ids(messages: list[Shipped]) -> list[str]:
    return [parse_event(line)["id"] for message in messages for line in message.lines]


def totals(spool: Path) -> dict[str, Any]:
    return dict(json.loads((spool / STATE_FILE_NAME).read_text())["totals"])


def assert_signed(messages: list[Shipped]) -> None:
    for message in messages:
        assert message.auth is not None and message.auth["collector"] == "c-test"
        expected = expected_signature(SECRET, message.auth, message.lines)
        assert constant_time_equal(expected, message.auth["sig"])


# --------------------------------------------------------------------------- kill -9 the agent
def test_kill_9_mid_stream_then_restart_ships_every_event(spool: Path,
                                                          broker: BrokerQueue) -> None:
    reporter = Reporter(job="kill9", spool_dir=spool, heartbeat_s=0, segment_bytes=64 * 1024)
    stop_writing = threading.Event()

    def write_steadily() -> None:
        i = 0
        while not stop_writing.is_set():
            for _ in range(200):
                reporter.span("eval", float(i), float(i) + 1)
                i += 1
            time.sleep(0.01)

    writer = threading.Thread(target=write_steadily, daemon=True)
    writer.start()
    proc = subprocess.Popen(agent_cmd(spool, broker, "--batch-lines", "100"), cwd=REPO,
                            env=agent_env(), stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not (spool / STATE_FILE_NAME).exists() or totals(spool)["lines"] < 1000:
            assert time.monotonic() < deadline, "agent shipped nothing"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)  # mid-stream: the writer is still appending
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stop_writing.set()
    writer.join(10)
    assert reporter.shutdown()
    written = ids_on_disk(spool)
    assert totals(spool)["lines"] < len(written)  # the kill left work for the restart

    again = subprocess.run(agent_cmd(spool, broker, "--once", "--batch-lines", "500"),
                           cwd=REPO, env=agent_env(), capture_output=True, text=True,
                           timeout=60, check=False)
    assert again.returncode == 0, again.stderr
    got = broker.receive(lines=len(written), timeout=30, settle=1.0)
    ids = shipped_ids(got)
    assert set(ids) == set(written) and len(set(written)) == len(written)
    assert len(ids) - len(written) <= 100  # at most the batch in flight went twice
    assert_signed(got)
    assert list(spool.glob("*.jsonl")) == []  # sealed, shipped, retired


# --------------------------------------------------------------------------- corruption
def test_corrupted_record_is_counted_and_the_rest_of_the_segment_ships(
        spool: Path, broker: BrokerQueue) -> None:
    spool_events(spool, 50)
    written = ids_on_disk(spool)
    (segment,) = spool.glob("*.jsonl")
    data = bytearray(segment.read_bytes())
    victim = data.index(written[25].encode())
    os.chmod(segment, 0o644)
    data[victim:victim + 4] = b"XXXX"  # flip bytes in the middle of the segment
    segment.write_bytes(bytes(data))
    os.chmod(segment, 0o444)

    assert Agent(agent_config(spool, broker.url, broker.name, once=True)).run() == 0
    got = broker.receive(lines=49)
    assert sorted(shipped_ids(got)) == sorted(written[:25] + written[26:])
    assert totals(spool)["corrupted"] == 1
    (report,) = broker.health
    assert report.stats["corrupted_records"] == 1 and report.stats["shipped_events"] == 49
    assert report.stats["backlog_events"] == 0


# --------------------------------------------------------------------------- full spool
def test_full_spool_drops_are_counted_exactly_and_reach_the_health_report(
        spool: Path, broker: BrokerQueue) -> None:
    started = time.monotonic()
    reporter = spool_events(spool, 2000, max_spool_bytes=32 * 1024)
    assert time.monotonic() - started < 5
    kept = ids_on_disk(spool)
    assert reporter.dropped_full == 2000 - len(kept) > 0

    assert Agent(agent_config(spool, broker.url, broker.name, once=True)).run() == 0
    got = broker.receive(lines=len(kept))
    assert sorted(shipped_ids(got)) == sorted(kept)
    (report,) = broker.health
    assert report.stats["shipped_events"] + report.stats["dropped_events"] == 2000
    assert report.source == "node-f"
    body = [health_body(report.source, report.stats)]  # the source is signed too
    assert report.auth is not None
    assert constant_time_equal(expected_signature(SECRET, report.auth, body), report.auth["sig"])


# --------------------------------------------------------------------------- broker restart
@pytest.fixture
def metrics_port() -> int:
    return free_port()


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {line.split("{")[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def test_broker_restart_only_grows_the_spool_then_everything_ships(
        spool: Path, private_redis: PrivateRedis, metrics_port: int) -> None:
    private_redis.start()
    queue = BrokerQueue(private_redis.url, "ett-faults-restart")
    cfg = agent_config(spool, private_redis.url, queue.name, metrics_port=metrics_port,
                       keep_shipped_s=3600.0)
    agent = Agent(cfg)
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        before = spool_events(spool, 300, job="before")
        assert len(set(shipped_ids(queue.receive(lines=300)))) == 300
        private_redis.stop()
        spool_events(spool, 400, job="during")
        deadline = time.monotonic() + 10
        while scrape(metrics_port)["ett_collector_backlog_events"] < 400:
            assert time.monotonic() < deadline, "backlog never showed the outage"
            time.sleep(0.1)
        private_redis.start()
        during = shipped_ids(queue.receive(lines=400, timeout=20))
        assert before.dropped_full == 0
        assert len(during) >= 400 and len(set(during)) == 400
        metrics = scrape(metrics_port)
        deadline = time.monotonic() + 5
        while metrics["ett_collector_backlog_events"] != 0:
            assert time.monotonic() < deadline
            time.sleep(0.1)
            metrics = scrape(metrics_port)
        assert metrics["ett_collector_shipped_events_total"] >= 700
        assert metrics["ett_collector_last_success_timestamp_seconds"] > time.time() - 60
    finally:
        agent.stop()
        thread.join(15)
    assert not thread.is_alive()
