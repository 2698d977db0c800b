"""Signed unsubscribe tokens: a link in the e-mail is its own proof, no login needed.

The token carries the subscription id and its *version*, and is signed with the project's
secret (a salt of its own, so no other signed value can pass for it) and a timestamp, so an
old forwarded mail stops working after ``ETT_UNSUBSCRIBE_MAX_AGE_DAYS``.

Why the version: a subscription's version goes up each time it is turned back on
(``Subscription.save``). Without it, a link from a report sent before someone unsubscribed
and subscribed again still unsubscribed them for 90 days (issue 40, item 5g): their newer
choice undone by an old mail, a forwarded one included. A token of an earlier version is
refused with a page that says so. Tokens from before versions existed carry none and count
as version 1, the version every existing subscription started with.
"""

from __future__ import annotations

from typing import NamedTuple

from django.conf import settings
from django.core import signing

SALT = "ett.reports.unsubscribe"
#: The version of a token signed before tokens carried one (and of every new subscription).
FIRST_VERSION = 1


class TokenError(ValueError):
    """Why a token was refused, in words for the page."""


class UnsubscribeToken(NamedTuple):
    """What a valid token names: one subscription, as it was when the mail was made."""

    subscription_id: int
    version: int


def make_token(subscription_id: int, version: int = FIRST_VERSION) -> str:
    return signing.dumps({"s": subscription_id, "v": version}, salt=SALT, compress=False)


def read_token(token: str) -> UnsubscribeToken:
    """The subscription and version in a valid, unexpired token; else a TokenError saying
    why. Whether the version is still the subscription's is the view's question."""
    max_age = int(settings.ETT_UNSUBSCRIBE_MAX_AGE_DAYS) * 86400
    try:
        payload = signing.loads(token, salt=SALT, max_age=max_age)
    except signing.SignatureExpired:
        raise TokenError("this unsubscribe link has expired; change your subscription on the "
                         "report settings page instead") from None
    except signing.BadSignature:
        raise TokenError("this unsubscribe link is not valid (it may be cut short or "
                         "altered); change your subscription on the report settings page") from None
    if not isinstance(payload, dict):
        raise TokenError("this unsubscribe link is not valid")
    subscription_id, version = payload.get("s"), payload.get("v", FIRST_VERSION)
    if not isinstance(subscription_id, int) or not isinstance(version, int) \
            or isinstance(version, bool):
        raise TokenError("this unsubscribe link is not valid")
    return UnsubscribeToken(subscription_id, version)


#: The page's words for a link of an earlier version.
SUPERSEDED = ("this unsubscribe link is from a report sent before you subscribed again, so it "
              "no longer unsubscribes you: use the link in your latest report, or turn the "
              "report off on the report settings page")
