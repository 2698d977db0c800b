"""Per-source fairness: one node's flood of batches cannot hold every other node's events back.

Why: batches from every node share one FIFO queue, so a node that publishes 100,000 tiny
batches (a bug, a backlog replay, a hostile publisher) once delayed every other node's events
by 925 s: each waited for the whole flood to be *stored* ahead of it. The publisher may be
hostile, so the limit is enforced by the worker, never trusted to the agent.

The rule. Each batch ``source`` may have ``ETT_INGEST_SOURCE_RATE`` batches a second stored
in turn, with bursts of ``ETT_INGEST_SOURCE_BURST`` (10 and 20 by default; an agent ships
about one batch every 2 s): a GCRA token bucket shared by every worker, in Postgres, which
both brokers' deployments have. A batch over its source's rate is not stored in its turn:
the worker publishes a copy of it at the tail of the queue it came from, with publisher
confirms on RabbitMQ (a Redis push is confirmed by its reply), and only once the broker has
taken the copy does the task return and the original get acknowledged. The copy carries a
header only the server can make (an HMAC of its task id under ``SECRET_KEY``), and a batch
bearing it is stored whatever its source's rate: a batch is put back **once**, never again,
so nothing retries forever and nothing valid is dropped. If the copy cannot be published
(the broker refuses, a timeout), the batch is stored now, as before.

What it buys, and what it does not. A flood queued ahead of another node's batch now costs
that batch one *deferral* per flood batch beyond the burst, not one *store*, and the flood's
batches are stored after it, on their second pass. The bound stays proportional to the flood
queued ahead: a worker must take each message off the FIFO to look at it, and that
per-message cost (the pop, the pool, the ack) is the floor. On a loaded 2-core machine it is
about as large as storing a one-line batch (20-30 ms), so a flood of *tiny* batches delays
the others about as long as before; the gain grows with the flood's batch size, and a
deferral never costs a flood batch more than one extra pass (the figures, from the soak's
``source_flood``, are in docs/explanation/delivery.md). Only separate queues at the
publisher would remove the floor, and the publisher is the party not trusted. Against a
*hostile* publisher a per-source limit is weak anyway: it may name a new source for every
batch (each gets a fresh burst; the state stays bounded). It holds back one node that floods
under its own name (a bug, a backlog replay) without starving it.

Why not an overflow queue consumed beside the main one: RabbitMQ serves two queues on one
channel in turn, not the main one first, so every deferral would be paired with a flood
store and a burst would delay the others *more* than before; and a second queue must be
declared, permitted and consumed by every deployment. The tail of the same queue needs none
of that and behaves the same on Redis and RabbitMQ.

State is bounded by construction: sources are hashed into ``SLOTS`` buckets (one row each,
``SourceBucket``), so a publisher naming a million sources makes at most ``SLOTS`` rows. Two
sources sharing a slot share a rate; the cost of that collision is a deferral, never a loss.
Anyone may name another node's source (the batch signature covers the lines, not the source)
and so push that node's batches through one deferral each: a delay, never a loss.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
import uuid
from typing import Any, Final

from django.conf import settings
from django.db import connection
from django.utils.crypto import salted_hmac

from ettweb.ingest.models import SourceBucket

logger = logging.getLogger(__name__)
#: Hash slots of sources: the bucket table's most rows.
SLOTS: Final = 4096
#: The message header that marks a batch put back once by a worker.
HEADER: Final = "ett_deferred"
#: Seconds a deferral's publish (and its confirm) may take before the batch is stored now.
PUBLISH_TIMEOUT_S: Final = 10.0
_SALT: Final = "ettweb.ingest.fairness.deferred"


def slot(source: str) -> int:
    """The bucket ``source`` counts against: a stable hash (Python's ``hash`` is salted per
    process, and every worker must agree)."""
    digest = hashlib.blake2b(source.encode("utf-8", "backslashreplace"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % SLOTS


def take(source: str, now: float | None = None) -> bool:
    """Whether ``source`` may have one more batch stored now (and count it if so).

    GCRA in one statement: a slot's ``tat`` is when its bucket would be full again; a batch
    is within the rate when ``tat`` is at most ``burst - 1`` intervals ahead of now, and then
    moves it one interval on. A batch over the rate changes nothing, so a flood cannot push
    its own slot further into the future than a full bucket. Runs in autocommit, outside the
    batch's transaction: the slot's row lock is held for this statement only.
    """
    rate = settings.ETT_INGEST_SOURCE_RATE
    if rate <= 0:
        return True
    now = time.time() if now is None else now
    interval = 1.0 / rate
    table = SourceBucket._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (slot, tat) VALUES (%(slot)s, %(now)s + %(t)s) "
            f"ON CONFLICT (slot) DO UPDATE SET tat = greatest({table}.tat, %(now)s) + %(t)s "
            f"WHERE {table}.tat - %(now)s <= %(ahead)s RETURNING 1",
            {"slot": slot(source), "now": now, "t": interval,
             "ahead": (settings.ETT_INGEST_SOURCE_BURST - 1) * interval})
        return cursor.fetchone() is not None


def _token(task_id: str) -> str:
    return salted_hmac(_SALT, task_id, algorithm="sha256").hexdigest()


def was_deferred(request: Any) -> bool:
    """Whether this delivery is a copy a worker put back (its header verifies).

    A publisher can set any header, so the mark is an HMAC of the task id under the server's
    ``SECRET_KEY``: a forged or copied-over mark is ignored and the batch is rate checked."""
    mark = request.get(HEADER) or (request.get("headers") or {}).get(HEADER)
    task_id = request.get("id")
    return (isinstance(mark, str) and isinstance(task_id, str)
            and hmac.compare_digest(mark, _token(task_id)))


def should_defer(task: Any, source: str) -> bool:
    """Whether this delivery is over its source's rate and was never put back before.

    Only a delivery from the broker is limited: a plain call or an eager ``apply`` (trusted
    code in this process, tests) has no queue to be put back on."""
    request = task.request
    if request.called_directly or (request.delivery_info or {}).get("is_eager"):
        return False
    return settings.ETT_INGEST_SOURCE_RATE > 0 and not was_deferred(request) \
        and not take(source)


_publisher: Any = None


def _connection(app: Any) -> Any:
    """This process's connection for deferrals: publisher confirms on (RabbitMQ; ignored on
    Redis, whose push is confirmed by its reply). Made lazily, so each pool process has its
    own, after the fork."""
    global _publisher
    if _publisher is None:
        _publisher = app.connection_for_write(transport_options={"confirm_publish": True})
    return _publisher


def _drop_connection() -> None:
    global _publisher
    if _publisher is not None:
        try:
            _publisher.close()
        except Exception:  # closing a broken connection may fail too; it is dropped anyway
            logger.debug("closing the deferral connection failed", exc_info=True)
    _publisher = None


def defer(task: Any, lines: list[Any], source: str, auth: Any) -> bool:
    """Publish a copy of this batch, marked as put back, at the tail of its queue; True once
    the broker confirmed it (the caller then returns, and the original is acknowledged).

    False when it could not be published: the caller stores the batch now. A worker killed
    between the confirm and the ack leaves both the copy and the original: the second stored
    is counted as duplicates (its nonce and event ids were seen), never stored twice.
    """
    delivery = task.request.delivery_info or {}
    queue = delivery.get("routing_key") or task.app.conf.task_default_queue
    task_id = str(uuid.uuid4())
    options: dict[str, Any] = {"queue": queue}
    if connection_is_amqp(task.app):
        # Mandatory: a copy no queue takes fails here, and the batch is stored now instead.
        options.update(exchange=delivery.get("exchange") or queue, routing_key=queue,
                       mandatory=True)
    try:
        task.app.send_task(task.name, args=[lines, source, auth], task_id=task_id,
                           connection=_connection(task.app), retry=False,
                           headers={HEADER: _token(task_id)}, serializer="json",
                           timeout=PUBLISH_TIMEOUT_S, confirm_timeout=PUBLISH_TIMEOUT_S,
                           **options)
    except Exception:  # any failure to hand it over: store it now, lose nothing
        logger.warning("batch from %r is over its source's rate but could not be put back; "
                       "storing it now", source, exc_info=True)
        _drop_connection()
        return False
    return True


def connection_is_amqp(app: Any) -> bool:
    """Whether the broker is RabbitMQ (AMQP), where publishes need confirms and a route."""
    url = str(app.conf.broker_write_url or app.conf.broker_url or "")
    return url.split(":", 1)[0] in ("amqp", "amqps", "pyamqp")
