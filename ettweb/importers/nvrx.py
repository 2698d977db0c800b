"""NVIDIA resiliency extension (NVRx) launcher logs → schema-v1 events.

Why: ``ft_launcher`` (NVRx's fault-tolerant torchrun) restarts a job's workers in place, and
its profiler logs each step of that restart cycle, one line per event and node
(``nvidia_resiliency_ext/shared_utils/profiling.py``)::

    … profiling.py:95   - Cycle: 1 Event: failure_detected Node: node-b_4242_0 Rank: 1
    Time: 2026-03-02 08:30:00.000 UTC      (one line in the log)

``failure_detected`` increments the cycle before it is logged, so it and the following
``worker_terminated`` end attempt ``cycle - 1``; ``rendezvous_started/completed`` and
``worker_start_started/completed`` belong to attempt ``cycle`` (the restart count NVRx gives
its workers as ``TORCHELASTIC_RESTART_COUNT``). The rendezvous's run id (the line
``The node '…' has joined the rendezvous 'RUN' as rank R in a world of size W.``) is the job
id, as ``collector.identity`` takes torchrun's ``TORCHELASTIC_RUN_ID``: events a trainer
reports itself land in the same job. The log says when workers ran, not what they trained,
so this format makes no ``train`` spans: that time is left to the trainer's own events (alone,
it is ``unattributed``). Mapping table: ``docs/instrument.md``.
"""

from __future__ import annotations

import contextlib
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from ettweb.importers.common import UNATTRIBUTED, Options, Translation, mark, span, utc_seconds

FORMAT: Final = "nvrx"
#: The profiler's message; whatever the log handler put before it is ignored.
_PROFILING: Final = re.compile(
    r"Cycle:\s*(?P<cycle>\d+)\s+Event:\s*(?P<event>[a-z_]+)\s+Node:\s*(?P<node>\S+)\s+"
    r"Rank:\s*(?P<rank>\S+)\s+Time:\s*(?P<Y>\d{4})-(?P<m>\d\d)-(?P<d>\d\d) "
    r"(?P<H>\d\d):(?P<M>\d\d):(?P<S>\d\d)(?:\.(?P<f>\d+))?\s*UTC")
_JOINED: Final = re.compile(r"The node '(?P<node>[^']+)' has joined the rendezvous "
                            r"'(?P<run>[^']+)' as rank (?P<rank>\d+) in a world of size "
                            r"(?P<world>\d+)")
_NPROC: Final = re.compile(r"Using nproc_per_node=(?P<n>\d+)")
_PROGRESS: Final = re.compile(r"Training cycle #(?P<cycle>\d+) made (?:NO )?progress: "
                              r"(?P<start>\d+) \S+ (?P<end>\d+)")
#: The logger's own time (``%(asctime)s``, the node's local time) at the start of a line,
#: after an optional ``N: `` rank prefix.
_ASCTIME: Final = re.compile(r"^(?:\s*\d+:\s*)?(?P<Y>\d{4})-(?P<m>\d\d)-(?P<d>\d\d) "
                             r"(?P<H>\d\d):(?P<M>\d\d):(?P<S>\d\d),(?P<f>\d{3})")
_SUCCEEDED: Final = "worker group successfully finished"
_GAVE_UP: Final = ("Some rank(s) exited with non-zero exit code", "Agent run ended with exception",
                   "NVRx decided the job must not be restarted")
#: Paired events (``X_started`` … ``X_completed``) and the ETT phase of each.
PHASES: Final = {"rendezvous": "rendezvous", "worker_start": "container_start"}
FAILURE_DETECTED: Final = "failure_detected"
WORKER_TERMINATED: Final = "worker_terminated"
#: Logged by the rendezvous's pre-join hook: part of the rendezvous (its attrs).
HEALTH_CHECK: Final = "health_check_completed"
#: Local time is reported to a quarter of an hour (time zones are, nearly all).
_ZONE_STEP_S: Final = 900.0


@dataclass(frozen=True)
class _Profiled:
    line: int
    cycle: int
    event: str
    node: str
    rank: int | None
    ts: float


def _time(match: re.Match[str]) -> float:
    return utc_seconds(int(match["Y"]), int(match["m"]), int(match["d"]), int(match["H"]),
                       int(match["M"]), int(match["S"]), match["f"] or "")


