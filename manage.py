#!/usr/bin/env python
"""Django's command-line utility for ETT (default settings: ``ettweb.settings.local``)."""

from __future__ import annotations

import os
import sys


def main() -> int:
    """Run a management command; a configuration error is one line and exit status 2."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ettweb.settings.local")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        # Load settings now: Django would otherwise defer the error (``help`` even hides it).
        settings.INSTALLED_APPS  # noqa: B018
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
