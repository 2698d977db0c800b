"""Per-source fairness: a node flooding big batches waits behind the other nodes' batches.

Why: batches from every node share one FIFO queue, so a node that publishes 100,000 tiny
batches (a bug, a backlog replay, a hostile publisher) once delayed every other node's events
by 925 s: each waited for the whole flood to be *stored* ahead of it. The publisher may be
hostile, so the limit is enforced by the worker, never trusted to the agent.

The rule. Each batch ``source`` may have ``ETT_INGEST_SOURCE_RATE`` events a second stored
in turn, with bursts of ``ETT_INGEST_SOURCE_BURST`` events (off by default; the soak runs
2,000 and 20,000, see below for why it is off): a
GCRA token bucket shared by every worker, in Postgres, which both brokers' deployments have.
A batch of at least ``ETT_INGEST_DEFER_MIN_LINES`` (500) lines over its source's rate is not
stored in its turn: the worker publishes a copy of it at the tail of the queue it came from,
with publisher confirms on RabbitMQ (a Redis push is confirmed by its reply), and only once
the broker has taken the copy does the task return and the original get acknowledged. The
copy carries a header only the server can make (an HMAC of its task id under
``SECRET_KEY``), and a batch bearing it is stored whatever its source's rate: a batch is put
back **once**, never again, so nothing retries forever and nothing valid is dropped. If the
copy cannot be published (the broker refuses, a timeout), the batch is stored now, as
before. A smaller batch is counted but never put back: see below.

What it buys, and what it does not. A flood of big batches queued ahead of another node's
batch now costs that batch one *deferral* per flood batch beyond the burst, not one *store*,
and the flood's batches are stored after it, on their second pass. The bound stays
proportional to the flood queued ahead: a worker must take each message off the FIFO to look
at it, and that per-message cost (the pop, the pool, the ack) is the floor. On a loaded
2-core machine it is about as large as storing a batch of 1 or 100 lines (20-30 ms), so
putting back a small batch adds a pass and buys nothing: measured with every batch eligible,
a flood of 1,000 one-line batches held another source's batch back no less, and in single
runs longer (18.0 s against 12.9 s without the limit on Redis, 9.3 s against 7.6 s on
RabbitMQ; runs on a shared machine vary by half). Hence ``ETT_INGEST_DEFER_MIN_LINES``: a
flood of tiny batches costs the others what it did before (N stores), a flood of big ones
about N deferrals (the figures, from the soak's ``source_flood``, are in
docs/explanation/delivery.md). Only separate queues at the publisher would remove the floor,
and the publisher is the party not trusted. Against a *hostile* publisher a per-source limit
is weak anyway: it may name a new source for every batch (each gets a fresh burst; the state
stays bounded). It holds back one node that floods under its own name (a bug, a backlog
replay) without starving it.

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


def take(source: str, events: int = 1, now: float | None = None, *,
         force: bool = False) -> bool:
    """Whether ``source`` may have a batch of ``events`` stored now (and count it if so);
    with ``force``, count it whatever the answer (a batch stored anyway).

    GCRA in one statement, in events: a slot's ``tat`` is when its bucket would be full
    again; a batch fits when moving ``tat`` on by its events keeps it within the burst of
    now. A batch that does not fit changes nothing, and a counted one never pushes ``tat``
    past a full bucket, so a flood cannot push its own slot further into the future than
    that. Runs in autocommit, outside the batch's transaction: the slot's row lock is held
    for this statement only.
    """
    rate = settings.ETT_INGEST_SOURCE_RATE
    if rate <= 0:
        return True
    now = time.time() if now is None else now
    table = SourceBucket._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (slot, tat) VALUES (%(slot)s, %(now)s + least(%(w)s, "
            "%(burst)s) * %(t)s) "
            f"ON CONFLICT (slot) DO UPDATE SET tat = least(greatest({table}.tat, %(now)s) "
            "+ %(w)s * %(t)s, %(now)s + %(burst)s * %(t)s) "
            f"WHERE %(force)s OR greatest({table}.tat, %(now)s) + %(w)s * %(t)s - %(now)s "
            "<= %(burst)s * %(t)s RETURNING 1",
            {"slot": slot(source), "now": now, "t": 1.0 / rate, "w": max(1, events),
             "burst": settings.ETT_INGEST_SOURCE_BURST, "force": force})
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


def should_defer(task: Any, source: str, events: int) -> bool:
    """Whether this delivery of ``events`` lines should be put back: its source is over the
    rate, the batch is big enough for a deferral to pay, and it was never put back before.

    A batch under ``ETT_INGEST_DEFER_MIN_LINES`` is only counted: taking a message off the
    queue, checking it and publishing it again costs about what storing a small batch does
    (the per-message floor), so deferring it would only add a pass. Only a delivery from the
    broker is limited: a plain call or an eager ``apply`` (trusted code in this process,
    tests) has no queue to be put back on."""
    request = task.request
    if request.called_directly or (request.delivery_info or {}).get("is_eager") \
            or settings.ETT_INGEST_SOURCE_RATE <= 0:
        return False
    if events < settings.ETT_INGEST_DEFER_MIN_LINES or was_deferred(request):
        take(source, events, force=True)
        return False
    return not take(source, events)


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
