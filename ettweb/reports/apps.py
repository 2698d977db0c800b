"""App config for the weekly e-mail reports."""

from typing import Any

from django.apps import AppConfig


class ReportsConfig(AppConfig):
    """Subscriptions, their send records, and the weekly ETT% e-mail (ETT_SPEC §7)."""

    name = "ettweb.reports"
    label = "reports"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """A subscription follows its account's address (``follow_account_address``): the
        identity provider, ``ett_login --email`` and the admin all change it by saving the
        user, so one receiver sees every change."""
        from django.contrib.auth.models import User
        from django.db.models.signals import post_save

        from ettweb.reports.subscriptions import follow_account_address

        def _followed(sender: Any, instance: User, **kwargs: Any) -> None:
            fields = kwargs.get("update_fields")
            if not kwargs.get("raw") and (fields is None or "email" in fields):
                follow_account_address(instance)  # not on a log-in's last_login save

        post_save.connect(_followed, sender=User, weak=False,
                          dispatch_uid="reports.follow_account_address")
