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

from ettweb.reports.models import SendRecord, SendStatus, Subscription
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


def test_addresses_become_the_accounts_and_none_is_turned_off(
        latest: list[tuple[str, str]]) -> None:
    """Issue 40, 4a: an address typed on the settings page cannot be told from an admin's,
    so each subscription goes to its account's address; without one it is turned off and
    its planned sends cancelled, never sent to an address nobody vouched for."""
    before = [("reports", "0002_owned_components")]
    executor = _migrate(before)
    old = executor.loader.project_state(
        [node for node in latest if node[0] != "reports"] + before).apps
    user, subscription = old.get_model("auth", "User"), old.get_model("reports", "Subscription")
    record = old.get_model("reports", "SendRecord")

    def subscribe(name: str, account: str, typed: str) -> int:
        made = subscription.objects.create(
            user=user.objects.create(username=name, email=account), email=typed)
        return int(made.pk)

    same = subscribe("same", "same@example.com", "same@example.com")
    typed = subscribe("typed", "typed@example.com", "leak@elsewhere.example")
    none = subscribe("none", "", "leak@elsewhere.example")
    record.objects.create(subscription_id=none, week="2026-W11", status="pending",
                          due_at="2026-03-16T09:00Z", next_attempt_at="2026-03-16T09:00Z")

    _migrate(latest)
    after = {pk: Subscription.objects.get(pk=pk) for pk in (same, typed, none)}
    assert {pk: (s.email, s.enabled, s.email_from_admin) for pk, s in after.items()} == {
        same: ("same@example.com", True, False), typed: ("typed@example.com", True, False),
        none: ("leak@elsewhere.example", False, False)}
    assert after[none].unsubscribed_at is not None
    assert SendRecord.objects.get(subscription_id=none).status == SendStatus.CANCELLED
