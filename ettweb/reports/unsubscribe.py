"""Signed unsubscribe tokens: a link in the e-mail is its own proof, no login needed.

The token carries the subscription id and is signed with the project's secret (a salt of its
own, so no other signed value can pass for it) and a timestamp, so an old forwarded mail
stops working after ``ETT_UNSUBSCRIBE_MAX_AGE_DAYS``.
"""

from __future__ import annotations

from django.conf import settings
from django.core import signing

SALT = "ett.reports.unsubscribe"


class TokenError(ValueError):
    """Why a token was refused, in words for the page."""


def make_token(subscription_id: int) -> str:
    return signing.dumps({"s": subscription_id}, salt=SALT, compress=False)


def read_token(token: str) -> int:
    """The subscription id in a valid, unexpired token; else a TokenError saying why."""
    max_age = int(settings.ETT_UNSUBSCRIBE_MAX_AGE_DAYS) * 86400
    try:
        payload = signing.loads(token, salt=SALT, max_age=max_age)
    except signing.SignatureExpired:
        raise TokenError("this unsubscribe link has expired; change your subscription on the "
                         "report settings page instead") from None
    except signing.BadSignature:
        raise TokenError("this unsubscribe link is not valid (it may be cut short or "
                         "altered); change your subscription on the report settings page") from None
    subscription_id = payload.get("s") if isinstance(payload, dict) else None
    if not isinstance(subscription_id, int):
        raise TokenError("this unsubscribe link is not valid") from None
    return subscription_id
