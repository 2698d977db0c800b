"""The collector's health: the counters an operator needs to trust that nothing is lost.

Why these numbers: every event a trainer emitted ends up in exactly one of *shipped*,
*backlog* (still on disk, a write in progress included), *dropped* (the spool was full;
counted by the Reporter) or *corrupted* (its spool record was damaged: a checksum mismatch,
an unreadable checksum, a torn write). Corrupted counts destroyed *events*, not lines: two
records fused by a lost newline are recovered when their checksums still verify, and a
record split by a stray newline is one. Exposing all four lets a dashboard or an alert
prove the books balance, instead of trusting that a quiet agent is a healthy one.

They leave the node two ways: Prometheus text exposition on a local port (pull, for the
node's own monitoring) and the ``ett.collector_health`` task (push, shown in the admin).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class HealthStats:
    """One snapshot; the field names are the ``ett.collector_health`` contract's keys."""

    backlog_bytes: int = 0
    backlog_events: int = 0
    shipped_events: int = 0
    dropped_events: int = 0
    corrupted_records: int = 0
    last_success_ts: float | None = None
    spool_files: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: (metric name, type, help, field) in exposition order.
_METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("ett_collector_backlog_bytes", "gauge",
     "Spool bytes not yet shipped.", "backlog_bytes"),
    ("ett_collector_backlog_events", "gauge",
     "Spool records not yet shipped.", "backlog_events"),
    ("ett_collector_shipped_events_total", "counter",
     "Events the broker confirmed.", "shipped_events"),
    ("ett_collector_dropped_events_total", "counter",
     "Events Reporters dropped because the spool or queue was full.", "dropped_events"),
    ("ett_collector_corrupted_records_total", "counter",
     "Events lost to damaged spool records (bad or unreadable checksum, torn write).",
     "corrupted_records"),
    ("ett_collector_last_success_timestamp_seconds", "gauge",
     "Unix time of the last confirmed publish (0 if none).", "last_success_ts"),
    ("ett_collector_spool_files", "gauge",
     "Spool segments present.", "spool_files"),
)


#: Not a health report's key: the server answers it (``collector.verdict``), it is not counted.
REJECTED_METRIC = ("ett_collector_rejected", "gauge",
                   "1 while the server rejects this collector's credential (the agent holds "
                   "its spool: nothing is sent); 0 otherwise or when unknown (no --server-url).")


def prometheus_text(stats: HealthStats, source: str, *, rejected: bool = False) -> str:
    """Render ``stats`` in the Prometheus text exposition format, labelled by source, and
    whether the server rejects the credential."""
    label = source.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    values = stats.as_dict()
    out: list[str] = []
    samples = [(name, kind, help_text, values[key] or 0)
               for name, kind, help_text, key in _METRICS]
    samples.append((*REJECTED_METRIC, int(rejected)))
    for name, kind, help_text, value in samples:
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}",
                f'{name}{{source="{label}"}} {value}']
    return "\n".join(out) + "\n"


class MetricsServer:
    """Serves ``GET /metrics`` from a snapshot callable in a daemon thread.

    The callable returns the agent's latest snapshot (computed by the agent's own thread),
    so a scrape never walks the agent's mutable state while it changes.
    """

    def __init__(self, host: str, port: int, render: Callable[[], str]) -> None:
        handler = _handler_for(render)
        self.server = ThreadingHTTPServer((host, port), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="ett-metrics",
                                       daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> MetricsServer:
        self.thread.start()
        return self

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler_for(render: Callable[[], str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404, "only /metrics is served")
                return
            body = render().encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Scrapes every few seconds would flood the agent's log: stay quiet."""

    return Handler
