"""Developer settings: DEBUG on, embedded Postgres/Redis unless DATABASE_URL/CELERY_BROKER_URL."""

from __future__ import annotations

from ettweb.settings import env
from ettweb.settings.base import *  # noqa: F403
from ettweb.settings.base import CELERY_BROKER_URL, DATABASE_URL, databases, embedded_defaults

DEBUG = env.bool_("DJANGO_DEBUG", True)
# A fixed key is acceptable only here: local servers listen on localhost for one developer.
SECRET_KEY = env.str_("DJANGO_SECRET_KEY", "local-only-insecure-key-do-not-deploy")
ALLOWED_HOSTS = env.list_("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])

DATABASE_URL, CELERY_BROKER_URL = embedded_defaults(DATABASE_URL, CELERY_BROKER_URL)
DATABASES = databases(DATABASE_URL)
WHITENOISE_USE_FINDERS = True
# No relay configured: reports are printed to the console, not sent to localhost:25.
if not EMAIL_RELAY_CONFIGURED:  # noqa: F405
    EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
