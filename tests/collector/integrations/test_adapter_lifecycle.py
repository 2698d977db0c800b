"""The adapters' shared state machine (``collector.integrations._lifecycle``), without a
framework: what an attempt's status is, who marks it, when spans are emitted, and how
pauses nest."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from adapter_runs import spool_events
from lightning.pytorch.utilities.exceptions import SIGTERMException

from collector.integrations import _lifecycle
from collector.integrations._lifecycle import (
    AttemptLifecycle,
    autoload_wanted,
    disabled,
    status_from_exception,
)


@pytest.mark.parametrize(("exc", "status"), [
    (None, "completed"),
    (KeyboardInterrupt(), "cancelled"),
    (SIGTERMException(), "preempted"),
    (RuntimeError("CUDA error"), "failed"),
    (MemoryError(), "failed"),
    (SystemExit(0), "completed"),
    (SystemExit(1), "failed"),
])
def test_status_from_how_the_run_ended(exc: BaseException | None, status: str) -> None:
    assert status_from_exception(exc) == status


@pytest.mark.parametrize(("env", "wanted"), [
    ({}, False),
    ({"ETT_JOB_ID": "j"}, True),
    ({"ETT_SPOOL_DIR": "/var/spool/ett"}, True),
    ({"ETT_JOB_ID": " "}, False),
    ({"ETT_JOB_ID": "j", "ETT_AUTOLOAD": "0"}, False),
    ({"ETT_JOB_ID": "j", "ETT_AUTOLOAD": "false"}, False),
    ({"ETT_JOB_ID": "j", "ETT_AUTOLOAD": "1"}, True),
    ({"ETT_SPOOL_DIR": "s", "ETT_DISABLE": "1"}, False),
    ({"ETT_SPOOL_DIR": "s", "ETT_DISABLE": "0"}, True),
])
def test_autoload_only_where_ett_is_configured(env: dict[str, str], wanted: bool) -> None:
    assert autoload_wanted(env) is wanted
    assert disabled(env) is (env.get("ETT_DISABLE") == "1")


def _life(tmp_path: Path, **options: Any) -> AttemptLifecycle:
    return AttemptLifecycle(**{"job": "unit", "attempt": 0, "spool_dir": tmp_path,
                               **options})


def _events(tmp_path: Path) -> list[dict[str, Any]]:
    return spool_events(tmp_path)


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "SLURM_PROCID", "ETT_SUPERVISED", "ETT_DISABLE", "ETT_ATTEMPT"):
        monkeypatch.delenv(name, raising=False)


def test_spans_before_the_reporter_exists_are_emitted_after_attempt_start(
        tmp_path: Path) -> None:
    began = time.time() - 5
    life = _life(tmp_path, started_at=began)
    life.stretch("model_init", at=began)
    with life.phase("process_group_init", pause=False):
        pass
    life.stretch(None)
    assert life.reporter is None  # nothing created, nothing written yet
    assert life.begin(gpus=8, rank_hint=0, model="m")
    life.end("completed")
    events = _events(tmp_path)
    assert [e.get("mark") or e["phase"] for e in events] == [
        "attempt_start", "model_init", "process_group_init", "attempt_end"]
    assert events[0]["ts"] == began and events[0]["attrs"] == {"gpus": 8, "model": "m"}
    assert events[1]["start"] == began


@pytest.mark.parametrize(("options", "env", "marks"), [
    ({}, {}, True),
    ({"rank": 3}, {}, False),
    ({}, {"RANK": "2"}, False),
    ({}, {"ETT_SUPERVISED": "1"}, False),
    ({"marks_attempt": True}, {"ETT_SUPERVISED": "1"}, True),
])
def test_only_rank_zero_marks_the_attempt_unless_a_supervisor_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any],
        env: dict[str, str], marks: bool) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    life = _life(tmp_path, **options)
    life.begin(gpus=1, rank_hint=0)
    with life.phase("eval"):
        pass
    life.end("completed")
    kinds = [e.get("mark", e.get("phase")) for e in _events(tmp_path)]
    assert kinds == (["attempt_start", "eval", "attempt_end"] if marks else ["eval"])


@pytest.mark.parametrize(("env", "argument", "hint", "rank"), [
    ({}, None, 5, 5),  # the framework knows the rank the environment did not say
    ({"RANK": "2"}, None, 5, 2),  # the environment wins over the framework
    ({"RANK": "2"}, 7, 5, 7),  # an argument wins over both
])
def test_the_rank_comes_from_argument_environment_then_framework(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
        argument: int | None, hint: int, rank: int) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    life = _life(tmp_path, rank=argument)
    life.begin(gpus=1, rank_hint=hint)
    assert life.reporter is not None and life.reporter.rank == rank
    life.end("completed")


def test_training_resumes_only_when_every_pause_has_ended(tmp_path: Path) -> None:
    life = _life(tmp_path, marks_attempt=False)
    life.begin(gpus=1)
    life.step_begin(0)
    life.step_end(1)
    life.open("save", "checkpoint_save")  # a save, and a compile inside it
    life.pause("compile")
    life.close("save")
    life.step_end(1)  # still paused: no new slice
    life.resume("compile")
    life.step_end(2)
    life.end("completed")
    spans = [e for e in _events(tmp_path) if e["kind"] == "span"]
    train = [(s["step_start"], s["step_end"]) for s in spans if s["phase"] == "train"]
    assert train == [(0, 1), (1, 2)]
    save = next(s for s in spans if s["phase"] == "checkpoint_save")
    first, second = (s for s in spans if s["phase"] == "train")
    assert first["end"] <= save["start"] and second["start"] >= save["end"]


def test_an_attempt_ends_once_and_closes_what_is_open(tmp_path: Path) -> None:
    life = _life(tmp_path)
    life.begin(gpus=1)
    life.open("validation", "eval")
    life.end("failed", error="RuntimeError")
    life.end("completed")  # too late: the first end counts
    life.close("validation")
    events = _events(tmp_path)
    assert [e.get("mark", e.get("phase")) for e in events] == [
        "attempt_start", "eval", "attempt_end"]
    assert events[1]["attrs"] == {"error": True}
    assert events[2]["attrs"] == {"status": "failed", "error": "RuntimeError"}
    assert not life.active


@pytest.mark.parametrize(("unhandled", "status"), [(None, "failed"),
                                                   (KeyboardInterrupt, "cancelled")])
def test_an_attempt_still_open_at_exit_is_ended_by_how_the_process_went(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unhandled: type | None,
        status: str) -> None:
    if unhandled is None:
        monkeypatch.delattr(sys, "last_type", raising=False)
    else:
        monkeypatch.setattr(sys, "last_type", unhandled, raising=False)
    life = _life(tmp_path)
    life.begin(gpus=1)
    _lifecycle._end_unended()  # what the interpreter runs at exit
    end = [e for e in _events(tmp_path) if e.get("mark") == "attempt_end"]
    assert [e["attrs"]["status"] for e in end] == [status]


def test_disabled_it_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ETT_DISABLE", "1")
    life = _life(tmp_path)
    assert not life.begin(gpus=1)
    with life.phase("eval"):
        pass
    life.end("completed")
    assert life.reporter is None and not list(tmp_path.iterdir())
