"""Two things a worker needs from the broker that Celery and kombu do not give by default.

1. **A killed worker's batch comes back in minutes, not an hour.** With late acks on Redis a
   delivered message sits in kombu's ``unacked`` hash until the worker acks it. A worker that
   shuts down cleanly puts it back; one killed with ``kill -9`` cannot, and then only the
   *visibility timeout* brings it back: any worker's event loop restores messages older than
   that. kombu's default is 3,600 s, so a batch of a killed worker went missing for an hour
   (and kombu 5.7 scans only on every 10th 10-s tick). Settings set the timeout to
   ``ETT_BROKER_VISIBILITY_TIMEOUT_S`` (600 s) and scan on every tick, so such a batch is back
   within the timeout plus 10 s. It must stay above any countdown a task is sent with (ours: the 5 s
   rollup debounce, retry backoff capped at 300 s) — a held message older than it is handed to
   another worker too; every ETT task is idempotent, so that costs work, never data.

2. **A Redis outage while a message is held does not kill the worker** (celery 5.7.0, kombu
   5.7.0, redis-py 8.1.0). On a lost connection the consumer first collects the connection
   (which drops the transport's reference to its client), then closes it; closing the channel
   restores its unacked messages, which builds a Redis client from that reference — now None:
   ``AttributeError: 'NoneType' object has no attribute 'hostname'``, raised past kombu's
   connection-error handling, and the worker exits "Unrecoverable error" for good. Ingestion's
   countdown refresh tasks make holding a message the usual state. :func:`install` makes that
   restore a logged no-op when the connection is already gone: the messages stay in the
   ``unacked`` hash (Redis keeps it, with ``--appendonly yes`` across restarts too) and the
   visibility timeout restores them, while the worker reconnects.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)
_INSTALLED = "_ett_restore_guard"


def install() -> None:
    """Guard ``kombu.transport.redis.QoS.restore_unacked`` (idempotent)."""
    from kombu.transport import redis as kombu_redis

    qos = kombu_redis.QoS
    if getattr(qos.restore_unacked, _INSTALLED, False):
        return
    original = qos.restore_unacked

    def restore_unacked(self: Any, client: Any = None) -> Any:
        transport = getattr(self.channel, "connection", None)
        if client is None and getattr(transport, "client", None) is None:
            held = len(self._delivered)
            if held:
                log.warning("broker connection already gone: %d unacknowledged message(s) "
                            "stay in the broker's unacked index; its visibility timeout "
                            "restores them", held)
            self._delivered.clear()
            return None
        return original(self, client)

    setattr(restore_unacked, _INSTALLED, True)
    qos.restore_unacked = restore_unacked  # type: ignore[method-assign]
