"""Settings shared by every environment; environment modules override what differs.

Only Postgres is supported (no sqlite anywhere): the ingest path relies on
``INSERT ... ON CONFLICT DO NOTHING`` and JSONB, and tests must run on what production runs.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ettweb.platform.schedule import BEAT_SCHEDULE
from ettweb.settings import env

if TYPE_CHECKING:
    from django.http import HttpRequest

BASE_DIR = Path(__file__).resolve().parent.parent.parent

# Service URLs: None means "not configured"; local/test then use the embedded servers and
# production refuses to start (see ettweb.settings.production).
DATABASE_URL: str | None = env.url("DATABASE_URL", env.POSTGRES_SCHEMES, default=None,
                                   kind="postgres://")
CELERY_BROKER_URL: str | None = env.url("CELERY_BROKER_URL", env.BROKER_SCHEMES, default=None,
                                        kind="redis:// or amqp://")
#: Celery's ``broker_password``: the password from a secret file, beside the URL.
CELERY_BROKER_PASSWORD: str | None = env.broker_password(CELERY_BROKER_URL)


def embedded_defaults(database_url: str | None, broker_url: str | None, *,
                      hold: bool = False) -> tuple[str, str]:
    """Fill unset service URLs from the embedded servers (started only for what is unset).

    ``hold``: a test session's settings, whose session stops at its end the servers it
    started (see ``ettweb.platform.embedded.release``)."""
    if database_url and broker_url:
        return database_url, broker_url
    import subprocess

    from django.core.exceptions import ImproperlyConfigured

    from ettweb.platform import embedded

    try:
        urls = embedded.start(postgres=database_url is None, redis=broker_url is None,
                              hold=hold)
    except (embedded.EmbeddedError, OSError, subprocess.SubprocessError) as exc:
        unset = " and ".join(name for name, url in (("DATABASE_URL", database_url),
                                                    ("CELERY_BROKER_URL", broker_url)) if not url)
        raise ImproperlyConfigured(f"{unset} unset and the embedded servers failed: {exc}") from exc
    return (database_url or str(urls.database_url), broker_url or str(urls.broker_url))


def databases(database_url: str) -> dict[str, dict[str, Any]]:
    """DATABASES for a validated postgres URL."""
    return {"default": env.postgres_url("DATABASE_URL", database_url).as_database()}


INSTALLED_APPS = [
    # django.contrib.admin with ETT's admin site: admins (the role) only (ettweb/access).
    "ettweb.access.apps.EttAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "ettweb.ingest",
    "ettweb.rollups",
    "ettweb.pages",
    "ettweb.dashboard",
    "ettweb.components",
    "ettweb.rollouts",
    "ettweb.changes",
    "ettweb.api",
    "ettweb.simulate",
    "ettweb.reports",
    "ettweb.metrics",
    "ettweb.access",
    # Single sign-on with OpenID Connect (off unless ETT_OIDC_ISSUER is set, below).
    "ettweb.sso",
    # django-ninja's own static files: the API docs page loads Swagger UI from us, not a CDN.
    "ninja",
    # Login throttling (see AXES_* below).
    "axes",
    # The Content-Security-Policy header (CONTENT_SECURITY_POLICY below).
    "csp",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "ettweb.platform.middleware.RefuseNulMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes requires: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
    # Inside auth: the page it draws names who is signed in.
    "ettweb.platform.middleware.ErrorPageMiddleware",
    "ettweb.queries.memo_middleware.QueryMemoMiddleware",
]

ROOT_URLCONF = "ettweb.urls"
WSGI_APPLICATION = "ettweb.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "ettweb" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            # can_edit_rollout, can_edit_component ... on every page without a {% load %}.
            "builtins": ["ettweb.access.templatetags.access"],
        },
    },
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Single sign-on first: it answers only its own callback (never a username and password),
# and throttling the provider's log-ins is the provider's business. Then axes: it refuses a
# locked-out login before the password is even checked (so the right password does not help
# a guesser), then Django's own backend authenticates.
AUTHENTICATION_BACKENDS = [
    "ettweb.sso.backends.SsoBackend",
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
    # Admins (the role, ettweb/access) hold every model permission in the Django admin.
    "ettweb.access.backends.AdminRoleBackend",
]

# Content-Security-Policy (django-csp) on every response: scripts only from our own static
# files (no inline script, no eval: charts are JSON blocks that static/ett/ett.js draws), so
# an injected <script> or onerror= in a job name would not run even if escaping failed.
# plotly.js needs no eval and no inline script, but it does insert <style> elements (its
# rule sheet, and the map library's CSS it bundles): measured in Chromium, style-src 'self'
# alone blocks both, and the pages' and the e-mail preview's style attributes (the preview
# is an iframe that inherits this policy). Hence 'unsafe-inline' for styles only: a style
# runs no code, and img-src keeps a style from loading anything from another site. Images
# may be data: URLs (the preview's inline chart); nothing may frame the dashboard
# (X-Frame-Options says the same to older browsers).
CONTENT_SECURITY_POLICY: dict[str, Any] = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

# Login throttling (django-axes, the dashboard's and the admin's login): 5 failed log-ins for
# one username from one address lock that pair out for 15 minutes after the last failure (a
# failure during the lock restarts it); a successful log-in clears the count. Locking the
# pair, not the username, keeps a guesser elsewhere from locking a user out; locking the
# pair, not the address, keeps users behind one NAT from locking each other out. Attempts
# are kept in the database (every web process sees them), viewable in the admin, and
# cleared with ``manage.py axes_reset``. The lockout is a page (429), not a bare 403.
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
# Behind reverse proxies every request comes from the nearest proxy's address, which would
# make "the same address" everyone: with N proxies that each append to X-Forwarded-For, the
# client is the N-th entry from the right (entries further left are the client's to forge).
ETT_TRUSTED_PROXY_COUNT: int = env.int_("ETT_TRUSTED_PROXY_COUNT", 0, minimum=0)


def client_ip(request: HttpRequest) -> str | None:
    """The client's address for login throttling: ``REMOTE_ADDR``, or with
    ``ETT_TRUSTED_PROXY_COUNT`` proxies the address the outermost one saw.

    Why not trust X-Forwarded-For always: a client can send any X-Forwarded-For it likes, so
    its left part would let a guesser pick a fresh address for every attempt. A header with
    fewer entries than proxies did not come through all of them: ``REMOTE_ADDR`` then.
    """
    from django.conf import settings

    count = int(getattr(settings, "ETT_TRUSTED_PROXY_COUNT", 0))
    if count:
        hops = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
                if hop.strip()]
        if len(hops) >= count:
            return hops[-count]
    remote: str | None = request.META.get("REMOTE_ADDR")
    return remote


AXES_CLIENT_IP_CALLABLE = client_ip

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:jobs"
LOGOUT_REDIRECT_URL = "login"

# Single sign-on with OpenID Connect (ettweb/sso, docs/how-to/single-sign-on.md): off unless the
# issuer is set; then the log-in page offers "Sign in with <provider>" beside the username and
# password form, which stays (small sites, ``manage.py ett_login``). Endpoints are discovered from
# the issuer's /.well-known/openid-configuration at the first sign-in, not here: a provider that is
# down must not stop ETT from starting (its local log-ins still work).
ETT_OIDC_ISSUER: str | None = env.url("ETT_OIDC_ISSUER", ("http", "https"), default=None,
                                      kind="http(s)://")
ETT_OIDC_CLIENT_ID: str | None = env.str_("ETT_OIDC_CLIENT_ID", None)
ETT_OIDC_CLIENT_SECRET: str | None = env.str_("ETT_OIDC_CLIENT_SECRET", None)
# The button's "Sign in with ..." (the issuer's host name when unset).
ETT_OIDC_PROVIDER_NAME: str = env.str_("ETT_OIDC_PROVIDER_NAME", "")
ETT_OIDC_SCOPES: list[str] = env.str_("ETT_OIDC_SCOPES", "openid email profile").split()
# The claim holding the person's groups, and how groups become ETT roles (set again from
# the claim at every sign-in): a group in ETT_OIDC_ADMIN_GROUPS makes an admin; each group
# named <prefix><component> (ett-owner:checkpointing) makes an owner of that component;
# anyone else is a viewer, or, when ETT_OIDC_VIEWER_GROUPS is set, refused unless in one.
ETT_OIDC_GROUPS_CLAIM: str = env.str_("ETT_OIDC_GROUPS_CLAIM", "groups")
ETT_OIDC_ADMIN_GROUPS: list[str] = env.list_("ETT_OIDC_ADMIN_GROUPS", [])
ETT_OIDC_OWNER_GROUP_PREFIX: str = env.str_("ETT_OIDC_OWNER_GROUP_PREFIX", "ett-owner:")
ETT_OIDC_VIEWER_GROUPS: list[str] = env.list_("ETT_OIDC_VIEWER_GROUPS", [])
# A new user's ETT username (kept afterwards: the account is tied to the provider's subject).
ETT_OIDC_USERNAME_CLAIM: str = env.str_("ETT_OIDC_USERNAME_CLAIM", "preferred_username")
ETT_OIDC_SIGN_ALGO: str = env.str_("ETT_OIDC_SIGN_ALGO", "RS256")
ETT_OIDC_TIMEOUT_S: float = env.float_("ETT_OIDC_TIMEOUT_S", 10.0, minimum=1.0)


def _check_sso() -> None:
    from ettweb.sso.config import check

    check(ETT_OIDC_ISSUER, ETT_OIDC_CLIENT_ID, ETT_OIDC_CLIENT_SECRET, ETT_OIDC_SCOPES,
          ETT_OIDC_SIGN_ALGO, ETT_OIDC_OWNER_GROUP_PREFIX)


_check_sso()

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

STATIC_URL = "static/"
STATIC_ROOT = Path(env.str_("DJANGO_STATIC_ROOT", str(BASE_DIR / "staticfiles")))
STATICFILES_DIRS = [BASE_DIR / "ettweb" / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    # plotly.js comes from the installed plotly package, never from a CDN.
    "ettweb.dashboard.finders.PlotlyJsFinder",
]
STORAGES: dict[str, dict[str, Any]] = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

# Celery: JSON only (the collector sends batches without importing Django or pickle),
# and a batch is acknowledged only after it is stored, so a killed worker loses nothing.
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = "UTC"
# Redis: a message a worker held is restored (handed to another worker) once it is this many
# seconds old, by a scan each worker runs every 10 s (kombu 5.7 scans only every 10th time by
# default: up to 100 s more); a live worker re-scores what it holds every third of this
# (ettweb/platform/visibility.py), so only a dead or stuck worker's messages age past it. A
# killed worker's batch is back within this plus 10 s: 90 s keeps that under two minutes while
# a live worker may miss two beats in a row (docs/explanation/delivery.md, section 3). The
# scan's lock expires after a third of it (kombu's default: 300 s), so a worker killed
# mid-scan holds the restores up for no longer than that.
ETT_BROKER_VISIBILITY_TIMEOUT_S: float = env.float_("ETT_BROKER_VISIBILITY_TIMEOUT_S", 90.0,
                                                    minimum=10.0)
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": ETT_BROKER_VISIBILITY_TIMEOUT_S,
                                   "unacked_restore_interval": 10,
                                   "unacked_restore_throttle": 1,
                                   "unacked_mutex_expire": ETT_BROKER_VISIBILITY_TIMEOUT_S / 3}
# Periodic tasks (``celery beat``): one schedule module, ettweb/platform/schedule.py.
CELERY_BEAT_SCHEDULE = BEAT_SCHEDULE

# Ingestion. A batch without a valid collector signature is quarantined, never stored; turning
# this off is for trusted single-host setups only (docs/how-to/run-the-collector.md).
ETT_INGEST_REQUIRE_AUTH: bool = env.bool_("ETT_INGEST_REQUIRE_AUTH", True)
# Refused credentials (/collectors/): the per-source rows are bounded, because whoever can
# publish to the broker chooses the sources. A new refused source prunes all but the newest
# this many rows, and rows not refused for this many days go (beat prunes them too); every
# refusal stays counted per reason (ettweb.ingest.credentials.record_rejection).
ETT_COLLECTOR_REJECTIONS_KEPT: int = env.int_("ETT_COLLECTOR_REJECTIONS_KEPT", 100, minimum=1)
ETT_COLLECTOR_REJECTIONS_DAYS: int = env.int_("ETT_COLLECTOR_REJECTIONS_DAYS", 7, minimum=1)
# Per-source fairness: each batch source may have this many events a second stored in turn
# (with bursts of ETT_INGEST_SOURCE_BURST events); a batch of at least
# ETT_INGEST_DEFER_MIN_LINES lines over it is put back once at the queue's tail, so one node's
# flood of big batches cannot hold the other nodes' events back; smaller batches are only
# counted, as deferring one costs about what storing it does (ettweb.ingest.fairness).
# A rate of 0, the default, turns the limit off: every over-rate batch is taken off the queue
# twice, which cost a one-node backlog burst about a fifth of its throughput (bench.ingest:
# 36-38k against 47-49k events/s), while a flood of tiny batches is not helped at all. Set it
# (2000 is what the soak runs) where many nodes share the workers and one may flood.
ETT_INGEST_SOURCE_RATE: float = env.float_("ETT_INGEST_SOURCE_RATE", 0.0, minimum=0.0)
ETT_INGEST_SOURCE_BURST: int = env.int_("ETT_INGEST_SOURCE_BURST", 20000, minimum=1)
ETT_INGEST_DEFER_MIN_LINES: int = env.int_("ETT_INGEST_DEFER_MIN_LINES", 500, minimum=1)
# The ingestion window (issue 40): an event whose time (``start``, ``end`` or ``ts``) falls
# before ETT_INGEST_EARLIEST or later than now + ETT_INGEST_MAX_FUTURE_S when it is ingested
# is quarantined with the field, the value and the window as its reason. One heartbeat at
# ts=1e18 once stretched a job's window over 3e10 years and ran the refresh out of memory:
# every stored time is within this window by construction. The future allowance covers
# skewed node clocks and is capped at 30 days (the longest span), the earliest date must be
# after the epoch and before now, so neither can switch the bound off.
ETT_INGEST_EARLIEST: float = env.utc_date("ETT_INGEST_EARLIEST", "2000-01-01")
ETT_INGEST_MAX_FUTURE_S: float = env.float_("ETT_INGEST_MAX_FUTURE_S", 86400.0, minimum=0.0)
if ETT_INGEST_MAX_FUTURE_S > 30 * 86400:
    from django.core.exceptions import ImproperlyConfigured
    raise ImproperlyConfigured(
        f"ETT_INGEST_MAX_FUTURE_S: must be <= 2592000 (30 days), got {ETT_INGEST_MAX_FUTURE_S:g}")
if not 0 <= ETT_INGEST_EARLIEST < time.time():
    from django.core.exceptions import ImproperlyConfigured
    raise ImproperlyConfigured(
        "ETT_INGEST_EARLIEST: must be between 1970-01-01 and today (UTC), got "
        f"{env.str_('ETT_INGEST_EARLIEST', '2000-01-01')!r}")
# Daily event partitions are created automatically for event times within this many days
# before / after now; anything outside lands in the default partition.
ETT_PARTITION_DAYS_BACK: int = env.int_("ETT_PARTITION_DAYS_BACK", 35, minimum=0)
ETT_PARTITION_DAYS_AHEAD: int = env.int_("ETT_PARTITION_DAYS_AHEAD", 7, minimum=0)
# Rollups: a job's refresh runs this many seconds after its first new batch, so the batches
# arriving meanwhile share one refresh (the dashboard lags by about this much). A refresh
# recomputes the chunks the new events land in, so a job reporting steadily has its live
# chunk recomputed about once per delay (docs/explanation/capacity.md, "Capacity plan"); 5 s
# keeps trend pages current while a backlog is stored first.
ETT_ROLLUP_REFRESH_DELAY_S: float = env.float_("ETT_ROLLUP_REFRESH_DELAY_S", 5.0, minimum=0.0)
# Attribution is kept per chunk of this many seconds of each job's timeline (it must divide
# a day): a refresh recomputes the chunks new events touch. Shorter chunks: a refresh of a
# thousand-rank job reads fewer events; longer: fewer rows per job
# (ettweb.attribution.chunk_refresh, docs/explanation/capacity.md).
ETT_CHUNK_S: int = env.int_("ETT_CHUNK_S", 900, minimum=1)
if 86400 % ETT_CHUNK_S:
    from django.core.exceptions import ImproperlyConfigured
    raise ImproperlyConfigured(
        f"ETT_CHUNK_S: must divide a day (86400 s) evenly, e.g. 600, 900 or 3600, "
        f"not {ETT_CHUNK_S}")
# A refresh attributes a job whose window spans at most this many UTC days; a longer one
# (an event's clock gone wrong) fails at once and is parked for an admin, instead of
# allocating a row per day of the span (ettweb.attribution.bounds, ettweb.rollups.parking).
ETT_REFRESH_MAX_JOB_DAYS: int = env.int_("ETT_REFRESH_MAX_JOB_DAYS", 3660, minimum=1)
# A running attempt (no attempt_end, no later attempt) from which no event was heard for this
# many seconds shows as stale on the job page and the jobs list, and in the API: its process
# is probably gone (SIGKILL, a lost node). 120 s is twelve of the Reporter's 10-s heartbeats and
# twice the spec's longest train slice (60 s), so a trainer that heartbeats, or only closes its
# slices, is never called stale while it runs; its numbers do not change (ettweb.queries.liveness).
ETT_STALE_AFTER_S: float = env.float_("ETT_STALE_AFTER_S", 120.0, minimum=10.0)
# Raw events are kept this many days; beat then drops their daily partitions, once every
# chunk they feed is final (rollups, chunks and rollout impacts are kept).
ETT_EVENT_RETENTION_DAYS: int = env.int_("ETT_EVENT_RETENTION_DAYS", 35, minimum=1)

# E-mail (weekly reports): Django's own setting names, from the environment. ``EMAIL_HOST``
# unset means "no relay configured": local settings then print messages to the console.
EMAIL_RELAY_CONFIGURED: bool = env.str_("EMAIL_HOST", None) is not None
EMAIL_HOST: str = env.str_("EMAIL_HOST", "localhost")
EMAIL_PORT: int = env.int_("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER: str = env.str_("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD: str = env.str_("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS: bool = env.bool_("EMAIL_USE_TLS", False)
EMAIL_USE_SSL: bool = env.bool_("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT: float = env.float_("EMAIL_TIMEOUT", 30.0, minimum=1.0)
DEFAULT_FROM_EMAIL: str = env.str_("DEFAULT_FROM_EMAIL", "ETT <ett@localhost>")
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("EMAIL_USE_TLS: and EMAIL_USE_SSL cannot both be true")
# Every link in an e-mail is built from this one URL (the dashboard as readers reach it).
ETT_BASE_URL: str = env.url("ETT_BASE_URL", ("http", "https"), "http://localhost:8000",
                            kind="http(s)://").rstrip("/")
# Weekly reports: sent at 09:00 local time on the Monday after the week, never before the week
# has ended in UTC plus the settle time (late events and rollup refreshes land first); each
# subscriber's send is spread by up to the jitter, with a pause between sends so a long list
# does not burst the relay.
ETT_REPORT_SETTLE_S: float = env.float_("ETT_REPORT_SETTLE_S", 3600.0, minimum=0.0)
ETT_REPORT_JITTER_S: float = env.float_("ETT_REPORT_JITTER_S", 600.0, minimum=0.0)
ETT_REPORT_PAUSE_S: float = env.float_("ETT_REPORT_PAUSE_S", 1.0, minimum=0.0)
# A failed SMTP send is retried this many times in all, waiting base * 2^n between tries.
ETT_REPORT_MAX_ATTEMPTS: int = env.int_("ETT_REPORT_MAX_ATTEMPTS", 5, minimum=1)
ETT_REPORT_RETRY_BASE_S: float = env.float_("ETT_REPORT_RETRY_BASE_S", 60.0, minimum=0.0)
# A send claimed this long ago and never finished is marked missed (never sent again).
ETT_REPORT_CLAIM_TIMEOUT_S: float = env.float_("ETT_REPORT_CLAIM_TIMEOUT_S", 900.0,
                                               minimum=1.0)
# Unsubscribe links in a report stay valid this long.
ETT_UNSUBSCRIBE_MAX_AGE_DAYS: int = env.int_("ETT_UNSUBSCRIBE_MAX_AGE_DAYS", 90, minimum=1)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str_("DJANGO_LOG_LEVEL", "INFO")},
    # django-axes announces itself on every start (each manage.py command, each worker) on
    # stderr; its failed-login and lockout lines (other loggers) stay. matplotlib (the
    # e-mail's charts) says "generated new fontManager" the first time it runs on a machine:
    # noise on a command's stderr, where one line says what went wrong.
    "loggers": {"axes.apps": {"level": "WARNING"}, "matplotlib": {"level": "WARNING"}},
}
