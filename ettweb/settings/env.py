"""Strict environment parsing for settings.

A misconfigured deployment should fail at start-up with one line that names the variable,
not later with a stack trace from deep inside a database driver. Every helper here raises
:class:`~django.core.exceptions.ImproperlyConfigured` whose message starts with the variable.
Secrets (:data:`FILE_VARIABLES`) may instead be given as ``NAME_FILE``, a file to read.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

from collector.config import password_conflict

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})
POSTGRES_SCHEMES = ("postgres", "postgresql")
BROKER_SCHEMES = ("redis", "rediss", "redis+socket", "amqp", "amqps", "pyamqp")


class _Missing:
    """Sentinel: no default given, so the variable is required."""


REQUIRED: Any = _Missing()


def _fail(name: str, problem: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{name}: {problem}")


#: Secrets that may come from a file instead (``NAME_FILE``: a path whose first line is the
#: value), as Docker and Kubernetes secrets are mounted: a value in the environment is visible
#: to every process that can read ``/proc/<pid>/environ`` or ``docker inspect``, a file's
#: permissions are the operator's to choose. The URLs are here for the passwords inside them.
FILE_VARIABLES = frozenset({"DJANGO_SECRET_KEY", "EMAIL_HOST_PASSWORD", "DATABASE_URL",
                            "CELERY_BROKER_URL", "CELERY_BROKER_PASSWORD",
                            "ETT_OIDC_CLIENT_SECRET"})


def _set(value: str | None) -> bool:
    """Whether an environment value counts as given (blank is unset, as for every variable:
    compose writes ``${X:-}`` as an empty string)."""
    return value is not None and value.strip() != ""


def _from_file(name: str, path: str) -> str:
    """The first line of ``path`` (the ``NAME_FILE`` variable ``name``), stripped.

    An unreadable or empty file is an error naming ``name``: a secret silently read as empty
    would start a server with no key or no password.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            first = handle.readline().strip()
    except OSError as exc:
        raise _fail(name, f"cannot read {path!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise _fail(name, f"{path!r} is not UTF-8 text") from None
    if not first:
        raise _fail(name, f"{path!r} is empty (the value is its first line)")
    return first


def _raw(name: str, default: Any) -> str | None:
    value = os.environ.get(name)
    if name in FILE_VARIABLES:
        path = os.environ.get(f"{name}_FILE")
        if _set(path):
            if _set(value):
                raise _fail(name, f"both {name} and {name}_FILE are set; set one of them")
            value = _from_file(f"{name}_FILE", str(path).strip())
    if value is None or value.strip() == "":
        if default is REQUIRED:
            raise _fail(name, "required but not set")
        return None
    return value.strip()


def str_(name: str, default: Any = REQUIRED) -> Any:
    """A non-empty string, or ``default`` when unset (required when no default).

    For a name in :data:`FILE_VARIABLES` the value may come from ``NAME_FILE`` instead.
    """
    value = _raw(name, default)
    return default if value is None else value


def bool_(name: str, default: bool | None = None) -> bool:
    """``1/true/yes/on`` or ``0/false/no/off``; anything else is an error, not False."""
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise _fail(name, "required but not set")
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise _fail(name, f"not a boolean: {value!r} (use true/false)")


def _number(name: str, default: Any, convert: type, kind: str,
            minimum: float | None) -> Any:
    """``convert`` of the variable (an error names ``kind``), or ``default`` when unset."""
    value = _raw(name, default)
    if value is None:
        return default
    try:
        number = convert(value)
    except ValueError:
        raise _fail(name, f"not {kind}: {value!r}") from None
    if not math.isfinite(number):
        raise _fail(name, f"must be a finite number, got {value!r}")
    if minimum is not None and number < minimum:
        raise _fail(name, f"must be >= {_shown(minimum)}, got {_shown(number)}")
    return number


def _shown(number: float) -> str:
    return f"{number:g}" if isinstance(number, float) else str(number)


def int_(name: str, default: Any = REQUIRED, *, minimum: int | None = None) -> Any:
    """An integer (optionally ``>= minimum``), or ``default`` when unset."""
    return _number(name, default, int, "an integer", minimum)


def float_(name: str, default: Any = REQUIRED, *, minimum: float | None = None) -> Any:
    """A finite number (optionally ``>= minimum``), or ``default`` when unset."""
    return _number(name, default, float, "a number", minimum)


def utc_date(name: str, default: str) -> float:
    """A UTC date (``YYYY-MM-DD``) or date and time (``YYYY-MM-DDTHH:MM[:SS]``, UTC unless an
    offset is given) as epoch seconds; ``default`` is such a text.

    Why text and not epoch seconds: a bound people set by the calendar (the earliest event
    time ingestion accepts) is read and reviewed as a date.
    """
    value = _raw(name, default)
    text = default if value is None else value
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise _fail(name, f"not a date (YYYY-MM-DD, UTC): {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def list_(name: str, default: Any = REQUIRED) -> Any:
    """A comma-separated list of non-empty items (blank items are an error, not skipped)."""
    value = _raw(name, default)
    if value is None:
        return default
    items = [item.strip() for item in value.split(",")]
    if any(not item for item in items):
        raise _fail(name, f"empty item in comma-separated list {value!r}")
    return items


def url(name: str, schemes: tuple[str, ...], default: Any = REQUIRED, *,
        kind: str = "") -> Any:
    """A URL whose scheme is one of ``schemes``; the message says which kind was expected."""
    value = _raw(name, default)
    if value is None:
        return default
    expected = kind or f"{schemes[0]}://"
    try:
        parts = urlsplit(value)
    except ValueError:
        raise _fail(name, f"not a {expected} URL") from None
    if parts.scheme not in schemes:
        raise _fail(name, f"not a {expected} URL")
    return value


def broker_password(broker_url: str | None) -> str | None:
    """``CELERY_BROKER_PASSWORD`` (or its ``_FILE``): the broker password beside the URL.

    Why beside it: compose and Kubernetes hand the password over as a secret file, which the
    Redis server reads too, while the URL stays a plain setting. It becomes Celery's
    ``broker_password`` (kombu's ``password``), which Celery applies also when an exported
    CELERY_BROKER_URL overrides the URL setting, as it does. A password kombu would ignore
    (the URL has one, or is redis+socket: ``collector.config.password_conflict``, the
    collector's own rule) or one without a URL is an error.
    """
    name = "CELERY_BROKER_PASSWORD"
    password = str_(name, None)
    if password is None:
        return None
    if broker_url is None:
        raise _fail(name, "set, but CELERY_BROKER_URL is not")
    conflict = password_conflict(broker_url)
    if conflict is not None:
        raise _fail("CELERY_BROKER_URL", f"{conflict} ({name} is set)")
    return str(password)


@dataclass(frozen=True)
class PostgresUrl:
    """The parts of a ``postgres://`` URL Django's DATABASES entry needs."""

    name: str
    user: str
    password: str
    host: str
    port: str
    options: dict[str, str]

    def as_database(self) -> dict[str, Any]:
        """A Django ``DATABASES['default']`` dict (Postgres only, by design)."""
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": self.name, "USER": self.user, "PASSWORD": self.password,
            "HOST": self.host, "PORT": self.port, "OPTIONS": dict(self.options),
            "CONN_MAX_AGE": 60, "CONN_HEALTH_CHECKS": True,
        }


def postgres_url(name: str, value: str) -> PostgresUrl:
    """Parse a postgres URL; a unix socket is given as ``?host=/dir`` (libpq's convention)."""
    parts = urlsplit(value)
    if parts.scheme not in POSTGRES_SCHEMES:
        raise _fail(name, "not a postgres:// URL")
    query = {key: vals[-1] for key, vals in parse_qs(parts.query).items()}
    host = query.pop("host", "") or unquote(parts.hostname or "")
    database = unquote(parts.path.lstrip("/"))
    if not database:
        raise _fail(name, "no database name in the URL path")
    if not host:
        raise _fail(name, "no host (give host:port or ?host=/socket/dir)")
    try:
        port = str(parts.port or "")
    except ValueError:
        raise _fail(name, "port is not a number") from None
    return PostgresUrl(
        name=database, user=unquote(parts.username or ""), password=unquote(parts.password or ""),
        host=host, port=port, options=query,
    )


def database_url(database: Mapping[str, Any]) -> str:
    """The ``postgres://`` URL of a Django DATABASES entry — the inverse of ``postgres_url``.

    Why: processes we start (a worker, the demo, a benchmark) must reach the very database
    this process uses, including one pytest-django or a benchmark created under another name.
    """
    user = quote(database.get("USER") or "postgres")
    password = f":{quote(database['PASSWORD'])}" if database.get("PASSWORD") else ""
    host = database.get("HOST") or ""
    if host.startswith("/"):
        return f"postgres://{user}{password}@/{database['NAME']}?host={host}"
    return f"postgres://{user}{password}@{host}:{database.get('PORT') or 5432}/{database['NAME']}"
