"""The role functions every write asks, ``ett_login``'s roles and the role migration."""

from __future__ import annotations

import importlib
from io import StringIO

import pytest
from django.apps import apps
from django.contrib.auth.models import AnonymousUser, Group, User
from django.core.exceptions import PermissionDenied
from django.core.management import CommandError, call_command

from ettweb.access.models import ComponentOwner
from ettweb.access.roles import (
    can_edit_component,
    can_edit_rollout,
    can_record_rollouts,
    component_owners,
    is_admin,
    owned_components,
    owners,
    require,
    role_of,
    set_role,
)
from ettweb.rollouts.models import Rollout

pytestmark = pytest.mark.django_db


def _fresh(user: User) -> User:
    """The user as the next request loads it (roles are cached per user object)."""
    return User.objects.get(pk=user.pk)


def test_a_user_in_no_group_is_a_viewer_and_edits_nothing() -> None:
    user = User.objects.create_user("v")
    ComponentOwner.objects.create(user=user, component="pt2_compiler")  # no owner role
    assert role_of(user) == "viewer"
    assert owned_components(user) == frozenset()
    assert not can_edit_component(user, "pt2_compiler")
    assert not can_record_rollouts(user) and not is_admin(user)


def test_an_owner_edits_only_the_components_they_own() -> None:
    user = User.objects.create_user("o")
    set_role(user, "owner", ["pt2_compiler", "checkpointing"])
    user = _fresh(user)
    assert role_of(user) == "owner"
    assert owned_components(user) == {"pt2_compiler", "checkpointing"}
    assert can_edit_component(user, "pt2_compiler") and not can_edit_component(user, "scheduler")
    assert can_edit_rollout(user, Rollout(component="checkpointing"))
    assert not can_edit_rollout(user, Rollout(component="reliability"))
    assert can_record_rollouts(user) and not is_admin(user)


@pytest.mark.parametrize("make", [
    lambda: User.objects.create_user("su", is_superuser=True),
    lambda: _with_group(User.objects.create_user("ga"), "admin"),
], ids=["superuser", "admin-group"])
def test_admins_edit_everything(make: object) -> None:
    user = make()  # type: ignore[operator]
    assert is_admin(user) and role_of(user) == "admin"
    assert can_edit_component(user, "anything") and can_record_rollouts(user)


def _with_group(user: User, name: str) -> User:
    user.groups.add(Group.objects.get_or_create(name=name)[0])
    return user


def test_inactive_and_anonymous_users_have_no_role() -> None:
    gone = User.objects.create_user("gone", is_superuser=True, is_active=False)
    assert not is_admin(gone) and not can_edit_component(gone, "pt2_compiler")
    assert role_of(AnonymousUser()) == "viewer"
    assert not can_edit_component(AnonymousUser(), "pt2_compiler")


def test_a_refusal_names_the_role_and_what_the_owner_owns() -> None:
    owner = User.objects.create_user("o2")
    set_role(owner, "owner", ["pt2_compiler"])
    with pytest.raises(PermissionDenied, match=r"^you own pt2_compiler, but only a component's "
                                               "owners and admins may edit scheduler: "):
        require(False, _fresh(owner), "edit scheduler")
    with pytest.raises(PermissionDenied, match=r"^a viewer may not record rollouts: only a "
                                               "component's owners and admins may, and "):
        require(False, User.objects.create_user("v2"), "record rollouts")
    with pytest.raises(PermissionDenied, match=r"^a viewer may not use the admin site: only "
                                               "admins may, and "):
        require(False, User.objects.create_user("v3"), "use the admin site", needs="admin")
    require(True, owner, "anything")  # allowed: no exception


def test_set_role_replaces_the_role_and_the_components() -> None:
    user = User.objects.create_user("r")
    set_role(user, "admin")
    assert _fresh(user).is_superuser and role_of(_fresh(user)) == "admin"
    set_role(user, "owner", ["scheduler"])
    user = _fresh(user)
    assert not user.is_superuser and not user.is_staff and role_of(user) == "owner"
    set_role(user, "owner", ["checkpointing"])
    assert owned_components(_fresh(user)) == {"checkpointing"}
    set_role(user, "viewer")
    assert role_of(_fresh(user)) == "viewer" and not ComponentOwner.objects.filter(user=user)
    with pytest.raises(ValueError, match="role: must be one of"):
        set_role(user, "root")  # type: ignore[arg-type]


