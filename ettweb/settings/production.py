"""Production settings: every secret and service comes from the environment, none defaulted.

No embedded servers here: a production web node silently starting its own empty database
would hide a misconfiguration behind a working-looking dashboard.
"""

from __future__ import annotations

from ettweb.settings import env
from ettweb.settings.base import *  # noqa: F403
from ettweb.settings.base import databases

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
