"""``manage.py send_weekly_reports [--week 2026-W47] [--to ADDRESS] [--dry-run]``.

Sends a week's reports now, in this process (no worker or beat needed), through the same send
records as the schedule: a report the schedule already sent is not sent again, and two of
these commands at once still send each report once. ``--to`` sends the fleet report to one
address as a preview (no record); ``--dry-run`` prints who would get what and sends nothing:
the same recipients as the run (``planning.recipients_now``), owners it would subscribe by
default included, so its count is the run's.
Exit status: 0 all sent, 1 a send failed (the reason is printed and kept in the admin), 2 bad
arguments (one line).
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from tqdm import tqdm

from ettweb.queries import IsoWeek
from ettweb.reports.content import ReportCache, build_message, render_for
from ettweb.reports.models import CLAIMABLE, SendRecord
from ettweb.reports.planning import plan_week, recipients_now
from ettweb.reports.sending import send_records
from ettweb.reports.subscriptions import (
    check_address,
    followed_components,
    save_default_subscriptions,
)

EXIT_BAD_ARGS = 2


def parse_week(text: str | None) -> IsoWeek:
    """The week asked for (default: the last complete one); it must have ended."""
    now = timezone.now()
    if text is None:
        return IsoWeek.last_complete(now)
    try:
        week = IsoWeek.parse(text)
    except ValueError as exc:
        raise CommandError(f"--week: {exc}", returncode=EXIT_BAD_ARGS) from None
    if week.ends_at > now:
        raise CommandError(f"--week: {week} has not ended yet (it ends "
                           f"{week.ends_at:%a %d %b %Y %H:%M} UTC)", returncode=EXIT_BAD_ARGS)
    return week


class Command(BaseCommand):
    help = ("Send a week's ETT% reports now, exactly once per subscriber (the schedule's send "
            "records are shared), or preview one with --to / --dry-run.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--week", metavar="YYYY-Www",
                            help="ISO week to report, e.g. 2026-W47 (default: the last "
                                 "complete week)")
        parser.add_argument("--to", metavar="ADDRESS",
                            help="send the fleet report to this one address only (a preview; "
                                 "no send record, subscribers get nothing)")
        parser.add_argument("--dry-run", action="store_true",
                            help="print what would be sent to whom, as the real run would "
                                 "send it now (owners it would subscribe by default "
                                 "included); send nothing, change nothing")
        parser.add_argument("--no-progress", action="store_true",
                            help="no progress bar on stderr")

    def handle(self, *args: Any, **options: Any) -> None:
        week = parse_week(options["week"])
        if options["to"]:
            self._preview(week, options["to"], dry_run=options["dry_run"])
        elif options["dry_run"]:
            self._dry_run(week)
        else:
            self._send(week, progress=not options["no_progress"] and self.stderr.isatty())

    def _preview(self, week: IsoWeek, to: str, *, dry_run: bool) -> None:
        try:
            address = check_address(to)
        except ValueError as exc:
            raise CommandError(f"--to: {exc}", returncode=EXIT_BAD_ARGS) from None
        rendered = render_for(None, week, ReportCache())
        if dry_run:
            self.stdout.write(f"would send to {address}: {rendered.subject}")
            return
        message = build_message(rendered, address, f"{week}.preview.{timezone.now():%s}")
        try:
            message.send(fail_silently=False)
        except Exception as exc:
            raise CommandError(f"sending to {address} failed: {type(exc).__name__}: {exc}",
                               returncode=1) from None
        self.stdout.write(f"sent to {address}: {rendered.subject}")

    def _dry_run(self, week: IsoWeek) -> None:
        handled = (SendRecord.objects.filter(week=str(week), subscription__enabled=True)
                   .exclude(status__in=CLAIMABLE).select_related("subscription")
                   .order_by("subscription__email"))
        for record in handled:
            self.stdout.write(f"skip {record.subscription.email}: {week} already handled")
        cache, count = ReportCache(), 0
        for subscription in recipients_now(week):
            rendered = render_for(subscription, week, cache)
            followed = ", ".join(followed_components(subscription)) or "fleet only"
            new = "" if subscription.pk else ", subscribed by default as an owner"
            self.stdout.write(f"would send to {subscription.email} ({followed}{new}): "
                              f"{rendered.subject}")
            count += 1
        self.stdout.write(f"{count} report(s) would be sent for {week}; nothing was sent")

    def _send(self, week: IsoWeek, *, progress: bool) -> None:
        chosen = recipients_now(week)  # exactly what --dry-run lists
        saved = [s for s in chosen if s.pk is not None]
        saved += [row for row, _ in save_default_subscriptions(s for s in chosen if s.pk is None)]
        plan_week(week, now=timezone.now(), subscriptions=saved)
        records = SendRecord.objects.filter(week=str(week))
        before = records.exclude(status__in=CLAIMABLE).count()
        ids = list(records.filter(status__in=CLAIMABLE).order_by("id")
                   .values_list("pk", flat=True))
        with tqdm(ids, desc=f"sending {week}", unit=" reports", file=sys.stderr,
                  disable=not progress) as bar:
            summary = send_records(bar, timezone.now, ignore_due=True)
        for problem in summary.failed + summary.retrying:
            self.stderr.write(f"not sent: {problem}")
        self.stdout.write(f"{week}: {len(summary.sent)} sent, {len(summary.failed)} failed, "
                          f"{len(summary.retrying)} to retry, {summary.skipped} taken by another "
                          f"sender or unsubscribed meanwhile, {before} handled before")
        if not summary.ok:
            raise CommandError(f"{len(summary.failed) + len(summary.retrying)} report(s) for "
                               f"{week} not sent (see above and the admin)", returncode=1)
