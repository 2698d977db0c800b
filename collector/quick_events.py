"""A Reporter's common events as compact records, and the JSON lines they are written as.

Why: the spans and heartbeats a trainer emits while it trains are the Reporter's hot path.
Once ``collector.schema`` has checked such an event's values (``quick_span_ok``,
``quick_mark_ok``), the caller queues a small tuple rather than the 12-key dict of the event:
a burst of emits then takes a fraction of the fresh memory pages, whose faults cost more than
the emit itself. The writer thread turns each record into its JSON line from text made once
per Reporter, a few times faster than encoding a dict, and the line is exactly what
``collector.schema.dump_event`` writes for the same event (values, and keys in the order
``validate_event`` leaves them).

A record is ``("span", id, phase, start, end, step_start, step_end, blocking, attrs)`` (the
steps None when the span has none, attrs None when empty) or ``("mark", id, mark, ts, step)``
(step None when absent).
"""

from __future__ import annotations

import json
from typing import Any

from collector.schema import dump_event

Record = tuple[Any, ...]


class LineTemplate:
    """The JSON text of one Reporter's records, its identity encoded once.

    An id is hex, and a phase or mark name that passed the quick checks uses only
    ``[a-z0-9_.-]``: none needs escaping. Floats are written by ``repr`` and ints by ``str``,
    as the JSON encoder writes them; attrs by the schema's encoder.
    """

    def __init__(self, job: str, attempt: int, rank: int, host: str) -> None:
        def head(kind: str, name: str) -> str:  # from the end of the id to the name's value
            return (f'","job":{json.dumps(job)},"attempt":{attempt},"kind":"{kind}",'
                    f'"rank":{rank},"host":{json.dumps(host)},"{name}":"')

        self._span_head = head("span", "phase")
        self._mark_head = head("mark", "mark")

    def line(self, record: Record) -> str:
        """The record's JSON line; ValueError for an int too long to write, as from json."""
        if record[0] == "span":
            return self._span(record)
        return self._mark(record)

    def _span(self, record: Record) -> str:
        _, event_id, phase, start, end, first, last, blocking, attrs = record
        steps = "" if first is None else f',"step_start":{first},"step_end":{last}'
        attrs_text = "{}" if attrs is None else dump_event(attrs)  # an object like an event
        return (f'{{"v":1,"id":"{event_id}{self._span_head}{phase}","start":{start!r},'
                f'"end":{end!r}{steps},"blocking":{"true" if blocking else "false"},'
                f'"attrs":{attrs_text}}}')

    def _mark(self, record: Record) -> str:
        _, event_id, mark, ts, step = record
        step_text = "" if step is None else f',"step":{step}'
        return (f'{{"v":1,"id":"{event_id}{self._mark_head}{mark}","ts":{ts!r}{step_text},'
                '"blocking":true,"attrs":{}}')
