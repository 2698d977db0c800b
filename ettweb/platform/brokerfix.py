"""Three things a worker needs from the broker that Celery and kombu do not give by default.

1. **A killed worker's batch comes back within two minutes, not an hour.** With late acks on
   Redis a delivered message sits in kombu's ``unacked`` hash until the worker acks it. A
   worker that shuts down cleanly puts it back; one killed with ``kill -9`` cannot, and then
   only the *visibility timeout* brings it back: any worker's event loop restores messages
   older than that. kombu's default is 3,600 s, so a batch of a killed worker went missing
   for an hour (and kombu 5.7 scans only on every 10th 10-s tick). Settings set the timeout to
   ``ETT_BROKER_VISIBILITY_TIMEOUT_S`` (90 s) and scan on every tick, so such a batch is back
   within the timeout plus 10 s. A message a live worker holds longer than that (a task waiting
   out a database outage, a long refresh, a countdown) is not handed to another worker: the
   worker re-scores what it holds every third of the timeout (``ettweb.platform.visibility``).

2. **A Redis outage while a message is held does not kill the worker** (celery 5.7.0, kombu
   5.7.0, redis-py 8.1.0). On a lost connection the consumer first collects the connection
   (which drops the transport's reference to its client), then closes it; closing the channel
   restores its unacked messages, which builds a Redis client from that reference — now None:
   ``AttributeError: 'NoneType' object has no attribute 'hostname'``, raised past kombu's
   connection-error handling, and the worker exits "Unrecoverable error" for good. Ingestion's
   countdown refresh tasks make holding a message the usual state. :func:`install` makes that
   restore a logged no-op when the connection is already gone: the messages stay in the
   ``unacked`` hash (Redis keeps it, with ``--appendonly yes`` across restarts too) and the
   visibility timeout restores them, while the worker reconnects. The same holds for an ack or
   reject of a message the pool finished during the outage: after the reconnect the old
   channel may be closed (no pool, no connection), and kombu's ack raised the same kind of
   ``AttributeError`` (the worker exited). That ack is now skipped with a warning; the message
   stays in the broker and comes back after the visibility timeout, to an idempotent task.

3. **A delivered message is in the unacked hash before it leaves Redis.** kombu delivers with
   ``BRPOP`` and records the message as unacknowledged only after the reply is parsed, in a
   second round trip. A message between the two lives only in a socket buffer: a worker killed
   then (or one whose BRPOP reply waits, paused, for prefetch credit), a connection dropped or a
   Redis killed after the pop, and the message is gone with nothing left to restore
   (celery/celery#7950; ``python -m bench.soak`` traced such batches to a pop with no unacked
   entry in the AOF). :func:`install` replaces the BRPOP with one Lua script that pops *and*
   records the message in ``unacked``/``unacked_index`` atomically — in one AOF transaction —
   so after any crash it is either still queued or restorable. A script cannot block, so an
   idle channel polls every :data:`POLL_S` seconds instead of waiting server-side: at most that
   much added latency, and a few cheap calls a second per idle worker. Channels that consume a
   queue without acks (which nobody restores) and key-prefixed clients keep kombu's BRPOP.
"""

from __future__ import annotations

import logging
from time import monotonic, time
from typing import Any, Final

log = logging.getLogger(__name__)
_INSTALLED = "_ett_restore_guard"

#: How often an idle channel asks Redis for a message (seconds).
POLL_S = 0.1

#: Pop the first message of KEYS (in BRPOP's order) and record it as unacknowledged exactly as
#: kombu's ``QoS.append`` does (``unacked[tag] = [payload, exchange, routing_key]``, the index
#: scored with the client's clock), in one atomic step. A message without a delivery tag is
#: returned unrecorded, as BRPOP would have (kombu then records it itself).
POP_AND_HOLD = """
local unacked, index, now = ARGV[1], ARGV[2], ARGV[3]
for i = 1, #KEYS do
  local item = redis.call('RPOP', KEYS[i])
  if item then
    local ok, payload = pcall(cjson.decode, item)
    if ok and type(payload) == 'table' and type(payload.properties) == 'table' then
      local properties = payload.properties
      local tag = properties.delivery_tag
      local info = properties.delivery_info
      if type(tag) == 'string' and type(info) == 'table' then
        redis.call('ZADD', index, now, tag)
        redis.call('HSET', unacked, tag, '[' .. item .. ',' .. cjson.encode(info.exchange)
                   .. ',' .. cjson.encode(info.routing_key) .. ']')
      end
    end
    return {KEYS[i], item}
  end
end
return false
"""


#: The kombu release series the guards were written against and tested with; pyproject.toml
#: pins kombu to it. Another release may move what the guards replace (private methods).
TESTED_KOMBU: Final = "5.7"

