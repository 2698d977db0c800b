"""The goodput translator on its own: entries (bare or as Cloud Logging exports), bad lines
kept with a reason, unknown entries counted, unmappable ones kept as ``unattributed``."""

from __future__ import annotations

import json
from typing import Any

from ettweb.importers.common import Options
from ettweb.importers.goodput import translate

T0 = 1772438400.0


def entry(**fields: Any) -> str:
    values = {key: T0 + value if key.endswith("_time") and isinstance(value, float) else value
              for key, value in fields.items()}
    return json.dumps({"job_name": "run", **values})


def _spans(events: list[dict[str, Any]]) -> list[tuple[int, str, float, float, bool]]:
    return sorted((e["attempt"], e["phase"], e["start"] - T0, e["end"] - T0,
                   e.get("blocking", True)) for e in events if e["kind"] == "span")


def test_steps_become_train_spans_between_step_starts() -> None:
    lines = [entry(job_start_time=0.0), entry(step_start_time=10.0, step_count=0),
             entry(step_start_time=12.0, step_count=1), entry(step_start_time=14.0, step_count=2),
             entry(step_start_time=16.0, step_count=3), entry(job_end_time=18.0)]
    out = translate(lines, Options(gpus=16))
    trains = [(e["start"] - T0, e["end"] - T0, e["step_start"], e["step_end"])
              for e in out.events if e.get("phase") == "train"]
    assert trains == [(10.0, 12.0, 0, 1), (12.0, 14.0, 1, 2), (14.0, 16.0, 2, 3),
                      (16.0, 18.0, 3, 4)]  # equal steps: no compile split
    marks = sorted((e["mark"], e["ts"] - T0, e.get("attrs")) for e in out.events
                   if e["kind"] == "mark")
    assert marks == [("attempt_end", 18.0, {"status": "completed"}),
                     ("attempt_start", 0.0, {"gpus": 16})]
    assert {e["job"] for e in out.events} == {"run"}


def test_bad_lines_are_rejected_with_a_reason_and_unknown_entries_counted() -> None:
    lines = ["{not json", "[1, 2]", entry(step_start_time="soon", step_count=1),
             entry(step_start_time=1.0), entry(job_start_time=-5),
             json.dumps({"job_name": "run", "metric": 0.93}), "",
             entry(job_start_time=0.0)]
    out = translate(lines, Options())
    reasons = [(r.line, r.reason) for r in out.rejected]
    assert reasons[0][0] == 1 and reasons[0][1].startswith("goodput: bad JSON (")
    assert reasons[1:] == [
        (2, "goodput: line is not a JSON object"),
        (3, "goodput: 'step_start_time' must be epoch seconds (a number >= 0)"),
        (4, "goodput: 'step_start_time' without a 'step_count' >= 0"),
        (5, "goodput: 'job_start_time' must be epoch seconds (a number >= 0)")]
    assert (out.lines, out.skipped) == (8, 2)  # the metric entry and the blank line
    assert [e["mark"] for e in out.events] == ["attempt_start"]


def test_cloud_logging_exports_and_entries_without_a_job_name() -> None:
    exported = json.dumps({"insertId": "x1", "timestamp": "2026-03-02T08:00:00Z",
                           "jsonPayload": json.loads(entry(job_start_time=0.0))})
    orbax = json.dumps({"event_type": "restore", "step": 9,
                        "checkpoint_manager_start_time": T0 + 2.0,
                        "checkpoint_manager_duration_secs": 3.0})
    out = translate([exported, orbax], Options())
    assert {e["job"] for e in out.events} == {"run"}  # the file's one job
    assert _spans(out.events) == [(0, "checkpoint_load", 2.0, 5.0, True)]
    alone = translate([orbax], Options(source="/x/ckpt.jsonl"))
    assert {e["job"] for e in alone.events} == {"ckpt"}
    bad = json.dumps({"event_type": "save", "step": 1})
    assert translate([bad], Options()).rejected[0].reason == (
        "goodput: Orbax save entry without 'checkpoint_manager_blocking_start_time' and "
        "'checkpoint_manager_blocking_duration_secs'")


def test_custom_badput_maps_by_type_and_unknown_types_are_unattributed() -> None:
    lines = [entry(job_start_time=0.0),
             entry(custom_badput_event_start_time=1.0, custom_badput_event_type="EVAL_STEP"),
             entry(custom_badput_event_end_time=3.0, custom_badput_event_type="EVAL_STEP"),
             entry(custom_badput_event_start_time=4.0, custom_badput_event_type="sdc_check"),
             entry(custom_badput_event_end_time=5.0, custom_badput_event_type="sdc_check"),
             entry(tpu_init_start_time=6.0)]  # the attempt died inside it
    out = translate(lines, Options())
    assert _spans(out.events) == [(0, "eval", 1.0, 3.0, True), (0, "unattributed", 4.0, 5.0, True),
                                  (0, "unattributed", 6.0, 6.0, True)]
    kept = sorted(e["attrs"].get("badput_type", e["attrs"].get("source_event"))
                  for e in out.events if e.get("phase") == "unattributed")
    assert kept == ["sdc_check", "tpu_init open"] and out.unattributed == 2


def test_data_loading_blocks_only_before_the_first_step() -> None:
    lines = [entry(job_start_time=0.0), entry(data_loading_start_time=1.0),
             entry(data_loading_end_time=4.0), entry(step_start_time=4.0, step_count=0),
             entry(data_loading_start_time=5.5), entry(data_loading_end_time=6.0),
             entry(step_start_time=6.0, step_count=1)]
    spans = _spans(translate(lines, Options()).events)
    assert (0, "data_init", 1.0, 4.0, True) in spans
    assert (0, "data_init", 5.5, 6.0, False) in spans  # overlaps training: background


def test_a_restart_below_the_trained_steps_is_a_new_attempt_with_a_heartbeat_left() -> None:
    lines = [entry(job_start_time=0.0), entry(step_start_time=1.0, step_count=0),
             entry(step_start_time=2.0, step_count=1), entry(step_start_time=3.0, step_count=2),
             entry(job_start_time=10.0), entry(step_start_time=11.0, step_count=1),
             entry(step_start_time=12.0, step_count=2), entry(job_end_time=13.0)]
    out = translate(lines, Options())
    trains = sorted((e["attempt"], e["step_start"], e["step_end"]) for e in out.events
                    if e.get("phase") == "train")
    assert trains == [(0, 0, 1), (0, 1, 2), (1, 1, 2), (1, 2, 3)]
    beat = next(e for e in out.events if e.get("mark") == "heartbeat")
    assert (beat["attempt"], beat["ts"] - T0, beat["attrs"]) == (0, 3.0, {"step_started": 2})
    ids = sorted(e["id"] for e in out.events)
    assert ids == sorted(e["id"] for e in translate(list(reversed(lines)), Options()).events)
