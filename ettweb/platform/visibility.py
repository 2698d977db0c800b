"""A Redis worker keeps the messages it holds from being restored while it lives.

On Redis a delivered message waits in kombu's ``unacked`` hash, indexed in ``unacked_index``
by the time it was taken, and every worker's 10-s scan puts back any message older than the
visibility timeout (``ETT_BROKER_VISIBILITY_TIMEOUT_S``). That is how a killed worker's batch
comes back, so the timeout should be short; but a message held longer than the timeout by a
worker that is still alive would be handed to a second worker too. ETT's workers hold
messages that long on purpose: a task waiting in place through a database outage
(``ettweb.platform.retry``), a refresh of a replayed backlog that takes minutes, a refresh
task waiting out its countdown in the worker's timer.

So every worker beats: a thread in its main process re-scores, every third of the timeout,
the index entry of each message its consumer holds, so a live worker's messages never age
past the timeout and only a worker that stopped beating (killed, frozen, cut off from Redis
for two beats) has its messages restored. Why the main process and not a signal in the task:
the main process takes and acks the messages (a pool process never learns its message's
delivery tag), it holds the refreshes waiting for their countdown, and it beats whatever
pool runs the tasks, even one that blocks the event loop.

A beat re-scores only tags that are still in the index (``ZADD XX``): a message acked or
restored meanwhile is not brought back, so the beat ends with the task, whatever ended it.
A beat that fails (a Redis outage) is logged and the next one tries again. RabbitMQ has no
visibility timeout (a dead connection's messages are redelivered at once): no thread there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from celery import Celery, bootsteps

log = logging.getLogger(__name__)

#: Beats per visibility timeout: a live worker's messages are never older than a third of
#: it, so two beats in a row can fail (a Redis hiccup, a stalled process) before a message
#: held by a live worker is restored.
BEATS_PER_TIMEOUT = 3


def held_tags(qos: Any) -> list[str]:
    """The delivery tags a kombu virtual QoS holds: delivered and neither acked nor rejected
    yet (kombu moves a settled tag to ``_dirty`` and drops both later, on its own loop)."""
    for _attempt in range(3):
        try:  # another thread (the event loop) may change them as they are copied
            delivered, settled = list(qos._delivered), set(qos._dirty)
        except RuntimeError:
            continue
        return [tag for tag in delivered if tag not in settled]
    return []


def beat_period_s(visibility_timeout_s: float) -> float:
    """Seconds between two beats for a visibility timeout."""
    return float(visibility_timeout_s) / BEATS_PER_TIMEOUT


class Heartbeat:
    """Re-scores the index entries of what one Redis channel holds, from a thread of its own."""

    def __init__(self, channel: Any, clock: Callable[[], float] = time.time) -> None:
        self.channel, self.clock = channel, clock
        self.period_s = beat_period_s(channel.visibility_timeout)
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ett-visibility-heartbeat",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the beats; a beat in flight is waited for up to ``timeout`` seconds."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stopped.wait(self.period_s):
            self.beat()

    def beat(self) -> int:
        """Re-score every held message still in the index with now; how many were held.
        Never raises: a failed beat is logged, and the next one tries again."""
        try:
            tags = held_tags(self.channel.qos)
            if tags:
                with self.channel.conn_or_acquire() as client:
                    client.zadd(self.channel.unacked_index_key,
                                dict.fromkeys(tags, self.clock()), xx=True)
            return len(tags)
        except Exception as exc:  # the thread must outlive any outage
            log.warning("could not extend the visibility of the messages this worker holds "
                        "(%s: %s); trying again in %.0f s", type(exc).__name__, exc,
                        self.period_s)
            return 0


def redis_channel(consumer: Any) -> Any | None:
    """The Redis channel a Celery consumer takes its tasks on; None on any other transport."""
    from kombu.transport import redis as kombu_redis

    task_consumer = getattr(consumer, "task_consumer", None)
    channel = getattr(task_consumer, "channel", None)
    return channel if isinstance(channel, kombu_redis.Channel) else None


class HeldMessagesHeartbeat(bootsteps.StartStopStep):
    """The consumer step that runs a :class:`Heartbeat` while the task consumer runs; a
    reconnect stops it and starts one on the new channel."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.heartbeat: Heartbeat | None = None

    def start(self, parent: Any) -> None:
        channel = redis_channel(parent)
        if channel is None:  # RabbitMQ: a dead connection's messages come back at once
            return
        self.heartbeat = Heartbeat(channel)
        self.heartbeat.start()
        log.info("extending the visibility of held messages every %.0f s (timeout %.0f s)",
                 self.heartbeat.period_s, channel.visibility_timeout)

    def stop(self, parent: Any) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()
            self.heartbeat = None

    shutdown = stop


def install(app: Celery) -> None:
    """Run the heartbeat in every worker of ``app`` (a set of steps: idempotent)."""
    app.steps["consumer"].add(HeldMessagesHeartbeat)
