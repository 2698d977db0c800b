"""Least privilege on the broker (issue 27, item 10), against the real servers.

RabbitMQ: ``deploy/rabbitmq/ett-broker-users.sh`` makes, in a vhost of its own, a node user
and a worker user. A real collector agent with the node user ships signed batches that a real
worker with the worker user stores; everything else the node user tries (consume, get,
purge, declare, delete, publish to any other exchange) the broker refuses with
ACCESS_REFUSED, and what it may publish without a credential the worker refuses. Each test
removes its vhost and users.

Redis: a worker and ``/healthz`` reach a Redis that requires a password, given as a file
(``CELERY_BROKER_PASSWORD_FILE``) beside a URL without one, as the compose stack gives them;
without it the worker says the broker wants one.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from amqp.exceptions import AccessRefused, ChannelError, NotFound
from celery import Celery, signature
from django.db import connection
from django.test import Client, override_settings
from kombu import Connection, Exchange, Producer, Queue

from collector.config import config_from_args
from collector.publisher import CeleryPublisher
from ettweb.ingest.credentials import new_credential
from ettweb.ingest.models import CollectorHealth, Event, QuarantinedEvent
from ettweb.settings.env import database_url
from tests.ettweb.waiting import wait_until
from tests.ettweb.worker_fleet import PrivateRedis

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "rabbitmq" / "ett-broker-users.sh"
T0 = time.time() - 3600.0
UNSIGNED = "missing auth (unsigned batch)"


def _rabbitmq_here() -> bool:
    if shutil.which("rabbitmqctl") is None:
        return False
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", 5672), 0.5):
        return True
    return False


needs_rabbitmq = pytest.mark.skipif(not _rabbitmq_here(), reason="no RabbitMQ node here "
                                    "(rabbitmqctl and 127.0.0.1:5672)")


def _lines(job: str, count: int = 3) -> list[str]:
    """Heartbeat events of one job, ids unique."""
    return [json.dumps({"v": 1, "id": f"{job}-{i}", "job": job, "attempt": 0, "kind": "mark",
                        "mark": "heartbeat", "ts": T0 + i}) for i in range(count)]


def _rabbitmqctl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["rabbitmqctl", "--quiet", *args], input=stdin, capture_output=True,
                          text=True, timeout=60, check=False)


@dataclass
class BrokerUsers:
    """A vhost with the script's two users; ``queue`` is the ingest queue it was run for."""

    vhost: str
    queue: str
    node_user: str
    worker_user: str
    secrets_dir: Path

    def password_file(self, user: str) -> Path:
        return self.secrets_dir / f"{user}.password"

    def password(self, user: str) -> str:
        return self.password_file(user).read_text().splitlines()[0]

    def url(self, user: str) -> str:
        """The URL as deployments give it: user name, no password."""
        return f"amqp://{user}@127.0.0.1:5672/{self.vhost}"

    def connection(self, user: str) -> Connection:
        return Connection(self.url(user), password=self.password(user), connect_timeout=5,
                          transport_options={"confirm_publish": True})

    def run_script(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), "--vhost", self.vhost, "--queue", self.queue,
             "--node-user", self.node_user, "--worker-user", self.worker_user,
             str(self.password_file(self.node_user)),
             str(self.password_file(self.worker_user))],
            capture_output=True, text=True, timeout=120, check=False)

    def remove(self) -> None:
        _rabbitmqctl("delete_vhost", self.vhost)
        for user in (self.node_user, self.worker_user):
            _rabbitmqctl("delete_user", user)


@pytest.fixture
def broker_users(tmp_path: Path) -> Iterator[BrokerUsers]:
    tag = uuid.uuid4().hex[:8]
    users = BrokerUsers(vhost=f"ett-test-{tag}", queue=f"ett.ingest-{tag}",
                        node_user=f"ett-node-{tag}", worker_user=f"ett-worker-{tag}",
                        secrets_dir=tmp_path)
    for user in (users.node_user, users.worker_user):
        users.password_file(user).write_text(secrets.token_hex(16) + "\n")
    try:
        made = users.run_script()
        assert made.returncode == 0, made.stderr
        yield users
    finally:
        users.remove()
    left = _rabbitmqctl("list_users", "--no-table-headers").stdout
    assert users.node_user not in left and users.worker_user not in left


