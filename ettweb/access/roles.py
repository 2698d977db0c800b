"""The three roles and every permission question ETT asks, as plain functions.

* **viewer**: reads every page and API endpoint, changes nothing shared (their own report
  settings and password are theirs). A user in no role group is a viewer.
* **owner** (group ``owner``): a viewer who also edits the rollouts, the owner team and the
  phase-map categories of the components they own (:class:`ComponentOwner` rows).
* **admin** (group ``admin``, and every superuser): everything, the Django admin included.

Pages ask these to decide which edit links to show; views, the admin site and the API ask the
same functions before any write, so a hidden link is never the only protection. Who owns a
component is this one answer everywhere: the component pages and the API list
:func:`component_owners`, and default report subscriptions follow :func:`owned_components`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group, User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet

from ettweb.access.models import ComponentOwner

Role = Literal["viewer", "owner", "admin"]
VIEWER: Final = "viewer"
OWNER: Final = "owner"
ADMIN: Final = "admin"
ROLES: Final[tuple[Role, ...]] = (VIEWER, OWNER, ADMIN)
#: Where a refused user is told to go: roles are given by an admin
#: (docs/how-to/manage-access.md, "Roles").
ASK: Final = "an admin gives roles (docs/how-to/manage-access.md: Roles)"

AnyUser = AbstractBaseUser | AnonymousUser
_CACHE: Final = "_ett_access"


class HasComponent(Protocol):
    """A rollout as any layer holds it (the model, the impact query's reference)."""

    @property
    def component(self) -> str: ...


@dataclass(frozen=True)
class _Access:
    """One user's role groups and owned components, read once per user object (a request's
    ``request.user`` lives for one request, so a page of 500 rows asks the database once)."""

    groups: frozenset[str]
    owned: frozenset[str]


def _access(user: AnyUser) -> _Access:
    cached = getattr(user, _CACHE, None)
    if isinstance(cached, _Access):
        return cached
    if not user.is_authenticated or not user.is_active or not isinstance(user, User):
        found = _Access(frozenset(), frozenset())
    else:
        found = _Access(
            frozenset(user.groups.filter(name__in=ROLES).values_list("name", flat=True)),
            frozenset(ComponentOwner.objects.filter(user=user)
                      .values_list("component", flat=True)))
    setattr(user, _CACHE, found)
    return found


def is_admin(user: AnyUser) -> bool:
    """Admins may do everything: members of ``admin`` and active superusers."""
    if not user.is_authenticated or not user.is_active:
        return False
    return bool(getattr(user, "is_superuser", False)) or ADMIN in _access(user).groups


def role_of(user: AnyUser) -> Role:
    """The user's strongest role; no role group means viewer."""
    if is_admin(user):
        return ADMIN
    return OWNER if OWNER in _access(user).groups else VIEWER


def owned_components(user: AnyUser) -> frozenset[str]:
    """The components an owner acts on; none for viewers (rows without the role count for
    nothing, so taking the role away is one click in the admin)."""
    if role_of(user) != OWNER:
        return frozenset()
    return _access(user).owned


def can_edit_component(user: AnyUser, name: str) -> bool:
    """Whether ``user`` may edit ``name``'s rollouts, owner team and phase-map categories."""
    return is_admin(user) or name in owned_components(user)


def can_edit_rollout(user: AnyUser, rollout: HasComponent) -> bool:
    """Owners of the rollout's component, and admins."""
    return can_edit_component(user, rollout.component)


def can_record_rollouts(user: AnyUser) -> bool:
    """Whether the user may record a rollout of at least one component."""
    return is_admin(user) or bool(owned_components(user))


#: Who may do an action: a component's owners and admins, or admins alone.
Needs = Literal["owner", "admin"]


def refusal(user: AnyUser, action: str, needs: Needs = "owner") -> str:
    """Why ``user`` may not ``action``, in a sentence: their role (an owner's components),
    who may (``needs``: a component's owners and admins, or admins alone) and whom to ask.

    Why ``needs``: one wording for both kinds told an owner on ``/admin/`` that "use the
    admin is for that component's owners and admins", and a viewer that owners may use the
    admin, which they may not (issue 40, item 4c)."""
    who = "only admins" if needs == ADMIN else "only a component's owners and admins"
    if role_of(user) == OWNER:
        owned = ", ".join(sorted(owned_components(user))) or "no component"
        return f"you own {owned}, but {who} may {action}: {ASK}"
    return f"a {role_of(user)} may not {action}: {who} may, and {ASK}"


def require(allowed: bool, user: AnyUser, action: str, needs: Needs = "owner") -> None:
    """Refuse the request (a 403 page with the reason) unless ``allowed``."""
    if not allowed:
        raise PermissionDenied(refusal(user, action, needs))


def owners() -> QuerySet[User]:
    """Every user whose role is owner, as :func:`role_of` decides it: active, in ``owner``,
    neither a superuser nor in ``admin``. Their :class:`ComponentOwner` rows are what they own;
    anyone else's rows count for nothing."""
    return (User.objects.filter(is_active=True, is_superuser=False, groups__name=OWNER)
            .exclude(groups__name=ADMIN).distinct())


def component_owners(components: Iterable[str] | None = None) -> Mapping[str, list[User]]:
    """The owners of each component (of ``components``, else of every owned one), by
    username: the people whose :func:`owned_components` hold it."""
    rows = ComponentOwner.objects.filter(user__in=owners()).select_related("user")
    if components is not None:
        rows = rows.filter(component__in=list(components))
    found: dict[str, list[User]] = {}
    for row in rows.order_by("component", "user__username"):
        found.setdefault(row.component, []).append(row.user)
    return found


@transaction.atomic
def set_role(user: User, role: Role, components: Iterable[str] = ()) -> None:
    """Give ``user`` exactly ``role`` (and, for an owner, exactly ``components``).

    Admins are superusers too (``is_staff`` with it), as ``ett_login`` always made them;
    viewers and owners lose both, so a downgrade takes effect at once.
    """
    if role not in ROLES:
        raise ValueError(f"role: must be one of {', '.join(ROLES)}, not {role!r}")
    user.groups.remove(*Group.objects.filter(name__in=ROLES))
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    user.is_superuser = user.is_staff = role == ADMIN
    user.save(update_fields=["is_superuser", "is_staff"])
    ComponentOwner.objects.filter(user=user).delete()
    if role == OWNER:
        ComponentOwner.objects.bulk_create(
            [ComponentOwner(user=user, component=name) for name in sorted(set(components))])
    if hasattr(user, _CACHE):
        delattr(user, _CACHE)
