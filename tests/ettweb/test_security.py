"""Security checks as tests (issue 13).

* Every URL Django knows, walked from the resolver (a page added later is covered the day it
  lands), refuses anonymous requests with a login redirect or 401/403, except the few pages
  in :data:`ANONYMOUS`, each with its reason and the only answers it may give.
* Forged, replayed and stale batches: tests/ettweb/ingest/test_auth.py (anchored below).
* Pickle and yaml are refused: settings here, a real worker in test_security_worker.py.
* Secrets come only from the environment or ``*_FILE`` files, and production's settings
  hold no secret literal.
* Log-in attempts are throttled (django-axes).
* ``manage.py check --deploy --fail-level WARNING`` passes on production settings.
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import re
import secrets
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from axes.models import AccessAttempt
from django.apps import apps
from django.conf import settings
from django.contrib import admin
from django.contrib.auth import get_user
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, resolve_url
from django.test import Client, RequestFactory, override_settings
from django.urls import (
    NoReverseMatch,
    Resolver404,
    URLPattern,
    URLResolver,
    get_resolver,
    include,
    path,
    resolve,
    reverse,
)
from django.utils import timezone
from django.utils.regex_helper import normalize
from django.views.decorators.http import require_POST

from ettweb.access.tokens import issue_token
from ettweb.settings import env
from ettweb.settings.base import client_ip

REPO = Path(__file__).resolve().parents[2]
SETTINGS_DIR = REPO / "ettweb" / "settings"

# --------------------------------------------------------------------------- the URL walker

#: Every method a view could act on (HEAD is GET's; OPTIONS answers only "which methods").
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
#: 405: the view does not take that method; it shows nothing, and another method is tried.
NOT_ALLOWED = 405
REDIRECTS = (301, 302, 303, 307, 308)


@dataclass(frozen=True)
class Anonymous:
    """A page anonymous requests may reach: why, and every status it may answer them with."""

    reason: str
    statuses: frozenset[int]


#: The pages that need no login, by URL name. Anything else must redirect to a login page or
#: answer 401/403. A bogus sample is used for every path parameter, so a token-authenticated
#: page must refuse it (never show content).
ANONYMOUS: dict[str, Anonymous] = {
    "healthz": Anonymous("container and load-balancer health checks: database and broker "
                         "status, no data (503 when either is down)", frozenset({200, 503})),
    "login": Anonymous("the log-in page (and its form's answer)", frozenset({200})),
    "favicon": Anonymous("the icon browsers fetch by themselves: a redirect to the static "
                         "file", frozenset({301})),
    "admin:login": Anonymous("the admin's log-in page", frozenset({200})),
    # Single sign-on is off in the walk (no ETT_OIDC_ISSUER): both answer 404 pages then.
    # On, the first redirects to the provider and the second is its redirect back, where
    # the provider's code and the browser's state are the authentication (tests/ettweb/sso).
    "sso:login": Anonymous("single sign-on's start: off, a 404 page", frozenset({404})),
    "sso:callback": Anonymous("single sign-on's return from the provider: off, a 404 page",
                              frozenset({404})),
    "reports:unsubscribe": Anonymous(
        "RFC 8058 one-click unsubscribe: a mail client POSTs without a login, the signed token "
        "is the authentication; a bad token is a 400 page, an unknown subscription 404",
        frozenset({400, 404})),
    "api-v1:api-root": Anonymous("django-ninja's placeholder for the API's base path: 404 for "
                                 "everyone", frozenset({404})),
}


@dataclass(frozen=True)
class Leaf:
    """One URL pattern, with the regex of its whole path and its qualified name."""

    name: str | None
    regex: str
    callback: Callable[..., Any]


def _leaves(patterns: list[URLPattern | URLResolver], prefix: str = "",
            namespace: str = "") -> Iterator[Leaf]:
    """Every URLPattern under ``patterns``, however deeply included."""
    for item in patterns:
        regex = prefix + item.pattern.regex.pattern.lstrip("^")
        if isinstance(item, URLResolver):
            inner = f"{namespace}{item.namespace}:" if item.namespace else namespace
            yield from _leaves(item.url_patterns, regex, inner)
        else:
            yield Leaf(f"{namespace}{item.name}" if item.name else None, regex, item.callback)


def _samples() -> tuple[str, ...]:
    """Path parameter values to try: a number, a word, a UUID, and every app label (the
    admin's app index accepts only those)."""
    labels = sorted(config.label for config in apps.get_app_configs())
    return ("1", "x", "00000000-0000-0000-0000-000000000000", *labels)


def concrete_path(leaf: Leaf, urlconf: Any = None) -> str:
    """A path that resolves to ``leaf``'s view, its parameters filled with samples.

    Fails (rather than skipping the pattern) when no sample fits: a new kind of parameter
    must get a sample here, not go unchecked.
    """
    samples = _samples()
    for template, params in normalize(leaf.regex):
        for values in itertools.product(samples, repeat=len(params)):
            candidate = "/" + template % dict(zip(params, values, strict=True))
            try:
                match = resolve(candidate, urlconf)
            except Resolver404:
                continue
            if match.func is leaf.callback:
                return candidate
    pytest.fail(f"no sample path reaches {leaf.name or leaf.regex!r}: add a sample value")


def _login_paths() -> set[str]:
    return {resolve_url(settings.LOGIN_URL), reverse("admin:login")}


def _refused(client: Client, response: HttpResponseBase, login_paths: set[str]) -> bool:
    """Whether an anonymous request was refused: 401/403, a redirect to a log-in page, or a
    redirect to a page that itself redirects there (the admin's log-out sends anonymous
    users to the admin index, which asks them to log in)."""
    if response.status_code in (401, 403):
        return True
    if response.status_code not in REDIRECTS:
        return False
    target = urlsplit(response["Location"])
    if target.netloc:  # another site: not a log-in page of ours
        return False
    if target.path in login_paths:
        return True
    then = client.get(response["Location"])
    return (then.status_code in REDIRECTS and not urlsplit(then["Location"]).netloc
            and urlsplit(then["Location"]).path in login_paths)


@dataclass
class Walk:
    """What one walk saw: the paths requested, the patterns no request can reach (a regex an
    earlier pattern has: django-ninja adds one pattern per operation of a path, the first
    serves them all), and every anonymous request not refused."""

    visited: dict[str, str | None]
    shadowed: list[str | None]
    exposed: list[str]


def walk_anonymously(urlconf: Any = None) -> Walk:
    """Request every pattern of the URLconf with every method, logged out, and list each
    answer that is neither a refusal nor one its :data:`ANONYMOUS` entry allows."""
    client = Client(raise_request_exception=False)
    login_paths = _login_paths()
    walk = Walk(visited={}, shadowed=[], exposed=[])
    seen: set[str] = set()
    for leaf in _leaves(get_resolver(urlconf).url_patterns):
        if leaf.regex in seen:
            walk.shadowed.append(leaf.name)
            continue
        seen.add(leaf.regex)
        url = concrete_path(leaf, urlconf)
        walk.visited[url] = leaf.name
        allowed = ANONYMOUS.get(leaf.name or "")
        answered = False
        for method in METHODS:
            response = client.generic(method, url)
            status = response.status_code
            if status == NOT_ALLOWED:
                continue
            answered = True
            if allowed is not None and status in allowed.statuses:
                continue
            if allowed is None and _refused(client, response, login_paths):
                continue
            where = f" -> {response['Location']}" if response.has_header("Location") else ""
            walk.exposed.append(f"{method} {url} ({leaf.name or leaf.regex}): {status}{where}")
        if not answered:
            walk.exposed.append(f"{url} ({leaf.name or leaf.regex}): 405 to every method")
    return walk


@pytest.mark.django_db
def test_every_url_refuses_anonymous_requests() -> None:
    walk = walk_anonymously()
    assert walk.exposed == []
    # The walk went into every include: the admin's model pages, the API, every app.
    names = set(walk.visited.values())
    for expected in ("admin:auth_user_change", "admin:app_list", "admin:view_on_site",
                     "api-v1:openapi-view", "api-v1:openapi-json", "rollouts:edit",
                     "components:detail", "reports:unsubscribe", "dashboard:job",
                     "password_change", "logout", "healthz"):
        assert expected in names, f"the walk missed {expected}"
    for model in admin.site._registry:
        prefix = f"admin:{model._meta.app_label}_{model._meta.model_name}"
        for view in ("changelist", "add", "change", "delete", "history"):
            assert f"{prefix}_{view}" in names
    assert set(ANONYMOUS) <= names, "an ANONYMOUS entry names a page that no longer exists"


def _open_page(request: HttpRequest, n: int) -> HttpResponse:
    """A page someone forgot to protect."""
    return HttpResponse(f"secret number {n}")


@require_POST
def _open_action(request: HttpRequest) -> HttpResponse:
    """An action taken for anyone who POSTs (GET is refused with 405)."""
    return HttpResponse("done")


def _away(request: HttpRequest) -> HttpResponse:
    """A redirect, but to a page anyone may see rather than to the log-in page."""
    return redirect("healthz")


def _with_open_pages() -> types.ModuleType:
    """The real URLconf plus three unprotected views."""
    urlconf = types.ModuleType("urls_with_open_pages")
    urlconf.urlpatterns = [  # type: ignore[attr-defined]
        path("open/<int:n>/", _open_page), path("act/", _open_action), path("away/", _away),
        path("", include("ettweb.urls"))]
    return urlconf


@pytest.mark.django_db
def test_the_walker_reports_an_unprotected_view() -> None:
    urlconf = _with_open_pages()
    with override_settings(ROOT_URLCONF=urlconf):
        walk = walk_anonymously(urlconf)
    reported = {line.split(" (")[0]: line.rsplit(": ", 1)[1] for line in walk.exposed}
    assert reported == {**{f"{method} /open/1/": "200" for method in METHODS},
                        "POST /act/": "200",
                        **{f"{method} /away/": "302 -> /healthz" for method in METHODS}}


@pytest.mark.django_db
def test_api_docs_need_a_login_and_work_with_one(client: Client) -> None:
    for url in (reverse("api-v1:openapi-view"), reverse("api-v1:openapi-json")):
        anonymous = client.get(url)
        assert anonymous.status_code == 302
        assert anonymous["Location"].startswith(f"{resolve_url(settings.LOGIN_URL)}?next=")
    client.force_login(User.objects.create_user("reader"))
    assert client.get(reverse("api-v1:openapi-view")).status_code == 200
    schema = client.get(reverse("api-v1:openapi-json"))
    assert schema.status_code == 200 and "paths" in schema.json()


@pytest.mark.django_db
def test_api_docs_work_with_a_bearer_token_alone(client: Client) -> None:
    """A program holding an API token (a client generator) reads the schema and the docs
    page without a session; a bad token is a 401 naming the problem, never the log-in page,
    and a token of a deactivated user is a bad token."""
    user = User.objects.create_user("generator")
    token = issue_token(user, "codegen")
    for url in (reverse("api-v1:openapi-view"), reverse("api-v1:openapi-json")):
        answer = client.get(url, headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200, (url, answer.status_code)
        bad = client.get(url, headers={"Authorization": "Bearer ett_not-a-token"})
        assert bad.status_code == 401 and "bearer token" in bad.json()["error"]
    schema = client.get(reverse("api-v1:openapi-json"),
                        headers={"Authorization": f"bearer {token}"}).json()
    assert "/api/v1/changes" in schema["paths"]
    assert "swagger" in client.get(reverse("api-v1:openapi-view"),
                                   headers={"Authorization": f"Bearer {token}"}
                                   ).content.decode().lower()
    user.is_active = False
    user.save()
    assert client.get(reverse("api-v1:openapi-json"),
                      headers={"Authorization": f"Bearer {token}"}).status_code == 401
    assert not get_user(client).is_authenticated  # the token opened no session


@pytest.mark.django_db
def test_no_password_reset_pages_but_password_change_works(client: Client) -> None:
    """ETT has no reset e-mail flow (``manage.py ett_login`` resets); change needs a login."""
    for name in ("password_reset", "password_reset_done", "password_reset_complete"):
        with pytest.raises(NoReverseMatch):
            reverse(name)
    assert client.get("/accounts/password_reset/").status_code == 404
    client.force_login(User.objects.create_user("changer", password="old-password-1"))
    assert client.get(reverse("password_change")).status_code == 200


# --------------------------------------------------------------------------- batches

#: Forged, replayed and stale batches (the design: an authentic batch is stored however old,
#: a replay stores nothing new, anything not signed by a known collector is quarantined) are
#: tested once, in tests/ettweb/ingest/test_auth.py; this keeps the checklist's link to them.
BATCH_TESTS = (
    "test_bad_auth_quarantines_the_whole_batch",
    "test_a_changed_body_breaks_the_signature",
    "test_revoked_collector_is_refused",
    "test_an_authentic_batch_is_stored_however_long_it_waited",
    "test_a_replay_stores_nothing_new_and_quarantines_nothing",
    "test_a_replay_after_its_nonce_was_pruned_is_still_all_duplicates",
)


def test_forged_replayed_and_stale_batches_are_tested_in_test_auth() -> None:
    tree = ast.parse((REPO / "tests" / "ettweb" / "ingest" / "test_auth.py").read_text())
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    missing = [name for name in BATCH_TESTS if name not in defined]
    assert not missing, f"renamed or gone from test_auth.py, update BATCH_TESTS: {missing}"


# --------------------------------------------------------------------------- serializers

def test_celery_accepts_and_sends_only_json() -> None:
    """Pickle runs code from the message, yaml may; a real worker's refusal is in
    test_security_worker.py."""
    from ettweb.celery import app

    assert settings.CELERY_ACCEPT_CONTENT == ["json"]
    assert settings.CELERY_TASK_SERIALIZER == settings.CELERY_RESULT_SERIALIZER == "json"
    assert list(app.conf.accept_content) == ["json"]
    assert app.conf.task_serializer == app.conf.result_serializer == "json"
    # Unset, results accept what tasks accept.
    assert app.conf.result_accept_content in (None, ["json"])


# --------------------------------------------------------------------------- secrets

@pytest.fixture
def clean_secrets(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The secret variables and their ``_FILE`` forms unset."""
    for name in env.FILE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"{name}_FILE", raising=False)
    return monkeypatch


def test_the_secrets_that_may_come_from_files() -> None:
    expected = {"DJANGO_SECRET_KEY", "EMAIL_HOST_PASSWORD", "DATABASE_URL", "CELERY_BROKER_URL",
                "CELERY_BROKER_PASSWORD", "ETT_OIDC_CLIENT_SECRET"}
    assert set(env.FILE_VARIABLES) == expected


@pytest.mark.parametrize("name", sorted(env.FILE_VARIABLES))
def test_a_secret_file_gives_its_first_line(name: str, tmp_path: Path,
                                            clean_secrets: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "secret"
    secret.write_text("redis://:s3cr%40t@broker:6379/0  \nignored second line\n")
    clean_secrets.setenv(f"{name}_FILE", str(secret))
    assert env.str_(name) == "redis://:s3cr%40t@broker:6379/0"


def test_a_file_is_read_only_for_secrets(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "hosts").write_text("evil.example\n")
    monkeypatch.delenv("DJANGO_ALLOWED_HOSTS", raising=False)
    monkeypatch.setenv("DJANGO_ALLOWED_HOSTS_FILE", str(tmp_path / "hosts"))
    assert env.list_("DJANGO_ALLOWED_HOSTS", ["default.example"]) == ["default.example"]


def test_both_a_secret_and_its_file_is_one_line_error(tmp_path: Path,
                                                      clean_secrets: pytest.MonkeyPatch) -> None:
    (tmp_path / "key").write_text("from-file\n")
    clean_secrets.setenv("DJANGO_SECRET_KEY", "from-env")
    clean_secrets.setenv("DJANGO_SECRET_KEY_FILE", str(tmp_path / "key"))
    with pytest.raises(ImproperlyConfigured, match=(
            r"^DJANGO_SECRET_KEY: both DJANGO_SECRET_KEY and DJANGO_SECRET_KEY_FILE are set; "
            r"set one of them$")):
        env.str_("DJANGO_SECRET_KEY")


@pytest.mark.parametrize(("content", "problem"), [
    (None, r"cannot read '.*/missing': No such file or directory$"),
    ("", r"'.*/missing' is empty \(the value is its first line\)$"),
    ("\n\nsecond line only\n", r"'.*/missing' is empty \(the value is its first line\)$"),
    (b"\xff\xfe", r"'.*/missing' is not UTF-8 text$"),
], ids=["absent", "empty", "blank-first-line", "binary"])
def test_an_unusable_secret_file_names_the_file_variable(
        content: str | bytes | None, problem: str, tmp_path: Path,
        clean_secrets: pytest.MonkeyPatch) -> None:
    target = tmp_path / "missing"
    if isinstance(content, bytes):
        target.write_bytes(content)
    elif content is not None:
        target.write_text(content)
    clean_secrets.setenv("EMAIL_HOST_PASSWORD_FILE", str(target))
    with pytest.raises(ImproperlyConfigured, match=rf"^EMAIL_HOST_PASSWORD_FILE: {problem}"):
        env.str_("EMAIL_HOST_PASSWORD", "")


def _production(argv: list[str], **overrides: str) -> subprocess.CompletedProcess[str]:
    """``python ARGV`` in the repository with production settings and only ``overrides`` of
    the variables settings read (as tests/ettweb/test_settings_env.py does)."""
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("DJANGO_", "DATABASE_URL", "CELERY_", "EMAIL_", "ETT_"))}
    environ = {**keep, "DJANGO_SETTINGS_MODULE": "ettweb.settings.production", **overrides}
    return subprocess.run([sys.executable, *argv], cwd=REPO, env=environ, capture_output=True,
                          text=True, timeout=120)


def _deploy_env(**overrides: str) -> dict[str, str]:
    """A complete production environment with dummy services and a random key."""
    return {"DJANGO_SECRET_KEY": secrets.token_urlsafe(50), "DJANGO_ALLOWED_HOSTS": "ett.example",
            "DATABASE_URL": "postgres://ett@db.invalid:5432/ett",
            "CELERY_BROKER_URL": "redis://redis.invalid:6379/0", **overrides}


PRINT_SECRETS = """
import django, json
django.setup()
from django.conf import settings
print(json.dumps({"key": settings.SECRET_KEY, "db": settings.DATABASES["default"]["PASSWORD"],
                  "broker": settings.CELERY_BROKER_URL, "mail": settings.EMAIL_HOST_PASSWORD}))
"""


def test_production_reads_every_secret_from_its_file(tmp_path: Path) -> None:
    files = {"DJANGO_SECRET_KEY": "k" * 60, "DATABASE_URL": "postgres://ett:db%2Fpw@db:5432/ett",
             "CELERY_BROKER_URL": "redis://:broker-pw@redis:6379/0", "EMAIL_HOST_PASSWORD": "m4il"}
    variables = {"DJANGO_ALLOWED_HOSTS": "ett.example"}
    for name, value in files.items():
        (tmp_path / name).write_text(value + "\n")
        (tmp_path / name).chmod(0o400)
        variables[f"{name}_FILE"] = str(tmp_path / name)
    proc = _production(["-c", PRINT_SECRETS], **variables)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {
        "key": "k" * 60, "db": "db/pw", "broker": "redis://:broker-pw@redis:6379/0",
        "mail": "m4il"}


def test_production_with_a_secret_twice_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "url").write_text("postgres://ett:pw@db:5432/ett\n")
    proc = _production([str(REPO / "manage.py"), "check"],
                       **_deploy_env(DATABASE_URL_FILE=str(tmp_path / "url")))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "configuration error: DATABASE_URL: both DATABASE_URL and DATABASE_URL_FILE are set; "
        "set one of them"]


def test_production_with_an_unreadable_secret_file_exits_2_naming_it(tmp_path: Path) -> None:
    environ = _deploy_env(DJANGO_SECRET_KEY_FILE=str(tmp_path / "nope"))
    del environ["DJANGO_SECRET_KEY"]
    proc = _production([str(REPO / "manage.py"), "check"], **environ)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"configuration error: DJANGO_SECRET_KEY_FILE: cannot read '{tmp_path / 'nope'}': "
        "No such file or directory"]


_SECRET_NAME = re.compile(r"SECRET|PASSWORD|PASSWD|TOKEN|PRIVATE|CREDENTIAL|(^|_)KEY$")
_URL_PASSWORD = re.compile(r"://[^/@:\s]*:[^/@\s]+@")
_TOKEN_LIKE = re.compile(r"^(?=.*[0-9])(?=.*[A-Za-z])[A-Za-z0-9_\-+/=]{24,}$")


def secret_literals(source: str) -> list[str]:
    """String literals in a settings module that look like secrets: a non-empty string given
    to a secret-named setting or as a secret variable's default, a URL with a password in it,
    or a long token of letters and digits. Empty strings are not secrets (no password)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            value = node.value
            if (value is not None and isinstance(value, ast.Constant)
                    and isinstance(value.value, str) and value.value
                    and any(_SECRET_NAME.search(name) for name in names)):
                found.append(f"{names[0]} = {value.value!r}")
        elif isinstance(node, ast.Call) and node.args:
            first = node.args[0]
            defaults = [*node.args[1:], *(kw.value for kw in node.keywords
                                          if kw.arg == "default")]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and (
                    _SECRET_NAME.search(first.value) or first.value in env.FILE_VARIABLES):
                found += [f"{first.value} defaults to {d.value!r}" for d in defaults
                          if isinstance(d, ast.Constant) and isinstance(d.value, str) and d.value]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                _URL_PASSWORD.search(node.value) or _TOKEN_LIKE.match(node.value)):
            found.append(f"literal {node.value!r}")
    return found


def test_production_settings_hold_no_secret() -> None:
    """production.py and every module it takes values from (``base``, ``env``)."""
    for module in ("production.py", "base.py", "env.py"):
        assert secret_literals((SETTINGS_DIR / module).read_text()) == [], module


def test_the_secret_scanner_finds_secrets() -> None:
    assert secret_literals((SETTINGS_DIR / "local.py").read_text()) == [
        "DJANGO_SECRET_KEY defaults to 'local-only-insecure-key-do-not-deploy'"]
    assert secret_literals((SETTINGS_DIR / "test.py").read_text()) == [
        "SECRET_KEY = 'test-only-key'"]
    found = secret_literals(
        'EMAIL_HOST_PASSWORD = "hunter2"\n'
        'DATABASE_URL = env.url("DATABASE_URL", SCHEMES, "postgres://u@h/db")\n'
        'BROKER = "redis://:pw@redis:6379/0"\n'
        'X = "a1B2c3D4e5F6g7H8i9J0k1L2m3"\n'
        'EMAIL_HOST_USER = env.str_("EMAIL_HOST_USER", "")\n')
    assert found == ["EMAIL_HOST_PASSWORD = 'hunter2'",
                     "DATABASE_URL defaults to 'postgres://u@h/db'",
                     "literal 'redis://:pw@redis:6379/0'",
                     "literal 'a1B2c3D4e5F6g7H8i9J0k1L2m3'"]


# --------------------------------------------------------------------------- log-in throttling

PASSWORD = "right-password-17"


@pytest.fixture
def alice() -> User:
    return User.objects.create_user("alice", password=PASSWORD)


@dataclass(frozen=True)
class Attempt:
    """One log-in POST's answer and whether it left a logged-in session."""

    status: int
    location: str | None
    text: str
    user_id: str | None


def _log_in(address: str, username: str, password: str, **extra: str) -> Attempt:
    """One log-in POST from ``address`` with a fresh client (no session carried over)."""
    meta: dict[str, Any] = {"REMOTE_ADDR": address, **extra}
    client = Client(**meta)
    response = client.post(reverse("login"), {"username": username, "password": password})
    return Attempt(response.status_code, response.get("Location"), response.content.decode(),
                   client.session.get("_auth_user_id"))


def _logged_in(attempt: Attempt) -> bool:
    return (attempt.status == 302 and attempt.location == reverse("dashboard:jobs")
            and attempt.user_id is not None)


def _locked(attempt: Attempt) -> bool:
    """The lockout page: 429, our layout, the reason and the wait; nobody logged in."""
    return (attempt.status == 429 and "<h1>Log-in locked</h1>" in attempt.text
            and "Too many failed log-ins for <strong>alice</strong>" in attempt.text
            and "for 15 minutes after the last failed attempt" in attempt.text
            and 'href="/static/' in attempt.text and attempt.user_id is None)


def _fail_times(count: int, address: str, username: str = "alice", **extra: str) -> None:
    for number in range(count):
        attempt = _log_in(address, username, "wrong", **extra)
        assert attempt.status == 200, number
        assert "didn't match" in attempt.text


@pytest.mark.django_db
def test_five_failures_lock_the_username_from_that_address(alice: User) -> None:
    assert settings.AXES_FAILURE_LIMIT == 5
    _fail_times(4, "10.0.0.1")
    assert _locked(_log_in("10.0.0.1", "alice", "wrong"))   # the fifth failure
    assert _locked(_log_in("10.0.0.1", "alice", PASSWORD))  # the right password is refused
    assert _logged_in(_log_in("10.0.0.2", "alice", PASSWORD))  # from elsewhere: fine
    User.objects.create_user("bob", password=PASSWORD)
    assert _logged_in(_log_in("10.0.0.1", "bob", PASSWORD))    # another user, same address


@pytest.mark.django_db
def test_the_lock_lasts_fifteen_minutes_after_the_last_failure(alice: User) -> None:
    _fail_times(4, "10.0.0.1")
    assert _locked(_log_in("10.0.0.1", "alice", "wrong"))
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=14))
    assert _locked(_log_in("10.0.0.1", "alice", PASSWORD))  # and the wait starts again
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=16))
    assert _logged_in(_log_in("10.0.0.1", "alice", PASSWORD))