#: The private kombu callables the guards wrap or stand in for, and the restore scan the
#: heartbeat (``ettweb.platform.visibility``) keeps live workers' messages from, with their
#: parameters: (class name in ``kombu.transport.redis``, method) -> parameter names.
SIGNATURES: Final[dict[tuple[str, str], tuple[str, ...]]] = {
    ("QoS", "restore_unacked"): ("self", "client"),
    ("QoS", "ack"): ("self", "delivery_tag"),
    ("QoS", "reject"): ("self", "delivery_tag", "requeue"),
    ("QoS", "append"): ("self", "message", "delivery_tag"),
    ("Channel", "_brpop_start"): ("self", "timeout"),
    ("Channel", "_brpop_read"): ("self", "options"),
    ("Channel", "basic_consume"): ("self", "queue", "args", "kwargs"),
    ("Channel", "_q_for_pri"): ("self", "queue", "pri"),
    ("Transport", "register_with_event_loop"): ("self", "connection", "loop"),
    ("QoS", "restore_visible"): ("self", "start", "num", "interval"),
}
#: Attributes of ``Channel`` the replacement delivery and the heartbeat read.
CHANNEL_ATTRIBUTES: Final = ("unacked_key", "unacked_index_key", "priority_steps",
                             "global_keyprefix", "client", "visibility_timeout",
                             "conn_or_acquire")
#: Attributes of ``QoS`` the heartbeat reads: the delivered tags and those settled since.
QOS_ATTRIBUTES: Final = ("_delivered", "_dirty")
#: Text each original method's source must still hold: what the guards assume it does.
SOURCE_FACTS: Final[dict[tuple[str, str], tuple[str, ...]]] = {
    # POP_AND_HOLD writes the unacked record in append's layout, under append's keys.
    ("QoS", "append"): ("self.unacked_index_key", "self.unacked_key",
                        "dumps([message._raw, EX, RK])"),
    # The replacement sends the poll as kombu's does and marks the connection in a poll.
    ("Channel", "_brpop_start"): ("self._in_poll = self.client.connection",
                                  "self._queue_cycle.consume(len(self.active_queues))",
                                  "send_command"),
    # The guarded ack falls back to the plain virtual QoS ack for an unknown tag.
    ("QoS", "ack"): ("super().ack(delivery_tag)",),
    # The heartbeat re-scores the index with the time: the scan restores by that score.
    ("QoS", "restore_visible"): ("ceil = time() - self.visibility_timeout",
                                 "self.unacked_index_key, ceil, 0"),
}
#: The originals, as they were before :func:`install` replaced them (the check reads these).
_ORIGINALS: dict[tuple[str, str], Any] = {}


def install() -> None:
    """Install the three guards on kombu's Redis transport (idempotent). A kombu whose
    internals no longer look as the guards expect (:func:`shape_problems`) is refused with
    what changed: patching it blind could lose messages."""
    from kombu.transport import redis as kombu_redis

    qos = kombu_redis.QoS
    if getattr(qos.restore_unacked, _INSTALLED, False):
        return
    problems = shape_problems()
    if problems:
        raise RuntimeError("ettweb.platform.brokerfix cannot guard this kombu: "
                           + "; ".join(problems))
    for cls_name, method in SIGNATURES:
        _ORIGINALS[(cls_name, method)] = getattr(getattr(kombu_redis, cls_name), method)
    _guard_restore(qos)
    _guard_ack(qos)
    _hold_on_pop(kombu_redis.Channel, kombu_redis.Transport)


def shape_problems() -> list[str]:
    """What the guards rely on in kombu and do not find, one line each (empty: all there):
    the release series, each wrapped method's parameters, the channel's and the QoS's
    attributes, and the facts of :data:`SOURCE_FACTS`. Read from the originals once the guards
    are installed."""
    import inspect

    import kombu
    from kombu.transport import redis as kombu_redis

    problems = []
    version = str(getattr(kombu, "__version__", "unknown"))
    if not version.startswith(f"{TESTED_KOMBU}."):
        problems.append(f"kombu {version} is installed; the guards were tested with "
                        f"{TESTED_KOMBU}.x (pyproject.toml pins it)")
    for (cls_name, method), expected in SIGNATURES.items():
        original = _ORIGINALS.get((cls_name, method),
                                  getattr(getattr(kombu_redis, cls_name), method, None))
        if original is None:
            problems.append(f"kombu.transport.redis.{cls_name}.{method} is gone")
            continue
        found = tuple(inspect.signature(original).parameters)
        if found != expected:
            problems.append(f"kombu.transport.redis.{cls_name}.{method} takes {found}, "
                            f"not {expected}")
        for fact in SOURCE_FACTS.get((cls_name, method), ()):
            if fact not in inspect.getsource(original):
                problems.append(f"kombu.transport.redis.{cls_name}.{method} no longer does "
                                f"{fact!r}")
    problems += [f"kombu.transport.redis.Channel.{name} is gone" for name in CHANNEL_ATTRIBUTES
                 if not hasattr(kombu_redis.Channel, name)]
    problems += [f"kombu.transport.redis.QoS.{name} is gone" for name in QOS_ATTRIBUTES
                 if not hasattr(kombu_redis.QoS, name)]
    return problems


