"""Settings: env parsing names the variable; production refuses to start half-configured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from ettweb.settings import env

REPO = Path(__file__).resolve().parents[2]


def test_url_with_wrong_scheme_names_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "mysql://u@h/db")
    with pytest.raises(ImproperlyConfigured, match=r"^DATABASE_URL: not a postgres:// URL$"):
        env.url("DATABASE_URL", env.POSTGRES_SCHEMES, kind="postgres://")


@pytest.mark.parametrize(
    ("helper", "value", "message"),
    [
        (lambda: env.int_("ETT_X"), "ten", r"^ETT_X: not an integer: 'ten'$"),
        (lambda: env.int_("ETT_X", minimum=1), "0", r"^ETT_X: must be >= 1, got 0$"),
        (lambda: env.bool_("ETT_X"), "maybe", r"^ETT_X: not a boolean: 'maybe'"),
        (lambda: env.list_("ETT_X"), "a,,b", r"^ETT_X: empty item"),
        (lambda: env.str_("ETT_X"), "  ", r"^ETT_X: required but not set$"),
        (lambda: env.float_("ETT_X"), "soon", r"^ETT_X: not a number: 'soon'$"),
        (lambda: env.float_("ETT_X"), "nan", r"^ETT_X: must be a finite number, got 'nan'$"),
        (lambda: env.float_("ETT_X", minimum=0.0), "-1.5", r"^ETT_X: must be >= 0, got -1.5$"),
    ],
)
def test_bad_values_name_the_variable(monkeypatch: pytest.MonkeyPatch, helper: object,
                                      value: str, message: str) -> None:
    monkeypatch.setenv("ETT_X", value)
    with pytest.raises(ImproperlyConfigured, match=message):
        helper()  # type: ignore[operator]


def test_good_values_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ETT_N", " 7 ")
    monkeypatch.setenv("ETT_B", "Off")
    monkeypatch.setenv("ETT_L", "a.example, b.example")
    monkeypatch.delenv("ETT_UNSET", raising=False)
    assert env.int_("ETT_N", minimum=1) == 7
    assert env.float_("ETT_N", minimum=0.0) == 7.0
    assert env.float_("ETT_UNSET", 2.0) == 2.0
    assert env.bool_("ETT_B") is False
    assert env.list_("ETT_L") == ["a.example", "b.example"]
    assert env.str_("ETT_UNSET", "fallback") == "fallback"
    assert env.bool_("ETT_UNSET", True) is True


def test_postgres_url_socket_and_tcp_forms() -> None:
    socket_db = env.postgres_url("DATABASE_URL", "postgres://postgres@/ett?host=/var/pg")
    assert (socket_db.name, socket_db.user, socket_db.host, socket_db.port) == (
        "ett", "postgres", "/var/pg", "")
    tcp_db = env.postgres_url("DATABASE_URL", "postgresql://u:p%40ss@db.internal:6543/ett")
    database = tcp_db.as_database()
    assert database["ENGINE"] == "django.db.backends.postgresql"
    assert (database["HOST"], database["PORT"], database["PASSWORD"]) == (
        "db.internal", "6543", "p@ss")


@pytest.mark.parametrize(
    ("value", "message"),
    [("postgres://u@h", r"^DATABASE_URL: no database name"),
     ("postgres://u@h:port/db", r"^DATABASE_URL: port is not a number$")],
)
def test_postgres_url_problems(value: str, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        env.postgres_url("DATABASE_URL", value)


def test_the_broker_password_comes_from_its_file(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.delenv("CELERY_BROKER_PASSWORD", raising=False)
    assert env.broker_password("redis://redis:6379/0") is None
    (tmp_path / "redis_password").write_text("s3cret\n")
    monkeypatch.setenv("CELERY_BROKER_PASSWORD_FILE", str(tmp_path / "redis_password"))
    assert env.broker_password("redis://redis:6379/0") == "s3cret"
    assert env.broker_password("amqp://ett-worker@rabbit:5672/ett") == "s3cret"


@pytest.mark.parametrize(
    ("url", "message"),
    [(None, r"^CELERY_BROKER_PASSWORD: set, but CELERY_BROKER_URL is not$"),
     ("redis://:inline@redis:6379/0",
      r"^CELERY_BROKER_URL: has a password already; give the URL without one "
      r"\(CELERY_BROKER_PASSWORD is set\)$"),
     ("redis+socket:///run/redis.sock",
      r"^CELERY_BROKER_URL: is a redis\+socket URL, whose password kombu reads from the URL "
      r"only")],
)
def test_a_broker_password_kombu_would_ignore_is_refused(
        monkeypatch: pytest.MonkeyPatch, url: str | None, message: str) -> None:
    """kombu lets a password inside the URL win and reads a socket's from the URL only: a
    password from a file that the broker never sees would hide the misconfiguration."""
    monkeypatch.setenv("CELERY_BROKER_PASSWORD", "s3cret")
    with pytest.raises(ImproperlyConfigured, match=message):
        env.broker_password(url)


def _manage_check(**overrides: str) -> subprocess.CompletedProcess[str]:
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("DJANGO_", "DATABASE_URL", "CELERY_"))}
    environ = {**keep, "DJANGO_SETTINGS_MODULE": "ettweb.settings.production", **overrides}
    return subprocess.run([sys.executable, str(REPO / "manage.py"), "check"], cwd=REPO,
                          env=environ, capture_output=True, text=True, timeout=60)


def test_production_without_secret_key_exits_2_with_one_line() -> None:
    proc = _manage_check(DJANGO_ALLOWED_HOSTS="ett.example")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "configuration error: DJANGO_SECRET_KEY: required but not set"]


def test_production_rejects_non_postgres_database() -> None:
    proc = _manage_check(DJANGO_SECRET_KEY="k" * 50, DJANGO_ALLOWED_HOSTS="ett.example",
                         DATABASE_URL="sqlite:///db.sqlite3",
                         CELERY_BROKER_URL="redis://127.0.0.1:6379/0")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "configuration error: DATABASE_URL: not a postgres:// URL"


@pytest.mark.slow
def test_production_collectstatic_includes_local_plotly(tmp_path: Path) -> None:
    """The image's build step: plotly.js must be collected, hashed and compressed."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "collectstatic", "--noinput", "-v0"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "ettweb.settings.production",
             "DJANGO_SECRET_KEY": "k" * 50, "DJANGO_ALLOWED_HOSTS": "ett.example",
             "DATABASE_URL": "postgres://build@localhost/build",
             "CELERY_BROKER_URL": "redis://localhost:6379/0", "DJANGO_STATIC_ROOT": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "staticfiles.json").read_text())["paths"]
    assert (tmp_path / manifest["vendor/plotly.min.js"]).stat().st_size > 1_000_000
    assert (tmp_path / "vendor" / "plotly.min.js.gz").exists()
    assert "ett.css" in manifest


