"""Tasks that only fail when the database is away wait for it, holding their message.

With ``task_acks_late`` a task that *raises* is still acknowledged, so a database outage
would lose its work. Celery's own retry (``autoretry_for``) is no answer: it acknowledges the
message after publishing a copy of it, and that copy is where batches were lost.
``python -m bench.soak``'s long runs found it both ways:

- With the broker down as well, the copy cannot be sent, and Celery then *rejects* the
  original without requeueing it (``Task.retry`` raises ``Reject(requeue=False)``): gone.
- On RabbitMQ the worker publishes without confirms, so a copy written while the broker
  restarts or blocks publishing (a memory alarm) can vanish after the original was acked.

So the task retries *in place*. On a connection error it drops the broken connections,
sleeps with backoff and jitter (0.5 s doubling to 30 s), and runs again, without limit. The
message stays unacknowledged in the broker all the while: a worker killed meanwhile leaves it
to be delivered again, RabbitMQ at once, Redis after its visibility timeout. A Redis outage
longer than that timeout hands it to another worker too, which is harmless: every ETT task
is idempotent. Bad data never raises (it is quarantined), so waiting is only ever about the
database.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import InterfaceError, OperationalError, connections

logger = logging.getLogger(__name__)
RETRY_INITIAL_S = 0.5
RETRY_MAX_S = 30.0
DATABASE_ERRORS = (OperationalError, InterfaceError)
Task = TypeVar("Task", bound=Callable[..., Any])


def waits_for_database(func: Task) -> Task:
    """Run ``func`` until it gets through without a database connection error."""

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        if _called_directly():  # an in-process caller (ett_import, a test) gets the error
            return func(*args, **kwargs)
        delay, failures = RETRY_INITIAL_S, 0
        while True:
            try:
                return func(*args, **kwargs)
            except DATABASE_ERRORS as exc:
                failures += 1
                _drop_connections()
                wait = random.uniform(delay / 2, delay)
                logger.warning("%s: database away (%s: %s); try %d failed, trying again in "
                               "%.1f s with the message held", func.__name__,
                               type(exc).__name__, str(exc).splitlines()[0][:200], failures,
                               wait)
                time.sleep(wait)
                delay = min(delay * 2, RETRY_MAX_S)

    return run  # type: ignore[return-value]


def _called_directly() -> bool:
    """Whether this run is a plain function call rather than a worker executing a message."""
    from celery import current_task

    if not current_task:  # a proxy: false outside any task
        return True
    return bool(getattr(current_task.request, "called_directly", True))


def _drop_connections() -> None:
    """Close every database connection of this thread: the next query opens a new one."""
    for connection in connections.all(initialized_only=True):
        with contextlib.suppress(OperationalError, InterfaceError):
            connection.close()
