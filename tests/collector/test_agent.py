"""The collector agent against a real broker: every complete spool line reaches the broker as an
``ett.ingest_batch`` task exactly once, in bounded batches, across restarts and outages."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from collector_brokers import BrokerQueue, PrivateRedis

from collector import Reporter
from collector.agent import Agent
from collector.config import STATE_FILE_NAME, AgentConfig
from collector.schema import parse_event
from collector.ship_state import FileCursor, ShipState

LineFactory = Callable[..., str]
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


def append(path: Path, *lines: str, partial: str = "") -> list[str]:
    """Append complete lines (and optionally an unterminated tail); return the lines."""
    with open(path, "a", encoding="utf-8") as spool:
        spool.write("".join(line + "\n" for line in lines) + partial)
    return list(lines)


def config(spool: Path, url: str, queue: str, **overrides: Any) -> AgentConfig:
    base = AgentConfig(broker_url=url, spool_dir=spool, state_file=spool / STATE_FILE_NAME,
                       source="node-test", queue=queue, batch_wait_s=0.1, poll_interval_s=0.05,
                       retry_initial_s=0.05, retry_max_s=0.2, publish_timeout_s=2.0)
    return replace(base, **overrides)


def all_lines(shipped: list[Any]) -> list[str]:
    return [line for message in shipped for line in message.lines]


def committed(spool: Path) -> dict[str, int]:
    state = json.loads((spool / STATE_FILE_NAME).read_text())
    return {name: cur["offset"] for name, cur in state["files"].items()}


def sizes(spool: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in spool.glob("*.jsonl")}


class AgentThread:
    """An agent following the spool in a thread, as the process would, until stopped."""

    def __init__(self, cfg: AgentConfig) -> None:
        self.agent = Agent(cfg)
        self.status: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.status = self.agent.run()

    def join(self, timeout: float = 15.0) -> int | None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "agent did not finish in time"
        return self.status

    def stop(self) -> int | None:
        self.agent.stop()
        return self.join()


@pytest.fixture
def agents() -> Iterator[list[AgentThread]]:
    started: list[AgentThread] = []
    yield started
    for agent in started:
        agent.agent.stop()
        agent.thread.join(10)


def run_cli(spool: Path, broker: BrokerQueue, *extra: str,
            timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CELERY_BROKER_URL"}
    return subprocess.run(
        [sys.executable, "-m", "collector", "--broker", broker.url, "--spool-dir", str(spool),
         "--queue", broker.name, "--source", "node-a", "--unsigned", *extra],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)


# --------------------------------------------------------------------------- exactly once
def test_once_ships_every_line_exactly_once_across_restarts(
        spool: Path, broker: BrokerQueue, event_line: LineFactory) -> None:
    a, b = spool / "j1.a0.r0.1.x.jsonl", spool / "j1.a0.r1.2.y.jsonl"
    written = append(a, *(event_line(kind="mark", mark="heartbeat", ts=i) for i in range(5)))
    written += append(b, *(event_line(kind="mark", mark="heartbeat", ts=i) for i in range(3)))
    tail = event_line(kind="mark", mark="heartbeat", ts=99)
    append(b, partial=tail[:20])

    first = run_cli(spool, broker, "--once")
    assert first.returncode == 0, first.stderr
    got = broker.receive(lines=8)
    assert sorted(all_lines(got)) == sorted(written)
    assert {(m.task, m.source, m.content_type) for m in got} == {
        ("ett.ingest_batch", "node-a", "application/json")}

    more = append(a, *(event_line(kind="mark", mark="heartbeat", ts=i) for i in range(4)))
    last = event_line(kind="mark", mark="heartbeat", ts=7)
    append(b, tail[20:], last)  # completes the held line, then one more
    more += [tail, last]
    second = run_cli(spool, broker, "--once")
    assert second.returncode == 0, second.stderr
    assert sorted(all_lines(broker.receive(lines=6))) == sorted(more)

    third = run_cli(spool, broker, "--once")
    assert third.returncode == 0, third.stderr
    assert broker.receive(lines=0) == []
    assert committed(spool) == sizes(spool)
    totals = json.loads((spool / STATE_FILE_NAME).read_text())["totals"]
    assert totals["lines"] == 14
    assert "shipped 0 events (total 14" in third.stderr


def test_reporter_spool_ships_as_valid_events(spool: Path, broker: BrokerQueue) -> None:
    reporter = Reporter(job="dlrm-e2e", spool_dir=spool, heartbeat_s=0)
    reporter.attempt_start(gpus=2)
    with reporter.train(start_step=0) as train:
        train.advance(10)
    reporter.attempt_end("completed")
    reporter.shutdown()

    assert Agent(config(spool, broker.url, broker.name, once=True)).run() == 0
    events = [parse_event(line) for line in all_lines(broker.receive(lines=3))]
    assert [e.get("mark", e.get("phase")) for e in events] == [
        "attempt_start", "train", "attempt_end"]


def test_the_given_broker_wins_over_an_exported_one(
        spool: Path, broker: BrokerQueue, event_line: LineFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Celery itself would let CELERY_BROKER_URL override the app's broker argument.
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://127.0.0.1:1/0")
    lines = append(spool / "a.jsonl", event_line(kind="mark", mark="heartbeat", ts=1))
    assert Agent(config(spool, broker.url, broker.name, once=True)).run() == 0
    assert all_lines(broker.receive(lines=1)) == lines


# --------------------------------------------------------------------------- tailing
def test_partial_trailing_line_is_held_until_complete(
        spool: Path, broker: BrokerQueue, agents: list[AgentThread],
        event_line: LineFactory) -> None:
    path = spool / "j.jsonl"
    done, pending = event_line(kind="mark", mark="heartbeat", ts=1), event_line(
        kind="mark", mark="heartbeat", ts=2)
    append(path, done, partial=pending[:15])
    agents.append(AgentThread(config(spool, broker.url, broker.name)))

    assert all_lines(broker.receive(lines=1, settle=0.6)) == [done]  # 6 batch waits later
    append(path, partial=pending[15:] + "\n")
    assert all_lines(broker.receive(lines=1)) == [pending]
    assert agents[0].stop() == 0
    assert committed(spool) == sizes(spool)


def test_multiple_spool_files_and_blank_lines(spool: Path, broker: BrokerQueue,
                                              event_line: LineFactory) -> None:
    written: list[str] = []
    for round_ in range(3):
        for rank in range(3):
            path = spool / f"j.a0.r{rank}.jsonl"
            written += append(path, event_line(kind="mark", mark="heartbeat", ts=round_))
            append(path, "", "   ")  # blank lines: skipped, yet their bytes are committed
    (spool / "notes.txt").write_text("not a spool file\n")

    assert Agent(config(spool, broker.url, broker.name, once=True)).run() == 0
    assert sorted(all_lines(broker.receive(lines=9))) == sorted(written)
    assert committed(spool) == sizes(spool)
    assert set(committed(spool)) == {"j.a0.r0.jsonl", "j.a0.r1.jsonl", "j.a0.r2.jsonl"}


def test_batches_respect_line_and_byte_limits(spool: Path, broker: BrokerQueue,
                                              event_line: LineFactory) -> None:
    lines = append(spool / "a.jsonl",
                   *(event_line(kind="mark", mark="heartbeat", ts=i) for i in range(25)))
    assert Agent(config(spool, broker.url, broker.name, once=True, batch_lines=10)).run() == 0
    assert [len(m.lines) for m in broker.receive(lines=25)] == [10, 10, 5]

    size = len(lines[0]) + 1
    big = event_line(kind="mark", mark="heartbeat", ts=1, attrs={"pad": "x" * 600})
    lines = append(spool / "b.jsonl", *(event_line(kind="mark", mark="heartbeat", ts=i)
                                        for i in range(7)), big, lines[0])
    limit = 3 * size + 5
    assert Agent(config(spool, broker.url, broker.name, once=True, batch_bytes=limit)).run() == 0
    got = broker.receive(lines=9)
    assert sorted(all_lines(got)) == sorted(lines)
    for message in got:
        nbytes = sum(len(line.encode()) + 1 for line in message.lines)
        assert nbytes <= limit or message.lines == [big]
    assert [big] in [m.lines for m in got]
    assert max(len(m.lines) for m in got) == 3


def test_follow_mode_ships_a_partial_batch_after_batch_wait(
        spool: Path, broker: BrokerQueue, agents: list[AgentThread],
        event_line: LineFactory) -> None:
    agents.append(AgentThread(config(spool, broker.url, broker.name, batch_wait_s=0.5,
                                     batch_lines=100)))
    time.sleep(0.2)
    first = append(spool / "a.jsonl", event_line(kind="mark", mark="heartbeat", ts=1))
    started = time.monotonic()
    assert all_lines(broker.receive(lines=1, settle=0)) == first
    assert 0.4 <= time.monotonic() - started < 3.0
    assert agents[0].stop() == 0


# --------------------------------------------------------------------------- outages
def test_broker_down_at_start_retries_then_ships(
        spool: Path, private_redis: PrivateRedis, agents: list[AgentThread],
        event_line: LineFactory, caplog: pytest.LogCaptureFixture) -> None:
    lines = append(spool / "a.jsonl",
                   *(event_line(kind="mark", mark="heartbeat", ts=i) for i in range(3)))
    queue = BrokerQueue(private_redis.url, "ett-down-at-start")
    with caplog.at_level(logging.WARNING, logger="ett.collector"):
        agent = AgentThread(config(spool, private_redis.url, queue.name, once=True))
        agents.append(agent)
        time.sleep(1.0)
        assert agent.thread.is_alive()  # still retrying, nothing committed
        assert not (spool / STATE_FILE_NAME).exists() or committed(spool) == {"a.jsonl": 0}
        private_redis.start()
        assert agent.join() == 0
    assert all_lines(queue.receive(lines=3)) == lines
    assert committed(spool) == sizes(spool)
    retries = [r for r in caplog.records if "broker error" in r.getMessage()]
    assert len(retries) >= 3


def test_broker_outage_mid_run_only_delays_shipping(
        spool: Path, private_redis: PrivateRedis, agents: list[AgentThread],
        event_line: LineFactory) -> None:
    private_redis.start()
    queue = BrokerQueue(private_redis.url, "ett-outage")
    agents.append(AgentThread(config(spool, private_redis.url, queue.name)))
    path = spool / "a.jsonl"
    before = append(path, event_line(kind="mark", mark="heartbeat", ts=1))
    assert all_lines(queue.receive(lines=1, settle=0)) == before

    private_redis.stop()
    during = append(path, event_line(kind="mark", mark="heartbeat", ts=2))
    time.sleep(0.8)
    assert committed(spool)["a.jsonl"] < path.stat().st_size
    private_redis.start()
    assert all_lines(queue.receive(lines=1)) == during
    assert agents[0].stop() == 0
    assert committed(spool) == sizes(spool)


def test_stop_during_outage_keeps_offsets_for_the_next_run(
        spool: Path, private_redis: PrivateRedis, event_line: LineFactory) -> None:
    lines = append(spool / "a.jsonl", event_line(kind="mark", mark="heartbeat", ts=1))
    cfg = config(spool, private_redis.url, "ett-stop-in-outage", once=True)
    agent = AgentThread(cfg)
    time.sleep(0.4)
    assert agent.stop() == 1  # --once stopped before the spool was drained
    assert committed(spool) == {"a.jsonl": 0}

    private_redis.start()
    assert Agent(cfg).run() == 0
    assert all_lines(BrokerQueue(private_redis.url, cfg.queue).receive(lines=1)) == lines


def test_sigterm_ships_the_batch_in_hand_and_commits(
        spool: Path, broker: BrokerQueue, event_line: LineFactory) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CELERY_BROKER_URL"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "collector", "--broker", broker.url, "--spool-dir", str(spool),
         "--queue", broker.name, "--batch-wait", "60", "--poll-interval", "0.05", "--unsigned"],
        cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    try:
        timer = threading.Timer(20, proc.kill)  # bounds the blocking read below
        timer.start()
        first = proc.stderr.readline() if proc.stderr else ""
        timer.cancel()
        assert "shipping" in first, first  # logged once the signal handlers are in place
        lines = append(spool / "a.jsonl",
                       *(event_line(kind="mark", mark="heartbeat", ts=i) for i in range(3)))
        time.sleep(0.5)  # read into a batch that would wait a minute
        assert broker.receive(lines=0, settle=0.1) == []
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=15)
        stderr = first + stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert "SIGTERM received" in stderr
    assert all_lines(broker.receive(lines=3)) == lines
    assert committed(spool) == sizes(spool)


# --------------------------------------------------------------------------- state file
def test_replaced_truncated_and_deleted_files(spool: Path, broker: BrokerQueue,
                                              event_line: LineFactory) -> None:
    cfg = config(spool, broker.url, broker.name, once=True)
    a, b, c = spool / "a.jsonl", spool / "b.jsonl", spool / "c.jsonl"
    for path in (a, b, c):
        append(path, event_line(kind="mark", mark="heartbeat", ts=1),
               event_line(kind="mark", mark="heartbeat", ts=2))
    assert Agent(cfg).run() == 0
    assert len(all_lines(broker.receive(lines=6))) == 6

    a.unlink()
    replaced = append(a, event_line(kind="mark", mark="heartbeat", ts=3))  # new inode
    b.write_text("")
    truncated = append(b, event_line(kind="mark", mark="heartbeat", ts=4))
    c.unlink()
    assert Agent(cfg).run() == 0
    assert sorted(all_lines(broker.receive(lines=2))) == sorted(replaced + truncated)
    assert committed(spool) == sizes(spool)
    assert "c.jsonl" not in committed(spool)


def test_corrupt_state_is_set_aside_and_shipping_restarts(
        spool: Path, broker: BrokerQueue, event_line: LineFactory,
        caplog: pytest.LogCaptureFixture) -> None:
    lines = append(spool / "a.jsonl", event_line(kind="mark", mark="heartbeat", ts=1))
    (spool / STATE_FILE_NAME).write_text('{"version": 1, "files": {"a.jsonl": {"off')
    with caplog.at_level(logging.ERROR, logger="ett.collector"):
        assert Agent(config(spool, broker.url, broker.name, once=True)).run() == 0
    assert all_lines(broker.receive(lines=1)) == lines
    assert (spool / (STATE_FILE_NAME + ".corrupt")).exists()
    assert any("unreadable" in r.getMessage() for r in caplog.records)


def test_state_round_trips_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    state = ShipState({"a.jsonl": FileCursor(12, 34)}, lines=5, batches=2, bytes=400)
    path = tmp_path / STATE_FILE_NAME
    state.save(path)
    state.save(path)
    assert ShipState.load(path) == state
    assert sorted(p.name for p in tmp_path.iterdir()) == [STATE_FILE_NAME]
