"""``ettweb.platform.visibility``: a live Redis worker keeps the messages it holds, however long
it holds them, and only a dead one's come back, after about the visibility timeout (issue 31,
item 4).

The first tests drive the heartbeat on a kombu channel of a private Redis, with a second
connection scanning as any other worker would; the last ones run real workers (a task held
past the timeout stays with its worker; a killed worker's batch is back after about it).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
import redis as redis_py
from django.db import connection, transaction
from kombu import Connection, Exchange, Queue

from ettweb.ingest.models import Event, EventId
from ettweb.platform.visibility import Heartbeat, HeldMessagesHeartbeat, beat_period_s, held_tags
from tests.ettweb.waiting import a_session_waits_on_a_lock, wait_until
from tests.ettweb.worker_fleet import VISIBILITY_S, PrivateRedis, Workers, heartbeat_lines

#: The channel tests' visibility timeout: a beat every half second.
SHORT_TIMEOUT_S = 1.5
#: What the restore scan of every worker adds to the timeout (settings: every 10 s).
SCAN_INTERVAL_S = 10.0


def _connection(redis: PrivateRedis) -> Connection:
    return Connection(redis.url, transport_options={"visibility_timeout": SHORT_TIMEOUT_S})


def _take(conn: Connection, count: int) -> tuple[str, list[Any]]:
    """Publish ``count`` messages to a fresh queue and take them all, unacked."""
    name = f"vis-{uuid.uuid4().hex[:6]}"
    queue = Queue(name, Exchange(name), routing_key=name)
    for n in range(count):
        conn.Producer().publish({"n": n}, exchange=queue.exchange, routing_key=name,
                                declare=[queue], serializer="json")
    return name, [conn.default_channel.basic_get(name, no_ack=False) for _ in range(count)]


def _scan(redis: PrivateRedis) -> None:
    """What every other worker's event loop runs every 10 s."""
    with _connection(redis) as other:
        other.default_channel.qos.restore_visible(interval=1)


def test_a_beat_period_is_a_third_of_the_timeout() -> None:
    assert beat_period_s(90) == 30.0 and beat_period_s(10) == pytest.approx(10 / 3)


@pytest.mark.slow
def test_a_beat_rescores_only_what_the_channel_still_holds(redis: PrivateRedis) -> None:
    """Acked and rejected messages are settled: their index entries are gone, and a beat
    (``ZADD XX``) must not bring them back."""
    server = redis_py.Redis.from_url(redis.url)
    with _connection(redis) as conn:
        _name, (acked, rejected, held) = _take(conn, 3)
        acked.ack()
        rejected.reject(requeue=False)
        assert held_tags(conn.default_channel.qos) == [held.delivery_tag]
        later = time.time() + 1000.0
        assert Heartbeat(conn.default_channel, clock=lambda: later).beat() == 1
        assert server.zscore("unacked_index", held.delivery_tag) == later
        assert server.zscore("unacked_index", acked.delivery_tag) is None
        assert server.zscore("unacked_index", rejected.delivery_tag) is None
        assert server.zcard("unacked_index") == 1 and server.hlen("unacked") == 1


@pytest.mark.slow
def test_a_held_message_outlives_the_timeout_until_the_heartbeat_stops(
        redis: PrivateRedis) -> None:
    """Another worker's scan leaves a message alone while its holder beats, however long
    past the timeout; once the beats stop (the holder died) it restores it."""
    server = redis_py.Redis.from_url(redis.url)
    with _connection(redis) as conn:
        name, (message,) = _take(conn, 1)
        heartbeat = Heartbeat(conn.default_channel)
        heartbeat.start()
        try:
            time.sleep(3 * SHORT_TIMEOUT_S)
            _scan(redis)
            assert server.llen(name) == 0 and server.hexists("unacked", message.delivery_tag)
        finally:
            heartbeat.stop()
        assert not heartbeat.running
        time.sleep(SHORT_TIMEOUT_S + 0.5)
        _scan(redis)
        assert server.llen(name) == 1 and not server.hexists("unacked", message.delivery_tag)


@pytest.mark.slow
def test_the_heartbeat_lives_through_a_redis_outage(
        redis: PrivateRedis, caplog: pytest.LogCaptureFixture) -> None:
    """A beat that meets no Redis is logged; the thread goes on, and the first beat after
    Redis is back re-scores the message (the AOF kept it)."""
    caplog.set_level(logging.WARNING, logger="ettweb.platform.visibility")
    server = redis_py.Redis.from_url(redis.url)
    with _connection(redis) as conn:
        _name, (message,) = _take(conn, 1)
        heartbeat = Heartbeat(conn.default_channel)
        heartbeat.start()
        try:
            redis.stop()
            time.sleep(4 * heartbeat.period_s)
            assert heartbeat.running
            assert "could not extend the visibility" in caplog.text
            redis.start()
            back = time.time()
            wait_until(lambda: (server.zscore("unacked_index", message.delivery_tag) or 0) > back,
                       10 * heartbeat.period_s, lambda: caplog.text)
            assert heartbeat.running
        finally:
            heartbeat.stop()