def _start_worker(queue: str, log: Path, **environ: str) -> subprocess.Popen[bytes]:
    """A real worker on the test database, consuming ``queue`` of the broker ``environ``
    names (its own session, so stopping it reaches the pool)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELERY_BROKER_")}
    env |= {"DJANGO_SETTINGS_MODULE": "ettweb.settings.test", "PYTHONUNBUFFERED": "1",
            "DATABASE_URL": database_url(connection.settings_dict), **environ}
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "ettweb.celery", "worker", "-Q", queue,
             "-n", f"broker-{uuid.uuid4().hex[:8]}@%h", "--concurrency", "1",
             "--pool", "prefork", "--loglevel", "INFO", "--without-heartbeat",
             "--without-mingle", "--without-gossip"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is None:
        os.killpg(worker.pid, signal.SIGTERM)
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for worker in started:
        _stop(worker)


def _log_of(path: Path) -> Callable[[], str]:
    return lambda: path.read_text(errors="replace")[-6000:] if path.exists() else ""


def _wait_ready(log: Path) -> None:
    wait_until(lambda: " ready." in _log_of(log)(), 90, _log_of(log))


# --- RabbitMQ -----------------------------------------------------------------------------

@needs_rabbitmq
def test_the_script_grants_what_it_says_and_a_second_run_rotates_a_password(
        broker_users: BrokerUsers) -> None:
    rows = _rabbitmqctl("list_permissions", "-p", broker_users.vhost,
                        "--no-table-headers").stdout.splitlines()
    escaped = broker_users.queue.replace(".", "\\.")
    assert sorted(rows) == sorted([
        f"{broker_users.node_user}\t^$\t^{escaped}$\t^$",
        f"{broker_users.worker_user}\t.*\t.*\t.*"])
    node = broker_users.node_user
    old = broker_users.password(node)
    broker_users.password_file(node).write_text("rotated-" + secrets.token_hex(8) + "\n")
    again = broker_users.run_script()
    assert again.returncode == 0, again.stderr
    assert _rabbitmqctl("authenticate_user", node, broker_users.password(node)).returncode == 0
    assert _rabbitmqctl("authenticate_user", node, old).returncode != 0
    broker_users.password_file(node).write_text("\n")
    refused = broker_users.run_script()
    assert refused.returncode == 2
    assert "is empty" in refused.stderr  # a blank password would turn password log-in off


def _node_publisher(users: BrokerUsers) -> CeleryPublisher:
    """The agent's publisher with the node user (unsigned: the broker does not look)."""
    config = config_from_args(
        ["--broker", users.url(users.node_user), "--queue", users.queue, "--unsigned",
         "--broker-password-file", str(users.password_file(users.node_user)),
         "--source", "node-forger", "--publish-timeout", "5"], environ={})
    return CeleryPublisher(config)


def _forge(users: BrokerUsers, task: str, args: list[Any]) -> None:
    """Publish any task, as the node user may: to the ingest exchange, declaring nothing."""
    app = Celery("forger", set_as_current=False)
    app.conf.update(task_serializer="json", accept_content=["json"])
    with users.connection(users.node_user) as conn:
        app.send_task(task, args=args, queue=users.queue, exchange=users.queue,
                      routing_key=users.queue, declare=[], connection=conn)


