"""The subscriptions' move from owner teams to owned components: nobody loses a report.

Run as Django runs it: the real migration, backwards to the schema with ``teams`` and forward
again, on the test database (transactional: Postgres refuses an ALTER TABLE in a transaction
that still has deferred foreign-key checks to run).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from ettweb.reports.models import Subscription
from ettweb.reports.subscriptions import followed_components

BEFORE = [("reports", "0001_initial")]


def _migrate(targets: list[tuple[str, str]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor


@pytest.fixture
def latest(transactional_db: None) -> Iterator[list[tuple[str, str]]]:
    """Every app's last migration; the schema is brought back to them whatever happens, so
    a failure here cannot leave the next test an old schema."""
    nodes = MigrationExecutor(connection).loader.graph.leaf_nodes()
    yield nodes
    _migrate(nodes)


def test_teams_become_the_components_they_owned_in_the_order_reports_listed_them(
        latest: list[tuple[str, str]]) -> None:
    executor = _migrate(BEFORE)
    old = executor.loader.project_state(
        [node for node in latest if node[0] != "reports"] + BEFORE).apps
    component, subscription = (old.get_model("components", "Component"),
                               old.get_model("reports", "Subscription"))
    user = old.get_model("auth", "User")
    for name, team in (("pt2_compiler", "ads"), ("checkpointing", "ads"),
                       ("scheduler", "infra"), ("evaluation", "")):
        component.objects.update_or_create(name=name, defaults={"owner_team": team})

    def subscribe(name: str, components: list[str], teams: list[str]) -> int:
        made = subscription.objects.create(user=user.objects.create(username=name),
                                           email=f"{name}@example.com",
                                           components=components, teams=teams)
        return int(made.pk)

    both = subscribe("both", ["scheduler", "checkpointing"], ["ads"])
    plain = subscribe("plain", ["evaluation"], [])
    gone = subscribe("gone", [], ["a-team-that-owns-nothing"])
    two = subscribe("two", [], ["infra", "ads"])

    _migrate(latest)
    listed = {pk: Subscription.objects.get(pk=pk) for pk in (both, plain, gone, two)}
    assert {pk: s.components for pk, s in listed.items()} == {
        both: ["scheduler", "checkpointing", "pt2_compiler"],  # chosen, then the team's
        plain: ["evaluation"], gone: [], two: ["checkpointing", "pt2_compiler", "scheduler"]}
    assert not any(s.owned for s in listed.values())  # what each listed, and nothing more
    assert followed_components(listed[both]) == ("scheduler", "checkpointing", "pt2_compiler")
    fresh = Subscription.objects.create(user=User.objects.create_user("new"),
                                        email="new@example.com")
    assert fresh.owned  # new subscriptions follow what their user owns
