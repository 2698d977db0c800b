"""The translators' shared pieces: stable ids, job names from files, training cut around
blocking work, and the compile estimate of a first step."""

from __future__ import annotations

import pytest

from collector.schema import validate_event
from ettweb.importers.common import (
    Interval,
    Options,
    compile_split,
    cut,
    job_from_file_name,
    mark,
    span,
    training,
)
from ettweb.importers.formats import DESCRIPTIONS, TRANSLATORS, translate


def test_an_events_id_depends_on_what_it_says_not_on_the_gpus_option() -> None:
    one = mark("nvrx", "j", 0, "attempt_start", 10.0, attrs={"gpus": 1})
    eight = mark("nvrx", "j", 0, "attempt_start", 10.0, attrs={"gpus": 8})
    assert one["id"] == eight["id"] and one["id"].startswith("nvrx-") and len(one["id"]) <= 64
    assert mark("nvrx", "j", 1, "attempt_start", 10.0)["id"] != one["id"]
    assert mark("goodput", "j", 0, "attempt_start", 10.0)["id"] != one["id"]
    unknown = [span("nvrx", "j", 0, "unattributed", 5.0, 5.0, attrs={"source_event": name})
               for name in ("a", "b")]
    assert unknown[0]["id"] != unknown[1]["id"]  # two unmapped events at one time: both kept
    for event in (one, *unknown, span("x", "j", 0, "train", 1, 2, steps=(0, 3))):
        valid = validate_event(event)  # schema v1: defaults filled, nothing changed
        assert {key: valid[key] for key in event} == event


@pytest.mark.parametrize(("source", "job"), [
    ("/var/log/llama-run7.log.gz", "llama-run7"), ("goodput.jsonl", "goodput"),
    ("slurm-1234.out", "slurm-1234"), (".log", ".log"), ("", "imported")])
def test_a_log_without_a_job_id_is_named_by_its_file(source: str, job: str) -> None:
    assert job_from_file_name(source) == job
    assert Options(source=source).job_or(None) == job
    assert Options(source=source, job="given").job_or("found") == "given"
    assert Options(source=source).job_or("found") == "found"


def test_training_is_cut_around_blocking_windows_and_keeps_its_steps() -> None:
    assert cut(0.0, 10.0, (0, 10), []) == [(0.0, 10.0, 0, 10)]
    pieces = cut(0.0, 10.0, (100, 110), [(2.0, 4.0), (3.0, 5.0), (20.0, 30.0), (-5.0, -1.0)])
    assert [(a, b) for a, b, _, _ in pieces] == [(0.0, 2.0), (5.0, 10.0)]
    assert [(s, e) for _, _, s, e in pieces] == [(100, 103), (103, 110)]  # 2 s : 5 s
    assert cut(0.0, 10.0, (0, 4), [(-1.0, 11.0)]) == [(10.0, 10.0, 0, 4)]  # all covered


def test_the_first_steps_excess_over_the_median_step_is_compilation() -> None:
    assert compile_split(0.0, 14.0, 1, 2.0) == 12.0
    assert compile_split(0.0, 2.0, 1, 2.0) is None  # no excess
    assert compile_split(0.0, 14.0, 1, None) is None  # nothing to compare with
    intervals = [Interval(0.0, 14.0, (0, 1)), Interval(14.0, 16.0, (1, 2)),
                 Interval(16.0, 22.0, (2, 3))]  # the last holds a 4 s save
    events = training("f", "j", 0, intervals, [(17.0, 21.0)], compile_first=True)
    phases = [(e["phase"], e["start"], e["end"], e.get("step_start"), e.get("step_end"))
              for e in events]
    assert phases == [("compile", 0.0, 12.0, None, None), ("train", 12.0, 14.0, 0, 1),
                      ("train", 14.0, 16.0, 1, 2), ("train", 16.0, 17.0, 2, 3),
                      ("train", 21.0, 22.0, 3, 3)]


def test_the_registry_lists_each_translator_with_a_description() -> None:
    assert set(TRANSLATORS) == set(DESCRIPTIONS) == {"nvrx", "goodput", "torchtitan"}
    assert translate("goodput", [], Options()).events == []
    with pytest.raises(KeyError):
        translate("ett", [], Options())
