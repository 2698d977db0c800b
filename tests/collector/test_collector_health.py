"""Health numbers and segment retention: the Prometheus text, the periodic signed report, and
the rule that only sealed, fully shipped, old-enough segments are ever deleted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from collector_brokers import BrokerQueue, free_port

from collector import Reporter
from collector.agent import Agent
from collector.config import STATE_FILE_NAME, AgentConfig
from collector.health import REJECTED_METRIC, HealthStats, MetricsServer, prometheus_text
from collector.spool import frame

REPO = Path(__file__).resolve().parents[2]


def test_prometheus_text_has_every_counter_with_help_type_and_label() -> None:
    stats = HealthStats(backlog_bytes=10, backlog_events=2, shipped_events=7, dropped_events=3,
                        corrupted_records=1, last_success_ts=None, spool_files=4)
    text = prometheus_text(stats, 'node "a"')
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert samples == [
        'ett_collector_backlog_bytes{source="node \\"a\\""} 10',
        'ett_collector_backlog_events{source="node \\"a\\""} 2',
        'ett_collector_shipped_events_total{source="node \\"a\\""} 7',
        'ett_collector_dropped_events_total{source="node \\"a\\""} 3',
        'ett_collector_corrupted_records_total{source="node \\"a\\""} 1',
        'ett_collector_last_success_timestamp_seconds{source="node \\"a\\""} 0',
        'ett_collector_spool_files{source="node \\"a\\""} 4',
        'ett_collector_rejected{source="node \\"a\\""} 0',
    ]
    assert text.count("# TYPE") == 8 and "# TYPE ett_collector_shipped_events_total counter" in text
    rejected = prometheus_text(stats, "n", rejected=True).splitlines()
    assert rejected[-3:] == [f"# HELP {REJECTED_METRIC[0]} {REJECTED_METRIC[2]}",
                             "# TYPE ett_collector_rejected gauge",
                             'ett_collector_rejected{source="n"} 1']


def test_metrics_server_serves_metrics_and_refuses_other_paths() -> None:
    server = MetricsServer("127.0.0.1", 0, lambda: "x 1\n").start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics") as response:
            assert response.read() == b"x 1\n"
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/admin")
    finally:
        server.close()


def cfg(spool: Path, broker: BrokerQueue, **overrides: object) -> AgentConfig:
    base = AgentConfig(broker_url=broker.url, spool_dir=spool,
                       state_file=spool / STATE_FILE_NAME, source="node-h", queue=broker.name,
                       batch_wait_s=0.05, poll_interval_s=0.05, publish_timeout_s=2.0,
                       once=True)
    return replace(base, **overrides)  # type: ignore[arg-type]


@pytest.mark.integration
def test_only_sealed_fully_shipped_old_enough_segments_are_deleted(
        tmp_path: Path, broker: BrokerQueue) -> None:
    spool = tmp_path / "spool"
    sealed = Reporter(job="sealed", spool_dir=spool, heartbeat_s=0)
    sealed.span("eval", 1.0, 2.0)
    sealed.shutdown()
    still_open = Reporter(job="open", spool_dir=spool, heartbeat_s=0)
    still_open.span("eval", 1.0, 2.0)
    assert still_open.flush()
    try:
        assert Agent(cfg(spool, broker, keep_shipped_s=3600)).run() == 0
        assert len(list(spool.glob("*.jsonl"))) == 2  # kept for an hour for inspection
        assert Agent(cfg(spool, broker, keep_shipped_s=0)).run() == 0
        assert list(spool.glob("*.jsonl")) == [still_open.spool_path]  # its writer lives on
        assert sum(len(m.lines) for m in broker.receive(lines=2)) == 2
    finally:
        still_open.shutdown()


@pytest.mark.integration
def test_follow_mode_sends_health_on_its_interval(tmp_path: Path, broker: BrokerQueue) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "a.jsonl").write_text(frame(json.dumps({"v": 1})) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ETT_", "CELERY_"))}
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "collector", "--broker", broker.url, "--spool-dir", str(spool),
         "--queue", broker.name, "--source", "node-h", "--health-interval", "0.3",
         "--batch-wait", "0", "--metrics-port", str(port), "--unsigned"],
        cwd=REPO, env=env, stderr=subprocess.DEVNULL)
    try:
        shipped = broker.receive(lines=1, timeout=15, settle=1.5)
        periodic = len(broker.health)
    finally:
        proc.terminate()
        assert proc.wait(15) == 0
    assert broker.receive(lines=0, settle=0.5) == []  # collects the report sent at exit
    assert sum(len(m.lines) for m in shipped) == 1
    assert periodic >= 1
    assert len(broker.health) >= 2  # periodic reports, plus the one at exit
    last = broker.health[-1]
    assert last.source == "node-h" and last.auth is None  # no credential configured
    assert last.stats["shipped_events"] == 1 and last.stats["spool_files"] == 1
    assert set(last.stats) == {"backlog_bytes", "backlog_events", "shipped_events",
                               "dropped_events", "corrupted_records", "last_success_ts",
                               "spool_files", "report_epoch", "report_seq"}
    assert time.time() - last.stats["last_success_ts"] < 60
    # In the agent's order: one run (one epoch), the counter rising report by report.
    assert len({m.stats["report_epoch"] for m in broker.health}) == 1
    assert [m.stats["report_seq"] for m in broker.health] == list(range(1, len(broker.health) + 1))
