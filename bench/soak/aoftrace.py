"""Where did a lost batch go? Follow event ids through a private Redis's append-only file.

Why: when the books say events are missing, the question is which hop lost them. The AOF
(``appendfsync always``) holds every write the broker acknowledged, in order: the agent's
``LPUSH`` of the batch, the pop that delivered it (a served ``BRPOP`` is written as a pop),
kombu's ``HSET unacked`` that makes it restorable, the ack's ``HDEL``, and any restore.
A batch that was pushed and popped but never entered ``unacked`` was lost between the
broker's reply and the worker's bookkeeping (the worker died with the reply unread).

``python -m bench.soak.aoftrace AOF_FILE ID [ID ...]`` prints those ids' fates (:func:`fates`) as
one JSON object.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any


def commands(data: bytes) -> Iterator[list[bytes]]:
    """The RESP arrays of an AOF file, in order (a torn tail ends the iteration)."""
    pos, size = 0, len(data)
    while pos < size:
        if data[pos:pos + 1] != b"*":
            newline = data.find(b"\n", pos)
            if newline == -1:
                return
            pos = newline + 1  # SELECT preamble, or a multi-part AOF's text: skip the line
            continue
        end = data.find(b"\r\n", pos)
        if end == -1:
            return
        count = int(data[pos + 1:end])
        pos = end + 2
        parts: list[bytes] = []
        for _ in range(count):
            end = data.find(b"\r\n", pos)
            if end == -1 or data[pos:pos + 1] != b"$":
                return
            length = int(data[pos + 1:end])
            pos = end + 2
            parts.append(data[pos:pos + length])
            pos += length + 2
        yield parts


def _batch_ids(payload: bytes) -> tuple[str, str, list[str]] | None:
    """(delivery tag, task name, event ids) of a kombu message, None if not a batch."""
    try:
        message = json.loads(payload)
        body = json.loads(base64.b64decode(message["body"]))
        task = str(message["headers"]["task"])
        tag = str(message["properties"]["delivery_tag"])
    except (ValueError, KeyError, TypeError):
        return None
    if task != "ett.ingest_batch":
        return tag, task, []
    ids = []
    for line in body[0][0]:
        try:
            ids.append(str(json.loads(line.rsplit("\t", 1)[0])["id"]))
        except (ValueError, KeyError, TypeError):
            continue
    return tag, task, ids


def fates(aof: Path, missing: set[str]) -> dict[str, Any]:
    """For events the books say are missing: which were ever published to the broker, and
    what became of each message that carried one (by its last push):

    ``popped_never_unacked``: pushed, then taken by a consumer that never recorded it in
    kombu's ``unacked`` hash (so nothing can restore it) — the consumer died or shut down
    with the pop's reply unread; ``acked_not_stored``: recorded and acknowledged, yet not
    stored (a worker bug); ``still_unacked``: waiting for a restore; ``queued``: pushed and
    never taken. Missing events never published were lost (or counted) before the broker.
    """
    last_push: dict[str, int] = {}
    carried: dict[str, int] = {}
    hset: dict[str, list[int]] = {}
    hdel: dict[str, list[int]] = {}
    pops = 0
    for index, parts in enumerate(commands(aof.read_bytes())):
        name = parts[0].upper()
        if name in (b"LPUSH", b"RPUSH"):
            for payload in parts[2:]:
                found = _batch_ids(payload)
                if found is None:
                    continue
                tag, _task, ids = found
                hits = sum(1 for event_id in ids if event_id in missing)
                if hits or tag in carried:
                    carried[tag] = max(carried.get(tag, 0), hits)
                    last_push[tag] = index
        elif name in (b"RPOP", b"LPOP"):
            pops += 1
        elif name == b"HSET" and parts[1] == b"unacked":
            hset.setdefault(parts[2].decode(), []).append(index)
        elif name == b"HDEL" and parts[1] == b"unacked":
            for raw_tag in parts[2:]:
                hdel.setdefault(raw_tag.decode(), []).append(index)
    verdicts: dict[str, int] = {}
    for tag, pushed_at in last_push.items():
        recorded = [i for i in hset.get(tag, []) if i > pushed_at]
        if not recorded:
            verdict = "popped_never_unacked" if pops else "queued"
        elif any(i > recorded[-1] for i in hdel.get(tag, [])):
            verdict = "acked_not_stored"
        else:
            verdict = "still_unacked"
        verdicts[verdict] = verdicts.get(verdict, 0) + carried[tag]
    published = sum(carried.values())
    return {"missing_published": published, "missing_never_published": len(missing) - published,
            "published_fates": verdicts, "messages": len(last_push)}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(fates(Path(args[0]), set(args[1:]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
