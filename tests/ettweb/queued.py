"""What the web side queued for the worker: the tasks waiting on the test broker's default
queue, read (and removed) as a worker would receive them.

No worker consumes the default queue during tests (the ones the tests start listen on
private queues), so what a GET sent there stays until a test drains it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ettweb.celery import app


@dataclass(frozen=True)
class QueuedTask:
    """One task message: its name and positional arguments (JSON, so lists)."""

    name: str
    args: list[Any]

    def run(self) -> Any:
        """Run it here, by name, as the worker that received it would."""
        app.loader.import_default_modules()  # a worker's start finds every ettweb/*/tasks.py
        return app.tasks[self.name](*self.args)


def drain_queued() -> list[QueuedTask]:
    """Every task waiting on the default queue, oldest first; the queue is left empty."""
    found: list[QueuedTask] = []
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue(app.conf.task_default_queue)
        try:
            while True:
                try:
                    message = queue.get(block=False)
                except queue.Empty:
                    return found
                args, _, _ = message.decode()
                found.append(QueuedTask(message.headers["task"], list(args)))
                message.ack()
        finally:
            queue.close()
