"""Model permissions for the admin role.

The Django admin asks ``user.has_perm("app.change_model")`` on every page; Django grants
those to superusers and to holders of permission rows. An admin by group has no rows (the
``admin`` group is created before any permission exists, and new models add new ones), so
this backend answers yes for admins and leaves everyone else to Django's ModelBackend.
Read-only admins (raw events, rollups, quarantine) stay read-only: they refuse before any
permission is asked.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.backends import BaseBackend

from ettweb.access.roles import is_admin


class AdminRoleBackend(BaseBackend):
    """Authenticates nobody; grants every model permission to admins."""

    def has_perm(self, user_obj: Any, perm: str, obj: Any = None) -> bool:
        return is_admin(user_obj)

    def has_module_perms(self, user_obj: Any, app_label: str) -> bool:
        return is_admin(user_obj)
