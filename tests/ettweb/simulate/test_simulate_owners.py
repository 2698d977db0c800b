"""``manage.py simulate_owners`` (what ``make demo`` runs): the simulated fleet's components
get owner teams and some of them owners, through the one ownership model, and nothing that
exists is changed."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from ettweb.access.roles import owned_components, role_of, set_role
from ettweb.components.models import Component
from ettweb.queries.components import owners_by_component
from ettweb.reports.subscriptions import ensure_owner_subscriptions, followed_components
from ettweb.simulate.owners import OWNER_TEAMS, OWNERS

pytestmark = pytest.mark.django_db


def _run() -> str:
    out = StringIO()
    call_command("simulate_owners", stdout=out)
    return out.getvalue().strip().splitlines()[-1]


def test_components_get_teams_and_owners_who_are_subscribed_by_default() -> None:
    Component.objects.filter(name__in=OWNER_TEAMS).update(owner_team="")
    assert _run() == (f"owner teams set on {len(OWNER_TEAMS)} component(s); owners created: "
                      "ada, grace, ken, barbara")
    teams = dict(Component.objects.values_list("name", "owner_team"))
    assert {name: teams[name] for name in OWNER_TEAMS} == OWNER_TEAMS
    shown = {c: [str(o) for o in owners] for c, owners in owners_by_component().items()}
    assert shown["checkpointing"] == ["Ada Lovelace (ada)"]
    assert shown["pt2_compiler"] == ["Grace Hopper (grace)"]
    assert "evaluation" not in shown  # a team, no owner yet
    for owner in OWNERS:
        user = User.objects.get(username=owner.username)
        assert role_of(user) == "owner" and owned_components(user) == set(owner.components)
        assert not user.has_usable_password() and user.email == owner.email
    assert ensure_owner_subscriptions() == len(OWNERS)
    ada = User.objects.get(username="ada")
    assert followed_components(ada.report_subscription) == ("checkpointing",
                                                            "model_publishing")


def test_a_second_run_and_what_people_set_are_left_alone() -> None:
    Component.objects.update_or_create(name="checkpointing",
                                       defaults={"owner_team": "our-storage"})
    Component.objects.filter(name="scheduler").update(owner_team="")
    grace = User.objects.create_user("grace", email="grace@corp.example", password="pw-grace-1")
    set_role(grace, "viewer")
    first = _run()
    assert "owners created: ada, ken, barbara" in first
    assert Component.objects.get(name="checkpointing").owner_team == "our-storage"
    assert Component.objects.get(name="scheduler").owner_team == OWNER_TEAMS["scheduler"]
    grace = User.objects.get(username="grace")
    assert role_of(grace) == "viewer" and grace.email == "grace@corp.example"
    assert grace.has_usable_password()
    assert _run() == ("owner teams set on 0 component(s); owners created: none (they exist "
                      "already)")
