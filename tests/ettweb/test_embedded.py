"""Embedded Postgres + Redis: start, attach from another process, stop cleanly.

Uses its own ETT_VAR_DIR so the servers the rest of the test run uses are never touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from ettweb.platform import embedded

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def var_root() -> Iterator[Path]:
    """A private data dir beside the real one. Not pytest's tmp_path: when tests run as root,
    Postgres runs as the ``pgserver`` user, and every new pytest session resets
    /tmp/pytest-of-root to mode 700 — a concurrent session would lock Postgres out."""
    base = embedded.var_dir()
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="test-embedded-", dir=base))
    root.chmod(0o755)
    try:
        yield root
    finally:
        embedded.stop(root)  # never leave servers behind, even when a test fails
        shutil.rmtree(root, ignore_errors=True)


def _cli(root: Path, command: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "ETT_VAR_DIR": str(root)}
    return subprocess.run([sys.executable, "-m", "ettweb.platform.embedded", command], cwd=REPO,
                          env=environ, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_start_attach_stop(var_root: Path) -> None:
    urls = embedded.start(root=var_root)
    assert urls.database_url and urls.broker_url
    assert str(var_root) in urls.database_url and urls.broker_url.startswith("redis+socket://")
    with psycopg.connect(urls.database_url) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("ett",)
    assert redis.Redis(unix_socket_path=urls.broker_url.removeprefix("redis+socket://")).ping()

    # Another process attaches to the same servers instead of starting new ones.
    cli_env = _cli(var_root, "env")
    assert cli_env.returncode == 0, cli_env.stderr
    assert cli_env.stdout.splitlines() == urls.export_lines()
    assert embedded.start(root=var_root) == urls

    assert embedded.stop(var_root) == {"postgres": True, "redis": True}
    assert embedded.status(var_root) == {"postgres": None, "redis": None}
    assert embedded.stop(var_root) == {"postgres": False, "redis": False}


@pytest.mark.slow
def test_cli_status_and_restart_keeps_data(var_root: Path) -> None:
    assert "not running" in _cli(var_root, "status").stdout
    urls = embedded.start(root=var_root)
    assert urls.database_url is not None
    with psycopg.connect(urls.database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (n int)")
        conn.execute("INSERT INTO kept VALUES (42)")
    stopped = _cli(var_root, "stop")
    assert stopped.returncode == 0 and "postgres: stopped" in stopped.stdout
    again = embedded.start(root=var_root)
    assert again.database_url is not None
    with psycopg.connect(again.database_url) as conn:
        assert conn.execute("SELECT n FROM kept").fetchone() == (42,)


def test_only_asked_for_servers_start(var_root: Path) -> None:
    urls = embedded.start(postgres=False, redis=True, root=var_root)
    assert urls.database_url is None and urls.broker_url is not None
    assert embedded.status(var_root)["postgres"] is None


def test_too_long_var_dir_is_refused_before_starting_anything(tmp_path: Path) -> None:
    root = tmp_path / ("x" * 120)
    with pytest.raises(embedded.EmbeddedError, match=r"^ETT_VAR_DIR: .* too long for a unix"):
        embedded.start(root=root)
    assert not root.exists()
    cli = _cli(root, "start")
    assert cli.returncode == 2
    assert cli.stderr.startswith("ettweb.platform.embedded: ETT_VAR_DIR:")
    assert cli.stderr.count("\n") == 1


# --- test sessions stop what they started (issue 14: `make test` left the servers running) ---

#: A second test session in its own process: holds a lease on ``root`` (redis only), says
#: "held", and releases when told to, printing what it stopped.
OTHER_SESSION = """
import json, sys
from pathlib import Path
from ettweb.platform import embedded
root = Path(sys.argv[1])
embedded.start(postgres=False, redis=True, root=root, hold=True)
print("held", flush=True)
sys.stdin.readline()
print(json.dumps(embedded.release(root)), flush=True)
"""


def _redis_up(root: Path) -> bool:
    return embedded.status(root)["redis"] is not None


@pytest.mark.slow
def test_a_session_stops_the_servers_it_started(var_root: Path) -> None:
    embedded.start(root=var_root, hold=True)
    assert all(embedded.status(var_root).values())
    assert embedded.release(var_root) == {"postgres": True, "redis": True}
    assert embedded.status(var_root) == {"postgres": None, "redis": None}
    assert embedded.release(var_root) == {}  # released once; holds nothing now


def test_a_session_leaves_running_the_servers_it_found(var_root: Path) -> None:
    embedded.start(postgres=False, redis=True, root=var_root)  # a developer's `make demo`
    embedded.start(postgres=False, redis=True, root=var_root, hold=True)
    assert embedded.release(var_root) == {}
    assert _redis_up(var_root)


def test_servers_someone_attached_to_during_the_session_stay_up(var_root: Path) -> None:
    embedded.start(postgres=False, redis=True, root=var_root, hold=True)  # the session starts
    embedded.start(postgres=False, redis=True, root=var_root)  # a demo attaches meanwhile
    assert embedded.release(var_root) == {}
    assert _redis_up(var_root)


def test_the_last_session_to_end_stops_them(var_root: Path) -> None:
    embedded.start(postgres=False, redis=True, root=var_root, hold=True)  # starts redis
    other = subprocess.Popen([sys.executable, "-c", OTHER_SESSION, str(var_root)], cwd=REPO,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdin is not None
        assert other.stdout.readline().strip() == "held"
        assert embedded.release(var_root) == {}  # the other session still uses it
        assert _redis_up(var_root)
        out, _ = other.communicate("\n", timeout=60)
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()
    assert out.strip() == '{"postgres": false, "redis": true}'
    assert not _redis_up(var_root)


def test_a_dead_sessions_lease_keeps_nothing_up(var_root: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    lease = var_root / ".sessions" / gone.stdout.strip()
    lease.parent.mkdir(parents=True)
    lease.touch()  # a session killed before it could release
    embedded.start(postgres=False, redis=True, root=var_root, hold=True)
    assert embedded.release(var_root) == {"postgres": False, "redis": True}
    assert not lease.exists() and not _redis_up(var_root)


@pytest.mark.slow
def test_a_pytest_session_stops_the_embedded_redis_it_started(var_root: Path) -> None:
    """The real thing: a pytest run (its conftest's last hook) on a private ETT_VAR_DIR with
    DATABASE_URL set, so it starts only Redis, and leaves none running when it ends."""
    from django.db import connection

    from ettweb.settings.env import database_url

    env = {**os.environ, "ETT_VAR_DIR": str(var_root), "ETT_TEST_DATABASE_NAME": "test_unused",
           "DATABASE_URL": database_url(connection.settings_dict)}
    env.pop("CELERY_BROKER_URL", None)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/ettweb/test_demo.py::test_the_simulated_fleet_is_loaded_unless_no_fleet"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert (var_root / "redis" / "redis.log").exists()  # the session did start it
    assert not _redis_up(var_root)
    assert not (var_root / ".sessions" / "started").exists()