def _consumer_on(channel: Any) -> SimpleNamespace:
    return SimpleNamespace(task_consumer=SimpleNamespace(channel=channel))


@pytest.mark.slow
def test_the_consumer_step_beats_on_redis_and_stops_with_the_consumer(
        redis: PrivateRedis) -> None:
    with _connection(redis) as conn:
        consumer = _consumer_on(conn.default_channel)
        step = HeldMessagesHeartbeat(consumer)
        step.start(consumer)
        heartbeat = step.heartbeat
        assert heartbeat is not None and heartbeat.running
        assert heartbeat.period_s == SHORT_TIMEOUT_S / 3
        step.stop(consumer)
        assert step.heartbeat is None and not heartbeat.running


def test_no_heartbeat_on_a_broker_without_a_visibility_timeout() -> None:
    """Any transport but Redis (RabbitMQ redelivers a dead connection's messages at once)."""
    with Connection("memory://") as conn:
        consumer = _consumer_on(conn.default_channel)
        step = HeldMessagesHeartbeat(consumer)
        step.start(consumer)
        assert step.heartbeat is None
        step.stop(consumer)


def test_every_worker_of_the_app_runs_the_step() -> None:
    from ettweb.celery import app

    assert HeldMessagesHeartbeat in app.steps["consumer"]


# ---------------------------------------------------------------- real workers


def _batch_tag(server: redis_py.Redis) -> str:
    """The delivery tag of the one ingest batch held unacknowledged."""
    (tag,) = [tag.decode() for tag, record in server.hgetall("unacked").items()
              if json.loads(record)[0]["headers"]["task"] == "ett.ingest_batch"]
    return tag


def _ready(workers: Workers, name: str) -> None:
    wait_until(lambda: " ready." in workers.log(name), 90, workers.logs)


def _batch_held_mid_insert(workers: Workers, job: str) -> None:
    """Start the holder, then publish a batch whose insert waits on the test's table lock."""
    workers.start("holder")
    _ready(workers, "holder")
    workers.publish(heartbeat_lines(job, 200))
    wait_until(a_session_waits_on_a_lock, 90, workers.logs)


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_batch_held_past_the_timeout_stays_with_its_live_worker(
        workers: Workers, redis: PrivateRedis) -> None:
    """The holder's task runs three times the visibility timeout (its insert waits on a lock)
    while a second worker scans and idles: the second worker never gets it, and once acked
    the batch's entry stays gone though the holder beats on (it holds the refresh task)."""
    server, job = redis_py.Redis.from_url(redis.url), f"long-{uuid.uuid4().hex[:6]}"
    hold_s = 3 * VISIBILITY_S  # unbeaten, it would be restored by 2 x timeout + 2 scans
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {EventId._meta.db_table} IN SHARE MODE")
        _batch_held_mid_insert(workers, job)
        tag = _batch_tag(server)
        taken_at = server.zscore("unacked_index", tag)
        workers.start("bystander")
        _ready(workers, "bystander")
        time.sleep(hold_s)
        score = server.zscore("unacked_index", tag)
        assert score is not None, "restored: the second worker was handed it"
        assert score > taken_at + VISIBILITY_S  # beaten since it was taken
    wait_until(lambda: Event.objects.filter(job=job).count() == 200, 60, workers.logs)
    assert "Task ett.ingest_batch[" not in workers.log("bystander")
    # received, then succeeded: logged after the commit the rows above show, so waited for
    wait_until(lambda: workers.log("holder").count("Task ett.ingest_batch[") == 2, 30,
               workers.logs)
    time.sleep(2 * beat_period_s(VISIBILITY_S))
    assert server.zscore("unacked_index", tag) is None and not server.hexists("unacked", tag)


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_killed_workers_batch_is_back_after_about_the_timeout(
        workers: Workers, redis: PrivateRedis) -> None:
    """kill -9 of the holder's whole group: its beats stop, so its batch is restored once
    its last beat is a timeout old, by the next scan — not before (the holder beat until the
    kill), and not later than the timeout plus one scan interval plus a little slack."""
    job = f"killed-{uuid.uuid4().hex[:6]}"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {EventId._meta.db_table} IN SHARE MODE")
        _batch_held_mid_insert(workers, job)
        workers.start("rescuer")
        _ready(workers, "rescuer")
        time.sleep(VISIBILITY_S)  # the holder has been beating for a while
        holder = workers.procs[0]
        killed_at = time.monotonic()
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        wait_until(lambda: "Task ett.ingest_batch[" in workers.log("rescuer"),
                   VISIBILITY_S + SCAN_INTERVAL_S + 30, workers.logs)
        delay = time.monotonic() - killed_at
    assert VISIBILITY_S - beat_period_s(VISIBILITY_S) - 1.0 <= delay, delay
    assert delay <= VISIBILITY_S + SCAN_INTERVAL_S + 5.0, delay
    wait_until(lambda: Event.objects.filter(job=job).count() == 200, 60, workers.logs)
