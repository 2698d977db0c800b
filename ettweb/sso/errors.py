"""Why a single sign-on did not log anyone in, as a page the browser shows."""

from __future__ import annotations


class Refused(Exception):
    """A log-in refused; the message names the parameter, claim or setting at fault.

    ``status`` is the page's: 400 for a callback or token that does not hold up, 403 for a
    person the rules give no access, 404 while single sign-on is off, 409 for a username
    that belongs to another account.
    """

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class ProviderError(Refused):
    """The identity provider is unreachable or answers something unusable: 502, since the
    person at the browser did nothing wrong and the operator has something to fix."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=502)
