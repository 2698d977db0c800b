"""Cleanup for tests that give their workers a private queue on the shared broker."""

from __future__ import annotations

import contextlib

from celery import Celery
from kombu import Exchange, Queue


def delete_queue(app: Celery, name: str) -> None:
    """Drop a private queue with whatever a run left in it (a stopped worker requeues its
    delayed refresh tasks; a failed run leaves batches), so runs leave nothing behind.

    The queue is declared as ``send_task`` declared it first: kombu's redis transport only
    deletes the bindings it knows about.
    """
    with contextlib.suppress(Exception), app.connection_for_write() as conn:
        bound = Queue(name, Exchange(name), routing_key=name).bind(conn.default_channel)
        bound.declare()
        bound.delete()