class _Log:
    """What one pass over the lines found."""

    def __init__(self) -> None:
        self.profiled: list[_Profiled] = []
        self.ranks: dict[str, int] = {}
        self.runs: dict[str, str] = {}  # node -> the rendezvous run id it joined
        self.worlds: dict[str, int] = {}  # run id -> nodes
        self.nproc = 0
        self.offsets: list[float] = []  # local asctime minus UTC, per profiling line
        self.ends: list[tuple[float, str]] = []  # (local time, status) of the job's end
        self.progress: list[tuple[float, int, int]] = []  # (local time, cycle, iteration)

    def read(self, number: int, line: str, out: Translation) -> None:
        found = _PROFILING.search(line)
        local = _ASCTIME.search(line)
        if found:
            self._profiled(number, line, found, local, out)
        elif "Event:" in line and "Cycle:" in line:
            out.reject(number, line, "nvrx: profiling line without 'Cycle: N Event: NAME "
                                     "Node: NODE Rank: R Time: YYYY-MM-DD HH:MM:SS.fff UTC'")
        elif joined := _JOINED.search(line):
            run = joined["run"]
            self.runs.setdefault(joined["node"], run)
            self.ranks.setdefault(joined["node"], int(joined["rank"]))
            self.worlds[run] = max(self.worlds.get(run, 0), int(joined["world"]))
        elif nproc := _NPROC.search(line):
            self.nproc = int(nproc["n"])
        elif local and (progress := _PROGRESS.search(line)):
            when = self._local(number, line, local, out)
            if when is not None:
                self.progress.append((when, int(progress["cycle"]), int(progress["end"])))
        elif local and (_SUCCEEDED in line or any(text in line for text in _GAVE_UP)):
            when = self._local(number, line, local, out)
            if when is not None:
                self.ends.append((when, "completed" if _SUCCEEDED in line else "failed"))
        else:
            out.skipped += 1

    def _profiled(self, number: int, line: str, found: re.Match[str],
                  local: re.Match[str] | None, out: Translation) -> None:
        try:
            ts = _time(found)
        except ValueError as exc:
            out.reject(number, line, f"nvrx: bad Time ({exc})")
            return
        rank = int(found["rank"]) if found["rank"].isdigit() else None
        if rank is not None:
            self.ranks.setdefault(found["node"], rank)
        self.profiled.append(_Profiled(number, int(found["cycle"]), found["event"],
                                       found["node"], rank, ts))
        if local:
            with contextlib.suppress(ValueError):  # a bad local time: no offset from it
                self.offsets.append(_time(local) - ts)

    @staticmethod
    def _local(number: int, line: str, local: re.Match[str], out: Translation) -> float | None:
        try:
            return _time(local)
        except ValueError as exc:
            out.reject(number, line, f"nvrx: bad log time ({exc})")
            return None

    def zone_offset(self) -> float:
        """The nodes' local time minus UTC: the logger stamps lines in local time, the
        profiler in UTC, so a profiling line carries both."""
        if not self.offsets:
            return 0.0
        ordered = sorted(self.offsets)
        return round(ordered[len(ordered) // 2] / _ZONE_STEP_S) * _ZONE_STEP_S

    def rank_of(self, node: str) -> int:
        """A node's group rank; nodes never given one are numbered after the known ones."""
        if node not in self.ranks:
            self.ranks[node] = max(self.ranks.values(), default=-1) + 1
        return self.ranks[node]


def translate(lines: Iterable[str], options: Options) -> Translation:
    """Translate NVRx launcher logs (one node's, or several merged) into events.

    A node's events belong to the job of the rendezvous it joined; the job's end (and a
    cycle's training progress) is logged without a node: it goes to the job that had last
    started by then.
    """
    out = Translation()
    log = _Log()
    for number, line in enumerate(lines, start=1):
        out.lines += 1
        log.read(number, line, out)
    runs = set(log.runs.values())
    only = next(iter(runs)) if len(runs) == 1 else None
    by_job: dict[str, list[_Profiled]] = defaultdict(list)
    for event in log.profiled:
        by_job[options.job_or(log.runs.get(event.node, only))].append(event)
    builders: dict[str, _Builder] = {}
    for job, events in by_job.items():
        worlds = {log.worlds.get(log.runs.get(e.node, only or ""), 0) for e in events}
        world = max(worlds)
        gpus = world * log.nproc if world and log.nproc else options.gpus
        builders[job] = _Builder(log, job, gpus, out, events)
    firsts = sorted((min(e.ts for e in events), job) for job, events in by_job.items())
    offset = log.zone_offset()

    def running(local: float) -> _Builder | None:
        started = [job for first, job in firsts if first <= local - offset] or [
            job for _, job in firsts[:1]]
        return builders[started[-1]] if started else None

    for local, status in log.ends:
        if (builder := running(local)) is not None:
            builder.finished.append((local - offset, status))
    for local, cycle, iteration in log.progress:
        if (builder := running(local)) is not None:
            builder.progress[cycle] = iteration
    for job in sorted(builders):
        builders[job].build()
    return out


class _Builder:
    """The events of one log: spans per node, then one start and end mark per attempt."""

    def __init__(self, log: _Log, job: str, gpus: int, out: Translation,
                 events: list[_Profiled]) -> None:
        self.log, self.job, self.gpus, self.out, self.events = log, job, gpus, out, events
        self.finished: list[tuple[float, str]] = []  # (UTC time, status) of the job's end
        self.progress: dict[int, int] = {}  # cycle -> checkpoint iteration reached
        self.starts: dict[int, float] = {}  # attempt -> its earliest event
        self.ends: dict[int, float] = {}  # failed attempt -> its last node's termination
        self.detected: dict[int, tuple[float, str]] = {}  # failed attempt -> first detection

    def build(self) -> None:
        by_node: dict[str, list[_Profiled]] = defaultdict(list)
        for event in sorted(self.events, key=lambda e: (e.ts, e.line)):
            by_node[event.node].append(event)
        for node, events in sorted(by_node.items()):
            self._node(node, events)
        self._marks()

    def _span(self, attempt: int, phase: str, start: float, end: float, node: str,
              attrs: dict[str, Any]) -> None:
        self.out.events.append(span(FORMAT, self.job, attempt, phase, start, end,
                                    rank=self.log.rank_of(node), attrs=attrs))
        if phase != "failure":
            self.starts[attempt] = min(start, self.starts.get(attempt, start))

    def _node(self, node: str, events: list[_Profiled]) -> None:
        opened: dict[tuple[int, str], _Profiled] = {}
        checks: dict[int, _Profiled] = {}  # health checks inside an open rendezvous
        for event in events:
            name = event.event
            if name == FAILURE_DETECTED:
                opened[(event.cycle, name)] = event
            elif name == WORKER_TERMINATED:
                self._terminated(node, event, opened.pop((event.cycle, FAILURE_DETECTED), None))
            elif name.endswith("_started"):
                opened[(event.cycle, name.removesuffix("_started"))] = event
            elif name == HEALTH_CHECK and (event.cycle, "rendezvous") in opened:
                checks[event.cycle] = event  # the rendezvous's pre-join hook
            elif name.endswith("_completed") and (
                    began := opened.pop((event.cycle, name.removesuffix("_completed")), None)):
                base = name.removesuffix("_completed")
                phase = PHASES.get(base, UNATTRIBUTED)
                attrs: dict[str, Any] = {"node": node}
                if phase == UNATTRIBUTED:
                    attrs["source_event"] = base
                if base == "rendezvous" and event.cycle in checks:
                    attrs["health_check_s"] = round(checks.pop(event.cycle).ts - began.ts, 6)
                self._span(event.cycle, phase, began.ts, event.ts, node, attrs)
            else:
                self._unmapped(node, event)
        for event in [*opened.values(), *checks.values()]:  # never closed: kept, unmapped
            if event.event == FAILURE_DETECTED:
                self._failed(node, event, event.ts)
            else:
                self._unmapped(node, event)

    def _terminated(self, node: str, ended: _Profiled, detected: _Profiled | None) -> None:
        if detected is None:  # workers stopped with no failure before (NVRx decided to stop)
            self._unmapped(node, ended)
            return
        self._failed(node, detected, ended.ts)

    def _failed(self, node: str, detected: _Profiled, until: float) -> None:
        """``failure_detected`` (cycle c) to ``worker_terminated``: the teardown of attempt
        c - 1, which ends failed when the last node's workers are gone."""
        attempt = max(detected.cycle - 1, 0)
        self._span(attempt, "failure", detected.ts, until, node, {"node": node})
        self.ends[attempt] = max(until, self.ends.get(attempt, until))
        self.detected[attempt] = min((detected.ts, node),
                                     self.detected.get(attempt, (detected.ts, node)))

    def _unmapped(self, node: str, event: _Profiled) -> None:
        """An event with no ETT meaning here (``health_check_completed``, an unpaired start):
        kept as an empty ``unattributed`` span at its time, never dropped."""
        self._span(event.cycle, UNATTRIBUTED, event.ts, event.ts, node,
                   {"node": node, "source_event": event.event})

    def _marks(self) -> None:
        for attempt, ts in sorted(self.starts.items()):
            self.out.events.append(mark(FORMAT, self.job, attempt, "attempt_start", ts,
                                        attrs={"gpus": self.gpus}))
        for attempt, ts in sorted(self.ends.items()):
            attrs: dict[str, Any] = {"status": "failed", "reason": "nvrx failure_detected",
                                     "detected_by": self.detected[attempt][1]}
            if attempt in self.progress:
                attrs["checkpoint_iteration"] = self.progress[attempt]
            self.out.events.append(mark(FORMAT, self.job, attempt, "attempt_end", ts,
                                        attrs=attrs))
        attempts = sorted({*self.starts, *self.ends})
        if not attempts or attempts[-1] in self.ends or not self.finished:
            return
        ts, status = max(self.finished)
        attrs = {"status": status}
        if status == "failed":
            attrs["reason"] = "nvrx launcher gave up"
        self.out.events.append(mark(FORMAT, self.job, attempts[-1], "attempt_end", ts,
                                    attrs=attrs))
