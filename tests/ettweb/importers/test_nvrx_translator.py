"""The NVRx translator on its own: the restart cycle's lines, what it cannot read (kept with a
reason), what it cannot map (an ``unattributed`` span), and what is no event (counted)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from ettweb.importers.common import Options
from ettweb.importers.nvrx import translate

T0 = datetime(2026, 3, 2, 8, tzinfo=UTC)


def _stamp(seconds: float, fmt: str) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime(fmt)[:-3]


def prof(cycle: int, event: str, seconds: float, node: str = "n0_1_0", rank: str = "None",
         local_offset_h: float = 0.0) -> str:
    """A profiling line as NVRx's LogManager writes it; the logger's own time may be local."""
    local = _stamp(seconds + local_offset_h * 3600, "%Y-%m-%d %H:%M:%S,%f")
    return (f"{local} [INFO] [host] [workload:?(?) infra:0(?)] profiling.py:93   - "
            f"Cycle: {cycle} Event: {event} Node: {node} Rank: {rank} "
            f"Time: {_stamp(seconds, '%Y-%m-%d %H:%M:%S.%f')} UTC")


def log(seconds: float, message: str, local_offset_h: float = 0.0) -> str:
    local = _stamp(seconds + local_offset_h * 3600, "%Y-%m-%d %H:%M:%S,%f")
    return f"{local} [INFO] [host] [workload:?(?) infra:0(?)] launcher.py:1 {message}"


def _at(seconds: float) -> float:
    return T0.timestamp() + seconds


def _cycle(offset_h: float = 0.0) -> list[str]:
    return [prof(0, "rendezvous_started", 1.0, local_offset_h=offset_h),
            prof(0, "rendezvous_completed", 3.0, local_offset_h=offset_h),
            prof(0, "worker_start_started", 3.5, rank="0", local_offset_h=offset_h),
            prof(0, "worker_start_completed", 5.0, rank="0", local_offset_h=offset_h)]


def _phases(events: list[dict[str, Any]]) -> list[tuple[int, str, float, float]]:
    return sorted((e["attempt"], e["phase"], e["start"] - _at(0), e["end"] - _at(0))
                  for e in events if e["kind"] == "span")


def _marks(events: list[dict[str, Any]]) -> list[tuple[int, str, float, str]]:
    return sorted((e["attempt"], e["mark"], e["ts"] - _at(0), e.get("attrs", {}).get("status", ""))
                  for e in events if e["kind"] == "mark")


def test_a_restart_cycle_becomes_two_attempts() -> None:
    lines = [*_cycle(), prof(1, "failure_detected", 100.0, rank="0"),
             prof(1, "worker_terminated", 110.0, rank="0"),
             prof(1, "rendezvous_started", 111.0), prof(1, "rendezvous_completed", 115.0),
             log(200.0, "[default] worker group successfully finished. Waiting 300 seconds")]
    out = translate(lines, Options(source="launcher.log"))
    assert _phases(out.events) == [(0, "container_start", 3.5, 5.0), (0, "failure", 100.0, 110.0),
                                   (0, "rendezvous", 1.0, 3.0), (1, "rendezvous", 111.0, 115.0)]
    assert _marks(out.events) == [(0, "attempt_end", 110.0, "failed"),
                                  (0, "attempt_start", 1.0, ""),
                                  (1, "attempt_end", 200.0, "completed"),
                                  (1, "attempt_start", 111.0, "")]
    assert {e["job"] for e in out.events} == {"launcher"}  # no rendezvous line: the file
    assert (out.lines, out.skipped, out.rejected, out.unattributed) == (9, 0, [], 0)


def test_the_logger_local_time_is_read_through_the_profilers_utc() -> None:
    """The logger stamps local time, the profiler UTC: a job's end logged at 10:03:20 local
    (UTC+2) ends at 08:03:20 UTC."""
    lines = [*_cycle(offset_h=2.0),
             log(200.0, "[default] worker group successfully finished.", local_offset_h=2.0)]
    out = translate(lines, Options())
    assert (0, "attempt_end", 200.0, "completed") in _marks(out.events)


def test_a_bad_line_is_rejected_with_its_reason_and_the_rest_is_translated() -> None:
    bad_time = prof(0, "rendezvous_started", 1.0).replace("08:00:01.000", "08:00:61.000")
    no_node = "x - Cycle: 0 Event: rendezvous_started Rank: None Time: 2026-03-02 UTC"
    out = translate([bad_time, no_node, *_cycle()[1:]], Options())
    assert [(r.line, r.reason.split(" (")[0]) for r in out.rejected] == [
        (1, "nvrx: bad Time"), (2, "nvrx: profiling line without 'Cycle: N Event: NAME Node: "
                                   "NODE Rank: R Time: YYYY-MM-DD HH:MM:SS.fff UTC'")]
    assert out.rejected[1].raw == no_node
    # the rendezvous lost its start: its completion is kept as an unmapped event
    assert (0, "unattributed", 3.0, 3.0) in _phases(out.events)
    assert (0, "container_start", 3.5, 5.0) in _phases(out.events)


def test_unknown_events_are_unattributed_spans_and_other_lines_are_counted() -> None:
    lines = [*_cycle(), prof(0, "attribution_get_started", 20.0),
             prof(0, "attribution_get_completed", 26.0), prof(0, "brand_new_event", 30.0),
             prof(0, "rendezvous_started", 40.0),  # never completed
             log(1.0, "Stopping workers... Timeout = 30 sec."), "a traceback line", ""]
    out = translate(lines, Options())
    unmapped = [(e["start"] - _at(0), e["end"] - _at(0), e["attrs"]["source_event"])
                for e in out.events if e.get("phase") == "unattributed"]
    assert sorted(unmapped) == [(20.0, 26.0, "attribution_get"),
                                (30.0, 30.0, "brand_new_event"),
                                (40.0, 40.0, "rendezvous_started")]
    assert (out.unattributed, out.skipped, out.lines) == (3, 3, len(lines))


def test_health_checks_belong_to_their_rendezvous() -> None:
    lines = [prof(0, "rendezvous_started", 1.0), prof(0, "health_check_completed", 2.5),
             prof(0, "rendezvous_completed", 3.0), prof(0, "health_check_completed", 9.0)]
    out = translate(lines, Options())
    rendezvous = next(e for e in out.events if e.get("phase") == "rendezvous")
    assert rendezvous["attrs"]["health_check_s"] == 1.5
    assert _phases(out.events) == [(0, "rendezvous", 1.0, 3.0), (0, "unattributed", 9.0, 9.0)]


def test_job_gpus_and_ids_come_from_the_log_unless_given() -> None:
    lines = [*_cycle(), log(0.0, "Using nproc_per_node=8."),
             log(3.0, "The node 'n0_1_0' has joined the rendezvous 'run-42' as rank 0 in a "
                      "world of size 3.")]
    out = translate(lines, Options(gpus=2))
    start = next(e for e in out.events if e.get("mark") == "attempt_start")
    assert (start["job"], start["attrs"]["gpus"]) == ("run-42", 24)
    assert {e["job"] for e in translate(lines, Options(job="mine")).events} == {"mine"}
    assert translate(lines[:4], Options(gpus=2)).events[-1]["attrs"]["gpus"] == 2
    shuffled = list(lines)
    random.Random(7).shuffle(shuffled)  # merged logs of many nodes: order does not matter
    assert sorted(e["id"] for e in translate(shuffled, Options(gpus=2)).events) == sorted(
        e["id"] for e in out.events)


def test_a_failure_without_teardown_or_a_launcher_that_gives_up_ends_failed() -> None:
    lines = [*_cycle(), prof(1, "failure_detected", 50.0, rank="0")]
    assert (0, "attempt_end", 50.0, "failed") in _marks(translate(lines, Options()).events)
    gave_up = [*_cycle(), log(70.0, "Some rank(s) exited with non-zero exit code: {0: 1}. "
                                    "Agent's exit code = 1")]
    assert (0, "attempt_end", 70.0, "failed") in _marks(translate(gave_up, Options()).events)


def test_two_jobs_in_one_log_are_told_apart_by_their_rendezvous() -> None:
    """A node's events go to the run it joined; the end of a job to the one running then."""
    first = [*_cycle(), log(3.0, "The node 'n0_1_0' has joined the rendezvous 'run-a' as "
                                 "rank 0 in a world of size 1."),
             log(50.0, "[default] worker group successfully finished.")]
    second = [prof(0, "rendezvous_started", 100.0, node="n0_2_0"),
              log(103.0, "The node 'n0_2_0' has joined the rendezvous 'run-b' as rank 0 in a "
                         "world of size 1."),
              prof(0, "rendezvous_completed", 103.0, node="n0_2_0"),
              log(150.0, "[default] worker group successfully finished.")]
    out = translate([*first, *second], Options())
    ends = sorted((e["job"], e["ts"] - _at(0)) for e in out.events
                  if e.get("mark") == "attempt_end")
    assert ends == [("run-a", 50.0), ("run-b", 150.0)]
    assert {e["job"] for e in out.events if e.get("phase") == "container_start"} == {"run-a"}
