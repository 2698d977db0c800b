"""Work a GET finds to do but may not do itself, sent to the worker by task name.

Why: a GET never writes (docs/architecture.md, "GETs never write"). A page that finds a job
without its rollup, a rollout without stored bootstrap draws, or a token whose last use is
worth recording answers from what it can read or compute in memory, and asks the worker for
the write. Sending a task is no database write; the worker's task is idempotent and checks
again before it writes, so a task sent twice costs a little work, never a wrong row.

Sends are remembered in this process for ``within_s`` seconds, so a page reloaded while the
worker is busy, or a pipeline calling the API in a loop, sends the task once rather than on
every request. A broker that refuses the send is logged, not raised: the page still answers,
and the next request asks again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

logger = logging.getLogger(__name__)

#: Sends remembered at most (the oldest are forgotten first).
_KEPT: Final = 4096
#: One quick retry on a stale broker connection, never a wait that would hold the page.
_RETRY_POLICY: Final = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2,
                        "interval_max": 0.2}
_SENT: OrderedDict[str, float] = OrderedDict()
_LOCK = threading.Lock()


def send_once(task: str, args: Sequence[Any], *, within_s: float,
              key: str | None = None) -> bool:
    """Send ``task`` (a Celery task name) with ``args`` (JSON values) unless this process
    sent it for the same ``key`` (default: the same arguments) in the last ``within_s``
    seconds; whether it was sent now."""
    sent = json.dumps([task, key if key is not None else list(args)], sort_keys=True)
    now = time.monotonic()
    with _LOCK:
        last = _SENT.get(sent)
        if last is not None and now - last < within_s:
            return False
        _SENT[sent] = now
        _SENT.move_to_end(sent)
        while len(_SENT) > _KEPT:
            _SENT.popitem(last=False)
    from ettweb.celery import app  # the app reads Django's settings: import on first send

    try:
        app.send_task(task, args=list(args), retry_policy=_RETRY_POLICY)
    except Exception:  # the broker is down: the page answers anyway, a later one asks again
        with _LOCK:
            if _SENT.get(sent) == now:
                del _SENT[sent]
        logger.warning("could not send %s%r to the worker", task, tuple(args), exc_info=True)
        return False
    return True

