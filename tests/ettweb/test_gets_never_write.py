"""GETs never write (issue 27): every GET URL of the site, as an admin, a viewer, a bearer
token and nobody, runs without one statement that writes.

The URLs come from the resolver, as in test_security.py: a route added later is requested
the day it lands, its path parameters filled with the fixture's real ids (a route the fill
cannot reach fails here with its name). Each request runs inside
``connection.execute_wrapper``: a statement that writes, locks rows or takes an advisory lock
is refused before Postgres sees it, and the test names the URL and the SQL. Underneath, the
transaction is ``READ ONLY``, so a write that does not pass through Django's cursor (a raw
psycopg ``COPY``) is refused by Postgres itself.

The fixture holds the states that used to write on a GET: a job whose rollup is missing and
one whose rollup predates its stored chunks (refreshed on first view), a rollout whose
bootstrap draws are not stored and one whose stored draws were last used two days ago
(stored, and marked used, while serving), an API token (``last_used`` was written on every
request) and ``/metrics`` (counter floors were raised on every scrape). What a GET finds
missing is queued to the worker instead: the test sees those tasks in the broker.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final
from urllib.parse import quote

import psycopg
import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.db import connection, transaction
from django.test import Client
from django.urls import Resolver404, get_resolver, resolve
from django.utils import timezone
from django.utils.regex_helper import normalize

from ettweb.access.roles import ADMIN, VIEWER, set_role
from ettweb.access.tokens import issue_token
from ettweb.api.models import ApiToken
from ettweb.changes.models import Change
from ettweb.ingest.batches import ingest_lines
from ettweb.ingest.models import CollectorHealth
from ettweb.ingest.tasks import ingest_batch
from ettweb.queries.impact import draws as impact_draws
from ettweb.reports.models import Subscription
from ettweb.reports.unsubscribe import make_token
from ettweb.rollouts.models import BootstrapDraws, Rollout
from ettweb.rollouts.warm import warm_impacts
from ettweb.rollups.models import JobRollup
from tests.conftest import worked_example
from tests.ettweb.dashboard import scoped_fleet
from tests.ettweb.queued import QueuedTask
from tests.ettweb.rollouts.test_rollout_impact import day_job, store
from tests.ettweb.test_security import Leaf, _leaves

pytestmark = pytest.mark.django_db

#: A statement that changes data or schema, locks rows or tables, draws from a sequence or
#: takes an advisory lock (which only guards writes). Matched on the SQL as Django sends it,
#: with its parameters apart, so no value a user typed can trip it.
WRITE: Final = re.compile(
    r"\b(INSERT\s+INTO|UPDATE\s+\S+\s+SET|DELETE\s+FROM|MERGE\s+INTO|COPY\s|TRUNCATE\b"
    r"|CREATE\s|ALTER\s|DROP\s|LOCK\s|GRANT\s|REVOKE\s|VACUUM\b|ANALYZE\b|REINDEX\b"
    r"|REFRESH\s+MATERIALIZED|COMMENT\s+ON|SELECT\s.*\bINTO\s"
    r"|FOR\s+(NO\s+KEY\s+)?UPDATE\b|FOR\s+(KEY\s+)?SHARE\b"
    r"|nextval\s*\(|setval\s*\(|pg_(try_)?advisory)",
    re.IGNORECASE | re.DOTALL)
MARCH: Final = "?date_from=2026-03-01&date_to=2026-03-31"
#: Query strings tried beside the bare URL, by URL name: the variants that read other data
#: (a non-standard impact window, a CSV export, the fixture's month and ISO week).
VARIANTS: Final[dict[str, tuple[str, ...]]] = {
    "dashboard:jobs": (MARCH, f"{MARCH}&format=csv"),
    "dashboard:fleet": (MARCH, f"{MARCH}&format=csv&table=top_jobs"),
    "dashboard:job": ("?format=csv&table=attempts", "?format=csv&table=recoveries"),
    "components:index": (MARCH,),
    "components:detail": (MARCH, f"{MARCH}&format=csv&table=rollouts"),
    "rollouts:detail": ("?window=3", "?window=28"),
    "rollouts:list": ("?format=csv",),
    "changes:list": (MARCH,),
    "reports:preview": ("?week=2026-W11",),
    "reports:preview-chart": ("?week=2026-W11",),
    "api-v1:get_impact": ("?window=3",),
    "api-v1:weekly_report": ("?week=2026-W11",),
    "api-v1:fleet_summary": (MARCH,),
    "api-v1:fleet_trend": (MARCH,),
    "api-v1:fleet_headline": (MARCH,),
    "api-v1:fleet_lost_by_component": (MARCH,),
    "api-v1:fleet_lost_trend": (MARCH,),
    "api-v1:fleet_lifecycle": (MARCH,),
    "api-v1:fleet_top_jobs": (MARCH,),
    "api-v1:jobs": (MARCH,),
    "api-v1:components": (MARCH,),
    "api-v1:component": (MARCH,),
    "api-v1:changes": (MARCH,),
}
#: Only these answer a bearer token (every other page is the browser's, behind a log-in).
TOKEN_ROUTES: Final = ("api-v1:", "metrics")


class WriteOnGet(Exception):
    """A GET sent a statement that writes; raised before Postgres runs it."""


@dataclass(frozen=True)
class Site:
    """What the fixture stored, for filling path parameters and checking what was queued."""

    params: dict[str, tuple[str, ...]]
    unrolled_job: str  # events stored, no rollup
    stale_job: str  # a rollup from before the stored chunks
    undrawn_rollout: int  # no stored bootstrap draws
    token: str


def _users() -> tuple[User, User]:
    boss = User.objects.create_user("boss", email="boss@example.com", password="pw-boss-1")
    set_role(boss, ADMIN)
    vic = User.objects.create_user("vic", email="vic@example.com", password="pw-vic-1")
    set_role(vic, VIEWER)
    return boss, vic


def _impact_fleet() -> None:
    """Six ads and six feed jobs a day either side of 2026-03-10: intervals for both."""
    events: list[dict[str, Any]] = []
    for n in range(6):
        events += day_job(f"ads-b{n}", 8 + n % 2, 1 + n, "ads", ("compile", 2), 8)
        events += day_job(f"ads-a{n}", 11 + n % 2, 1 + n, "ads", ("compile", 1), 9)
        events += day_job(f"feed-b{n}", 8 + n % 2, 2, "feed", ("checkpoint_save", 1), 9)
        events += day_job(f"feed-a{n}", 11 + n % 2, 2, "feed", ("checkpoint_save", 1), 9)
    store(events)


def _admin_object_ids() -> tuple[str, ...]:
    """One stored row of every model the admin shows (the first by primary key)."""
    ids = {str(model._default_manager.order_by("pk").values_list("pk", flat=True).first())
           for model in admin.site._registry}
    return tuple(sorted(ids - {"None"}))


@pytest.fixture
def site() -> Site:
    """A small fleet with rollups, rollouts, changes, collectors, users and a token, and
    the states a GET used to repair by writing."""
    scoped_fleet.ingest()
    _impact_fleet()
    at = datetime(2026, 3, 10, 12, tzinfo=UTC)
    warmed = Rollout.objects.create(name="compile cache", component="pt2_compiler", at=at,
                                    scope={"teams": ["ads"]})
    warm_impacts(windows=(14, 28))  # what beat does; its draws were last used two days ago
    BootstrapDraws.objects.update(used_at=timezone.now() - timedelta(days=2))
    undrawn = Rollout.objects.create(name="async checkpoint", component="checkpointing",
                                     at=at, scope={"teams": ["feed"]})
    Rollout.objects.create(name="gang scheduling", component="scheduler", at=at)
    impact_draws._DRAWS.clear()  # this process computed the warm pass's draws: forget them

    ingest_lines([json.dumps({"v": 1, "id": f"unrolled-{i}", **e})
                  for i, e in enumerate(worked_example("unrolled"))])  # no refresh ran
    ingest_batch([json.dumps({"v": 1, "id": f"stale-{i}", **e})
                  for i, e in enumerate(worked_example("stale"))])
    JobRollup.objects.filter(job="stale").update(chunks=0)  # as before chunked storage
    ingest_batch([json.dumps({"v": 1, "id": "bad-1", "job": "j", "kind": "mark"}), "{oops"],
                 "node-a", None)
    CollectorHealth.objects.create(source="node-a", backlog_events=12, shipped_events=100)
    Change.objects.create(component="pt2_compiler", team="ads", day=date(2026, 3, 4),
                          before_lost_pct=12.5, after_lost_pct=6.0, detected_at=timezone.now())
    _, vic = _users()
    subscription = Subscription.objects.create(user=vic, email=vic.email)
    token = issue_token(vic, "pipeline")
    jobs = ("ads-m2-west", "unrolled", "stale", "no-such-job")
    params = {
        "job": tuple(quote(job) for job in jobs),
        "rollout_id": (str(warmed.pk), str(undrawn.pk), "999999"),
        "name": ("pt2_compiler", "checkpointing"),
        "token": (make_token(subscription.pk),),
        "object_id": _admin_object_ids(),
        "id": (str(vic.pk),),  # the admin's password form for a user
        "content_type_id": (str(ContentType.objects.get_for_model(Rollout).pk),),
        "app_label": ("rollouts", "ingest", "auth"),
        "url": ("nothing-here/",),
    }
    return Site(params=params, unrolled_job="unrolled", stale_job="stale",
                undrawn_rollout=undrawn.pk, token=token)


def _paths(leaf: Leaf, site: Site) -> list[str]:
    """Every path of ``leaf`` its parameters can take from the fixture's values."""
    found: list[str] = []
    for template, names in normalize(leaf.regex):
        unknown = [name for name in names if name not in site.params]
        assert not unknown, f"{leaf.name or leaf.regex}: give {unknown} values in the fixture"
        for values in itertools.product(*(site.params[name] for name in names)):
            candidate = "/" + template % dict(zip(names, values, strict=True))
            try:
                match = resolve(candidate.split("?")[0])
            except Resolver404:
                continue
            if match.func is leaf.callback:
                found.append(candidate)
    assert found, f"no fixture value reaches {leaf.name or leaf.regex!r}"
    return found


