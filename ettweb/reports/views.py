"""Report pages: a user's settings, a preview of their report for any week, unsubscribe.

Unsubscribing needs no login: the signed token in the link is the proof. Its GET only shows a
confirmation (mail scanners and link previews open every link; a GET must change nothing),
and its POST unsubscribes — which is also what a mail client's RFC 8058 one-click button
sends (``List-Unsubscribe=One-Click`` in the body, no CSRF token: the token is the check).
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods

from ettweb.access.roles import is_admin, require
from ettweb.pages.parameters import bad_parameters, takes
from ettweb.queries import IsoWeek
from ettweb.queries.weekly import report_history
from ettweb.reports.chart import trend_png
from ettweb.reports.content import ReportCache, render_for
from ettweb.reports.forms import PreviewForm, SubscriptionForm
from ettweb.reports.models import SendRecord, SendStatus, Subscription
from ettweb.reports.subscriptions import new_subscription
from ettweb.reports.unsubscribe import SUPERSEDED, TokenError, read_token


def cancel_unsent(subscription: Subscription) -> None:
    """Turned off: reports planned but not yet claimed will not go out."""
    SendRecord.objects.filter(subscription=subscription,
                              status__in=(SendStatus.PENDING, SendStatus.RETRY)).update(
        status=SendStatus.CANCELLED, last_error="unsubscribed before the report was sent")


def _subscription_of(user: User) -> Subscription:
    """The user's subscription, or an unsaved one with the defaults."""
    existing = Subscription.objects.filter(user=user).first()
    return existing or new_subscription(user)


@login_required
@takes("saved")
@require_http_methods(["GET", "POST"])
def subscription_settings(request: HttpRequest) -> HttpResponse:
    """``/reports/settings/``: what I receive, where, when. Every role, viewers included,
    may save it: it is the user's own mail, not something others read. Where it goes is
    the account's address unless an admin sets another (``SubscriptionForm``)."""
    subscription = _subscription_of(request.user)  # type: ignore[arg-type]  # login_required
    form = SubscriptionForm(request.POST or None, instance=subscription,
                            by_admin=is_admin(request.user))
    if request.method == "POST" and form.is_valid():
        saved = form.save(commit=False)
        if not saved.enabled and subscription.unsubscribed_at is None:
            saved.unsubscribed_at = timezone.now()
        elif saved.enabled:
            saved.unsubscribed_at = None
        saved.save()
        if not saved.enabled:
            cancel_unsent(saved)
        return redirect(f"{request.path}?saved=1")
    recent = (SendRecord.objects.filter(subscription=subscription).order_by("-week")[:8]
              if subscription.pk else [])
    return render(request, "reports/settings.html", {
        "form": form, "subscription": subscription, "saved": request.GET.get("saved") == "1",
        "zones": SubscriptionForm.zone_names(), "recent": recent,
        "checks": SubscriptionForm.CHECKS,
        "last_week": IsoWeek.last_complete(timezone.now())})


def _week(form: PreviewForm) -> IsoWeek:
    """The week a valid preview form asks for: its ``week``, else the last complete one."""
    week: IsoWeek = form.cleaned_data["week"] or IsoWeek.last_complete(timezone.now())
    return week


@login_required
@takes(PreviewForm)
@require_GET
def preview(request: HttpRequest) -> HttpResponse:
    """``/reports/preview/?week=2026-W47``: the report as it would be sent (admins may add
    ``&user=NAME`` to see someone else's: it shows their address and what they follow)."""
    form = PreviewForm(request.GET)
    if not form.is_valid():
        return bad_parameters(form)
    week = _week(form)
    user: User = request.user  # type: ignore[assignment]  # login_required
    if form.cleaned_data["user"]:
        require(is_admin(request.user), request.user, "preview another user's report",
                needs="admin")
        other = User.objects.filter(username=form.cleaned_data["user"]).first()
        if other is None:
            return HttpResponseBadRequest(
                f"bad parameters: user: no user named {form.cleaned_data['user']!r}",
                content_type="text/plain")
        user = other
    subscription = _subscription_of(user)
    chart = f"{reverse('reports:preview-chart')}?{urlencode({'week': str(week)})}"
    rendered = render_for(subscription, week, ReportCache(), chart_src=chart, with_chart=False)
    return render(request, "reports/preview.html", {
        "week": week, "rendered": rendered, "previewed": user,
        "subscription": subscription, "previous": week.previous,
        "next": week.next if week.next.ends_at <= timezone.now() else None})


@login_required
@takes(PreviewForm)
@require_GET
def preview_chart(request: HttpRequest) -> HttpResponse:
    """``/reports/preview/chart.png?week=2026-W47``: the chart the week's report carries
    (the same PNG the mail attaches; the fleet's 8 weeks, the same for every subscriber).

    Why its own URL: drawing it (matplotlib, ~100-170 ms) was half of the preview page's
    server time; the browser fetches it beside the page, and caches it for the week."""
    form = PreviewForm(request.GET)
    if not form.is_valid():
        return bad_parameters(form)
    response = HttpResponse(trend_png(*report_history(_week(form))), content_type="image/png")
    response["Cache-Control"] = "private, max-age=3600"
    return response


@csrf_exempt
@takes()
@require_http_methods(["GET", "POST"])
def unsubscribe(request: HttpRequest, token: str) -> HttpResponse:
    """GET: confirm (changes nothing). POST: unsubscribe (the page's button or one-click).
    A link of an earlier version of the subscription (it was turned back on since) is a
    410 page saying so, and changes nothing."""
    try:
        signed = read_token(token)
    except TokenError as exc:
        return render(request, "reports/unsubscribe_invalid.html", {"reason": str(exc)},
                      status=400)
    subscription = Subscription.objects.filter(pk=signed.subscription_id).first()
    if subscription is None:
        return render(request, "reports/unsubscribe_invalid.html", {
            "reason": "this subscription no longer exists; there is nothing to unsubscribe"},
            status=404)
    if signed.version != subscription.version:
        # 410: the link was good once; the subscription it named has been renewed since.
        return render(request, "reports/unsubscribe_invalid.html", {
            "reason": SUPERSEDED, "subscription": subscription}, status=410)
    if request.method == "GET":
        return render(request, "reports/unsubscribe_confirm.html",
                      {"subscription": subscription})
    with transaction.atomic():
        # The version in the filter too: a re-subscribe between the check and here wins.
        Subscription.objects.filter(pk=subscription.pk, enabled=True,
                                    version=signed.version).update(
            enabled=False, unsubscribed_at=timezone.now())
        cancel_unsent(subscription)
    return render(request, "reports/unsubscribed.html", {"subscription": subscription})
