"""Test settings: real Postgres (embedded unless DATABASE_URL is set), fast password hashing."""

from __future__ import annotations

from ettweb.settings import env
from ettweb.settings.base import *  # noqa: F403
from ettweb.settings.base import CELERY_BROKER_URL, DATABASE_URL, databases, embedded_defaults

DEBUG = False
SECRET_KEY = "test-only-key"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]

# hold: the test session stops at its end the embedded servers it started (tests/conftest.py).
DATABASE_URL, CELERY_BROKER_URL = embedded_defaults(DATABASE_URL, CELERY_BROKER_URL, hold=True)
DATABASES = databases(DATABASE_URL)
DATABASES["default"]["CONN_MAX_AGE"] = 0

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
# Several test sessions may share one Postgres server (the embedded one, or the system's):
# each names its own test database, e.g. ETT_TEST_DATABASE_NAME=test_ett_import.
if env.str_("ETT_TEST_DATABASE_NAME", ""):
    DATABASES["default"]["TEST"] = {"NAME": env.str_("ETT_TEST_DATABASE_NAME", "")}
# The suite's fixtures keep ETT_SPEC's worked example at its toy times (t = 1000 s, in 1970),
# so the test settings open the ingestion window's lower bound to the epoch unless the
# environment sets one. tests/ettweb/ingest/test_ingest_window.py checks the 2000-01-01
# default, and the issue-40 worker test runs its worker with it.
if not env.str_("ETT_INGEST_EARLIEST", ""):
    ETT_INGEST_EARLIEST = 0.0
