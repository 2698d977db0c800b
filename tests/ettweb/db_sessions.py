"""A second database session for concurrency tests: work run in a thread of its own."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connections


def start_session(work: Callable[[], object], errors: list[BaseException], *,
                  name: str | None = None) -> threading.Thread:
    """Start ``work`` in a thread, which Django gives a database connection of its own
    (closed when the work ends); what it raises goes to ``errors``, for the test thread to
    assert empty (an exception in a thread would otherwise only be printed)."""

    def run() -> None:
        try:
            work()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread
