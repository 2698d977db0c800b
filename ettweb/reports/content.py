"""One subscriber's weekly report as an e-mail: subject, text and HTML from templates, the
chart inline as ``cid:``, every link built from ``ETT_BASE_URL``.

The numbers come from :class:`~ettweb.queries.weekly.WeeklyReportQuery` and nothing else, so
a report can never disagree with the dashboard or the API for the same week. A
:class:`ReportCache` computes each (week, components) report and each week's chart once per
sending run, so a list of a thousand owners costs a handful of queries, not a thousand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from email.mime.image import MIMEImage
from email.utils import parseaddr
from typing import Any, Final
from urllib.parse import quote, urlencode, urlsplit

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.template.loader import render_to_string
from django.urls import reverse

from ettweb.queries import (
    DetectedChange,
    IsoWeek,
    RolloutMarker,
    WeeklyReportQuery,
    WeeklyReportResult,
    calculate,
)
from ettweb.queries.markers import Headline
from ettweb.reports.chart import trend_png
from ettweb.reports.models import Subscription
from ettweb.reports.subscriptions import followed_components
from ettweb.reports.unsubscribe import make_token

CHART_CID: Final = "ett-trend"


def absolute(path: str, **params: str) -> str:
    """``ETT_BASE_URL`` + ``path`` (+ query): the one way a report builds a link."""
    query = f"?{urlencode(params)}" if params else ""
    return f"{settings.ETT_BASE_URL}{path}{query}"


def job_url(job: str) -> str:
    return absolute(reverse("dashboard:job", args=[job]))


def rollout_url(rollout_id: int) -> str:
    return absolute(reverse("rollouts:detail", args=[rollout_id]))


def change_url(change: DetectedChange) -> str:
    """The change's row on the changes page (where its owners record the rollout)."""
    day = change.day.isoformat()
    return absolute(reverse("changes:list"), component=change.component,
                    **({"team": change.team} if change.team else {}), date_from=day,
                    date_to=day)


@dataclass(frozen=True)
class KeyRow:
    """One line of the chart's key: the rollout behind badge ``number``, its page, and what
    is known of its effect (``headline`` None: too early, or not computed yet)."""

    number: int
    rollout: RolloutMarker
    url: str
    headline: Headline | None
    this_week: bool


def chart_key(report: WeeklyReportResult) -> list[KeyRow]:
    """The chart's rollouts in badge order. This week's carry the verdict the report
    computed (what "Rollouts this week" says); earlier ones the warm pass's."""
    fresh = {r.rollout.id: r for r in report.rollouts}
    rows = []
    for number, marker in enumerate(report.history_markers, start=1):
        current = fresh.get(marker.id)
        headline = ((None if current.too_early else current.headline) if current
                    else report.history_headlines.get(marker.id))
        rows.append(KeyRow(number, marker, rollout_url(marker.id), headline,
                           current is not None))
    return rows


@dataclass
class ReportCache:
    """Reports and charts computed once per run (keyed by week and followed components)."""

    reports: dict[tuple[IsoWeek, tuple[str, ...]], WeeklyReportResult] = field(
        default_factory=dict)
    charts: dict[IsoWeek, bytes] = field(default_factory=dict)

    def report(self, week: IsoWeek, components: tuple[str, ...]) -> WeeklyReportResult:
        key = (week, components)
        if key not in self.reports:
            self.reports[key] = calculate(WeeklyReportQuery(week, components=components))
        return self.reports[key]

    def chart(self, week: IsoWeek, report: WeeklyReportResult) -> bytes:
        if week not in self.charts:
            self.charts[week] = trend_png(report.history, report.history_markers)
        return self.charts[week]


@dataclass(frozen=True)
class RenderedReport:
    subject: str
    text: str
    html: str
    chart_png: bytes
    unsubscribe_url: str