def _connection_gone(qos: Any) -> bool:
    """The channel of ``qos`` has lost its transport connection (closed after an outage)."""
    transport = getattr(qos.channel, "connection", None)
    return getattr(transport, "client", None) is None


def _guard_restore(qos: Any) -> None:
    original = qos.restore_unacked

    def restore_unacked(self: Any, client: Any = None) -> Any:
        if client is None and _connection_gone(self):
            held = len(self._delivered)
            if held:
                log.warning("broker connection already gone: %d unacknowledged message(s) "
                            "stay in the broker's unacked index; its visibility timeout "
                            "restores them", held)
            self._delivered.clear()
            return None
        return original(self, client)

    setattr(restore_unacked, _INSTALLED, True)
    qos.restore_unacked = restore_unacked


def _guard_ack(qos: Any) -> None:
    from kombu.transport import virtual

    original_ack, original_reject = qos.ack, qos.reject

    def _settle(self: Any, what: str, delivery_tag: str, call: Any) -> Any:
        try:
            return call()
        except AttributeError:
            # Only a closed channel makes kombu raise this (its pool and connection are None);
            # anything else is a bug of ours or kombu's and must not be swallowed.
            if not (self.channel.closed or _connection_gone(self)):
                raise
            log.warning("%s after the broker connection closed: message %s stays in the "
                        "broker and comes back after the visibility timeout", what,
                        delivery_tag)
            return virtual.QoS.ack(self, delivery_tag)

    def ack(self: Any, delivery_tag: str) -> Any:
        return _settle(self, "ack", delivery_tag, lambda: original_ack(self, delivery_tag))

    def reject(self: Any, delivery_tag: str, requeue: bool = False) -> Any:
        return _settle(self, "reject", delivery_tag,
                       lambda: original_reject(self, delivery_tag, requeue))

    qos.ack, qos.reject = ack, reject


def _hold_on_pop(channel_class: Any, transport_class: Any) -> None:
    """Deliver with :data:`POP_AND_HOLD` instead of BRPOP (see the module's point 3)."""
    original_start, original_consume = channel_class._brpop_start, channel_class.basic_consume
    original_register = transport_class.register_with_event_loop

    def basic_consume(self: Any, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        if no_ack:
            self._ett_no_ack = True  # nobody restores such a message: recording it is wrong
        return original_consume(self, queue, no_ack, *args, **kwargs)

    def _brpop_start(self: Any, timeout: float | None = None) -> None:
        if getattr(self, "_ett_no_ack", False) or self.global_keyprefix:
            return original_start(self, timeout)
        if monotonic() - getattr(self, "_ett_empty_at", float("-inf")) < POLL_S:
            return None  # polled empty a moment ago; the event loop comes back within POLL_S
        queues = self._queue_cycle.consume(len(self.active_queues))
        if not queues:
            return None
        keys = [self._q_for_pri(queue, pri) for pri in self.priority_steps for queue in queues]
        self._in_poll = self.client.connection
        self._brpop_sent_at = monotonic()
        self.client.connection.send_command(
            "EVAL", POP_AND_HOLD, len(keys), *keys,
            self.unacked_key, self.unacked_index_key, repr(time()))
        return None

    original_read = channel_class._brpop_read

    def _brpop_read(self: Any, **options: Any) -> Any:
        try:
            return original_read(self, **options)
        except Exception:
            self._ett_empty_at = monotonic()  # Empty (nothing queued) or a connection error
            raise

    def register_with_event_loop(self: Any, connection: Any, loop: Any) -> Any:
        result = original_register(self, connection, loop)
        # A timer keeps the event loop ticking at least every POLL_S, so an idle channel's
        # next poll is sent on time even when no socket becomes readable.
        tref = getattr(self.cycle, "_ett_poll_tref", None)
        if tref is not None:
            tref.cancel()
        self.cycle._ett_poll_tref = loop.call_repeatedly(POLL_S, _tick)
        return result

    channel_class.basic_consume = basic_consume
    channel_class._brpop_start = _brpop_start
    channel_class._brpop_read = _brpop_read
    transport_class.register_with_event_loop = register_with_event_loop


def _tick() -> None:
    """Nothing to do: firing at all is what wakes the event loop."""
