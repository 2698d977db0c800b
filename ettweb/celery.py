"""The Celery app: ``celery -A ettweb.celery worker``.

Configuration comes from Django settings (``CELERY_*``), so web and worker can never disagree
about the broker. Tasks are found by autodiscovery (``ettweb/<app>/tasks.py``) because
``ettweb/__init__.py`` stays empty: importing Django there would tax every ``import ettweb``
(the offline report, the collector's tests). On Redis every worker keeps the messages it holds
from going to another worker while it lives (``ettweb.platform.visibility``).
"""

from __future__ import annotations

import os
import sys

from celery import Celery
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from ettweb.platform import brokerfix, visibility

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ettweb.settings.local")


def _settings_or_exit() -> None:
    """A worker with bad settings says so in one line (exit 2), like manage.py, not a traceback."""
    try:
        settings.INSTALLED_APPS  # noqa: B018 - forces the settings module to load
    except ImproperlyConfigured as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        sys.exit(2)


_settings_or_exit()
brokerfix.install()
app = Celery("ettweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
visibility.install(app)
