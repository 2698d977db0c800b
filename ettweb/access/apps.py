"""The access app, and the admin's app config that installs ETT's admin site."""

from __future__ import annotations

from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class AccessConfig(AppConfig):
    default = True  # for "ettweb.access": this module also holds the admin's config
    name = "ettweb.access"
    label = "access"
    verbose_name = "Access"
    default_auto_field = "django.db.models.BigAutoField"


class EttAdminConfig(admin_apps.AdminConfig):
    """``django.contrib.admin`` with :class:`ettweb.access.admin_site.EttAdminSite` as
    ``admin.site``: the admin is for admins (the role), not for whoever has ``is_staff``."""

    default = False
    default_site = "ettweb.access.admin_site.EttAdminSite"
