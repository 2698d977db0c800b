"""Putting the collector agent's batches and health reports on the broker.

Why it works this way: it publishes by task *name* (``ett.ingest_batch``,
``ett.collector_health``) through a bare Celery app, so the node needs neither Django nor the
web code, and JSON is the only serializer. A publish returns only once the broker has the
message (publisher confirms on AMQP; on Redis the push has returned), which is what lets the
agent commit. Messages are signed (``collector.auth``) when the node has a credential. It
never retries: the agent owns the retry loop.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

from collector.auth import health_body, sign_batch
from collector.config import AgentConfig

TASK_NAME = "ett.ingest_batch"
HEALTH_TASK_NAME = "ett.collector_health"


class Publisher(Protocol):
    """What the agent needs of a broker: a test hands the agent its own."""

    def publish(self, lines: list[str]) -> None: ...
    def publish_health(self, stats: dict[str, Any]) -> None: ...
    def reset(self) -> None: ...
    def close(self) -> None: ...


class CeleryPublisher:
    """Sends batches as the Celery task ``ett.ingest_batch`` by name, JSON only.

    It dials its own kombu connection rather than the app's pool: Celery lets an exported
    CELERY_BROKER_URL override the app's broker, and the agent must use the URL it was given
    (``--broker`` wins over the environment), with the password from its file beside it.
    Celery's publish retry is off and kombu connects once per try (``max_retries: 0``): the
    agent owns the retry loop, so a stop request is honoured between tries and the backoff
    is ours to log. Where a message goes on the wire is :func:`publish_route`.
    """

    def __init__(self, config: AgentConfig) -> None:
        import celery  # deferred: ``--help`` and config errors answer without loading Celery

        self.config = config
        self.app = celery.Celery("ett-collector", set_as_current=False)
        self.app.conf.update(task_serializer="json", accept_content=["json"])
        self.connection = self._connect()

    def _connect(self) -> Any:
        from kombu import Connection

        return Connection(self.config.broker_url, password=self.config.broker_password,
                          connect_timeout=self.config.publish_timeout_s,
                          transport_options=transport_options(self.config))

    def publish(self, lines: list[str]) -> None:
        """Return only once the broker has the batch; raise on any broker error."""
        self._send(TASK_NAME, [lines, self.config.source, self._auth(lines)])

    def publish_health(self, stats: dict[str, Any]) -> None:
        """Send the health counters as ``ett.collector_health``, signed like a batch over
        this node's name and the counters (``collector.auth.health_body``)."""
        signed = [health_body(self.config.source, stats)]
        self._send(HEALTH_TASK_NAME, [self.config.source, stats, self._auth(signed)])

    def _auth(self, lines: list[str]) -> dict[str, object] | None:
        cfg = self.config
        if cfg.collector_id is None or cfg.collector_secret is None:
            return None
        return sign_batch(cfg.collector_id, cfg.collector_secret, lines)

    def _send(self, task: str, args: list[Any]) -> None:
        timeout = self.config.publish_timeout_s
        self.app.send_task(task, args=args, queue=self.config.queue,
                           connection=self.connection, retry=False, serializer="json",
                           timeout=timeout, confirm_timeout=timeout,
                           **publish_route(self.config))

    def reset(self) -> None:
        """After an error, drop the connection: the next try dials the broker afresh."""
        self.close()
        self.connection = self._connect()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.connection.close()


def publish_route(config: AgentConfig) -> dict[str, Any]:
    """Where a message goes on AMQP: to the exchange named like the queue (the one Celery
    binds the queue to), declaring nothing, and mandatory.

    A training node's broker user may only write to that exchange
    (docs/how-to/secure-the-broker.md). Declaring takes RabbitMQ's configure permission, which
    that user lacks, and Celery's default route, the nameless exchange, reaches every queue by
    name (the workers' control queues too), so it is not granted. Since nothing is declared,
    ``mandatory`` makes a message that no queue is bound to take fail (the agent retries it)
    instead of vanishing.
    Redis has no such permissions: there Celery's default stays (declare, publish by name).
    """
    if not config.is_amqp:
        return {}
    return {"exchange": config.queue, "routing_key": config.queue, "declare": [],
            "mandatory": True}


def transport_options(config: AgentConfig) -> dict[str, Any]:
    """Broker transport options: confirms on AMQP, bounded socket waits everywhere."""
    options: dict[str, Any] = {"max_retries": 0}
    if config.is_amqp:
        options["confirm_publish"] = True
    else:
        options["socket_connect_timeout"] = config.publish_timeout_s
        options["socket_timeout"] = config.publish_timeout_s
    return options