@needs_rabbitmq
def test_a_batch_goes_nowhere_unseen_before_a_worker_declared_its_queue(
        broker_users: BrokerUsers) -> None:
    """The node declares nothing, so a publish before any worker declared the ingest queue
    (or with the queue unbound) fails, and the agent keeps the batch to retry."""
    publisher = _node_publisher(broker_users)
    with pytest.raises(NotFound, match="no exchange"):
        publisher.publish(_lines("early"))
    publisher.reset()
    with broker_users.connection(broker_users.worker_user) as worker:
        Exchange(broker_users.queue)(worker.default_channel).declare()
    with pytest.raises(ChannelError, match="NO_ROUTE"):
        publisher.publish(_lines("unbound"))
    publisher.reset()
    with broker_users.connection(broker_users.worker_user) as worker:
        bound = Queue(broker_users.queue, Exchange(broker_users.queue),
                      routing_key=broker_users.queue)(worker.default_channel)
        bound.declare()
        publisher.publish(_lines("bound"))
        assert bound.get(no_ack=True).headers["task"] == "ett.ingest_batch"
    publisher.close()


def _refused_to_the_node(users: BrokerUsers, attempt: Callable[[Any], object]) -> str:
    """What the broker answers ``attempt(channel)`` made as the node user."""
    with users.connection(users.node_user) as conn, pytest.raises(AccessRefused) as refused:
        attempt(conn.default_channel)
    return str(refused.value)


def _publish_to(exchange: str, routing_key: str) -> Callable[[Any], object]:
    return lambda channel: Producer(channel).publish(
        {"pwned": True}, exchange=exchange, routing_key=routing_key, serializer="json")


