"""``python -m bench.reports``: what a Monday's weekly e-mail costs, sent to a real SMTP server.

On a simulated fleet (``manage.py simulate_fleet``, through the import path) with a list of
subscribers following a handful of different component sets, measured side by side in one
run, against an SMTP server on loopback (aiosmtpd):

1. **Chart**: the inline PNG (matplotlib Agg, last 8 weeks with rollout markers), drawn
   ``--repeats`` times; median ms.
2. **Uncached**: reports sent one by one, each computing its own numbers and chart — what a
   sender without ``ReportCache`` would do; ms per report.
3. **Scheduled path**: the week planned for every subscriber and sent by ``send_records``
   (claim, render, SMTP, record) with the cache, pause 0; ms per report, and every subscriber
   must have received exactly one message.

The ratio uncached / cached is the cache's speed-up. The last line of output is one JSON
object; ``meets_targets`` says whether a cached report costs ≤ 100 ms (so the 1 s pause
between sends, not the work, sets the pace) and the chart ≤ 300 ms.
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import statistics
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from io import StringIO
from typing import Any

from bench.rollup_cost import _setup_django, bench_database

DATABASE = "ett_bench_reports"
CACHED_TARGET_MS = 100.0
CHART_TARGET_MS = 300.0
#: Component sets the subscribers follow (owners of one or two components, and the fleet).
FOLLOWS: tuple[tuple[str, ...], ...] = (
    (), ("checkpointing",), ("pt2_compiler",), ("reliability", "scheduler"),
    ("trainer_init", "data_ingestion"), ("evaluation",), ("model_publishing",))


def _say(text: str) -> None:
    print(f"[bench.reports] {text}", file=sys.stderr, flush=True)


class _Relay:
    """An SMTP server on loopback that counts what each recipient received."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.received: Counter[str] = Counter()
        relay = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
                for rcpt in envelope.rcpt_tos:
                    relay.received[rcpt] += 1
                return "250 OK"

        with socket.socket() as probe:  # aiosmtpd connects to its own port: name a free one
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)

    def __enter__(self) -> _Relay:
        logging.getLogger("mail.log").setLevel(logging.WARNING)  # aiosmtpd's per-line log
        self.controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.controller.stop()


def _subscribers(count: int) -> None:
    from django.contrib.auth.models import User

    from ettweb.reports.models import Subscription

    for i in range(count):
        user = User.objects.create_user(f"owner{i}", email=f"owner{i}@example.com")
        Subscription.objects.create(user=user, email=user.email,
                                    components=list(FOLLOWS[i % len(FOLLOWS)]))


def _chart_ms(week: Any, repeats: int) -> float:
    from ettweb.queries import WeeklyReportQuery, calculate
    from ettweb.reports.chart import trend_png

    report = calculate(WeeklyReportQuery(week))
    trend_png(report.history, report.history_markers)  # first call: fonts, imports
    samples = []
    for _ in range(repeats):
        began = time.perf_counter()
        trend_png(report.history, report.history_markers)
        samples.append((time.perf_counter() - began) * 1000)
    return statistics.median(samples)


def _uncached_ms(week: Any, count: int) -> float:
    """Each report computed from scratch (fresh cache), rendered and sent."""
    from django.core.mail import get_connection

    from ettweb.reports.content import ReportCache, build_message, render_for
    from ettweb.reports.models import Subscription

    subscriptions = list(Subscription.objects.order_by("id")[:count])
    began = time.perf_counter()
    for subscription in subscriptions:
        rendered = render_for(subscription, week, ReportCache())
        with get_connection(fail_silently=False) as connection:
            connection.send_messages([build_message(rendered, "uncached@example.com",
                                                    f"bench.{subscription.pk}")])
    return (time.perf_counter() - began) * 1000 / len(subscriptions)


def _scheduled_ms(week: Any) -> tuple[float, int]:
    from django.utils import timezone

    from ettweb.reports.models import SendRecord
    from ettweb.reports.planning import plan_week
    from ettweb.reports.sending import send_records

    began = time.perf_counter()
    plan_week(week, now=timezone.now())
    ids = list(SendRecord.objects.filter(week=str(week)).values_list("pk", flat=True))
    summary = send_records(ids, timezone.now, ignore_due=True, pause_s=0.0)
    return (time.perf_counter() - began) * 1000 / max(1, len(ids)), len(summary.sent)


def run(args: argparse.Namespace) -> dict[str, Any]:
    _setup_django()
    from django.conf import settings
    from django.core.management import call_command
    from django.utils import timezone

    from ettweb.queries import IsoWeek

    with bench_database(DATABASE), _Relay() as relay:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", relay.port
        _say(f"simulating {args.jobs:,} jobs over {args.days} days…")
        out = StringIO()
        call_command("simulate_fleet", "--jobs", str(args.jobs), "--days", str(args.days),
                     "--no-progress", stdout=out)
        _say(out.getvalue().strip().splitlines()[-1])
        _subscribers(args.subscribers)
        week = IsoWeek.last_complete(timezone.now())
        _say(f"chart for {week}…")
        chart_ms = _chart_ms(week, args.repeats)
        _say(f"{args.uncached} uncached reports…")
        uncached_ms = _uncached_ms(week, args.uncached)
        _say(f"{args.subscribers} scheduled reports…")
        cached_ms, sent = _scheduled_ms(week)
        exactly_once = sent == args.subscribers and all(
            relay.received[f"owner{i}@example.com"] == 1 for i in range(args.subscribers))
    return {
        "benchmark": "reports", "jobs": args.jobs, "days": args.days, "week": str(week),
        "subscribers": args.subscribers, "sent": sent, "exactly_once": exactly_once,
        "chart_ms": round(chart_ms, 1), "uncached_ms_per_report": round(uncached_ms, 1),
        "cached_ms_per_report": round(cached_ms, 1),
        "cache_speedup": round(uncached_ms / cached_ms, 1),
        "targets": {"cached_ms_per_report": CACHED_TARGET_MS, "chart_ms": CHART_TARGET_MS},
        "meets_targets": exactly_once and cached_ms <= CACHED_TARGET_MS and
        chart_ms <= CHART_TARGET_MS,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.reports", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2000, help="simulated jobs (2,000)")
    parser.add_argument("--days", type=int, default=90, help="days they cover (90)")
    parser.add_argument("--subscribers", type=int, default=300, help="subscribers (300)")
    parser.add_argument("--uncached", type=int, default=20,
                        help="reports sent without the cache (20)")
    parser.add_argument("--repeats", type=int, default=10, help="chart draws timed (10)")
    args = parser.parse_args(argv)
    if min(args.jobs, args.subscribers, args.uncached, args.repeats) < 1 or \
            not 14 <= args.days <= 3650:
        parser.error("--jobs, --subscribers, --uncached and --repeats must be at least 1, "
                     "--days between 14 and 3650")
    if args.uncached > args.subscribers:
        parser.error("--uncached cannot exceed --subscribers")
    return args


def main(argv: list[str] | None = None) -> int:
    result = run(parse_args(argv))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