def get_urls(site: Site) -> Iterator[tuple[str, str]]:
    """(URL name, URL) for every GET the site answers, its variants included."""
    seen: set[str] = set()
    for leaf in _leaves(get_resolver().url_patterns):
        if leaf.regex in seen:  # django-ninja: one pattern per operation, the first serves
            continue
        seen.add(leaf.regex)
        name = leaf.name or leaf.regex
        for path in _paths(leaf, site):
            for query in ("", *VARIANTS.get(name, ())):
                yield name, path + query


@dataclass
class Walk:
    """Every request made, the statuses each route answered, and the writes refused, each
    naming its URL, its caller and the statement."""

    requests: int = 0
    writes: list[str] = field(default_factory=list)
    statuses: dict[str, set[int]] = field(default_factory=dict)


def _refusing_writes(url: str, who: str) -> Callable[..., Any]:
    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool,
                context: dict[str, Any]) -> Any:
        if WRITE.search(sql):
            raise WriteOnGet(f"GET {url} as {who}: {sql[:300]}")
        return execute(sql, params, many, context)
    return wrapper


@contextmanager
def read_only() -> Iterator[None]:
    """A savepoint in which Postgres refuses every write, rolled back at the end (which
    makes the test's transaction read-write again, for its teardown)."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION READ ONLY")
        yield
        transaction.set_rollback(True)


def walk(clients: dict[str, Client], site: Site, token: str) -> Walk:
    """GET every URL as every client (the token only where a token is answered), read-only."""
    result = Walk()
    urls = list(get_urls(site))
    with read_only():
        for who, client in clients.items():
            _walk_as(who, client, urls, token, result)
    return result


def _walk_as(who: str, client: Client, urls: list[tuple[str, str]], token: str,
             result: Walk) -> None:
    for name, url in urls:
        headers: dict[str, str] = {}
        if who == "token":
            if not name.startswith(TOKEN_ROUTES):
                continue
            headers["HTTP_AUTHORIZATION"] = f"Bearer {token}"
        try:  # a savepoint: a refused statement leaves the transaction usable
            with transaction.atomic(), connection.execute_wrapper(_refusing_writes(url, who)):
                response = client.get(url, **headers)  # type: ignore[arg-type]
        except WriteOnGet as refused:
            result.writes.append(str(refused))
            continue
        result.requests += 1
        result.statuses.setdefault(name, set()).add(response.status_code)


def _clients() -> dict[str, Client]:
    clients = {"admin": Client(), "viewer": Client(), "token": Client(), "nobody": Client()}
    clients["admin"].force_login(User.objects.get(username="boss"))
    clients["viewer"].force_login(User.objects.get(username="vic"))
    return clients


@pytest.mark.slow
def test_no_get_writes(site: Site, queued: Callable[[], list[QueuedTask]]) -> None:
    """Every GET of every page and endpoint, as each kind of caller, writes nothing; what
    they found missing went to the worker instead."""
    walked = walk(_clients(), site, site.token)
    assert walked.writes == [], "GETs that wrote:\n" + "\n".join(walked.writes)
    assert walked.requests > 700  # every route, four callers, the admin's model pages
    statuses = walked.statuses
    # The reads that used to write answered, with what they had.
    assert statuses["dashboard:job"] >= {200, 404, 503}  # 503: a CSV being computed
    assert statuses["rollouts:detail"] >= {200, 404}
    assert statuses["api-v1:job_detail"] >= {200, 202, 404}
    assert statuses["metrics"] >= {200, 401}
    assert 200 in statuses["admin:rollouts_rollout_change"]
    sent = queued()
    assert QueuedTask("ett.refresh_outdated_rollups", [[site.unrolled_job]]) in sent
    assert QueuedTask("ett.refresh_outdated_rollups", [[site.stale_job]]) in sent
    assert QueuedTask("ett.warm_rollout_impact", [site.undrawn_rollout, 14]) in sent
    assert QueuedTask("ett.warm_rollout_impact", [site.undrawn_rollout, 3]) in sent
    assert [task.args[0] for task in sent if task.name == "ett.note_token_used"] == [
        ApiToken.objects.get().pk]  # once, for every request the token made


def test_postgres_refuses_a_write_the_wrapper_cannot_see() -> None:
    """A raw psycopg cursor bypasses ``execute_wrapper``; the read-only transaction under
    the walk still refuses its write."""
    with read_only():
        raw = connection.connection
        assert raw is not None
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction), \
                transaction.atomic(), raw.cursor() as cursor:
            cursor.execute("CREATE TEMP TABLE scratch (job text) ON COMMIT DROP")


def test_the_check_sees_a_write() -> None:
    """The wrapper refuses a write before it runs, naming the URL; a plain read passes."""
    check = _refusing_writes("/x/", "admin")
    ran: list[str] = []

    def execute(sql: str, params: Any, many: bool, context: dict[str, Any]) -> None:
        ran.append(sql)

    for sql in ('UPDATE "api_apitoken" SET "last_used" = %s WHERE "id" = %s',
                'INSERT INTO "rollouts_bootstrapdraws" ("key") VALUES (%s)',
                "CREATE TEMP TABLE IF NOT EXISTS t (job text) ON COMMIT DROP",
                "SELECT pg_advisory_xact_lock(h) FROM x", 'SELECT 1 FROM "t" FOR UPDATE',
                "SELECT nextval('s')", "COPY t (job) FROM STDIN", "TRUNCATE t"):
        with pytest.raises(WriteOnGet, match=r"GET /x/ as admin: "):
            check(execute, sql, (), False, {})
    for sql in ('SELECT "updated_at", "created" FROM "x" WHERE "last_used" < %s',
                "SELECT set_config('work_mem', %s, true)", "SAVEPOINT s1"):
        check(execute, sql, (), False, {})
    assert len(ran) == 3