def test_component_owners_are_exactly_whom_owned_components_names() -> None:
    """Pages, the API and default subscriptions list ``component_owners``; edits ask
    ``owned_components``: for every kind of user both must give the same answer."""
    made = {"owner": User.objects.create_user("owner"),
            "other": User.objects.create_user("other"),
            "viewer": User.objects.create_user("viewer"),
            "admin": User.objects.create_user("admin"),
            "superuser": User.objects.create_user("superuser", is_superuser=True),
            "inactive": User.objects.create_user("inactive", is_active=False),
            "rowless": User.objects.create_user("rowless")}
    set_role(made["owner"], "owner", ["checkpointing", "pt2_compiler"])
    set_role(made["other"], "owner", ["checkpointing"])
    set_role(made["inactive"], "owner", ["checkpointing"])
    set_role(made["rowless"], "owner")
    _with_group(made["admin"], "owner")
    _with_group(made["admin"], "admin")  # both groups: the stronger role wins
    _with_group(made["superuser"], "owner")
    for name in ("viewer", "admin", "superuser"):
        ComponentOwner.objects.create(user=made[name], component="scheduler")
    listed = component_owners()
    assert {c: [u.username for u in users] for c, users in listed.items()} == {
        "checkpointing": ["other", "owner"], "pt2_compiler": ["owner"]}
    for user in made.values():
        by_list = {c for c, users in listed.items() if user in users}
        assert by_list == owned_components(_fresh(user)), user.username
    assert set(owners().values_list("username", flat=True)) == {"owner", "other", "rowless"}
    assert list(component_owners(["pt2_compiler", "scheduler"])) == ["pt2_compiler"]


def test_ett_login_sets_the_address_reports_go_to() -> None:
    _ett_login("dee", "--role", "owner", "--component", "checkpointing",
               "--email", " dee@example.com ")
    assert User.objects.get(username="dee").email == "dee@example.com"
    _ett_login("dee", "--role", "owner", "--component", "checkpointing")
    assert User.objects.get(username="dee").email == "dee@example.com"  # kept when not given
    with pytest.raises(CommandError, match=r"^--email: 'dee' is not a valid e-mail address$"):
        _ett_login("eve", "--email", "dee")
    assert not User.objects.filter(username="eve").exists()


def _ett_login(*args: str) -> str:
    out = StringIO()
    call_command("ett_login", *args, stdout=out)
    return out.getvalue()


def test_ett_login_gives_the_role_asked_for_and_admin_by_default() -> None:
    assert "(admin)" in _ett_login("boss")
    assert role_of(User.objects.get(username="boss")) == "admin"
    printed = _ett_login("ann", "--role", "owner", "--component", "checkpointing",
                         "--component", "pt2_compiler")
    assert "(owner, owner of checkpointing, pt2_compiler)" in printed
    assert printed.strip().splitlines()[-1].startswith("login: ann / ")
    assert owned_components(User.objects.get(username="ann")) == {"checkpointing",
                                                                  "pt2_compiler"}
    _ett_login("ann", "--role", "viewer")  # a reset downgrades at once
    ann = User.objects.get(username="ann")
    assert role_of(ann) == "viewer" and not ann.is_superuser


@pytest.mark.parametrize(("args", "message"), [
    (["--role", "owner"], "--component: an owner needs at least one component"),
    (["--role", "owner", "--component", "ckpt"], "--component: unknown component 'ckpt'"),
    (["--role", "viewer", "--component", "checkpointing"], "only an owner owns components"),
])
def test_ett_login_refuses_a_role_that_cannot_mean_anything(args: list[str],
                                                            message: str) -> None:
    with pytest.raises(CommandError, match=message):
        _ett_login("x", *args)
    assert not User.objects.filter(username="x").exists()


def test_the_migration_creates_the_roles_and_keeps_staff_as_admins() -> None:
    """Staff were the editors before roles: they stay able to edit (as admins)."""
    migration = importlib.import_module("ettweb.access.migrations.0002_role_groups")
    Group.objects.filter(name__in=("viewer", "owner", "admin")).delete()
    staff = User.objects.create_user("old-staff", is_staff=True)
    plain = User.objects.create_user("old-plain")
    migration.create_roles(apps, None)
    assert set(Group.objects.values_list("name", flat=True)) >= {"viewer", "owner", "admin"}
    assert role_of(_fresh(staff)) == "admin" and role_of(_fresh(plain)) == "viewer"
