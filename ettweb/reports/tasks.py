"""The beat task behind the weekly report; the logic lives in ``reports.sending``."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from ettweb.platform.retry import waits_for_database
from ettweb.reports.sending import send_due

log = logging.getLogger(__name__)
SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
#: One run sends for at most this long, then leaves the rest to the next minute's run.
BUDGET_S = 50.0


def relay_configured() -> bool:
    """Whether sending can reach anything: a non-SMTP backend (console, locmem) always can."""
    return settings.EMAIL_BACKEND != SMTP_BACKEND or bool(settings.EMAIL_RELAY_CONFIGURED)


@shared_task(name="ett.send_due_reports")
@waits_for_database
def send_due_reports() -> int:
    """Beat, every minute: plan the week, mark dead claims missed, send what is due.

    With the SMTP backend and no ``EMAIL_HOST`` there is no relay to send to: nothing is
    planned (rather than five failed tries per subscriber); once a relay is configured the
    latest week is planned and sent at the next run.
    """
    if not relay_configured():
        log.debug("weekly reports: EMAIL_HOST is not set, nothing sent")
        return 0
    summary = send_due(budget_s=BUDGET_S)
    if summary.sent or summary.failed or summary.retrying or summary.missed:
        log.info("weekly reports: %d sent, %d failed, %d to retry, %d marked missed",
                 len(summary.sent), len(summary.failed), len(summary.retrying), summary.missed)
    return len(summary.sent)
