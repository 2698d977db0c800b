"""Production settings: every secret and service comes from the environment (or a ``*_FILE``
file, see ``env.FILE_VARIABLES``), none defaulted.

No embedded servers here: a production web node silently starting its own empty database
would hide a misconfiguration behind a working-looking dashboard.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from ettweb.settings import env
from ettweb.settings.base import *  # noqa: F403
from ettweb.settings.base import ETT_OIDC_ISSUER, databases

DEBUG = False
SECRET_KEY = env.str_("DJANGO_SECRET_KEY")
ALLOWED_HOSTS = env.list_("DJANGO_ALLOWED_HOSTS")
_database_url: str = env.url("DATABASE_URL", env.POSTGRES_SCHEMES, kind="postgres://")
_broker_url: str = env.url("CELERY_BROKER_URL", env.BROKER_SCHEMES, kind="redis:// or amqp://")
DATABASE_URL, CELERY_BROKER_URL = _database_url, _broker_url
DATABASES = databases(_database_url)

STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = env.bool_("DJANGO_SECURE_COOKIES", True)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
CSRF_TRUSTED_ORIGINS = env.list_("DJANGO_CSRF_TRUSTED_ORIGINS", [])
SECURE_CONTENT_TYPE_NOSNIFF = True

# HTTPS. ETT sits behind a TLS-terminating proxy that sets X-Forwarded-Proto (above): a plain
# HTTP request is redirected to https, except /healthz, which container and load-balancer
# health checks fetch over plain HTTP from inside, and a collector's credential check, which
# a collector beside the web service (the compose stack's) sends over plain HTTP: it carries
# an HMAC, never the secret, and its nonce cannot be used twice. A deployment without TLS (a
# trial on a trusted network) sets DJANGO_SSL_REDIRECT=false and DJANGO_SECURE_COOKIES=false.
SECURE_SSL_REDIRECT = env.bool_("DJANGO_SSL_REDIRECT", True)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^api/v1/collectors/self$"]
# HSTS (sent only on responses to HTTPS requests): browsers then refuse plain HTTP to this
# host for that long, and nothing the server does later can take it back before it expires.
# One hour by default, so a mistake (a host name that also serves plain HTTP, a proxy dropped)
# costs an hour, not a year; raise it to 31536000 once HTTPS is known to stay. It covers the
# host's own subdomains (not its parent or siblings). Preloading is a decision for whoever
# owns the domain (hstspreload.org wants a year and it is next to impossible to undo): off
# unless asked for, and Django's warning that it is off (security.W021) is silenced for that
# reason alone.
SECURE_HSTS_SECONDS = env.int_("DJANGO_HSTS_SECONDS", 3600, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool_("DJANGO_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env.bool_("DJANGO_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS: list[str] = [] if SECURE_HSTS_PRELOAD else ["security.W021"]

# Single sign-on: ETT sends the provider its client secret and takes ID tokens from it, so
# only over TLS (OpenID Connect requires an https issuer).
if ETT_OIDC_ISSUER and not ETT_OIDC_ISSUER.startswith("https://"):
    raise ImproperlyConfigured(
        "ETT_OIDC_ISSUER: must be an https:// URL in production (the client secret and the "
        "ID tokens travel to and from it)")
