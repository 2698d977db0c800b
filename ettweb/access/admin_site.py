"""ETT's admin site: open to admins (the role), a 403 with the reason for everyone else.

Django's own site admits ``is_staff`` users and sends a logged-in non-staff user to its
log-in page; here the role decides, and a viewer or owner who follows an admin link gets a
page that says why instead of a log-in form they cannot get past.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar, cast

from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponseBase

from ettweb.access.roles import is_admin, refusal

View = TypeVar("View", bound=Callable[..., HttpResponseBase])


class AdminRoleAuthenticationForm(AdminAuthenticationForm):
    """The admin's log-in form, for admins (Django's asks for ``is_staff``)."""

    def confirm_login_allowed(self, user: Any) -> None:
        if not user.is_active or not is_admin(user):
            raise ValidationError(self.error_messages["invalid_login"], code="invalid_login",
                                  params={"username": self.username_field.verbose_name})


class EttAdminSite(admin.AdminSite):
    """``admin.site`` (installed by :class:`ettweb.access.apps.EttAdminConfig`)."""

    site_header = "ETT administration"
    site_title = "ETT admin"
    login_form = AdminRoleAuthenticationForm

    def has_permission(self, request: HttpRequest) -> bool:
        return is_admin(request.user)

    def admin_view(self, view: View, cacheable: bool = False) -> View:
        """Django's wrapper (log-in redirect for anonymous users, CSRF, no caching), with a
        403 for a logged-in user who is not an admin."""
        inner = super().admin_view(view, cacheable)

        @wraps(inner)
        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if request.user.is_authenticated and not self.has_permission(request):
                raise PermissionDenied(refusal(request.user, "use the admin site",
                                                       needs="admin"))
            return inner(request, *args, **kwargs)
        return cast(View, guarded)
