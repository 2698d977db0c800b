"""The ETT account of a provider's person: made at their first sign-in, given the role
their claims grant at every sign-in."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from ettweb.access.roles import set_role
from ettweb.sso.claims import Grant
from ettweb.sso.errors import Refused
from ettweb.sso.models import SsoIdentity


def sign_in(issuer: str, subject: str, granted: Grant, username_claim: str) -> User:
    """The account of ``subject`` at ``issuer`` with ``granted``'s role and address.

    All or nothing: a refusal leaves no account, no identity and no role change behind.
    """
    try:
        with transaction.atomic():
            return _sign_in(issuer, subject, granted, username_claim)
    except IntegrityError:
        # Two first sign-ins of one person at once: the other one made the account.
        raise Refused("this account was being created by another sign-in at the same "
                      "moment; sign in again", status=409) from None


def _sign_in(issuer: str, subject: str, granted: Grant, username_claim: str) -> User:
    identity = (SsoIdentity.objects.select_for_update().select_related("user")
                .filter(issuer=issuer, subject=subject).first())
    if identity is None:
        identity = SsoIdentity(user=_new_user(granted, username_claim), issuer=issuer,
                               subject=subject)
    user = identity.user
    if not user.is_active:
        raise Refused(f"the ETT account {user.username!r} is deactivated; an ETT admin "
                      f"reactivates it (admin: Users)", status=403)
    if user.email != granted.email:
        user.email = granted.email
        user.save(update_fields=["email"])
    identity.groups = list(granted.groups)
    identity.last_sign_in = timezone.now()
    identity.save()
    set_role(user, granted.role, granted.components)
    return user


def _new_user(granted: Grant, username_claim: str) -> User:
    """A new account without a password (``manage.py ett_login`` can give it one)."""
    if User.objects.filter(username=granted.username).exists():
        raise Refused(
            f"claim {username_claim}: the username {granted.username!r} belongs to an ETT "
            f"account that is not this provider's person; an ETT admin renames that account "
            f"(admin: Users) if it is yours, then sign in again", status=409)
    return User.objects.create_user(granted.username, email=granted.email)
