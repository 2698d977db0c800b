"""Template filters over :mod:`ettweb.access.roles`, so a page shows an edit link exactly
when the server would accept the edit (a builtin: no ``{% load %}`` needed).

``{% if user|can_edit_rollout:r %}``, ``{% if user|can_edit_component:name %}``,
``{% if user|can_record_rollouts %}``, ``{% if user|is_admin %}``.
"""

from __future__ import annotations

from django import template

from ettweb.access import roles
from ettweb.access.roles import AnyUser, HasComponent

register = template.Library()


@register.filter
def is_admin(user: AnyUser) -> bool:
    return roles.is_admin(user)


@register.filter
def can_edit_component(user: AnyUser, name: str) -> bool:
    return roles.can_edit_component(user, str(name))


@register.filter
def can_edit_rollout(user: AnyUser, rollout: HasComponent) -> bool:
    return roles.can_edit_rollout(user, rollout)


@register.filter
def can_record_rollouts(user: AnyUser) -> bool:
    return roles.can_record_rollouts(user)