def test_production_requires_broker() -> None:
    proc = _manage_check(DJANGO_SECRET_KEY="k" * 50, DJANGO_ALLOWED_HOSTS="ett.example",
                         DATABASE_URL="postgres://postgres@127.0.0.1:5432/ett")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "configuration error: CELERY_BROKER_URL: required but not set"


@pytest.mark.parametrize(
    "argv",
    [[str(REPO / "manage.py"), "help"], ["-m", "celery", "-A", "ettweb.celery", "worker"]],
    ids=["manage.py", "celery-worker"],
)
def test_entry_points_fail_in_one_line_on_bad_local_settings(argv: list[str]) -> None:
    environ = {**os.environ, "DJANGO_SETTINGS_MODULE": "ettweb.settings.local",
               "DJANGO_DEBUG": "maybe"}
    proc = subprocess.run([sys.executable, *argv], cwd=REPO, env=environ, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "configuration error: DJANGO_DEBUG: not a boolean: 'maybe' (use true/false)")


def test_embedded_failure_is_one_configuration_line(tmp_path: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",
                                                                 "CELERY_BROKER_URL")}
    environ |= {"DJANGO_SETTINGS_MODULE": "ettweb.settings.local",
                "ETT_VAR_DIR": str(tmp_path / ("x" * 120))}
    proc = subprocess.run([sys.executable, str(REPO / "manage.py"), "check"], cwd=REPO,
                          env=environ, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("configuration error: DATABASE_URL and CELERY_BROKER_URL unset "
                                  "and the embedded servers failed: ETT_VAR_DIR:")
    assert proc.stderr.count("\n") == 1


@pytest.mark.slow
def test_production_reads_the_broker_password_from_its_file(tmp_path: Path) -> None:
    """As compose starts web, worker and beat: the URL without a password, the password in a
    secret file; an unreadable file stops start-up naming the variable."""
    password = tmp_path / "redis_password"
    password.write_text("s3cret\n")
    common = {"DJANGO_SECRET_KEY": "k" * 50, "DJANGO_ALLOWED_HOSTS": "ett.example",
              "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/ett",
              "CELERY_BROKER_URL": "redis://redis:6379/0"}
    proc = _manage_check(**common, CELERY_BROKER_PASSWORD_FILE=str(password))
    assert proc.returncode == 0, proc.stderr
    proc = _manage_check(**common, CELERY_BROKER_PASSWORD_FILE=str(tmp_path / "missing"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("configuration error: CELERY_BROKER_PASSWORD_FILE: cannot "
                                  "read")


@pytest.mark.parametrize(("value", "problem"), [
    ("5", "must be >= 10, got 5"), ("soon", "not a number: 'soon'"),
    ("inf", "must be a finite number, got 'inf'")])
def test_a_bad_stale_after_is_refused_by_name(value: str, problem: str) -> None:
    """ETT_STALE_AFTER_S under one heartbeat interval (10 s) would call live jobs stale."""
    environ = {**os.environ, "DJANGO_SETTINGS_MODULE": "ettweb.settings.local",
               "ETT_STALE_AFTER_S": value}
    proc = subprocess.run([sys.executable, str(REPO / "manage.py"), "help"], cwd=REPO,
                          env=environ, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"configuration error: ETT_STALE_AFTER_S: {problem}"
