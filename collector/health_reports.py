"""The collector agent's health reports: one snapshot, served to scrapes and sent to the server.

Why it works this way: the snapshot (backlog, shipped, dropped, corrupted, last success) is
recomputed on the agent's own thread, at most once a second, so a Prometheus scrape (served
on ``--metrics-port`` by a thread of its own) reads a finished snapshot and never walks
state the agent is changing. Every ``--health-interval`` the same snapshot is sent as
``ett.collector_health``, best effort: the next report carries the same totals anyway. What
the numbers mean is ``collector.health``'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from collector.config import AgentConfig
from collector.health import HealthStats, MetricsServer, prometheus_text
from collector.publisher import Publisher
from collector.ship_state import ShipState
from collector.spool import dropped_events
from collector.tailer import SpoolTailer

log = logging.getLogger("ett.collector")

#: Seconds a snapshot is fresh enough: the backlog count reads the whole unshipped spool.
REFRESH_S = 1.0


class HealthReports:
    """Keeps the agent's health snapshot, serves it and sends it.

    ``rejected`` says whether the server rejects the credential (a metric of its own, not a
    counted field); ``after_send`` runs after every report, sent or not: the agent asks the
    server about its credential again there.
    """

    def __init__(self, config: AgentConfig, state: ShipState, tailer: SpoolTailer,
                 publisher: Publisher, *, rejected: Callable[[], bool],
                 after_send: Callable[[], None]) -> None:
        self.config = config
        self.state = state
        self.tailer = tailer
        self.publisher = publisher
        self._rejected = rejected
        self._after_send = after_send
        self.snapshot = HealthStats()
        self.metrics: MetricsServer | None = None
        self._last_refresh = float("-inf")
        self._last_sent = time.monotonic()
        # A report's place in this agent's order: the broker may deliver an older one after a
        # newer one (a redelivery), and the server keeps only the newest of each source.
        self._report_epoch, self._report_seq = time.time(), 0

    def serve(self) -> None:
        """Serve ``/metrics`` when ``--metrics-port`` asks for it."""
        cfg = self.config
        if cfg.metrics_port:
            self.metrics = MetricsServer(
                cfg.metrics_host, cfg.metrics_port,
                lambda: prometheus_text(self.snapshot, cfg.source, rejected=self._rejected()))
            self.metrics.start()
            log.info("metrics on http://%s:%d/metrics", cfg.metrics_host, self.metrics.port)

    def refresh(self, *, force: bool = False) -> None:
        """Recompute the snapshot (at most once a second): scrapes read it, never the state."""
        now = time.monotonic()
        if not force and now - self._last_refresh < REFRESH_S:
            return
        self._last_refresh = now
        self.snapshot = HealthStats(
            backlog_bytes=self.tailer.backlog_bytes(),
            backlog_events=self.tailer.backlog_events(),
            shipped_events=self.state.lines,
            dropped_events=dropped_events(self.config.spool_dir),
            corrupted_records=self.state.corrupted,
            last_success_ts=self.state.last_success,
            spool_files=len(self.state.files),
        )

    def is_fresh(self) -> bool:
        """Whether the snapshot was taken within the last second."""
        return time.monotonic() - self._last_refresh < REFRESH_S

    def is_due(self) -> bool:
        """Whether ``--health-interval`` has passed since the last report."""
        return time.monotonic() - self._last_sent >= self.config.health_interval_s

    def send(self) -> bool:
        """Send the snapshot; whether the broker took it. Best effort, never retried: the
        next report carries the same totals anyway."""
        self._last_sent = time.monotonic()
        self._report_seq += 1
        report = {**self.snapshot.as_dict(), "report_epoch": self._report_epoch,
                  "report_seq": self._report_seq}
        try:
            self.publisher.publish_health(report)
            sent = True
        except Exception as exc:  # a broker problem shows up in the batch path too
            log.warning("health report not sent (%s: %s)", type(exc).__name__, exc)
            sent = False
            self.publisher.reset()
        self._after_send()
        return sent

    def close(self) -> None:
        """Stop serving ``/metrics``."""
        if self.metrics is not None:
            self.metrics.close()
