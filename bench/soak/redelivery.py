"""How long the messages a killed worker held took to reach a worker again (``worker_kill``).

Why from the workers' logs: they are the one record of both ends. At the kill, the victim's
log since its last start names every task it had received and not finished (a batch mid-
insert, a refresh waiting out its countdown): those messages were held, unacknowledged, by a
process that can no longer give them back. Redelivery is the first later line in any
worker's log (the victim's restart included) that receives the same task id again. On Redis
that takes the visibility timeout plus the restore scan; on RabbitMQ the dead connection
returns them at once.

Celery logs ``[YYYY-mm-dd HH:MM:SS,mmm: LEVEL/Process] Task NAME[ID] received`` in local
time, to the millisecond; a task's later lines (succeeded, raised, retry) name it the same
way. A worker that loses the broker (a broker restart, a cut network) holds nothing from
then on: the broker takes back what its connection held (Redis restores a closed channel's
unacknowledged messages, RabbitMQ requeues a dead connection's) and Celery drops its own
copies, countdowns waiting in its timer included. Those messages reach another worker
before any later kill, so they are not that kill's to bring back.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: A task's line: its time, and the task's name, id and what happened to it.
TASK_LINE = re.compile(
    r"^\[(?P<when>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(?P<ms>\d{3}): \w+/[^\]]+\] "
    r"Task (?P<name>[\w.]+)\[(?P<id>[0-9a-f-]{36})\] (?P<what>\w+)", re.MULTILINE)
#: What the rig writes before each start of a process into its log.
START_MARK = "\n==== start #"
#: What a worker's consumer logs when its broker connection is gone (see the module's doc).
CONNECTION_LOST = re.compile(r"^\[[^\]]+\] consumer: Connection to broker lost", re.MULTILINE)


@dataclass(frozen=True)
class Kill:
    """One worker_kill fault: whom, when (epoch seconds) and the tasks it held then."""

    worker: str
    at: float
    held: dict[str, str]  # task id -> task name


def held_tasks(log_text: str) -> dict[str, str]:
    """Task ids the worker received and never finished since its current run started or its
    consumer last lost the broker, whichever came later (id -> name)."""
    run = log_text[log_text.rfind(START_MARK) + 1:] if START_MARK in log_text else log_text
    losses = list(CONNECTION_LOST.finditer(run))
    if losses:
        run = run[losses[-1].end():]
    held: dict[str, str] = {}
    for line in TASK_LINE.finditer(run):
        if line["what"] == "received":
            held[line["id"]] = line["name"]
        else:
            held.pop(line["id"], None)
    return held


def received_at(log_texts: Iterable[str]) -> dict[str, list[float]]:
    """Every time each task id was received, over all the logs, in order."""
    seen: dict[str, list[float]] = {}
    for text in log_texts:
        for line in TASK_LINE.finditer(text):
            if line["what"] == "received":
                when = time.mktime(time.strptime(line["when"], "%Y-%m-%d %H:%M:%S"))
                seen.setdefault(line["id"], []).append(when + int(line["ms"]) / 1000)
    return {task: sorted(times) for task, times in seen.items()}


def measure(kills: list[Kill], logs: Iterable[Path]) -> dict[str, Any]:
    """The soak's figures: each held message's delay from the kill to its next receipt, the
    worst of them, and the held messages never received again."""
    seen = received_at(path.read_text(errors="replace") for path in logs)
    delays: list[float] = []
    not_back: list[str] = []
    per_kill: list[dict[str, Any]] = []
    for kill in kills:
        mine: list[float] = []
        for task, name in kill.held.items():
            later = [t for t in seen.get(task, []) if t >= kill.at]
            if later:
                mine.append(later[0] - kill.at)
            else:
                not_back.append(f"{name}[{task}]")
        delays += mine
        per_kill.append({"worker": kill.worker, "held": len(kill.held),
                         "worst_s": round(max(mine), 1) if mine else None})
    return {"worker_kill_redelivery_worst_s": round(max(delays), 1) if delays else None,
            "worker_kill_held_messages": len(delays) + len(not_back),
            "worker_kill_not_redelivered": not_back,
            "worker_kill_redelivery": per_kill}