def context(report: WeeklyReportResult, *, fleet: bool, chart_src: str,
            unsubscribe_url: str) -> dict[str, Any]:
    """What the templates see: the result, the rows to list, and every link, absolute."""
    week = report.week
    mine = [c for c in report.components if c.subscribed]
    others = [c for c in report.components if not c.subscribed] if fleet else []
    followed = {c.component for c in mine}
    rollouts = report.rollouts if fleet or not followed else [
        r for r in report.rollouts if r.rollout.component in followed]
    fleet_params = {"date_from": week.range.date_from.isoformat(),
                    "date_to": week.range.date_to.isoformat()}
    unrecorded = [c for c in report.unrecorded_changes if not followed or c.component in followed]
    return {
        "report": report, "week": week, "mine": mine, "others": others, "fleet": fleet,
        "rollouts": rollouts, "chart_src": chart_src,
        "unrecorded": [(c, change_url(c)) for c in unrecorded], "yours_only": bool(followed),
        "top_jobs": [(job, job_url(job.job)) for job in report.top_jobs],
        "rollout_urls": {r.rollout.id: rollout_url(r.rollout.id) for r in report.rollouts},
        "key": chart_key(report),
        "fleet_url": absolute(reverse("dashboard:fleet"), **fleet_params),
        "settings_url": absolute(reverse("reports:settings")),
        "preview_url": absolute(reverse("reports:preview"), week=str(week)),
        "unsubscribe_url": unsubscribe_url,
    }


def render(report: WeeklyReportResult, *, fleet: bool, chart_png: bytes, chart_src: str,
           unsubscribe_url: str) -> RenderedReport:
    """Subject, text and HTML of one report (``chart_src``: ``cid:`` in mail, a data URI in
    the preview page)."""
    ctx = context(report, fleet=fleet, chart_src=chart_src, unsubscribe_url=unsubscribe_url)
    subject = " ".join(render_to_string("reports/email/weekly_subject.txt", ctx).split())
    return RenderedReport(subject=subject,
                          text=render_to_string("reports/email/weekly.txt", ctx),
                          html=render_to_string("reports/email/weekly.html", ctx),
                          chart_png=chart_png, unsubscribe_url=unsubscribe_url)


def render_for(subscription: Subscription | None, week: IsoWeek, cache: ReportCache,
               chart_src: str = f"cid:{CHART_CID}", *, with_chart: bool = True,
               ) -> RenderedReport:
    """A subscriber's report (``None``: the fleet report, as ``--to`` previews send).
    ``with_chart=False`` leaves ``chart_png`` empty: the preview page's HTML links the chart
    (``chart_src``) instead of carrying it."""
    components = followed_components(subscription) if subscription else ()
    report = cache.report(week, components)
    unsubscribe = (absolute(reverse("reports:unsubscribe", args=[make_token(subscription.pk,
                                                                         subscription.version)]))
                   if subscription and subscription.pk else "")
    return render(report, fleet=subscription.fleet if subscription else True,
                  chart_png=cache.chart(week, report) if with_chart else b"",
                  chart_src=chart_src, unsubscribe_url=unsubscribe)


def _mail_domain() -> str:
    address = parseaddr(str(settings.DEFAULT_FROM_EMAIL))[1]
    return address.rpartition("@")[2] or urlsplit(settings.ETT_BASE_URL).hostname or "ett"


def message_id(key: str) -> str:
    """A Message-ID stable per send record, so a relay or inbox can drop a resent copy."""
    return f"<ett-report.{quote(key, safe='')}@{_mail_domain()}>"


def build_message(rendered: RenderedReport, to: str, key: str) -> EmailMultiAlternatives:
    """multipart/related(alternative(text, html), image): the HTML's ``cid:`` resolves to the
    attached chart (no chart in the HTML: just the alternative); RFC 8058 one-click
    unsubscribe headers when there is a link."""
    headers = {"Message-ID": message_id(key), "Auto-Submitted": "auto-generated",
               "X-Auto-Response-Suppress": "All"}
    if rendered.unsubscribe_url:
        headers["List-Unsubscribe"] = f"<{rendered.unsubscribe_url}>"
        headers["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    message = EmailMultiAlternatives(subject=rendered.subject, body=rendered.text,
                                     from_email=settings.DEFAULT_FROM_EMAIL, to=[to],
                                     headers=headers)
    message.attach_alternative(rendered.html, "text/html")
    if f"cid:{CHART_CID}" in rendered.html:  # a week without data shows no chart: an inline
        message.mixed_subtype = "related"  # part nothing points to is a stray attachment
        image = MIMEImage(rendered.chart_png, "png")
        image.add_header("Content-ID", f"<{CHART_CID}>")
        image.add_header("Content-Disposition", "inline", filename="ett-trend.png")
        message.attach(image)
    return message