@needs_rabbitmq
def test_the_node_user_publishes_batches_and_nothing_else(
        broker_users: BrokerUsers, workers: list[subprocess.Popen[bytes]],
        tmp_path: Path) -> None:
    users, queue = broker_users, broker_users.queue
    log = tmp_path / "worker.log"
    workers.append(_start_worker(
        queue, log, CELERY_BROKER_URL=users.url(users.worker_user),
        CELERY_BROKER_PASSWORD_FILE=str(users.password_file(users.worker_user))))
    _wait_ready(log)

    # A real agent with the node user: its signed batch and health report are stored.
    credential = new_credential(f"broker-{users.vhost}")
    (tmp_path / "collector.secret").write_text(credential.secret + "\n")
    spool = tmp_path / "spool"
    spool.mkdir()
    shipped = _lines("shipped", 4)
    (spool / "j1.a0.r0.1.x.jsonl").write_text("".join(line + "\n" for line in shipped))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "ETT_"))}
    agent = subprocess.run(
        [sys.executable, "-m", "collector", "--once", "--broker", users.url(users.node_user),
         "--broker-password-file", str(users.password_file(users.node_user)),
         "--queue", queue, "--spool-dir", str(spool), "--source", "node-least",
         "--collector-id", credential.collector_id,
         "--collector-secret-file", str(tmp_path / "collector.secret")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert agent.returncode == 0, agent.stderr
    wait_until(lambda: Event.objects.filter(job="shipped").count() == len(shipped), 60,
               _log_of(log))
    wait_until(CollectorHealth.objects.filter(source="node-least").exists, 60, _log_of(log))

    # Everything else: refused by the broker.
    channel_ops: dict[str, Callable[[Any], object]] = {
        "basic.get": lambda channel: channel.basic_get(queue),
        "basic.consume": lambda channel: channel.basic_consume(queue, callback=print),
        "queue.purge": lambda channel: channel.queue_purge(queue),
        "queue.delete": lambda channel: channel.queue_delete(queue),
        "queue.declare": lambda channel: channel.queue_declare("node-own", auto_delete=True),
        "exchange.declare": lambda channel: channel.exchange_declare("node-own", "fanout"),
        "queue.bind": lambda channel: channel.queue_bind(queue, "amq.fanout"),
        # The nameless exchange reaches every queue by name, the workers' mailboxes too.
        "publish to the default exchange": _publish_to("", queue),
        "publish to amq.topic": _publish_to("amq.topic", queue),
        "publish to the workers' control exchange": _publish_to("celery.pidbox", ""),
    }
    for what, attempt in channel_ops.items():
        answer = _refused_to_the_node(users, attempt)
        assert "ACCESS_REFUSED" in answer and users.node_user in answer, (what, answer)

    # What it may publish without a credential the worker refuses: an unsigned batch, and
    # one that asks celery.starmap to call ingest as a plain function.
    unsigned, via_starmap = _lines("unsigned"), _lines("starmap")
    _forge(users, "ett.ingest_batch", [unsigned, "node-forger", None])
    _forge(users, "celery.starmap", [signature("ett.ingest_batch"),
                                     [[via_starmap, "node-forger", None]]])

    def quarantined() -> int:
        return sum(QuarantinedEvent.objects.values_list("lines", flat=True))

    wait_until(lambda: quarantined() == len(unsigned) + len(via_starmap), 60, _log_of(log))
    assert set(QuarantinedEvent.objects.values_list("reason", flat=True)) == {UNSIGNED}
    assert Event.objects.count() == len(shipped)

    # And the worker user reads what the node user cannot: the queue is drained.
    with users.connection(users.worker_user) as conn:
        assert conn.default_channel.queue_declare(queue, passive=True).message_count == 0


# --- Redis --------------------------------------------------------------------------------

@pytest.fixture
def locked_redis(tmp_path: Path) -> Iterator[tuple[PrivateRedis, Path]]:
    """A Redis that requires a password, and the file that holds it."""
    password = secrets.token_hex(16)
    server = PrivateRedis(tmp_path, password=password)
    server.start()
    password_file = tmp_path / "redis_password"
    password_file.write_text(password + "\n")
    yield server, password_file
    server.stop()


def _healthz_broker(client: Client) -> tuple[int, str]:
    response = client.get("/healthz")
    return response.status_code, str(response.json()["broker"])


def test_the_worker_and_healthz_take_the_password_from_its_file(
        locked_redis: tuple[PrivateRedis, Path], workers: list[subprocess.Popen[bytes]],
        tmp_path: Path, client: Client) -> None:
    """The worker's environment has the URL without a password (Celery takes an exported
    CELERY_BROKER_URL over the setting) and CELERY_BROKER_PASSWORD_FILE, as compose gives
    it; the collector reads the same file."""
    server, password_file = locked_redis
    queue = f"ett-locked-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "worker.log"
    workers.append(_start_worker(queue, log, CELERY_BROKER_URL=server.url,
                                 CELERY_BROKER_PASSWORD_FILE=str(password_file)))
    _wait_ready(log)
    credential = new_credential(f"locked-{queue}")
    (tmp_path / "collector.secret").write_text(credential.secret + "\n")
    config = config_from_args(
        ["--broker", server.url, "--broker-password-file", str(password_file), "--queue", queue,
         "--source", "node-locked", "--collector-id", credential.collector_id,
         "--collector-secret-file", str(tmp_path / "collector.secret")], environ={})
    publisher = CeleryPublisher(config)
    lines = _lines("locked")
    publisher.publish(lines)
    publisher.close()
    wait_until(lambda: Event.objects.filter(job="locked").count() == len(lines), 60,
               _log_of(log))
    assert server.password is not None and server.password not in _log_of(log)()

    with override_settings(CELERY_BROKER_URL=server.url, CELERY_BROKER_PASSWORD=server.password):
        assert _healthz_broker(client) == (200, "ok")
    with override_settings(CELERY_BROKER_URL=server.url, CELERY_BROKER_PASSWORD=None):
        assert _healthz_broker(client) == (
            503, "error: OperationalError: Authentication required.")


def test_a_worker_without_the_password_says_the_broker_wants_one(
        locked_redis: tuple[PrivateRedis, Path], workers: list[subprocess.Popen[bytes]],
        tmp_path: Path) -> None:
    server, _ = locked_redis
    log = tmp_path / "worker.log"
    workers.append(_start_worker(f"ett-locked-{uuid.uuid4().hex[:8]}", log,
                                 CELERY_BROKER_URL=server.url))
    refused = f"Cannot connect to redis://:**@127.0.0.1:{server.port}/0: Authentication required"
    wait_until(lambda: refused in _log_of(log)(), 90, _log_of(log))
    assert " ready." not in _log_of(log)()