@pytest.mark.django_db
def test_a_successful_log_in_clears_the_count(alice: User) -> None:
    _fail_times(4, "10.0.0.1")
    assert _logged_in(_log_in("10.0.0.1", "alice", PASSWORD))
    _fail_times(4, "10.0.0.1")
    assert _logged_in(_log_in("10.0.0.1", "alice", PASSWORD))


@pytest.mark.django_db
def test_the_admin_log_in_is_throttled_too(alice: User) -> None:
    client = Client(REMOTE_ADDR="10.0.0.3")
    for _ in range(5):
        client.post(reverse("admin:login"), {"username": "alice", "password": "wrong"})
    assert client.post(reverse("admin:login"),
                       {"username": "alice", "password": PASSWORD}).status_code == 429


@pytest.mark.django_db
@override_settings(ETT_TRUSTED_PROXY_COUNT=1)
def test_behind_a_proxy_the_address_is_the_one_it_saw(alice: User) -> None:
    """Every request comes from the proxy (REMOTE_ADDR): without the count, one user's
    failures would lock that username for everyone."""
    proxy = "172.18.0.5"
    _fail_times(4, proxy, HTTP_X_FORWARDED_FOR="203.0.113.9")
    assert _locked(_log_in(proxy, "alice", "wrong", HTTP_X_FORWARDED_FOR="203.0.113.9"))
    # A forged left-hand entry changes nothing: the proxy appended the real address.
    assert _locked(_log_in(proxy, "alice", PASSWORD,
                           HTTP_X_FORWARDED_FOR="198.51.100.1, 203.0.113.9"))
    assert _logged_in(_log_in(proxy, "alice", PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.10"))


def test_client_address_trusts_only_as_many_forwarded_hops_as_proxies() -> None:
    factory = RequestFactory()
    forwarded = factory.get("/", REMOTE_ADDR="10.1.1.1",
                            HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.9, 10.2.2.2")
    assert settings.ETT_TRUSTED_PROXY_COUNT == 0
    assert client_ip(forwarded) == "10.1.1.1"
    with override_settings(ETT_TRUSTED_PROXY_COUNT=2):
        assert client_ip(forwarded) == "203.0.113.9"
        assert client_ip(factory.get("/", REMOTE_ADDR="10.1.1.1",
                                     HTTP_X_FORWARDED_FOR="10.2.2.2")) == "10.1.1.1"


# --------------------------------------------------------------------------- check --deploy

@pytest.mark.slow
def test_check_deploy_is_clean_on_production_settings() -> None:
    proc = _production([str(REPO / "manage.py"), "check", "--deploy", "--fail-level",
                        "WARNING"], **_deploy_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "System check identified no issues (1 silenced)." in proc.stdout


@pytest.mark.parametrize(("overrides", "warning"), [
    ({"DJANGO_SSL_REDIRECT": "false"}, "security.W008"),
    ({"DJANGO_HSTS_SECONDS": "0"}, "security.W004"),
    ({"DJANGO_SECURE_COOKIES": "false"}, "security.W012"),
], ids=["no-redirect", "no-hsts", "insecure-cookies"])
@pytest.mark.slow
def test_check_deploy_fails_when_a_protection_is_turned_off(overrides: dict[str, str],
                                                            warning: str) -> None:
    """The check above can fail: each switch an operator may turn off is reported."""
    proc = _production([str(REPO / "manage.py"), "check", "--deploy", "--fail-level",
                        "WARNING"], **_deploy_env(**overrides))
    assert proc.returncode == 1
    assert warning in proc.stderr


SECURITY_PROBE = """
import django, json
django.setup()
from django.conf import settings
from django.http import HttpResponse
from django.middleware.security import SecurityMiddleware
from django.test import RequestFactory
middleware = SecurityMiddleware(lambda request: HttpResponse("page"))
factory = RequestFactory(HTTP_HOST="ett.example")
answers = {}
for name, request in [("http /", factory.get("/")), ("http /healthz", factory.get("/healthz")),
                      ("http check", factory.post("/api/v1/collectors/self?source=n")),
                      ("http /api/v1/collectors", factory.get("/api/v1/collectors")),
                      ("https /", factory.get("/", HTTP_X_FORWARDED_PROTO="https"))]:
    response = middleware(request)
    answers[name] = [response.status_code, response.get("Location"),
                     response.get("Strict-Transport-Security")]
answers["silenced"] = settings.SILENCED_SYSTEM_CHECKS
print(json.dumps(answers))
"""


def _probe(**overrides: str) -> dict[str, Any]:
    proc = _production(["-c", SECURITY_PROBE], **_deploy_env(**overrides))
    assert proc.returncode == 0, proc.stderr
    answers: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return answers


def test_production_redirects_plain_http_except_the_health_check() -> None:
    """And except a collector's credential check, which a collector beside the web service
    sends over plain HTTP (an HMAC and a nonce, never its secret): nothing else of the API."""
    assert _probe() == {
        "http /": [301, "https://ett.example/", None],
        "http /healthz": [200, None, None],  # health checks over plain HTTP keep working
        "http check": [200, None, None],
        "http /api/v1/collectors": [301, "https://ett.example/api/v1/collectors", None],
        "https /": [200, None, "max-age=3600; includeSubDomains"],
        "silenced": ["security.W021"],
    }


def test_https_settings_follow_the_environment() -> None:
    assert _probe(DJANGO_SSL_REDIRECT="false", DJANGO_HSTS_SECONDS="31536000",
                  DJANGO_HSTS_INCLUDE_SUBDOMAINS="false", DJANGO_HSTS_PRELOAD="true") == {
        "http /": [200, None, None],
        "http /healthz": [200, None, None],
        "http check": [200, None, None],
        "http /api/v1/collectors": [200, None, None],
        "https /": [200, None, "max-age=31536000; preload"],
        "silenced": [],
    }


def test_compose_passes_the_https_switches_with_their_production_defaults() -> None:
    """compose writes an unset ``${X:-}`` as an empty string, which a boolean reads as false:
    a switch whose default is true must spell it out."""
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    web = compose["services"]["web"]["environment"]
    assert web["DJANGO_SSL_REDIRECT"] == "${DJANGO_SSL_REDIRECT:-true}"
    assert web["DJANGO_SECURE_COOKIES"] == "${DJANGO_SECURE_COOKIES:-true}"
    assert web["DJANGO_HSTS_SECONDS"] == "${DJANGO_HSTS_SECONDS:-3600}"
    assert web["ETT_TRUSTED_PROXY_COUNT"] == "${ETT_TRUSTED_PROXY_COUNT:-0}"
