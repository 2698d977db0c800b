"""The Reporter as a trainer uses it: every line it spools is a valid schema-v1 event, phases and
training become spans with the right bounds, and nothing it does can block or break training."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from collector import Reporter
from collector.reporter import traced
from collector.schema import parse_event

MakeReporter = Callable[..., Reporter]


@pytest.fixture
def make_reporter(tmp_path: Path) -> Iterator[MakeReporter]:
    """Reporters spooling into ``tmp_path``, always shut down after the test."""
    made: list[Reporter] = []

    def make(**kwargs: Any) -> Reporter:
        kwargs.setdefault("job", "job-1")
        kwargs.setdefault("spool_dir", tmp_path)
        kwargs.setdefault("heartbeat_s", 0)
        reporter = Reporter(**kwargs)
        made.append(reporter)
        return reporter

    yield make
    for reporter in made:
        reporter.shutdown()


def spooled(directory: Path) -> list[dict[str, Any]]:
    """Every event in the spool files, parsed by the schema module (raises if one is invalid)."""
    events = []
    for path in sorted(directory.glob("*.jsonl")):
        text = path.read_text()
        assert text == "" or text.endswith("\n"), f"{path.name} ends in a partial line"
        events += [parse_event(line) for line in text.splitlines()]
    return events


def spans(events: list[dict[str, Any]], phase: str) -> list[dict[str, Any]]:
    return sorted((e for e in events if e.get("phase") == phase), key=lambda e: e["start"])


def marks(events: list[dict[str, Any]], mark: str) -> list[dict[str, Any]]:
    return sorted((e for e in events if e.get("mark") == mark), key=lambda e: e["ts"])


# --------------------------------------------------------------------------- events
def test_lifecycle_events_are_schema_valid_and_carry_identity(
        make_reporter: MakeReporter, tmp_path: Path) -> None:
    reporter = make_reporter(job="dlrm/42", attempt=3, rank=2, host="node-7")
    reporter.attempt_start(gpus=4, model="dlrm", team="ads")
    with reporter.phase("compile"):
        pass
    with reporter.train(start_step=0) as train:
        train.advance(5)
    reporter.attempt_end("completed")
    assert reporter.shutdown()

    events = spooled(tmp_path)
    assert [e["kind"] for e in events] == ["mark", "span", "span", "mark"]
    assert {(e["job"], e["attempt"], e["rank"], e["host"]) for e in events} == {
        ("dlrm/42", 3, 2, "node-7")}
    assert len({e["id"] for e in events}) == 4
    start, end = marks(events, "attempt_start")[0], marks(events, "attempt_end")[0]
    assert start["attrs"] == {"gpus": 4, "model": "dlrm", "team": "ads"}
    assert end["attrs"] == {"status": "completed"}
    assert spans(events, "train")[0]["step_start"] == 0
    assert spans(events, "train")[0]["step_end"] == 5
    assert reporter.dropped_full == reporter.dropped_invalid == 0
    name = reporter.spool_path.name
    assert name.startswith("dlrm_42.a3.r2.") and f".{os.getpid()}." in name


def test_emit_returns_the_event_id_it_spooled(make_reporter: MakeReporter,
                                              tmp_path: Path) -> None:
    reporter = make_reporter()
    event_id = reporter.span("eval", 10.0, 12.5, attrs={"dataset": "holdout"})
    assert reporter.flush()
    (event,) = spooled(tmp_path)
    assert event["id"] == event_id
    assert (event["start"], event["end"], event["attrs"]) == (10.0, 12.5, {"dataset": "holdout"})


# --------------------------------------------------------------------------- phases
def test_phase_span_covers_the_block(make_reporter: MakeReporter, tmp_path: Path) -> None:
    reporter = make_reporter()
    before = time.time()
    with reporter.phase("checkpoint_save", path="/ckpt/7"):
        time.sleep(0.05)
    with reporter.phase("publish", blocking=False):
        pass
    after = time.time()
    reporter.flush()

    events = spooled(tmp_path)
    save, publish = spans(events, "checkpoint_save")[0], spans(events, "publish")[0]
    assert before <= save["start"] and save["end"] - save["start"] >= 0.05
    assert save["end"] <= publish["start"] <= publish["end"] <= after
    assert save["blocking"] is True and save["attrs"] == {"path": "/ckpt/7"}
    assert publish["blocking"] is False and publish["attrs"] == {}


def test_phase_decorator_gives_each_concurrent_call_its_own_span(
        make_reporter: MakeReporter, tmp_path: Path) -> None:
    reporter = make_reporter()

    @reporter.phase("eval")
    def evaluate(seconds: float) -> str:
        time.sleep(seconds)
        return "ok"

    threads = [threading.Thread(target=evaluate, args=(0.15,)) for _ in range(2)]
    for thread in threads:
        thread.start()
        time.sleep(0.05)  # the second call starts while the first is still running
    for thread in threads:
        thread.join()
    assert evaluate(0.0) == "ok"
    reporter.flush()

    evals = spans(spooled(tmp_path), "eval")
    assert len(evals) == 3
    assert all(e["end"] - e["start"] >= 0.15 for e in evals[:2])
    assert evals[1]["start"] - evals[0]["start"] >= 0.04


def test_traced_decorator_wraps_a_function(make_reporter: MakeReporter, tmp_path: Path) -> None:
    reporter = make_reporter()

    @traced(reporter, "data_init")
    def build_loader(n: int) -> list[int]:
        return list(range(n))

    assert build_loader(3) == [0, 1, 2]
    assert build_loader.__name__ == "build_loader"
    reporter.flush()
    assert len(spans(spooled(tmp_path), "data_init")) == 1


def test_exception_in_phase_is_recorded_and_reraised(make_reporter: MakeReporter,
                                                     tmp_path: Path) -> None:
    reporter = make_reporter()
    with pytest.raises(TimeoutError), reporter.phase("rendezvous", store="tcp"):
        raise TimeoutError("store unreachable")

    @reporter.phase("eval")
    def broken() -> None:
        raise KeyError("metric")

    with pytest.raises(KeyError):
        broken()
    reporter.flush()

    events = spooled(tmp_path)
    assert spans(events, "rendezvous")[0]["attrs"] == {"store": "tcp", "error": "TimeoutError"}
    assert spans(events, "eval")[0]["attrs"] == {"error": "KeyError"}


# --------------------------------------------------------------------------- training
def assert_contiguous(trains: list[dict[str, Any]], first: int, last: int) -> None:
    assert trains[0]["step_start"] == first and trains[-1]["step_end"] == last
    for before, after in itertools.pairwise(trains):
        assert after["step_start"] == before["step_end"], (before, after)


def test_train_slices_close_every_train_slice_s_with_contiguous_steps(
        make_reporter: MakeReporter, tmp_path: Path) -> None:
    reporter = make_reporter(train_slice_s=0.05)
    with reporter.train(start_step=100) as train:
        for step in range(101, 131):
            time.sleep(0.01)
            train.advance(step)
    reporter.flush()

    trains = spans(spooled(tmp_path), "train")
    assert len(trains) >= 3
    assert_contiguous(trains, 100, 130)
    for before, after in itertools.pairwise(trains):
        assert after["start"] == before["end"]  # no pause: no time between slices
    assert all(t["end"] - t["start"] >= 0.05 for t in trains[:-1])
    assert all(t["step_end"] > t["step_start"] for t in trains[:-1])  # the last may be empty


def test_a_pause_inside_the_first_step_reports_no_training_before_it(
        make_reporter: MakeReporter, tmp_path: Path) -> None:
    """torch.compile compiles when the first batch runs: the tracker is paused inside step 0.
    The moments before that pause advanced no step and are not training, so the job's first
    train span (its time to start, ETT_SPEC 3.7) begins after the compile."""
    reporter = make_reporter()
    with reporter.train(start_step=0) as train:
        time.sleep(0.02)  # the first batch is fetched, then dynamo starts compiling
        with train.paused(), reporter.phase("compile"):
            time.sleep(0.05)
        train.advance(1)
        train.advance(2)
    reporter.flush()

    events = spooled(tmp_path)
    trains, compile_ = spans(events, "train"), spans(events, "compile")[0]
    assert len(trains) == 1 and compile_["end"] <= trains[0]["start"]
    assert (trains[0]["step_start"], trains[0]["step_end"]) == (0, 2)


def test_pause_keeps_non_training_time_out_of_train_spans(make_reporter: MakeReporter,
                                                          tmp_path: Path) -> None:
    reporter = make_reporter()
    with reporter.train(start_step=0) as train:
        train.advance(1)
        train.advance(2)
        with train.paused(), reporter.phase("checkpoint_save"):
            time.sleep(0.05)
        train.advance(3)
        train.pause()
        with reporter.phase("eval"):
            time.sleep(0.02)
        train.advance(4)  # no resume(): the new slice still starts at step 3
    reporter.flush()

    events = spooled(tmp_path)
    trains = spans(events, "train")
    save, ev = spans(events, "checkpoint_save")[0], spans(events, "eval")[0]
    assert len(trains) == 3
    assert_contiguous(trains, 0, 4)
    assert trains[0]["end"] <= save["start"] and save["end"] <= trains[1]["start"]
    assert trains[1]["end"] <= ev["start"] and ev["end"] <= trains[2]["start"]


def test_rollback_and_empty_slices_stay_valid(make_reporter: MakeReporter,
                                              tmp_path: Path) -> None:
    reporter = make_reporter()
    train = reporter.train(start_step=50)
    train.advance(60)
    train.advance(55)  # reloaded an older checkpoint in-process
    train.advance(56)
    train.close()
    train.close()  # closing twice emits nothing more
    idle = reporter.train(start_step=7)
    idle.close()
    reporter.flush()

    trains = spans(spooled(tmp_path), "train")
    assert [(t["step_start"], t["step_end"]) for t in trains] == [(50, 60), (55, 56), (7, 7)]
    assert reporter.dropped_invalid == 0


def test_train_span_closes_when_the_loop_raises(make_reporter: MakeReporter,
                                                tmp_path: Path) -> None:
    reporter = make_reporter()
    with pytest.raises(RuntimeError), reporter.train(start_step=0) as train:
        train.advance(3)
        raise RuntimeError("NCCL timeout")
    reporter.flush()
    (train_span,) = spans(spooled(tmp_path), "train")
    assert (train_span["step_start"], train_span["step_end"]) == (0, 3)


def test_iterating_the_tracker_trains_up_to_steps_one_step_per_body(
        make_reporter: MakeReporter, tmp_path: Path) -> None:
    """``for step in reporter.train(start_step=..., steps=...)``: the global steps from the
    resumed one, each counted once its body completes; a body that advances itself (a
    rollback included) is not advanced again, and a ``break`` counts no step."""
    reporter = make_reporter()
    seen = []
    with reporter.train(start_step=3, steps=9) as train:
        assert reporter.tracker is train
        for step in train:
            seen.append(step)
            assert reporter.last_step == step  # not advanced before the body ends
            if step == 5 and seen.count(5) == 1:
                train.advance(4)  # rolled back in-process: steps 4 and 5 again
            if step == 7:
                break
    assert reporter.tracker is None
    with reporter.train(start_step=9) as more:
        more.advance()
        more.advance()
    reporter.flush()

    assert seen == [3, 4, 5, 4, 5, 6, 7]
    ranges = [(t["step_start"], t["step_end"]) for t in spans(spooled(tmp_path), "train")]
    assert ranges == [(3, 5), (4, 7), (9, 11)]  # step 5 rolled back before completing


def test_interrupt_pauses_only_the_loop_thread_and_only_a_running_tracker(
        make_reporter: MakeReporter, tmp_path: Path) -> None:
    """What a hook calls around blocking work it sees: a pause on the loop's thread, nothing
    from another thread, nothing when the loop had paused itself (its resume is its own)."""
    reporter = make_reporter()
    with reporter.train(start_step=0) as train:
        train.advance()
        from_elsewhere: list[bool] = []
        worker = threading.Thread(target=lambda: from_elsewhere.append(train.interrupt()))
        worker.start()
        worker.join()
        assert from_elsewhere == [False] and train.running
        assert train.interrupt() and not train.running
        train.resume()
        train.advance()
        with train.paused():
            assert not train.interrupt()
        train.advance()
    reporter.flush()
    ranges = [(t["step_start"], t["step_end"]) for t in spans(spooled(tmp_path), "train")]
    assert ranges == [(0, 1), (1, 2), (2, 3)]


# --------------------------------------------------------------------------- heartbeats
def test_heartbeats_carry_the_last_step_and_stop_at_attempt_end(
        make_reporter: MakeReporter, tmp_path: Path) -> None:
    reporter = make_reporter(heartbeat_s=0.04)
    train = reporter.train(start_step=0)
    train.advance(7)
    reporter.attempt_start(gpus=2)
    time.sleep(0.25)
    train.close()
    reporter.attempt_end("preempted")
    time.sleep(0.15)
    reporter.flush()

    events = spooled(tmp_path)
    beats = marks(events, "heartbeat")
    end = marks(events, "attempt_end")[0]
    assert len(beats) >= 3
    assert {b["step"] for b in beats} == {7}
    assert all(b["ts"] <= end["ts"] for b in beats)


def test_heartbeats_restart_with_the_next_attempt_start(make_reporter: MakeReporter,
                                                        tmp_path: Path) -> None:
    reporter = make_reporter(heartbeat_s=0.04)
    reporter.attempt_start()
    reporter.attempt_end("failed")
    reporter.attempt_start()  # at once: the previous heartbeat thread may still be alive
    time.sleep(0.2)
    reporter.attempt_end("completed")
    reporter.flush()
    later = [b for b in marks(spooled(tmp_path), "heartbeat") if "step" not in b]
    assert len(later) >= 2


def test_no_heartbeats_when_disabled(make_reporter: MakeReporter, tmp_path: Path) -> None:
    reporter = make_reporter(heartbeat_s=0)
    reporter.attempt_start()
    time.sleep(0.1)
    reporter.flush()
    assert marks(spooled(tmp_path), "heartbeat") == []


# --------------------------------------------------------------------------- environment
@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"ETT_ATTEMPT": "3", "TORCHELASTIC_RESTART_COUNT": "9"}, 3),
        ({"TORCHELASTIC_RESTART_COUNT": "2"}, 2),
        ({"ETT_ATTEMPT": "x", "TORCHELASTIC_RESTART_COUNT": "4"}, 4),
        ({"ETT_ATTEMPT": "²"}, 0),
        ({"ETT_ATTEMPT": " 5 "}, 5),
        ({}, 0),
    ],
)
def test_attempt_and_rank_from_env(make_reporter: MakeReporter, monkeypatch: pytest.MonkeyPatch,
                                   env: dict[str, str], expected: int) -> None:
    for name in ("ETT_ATTEMPT", "TORCHELASTIC_RESTART_COUNT", "RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RANK", "6")
    reporter = make_reporter()
    assert (reporter.attempt, reporter.rank) == (expected, 6)
    assert make_reporter(attempt=1, rank=0).attempt == 1


def test_spool_dir_from_env(make_reporter: MakeReporter, tmp_path: Path,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ETT_SPOOL_DIR", str(tmp_path / "node-spool"))
    reporter = make_reporter(spool_dir=None)
    reporter.heartbeat(step=1)
    reporter.flush()
    assert reporter.spool_path.parent == tmp_path / "node-spool"
    assert len(spooled(tmp_path / "node-spool")) == 1


# --------------------------------------------------------------------------- the quick route
def _lines_without_ids(directory: Path) -> list[str]:
    records = [line.rsplit("\t", 1)[0] for path in sorted(directory.glob("*.jsonl"))
               for line in path.read_text().splitlines()]
    return [re.sub(r'"id":"[0-9a-f]+"', '"id":"-"', record) for record in records]


def test_the_quick_route_spools_what_the_full_checks_would(make_reporter: MakeReporter,
                                                           tmp_path: Path) -> None:
    """A span or heartbeat of float times takes the quick route, an int time the full
    checks (which make it a float): both write the same line, key for key."""
    reporter = make_reporter(job='dlrm "42" %s', rank=3, host="nöde-7")
    calls: list[Callable[[float | int], str | None]] = [
        lambda t: reporter.span("checkpoint_save", t, t, blocking=False),
        lambda t: reporter.span("train", t, t, step_start=5, step_end=9),
        lambda t: reporter.span("eval", t, t),
        lambda t: reporter.span("dcp", t, t, blocking=False, attrs={"api": "dcp.save", "n": 3,
                                                                    "ok": True, "é": None}),
        lambda t: reporter.mark("heartbeat", t, step=9),
        lambda t: reporter.mark("attempt_start", t),
    ]
    for call in calls:
        assert call(7.0) is not None
        assert call(7) is not None
    reporter.flush()
    lines = _lines_without_ids(tmp_path)
    assert len(lines) == 2 * len(calls)
    assert lines[0::2] == lines[1::2]
    assert '"start":7.0,"end":7.0,"step_start":5,"step_end":9,"blocking":true' in lines[2]


def test_attrs_are_spooled_as_they_were_when_emitted(make_reporter: MakeReporter,
                                                     tmp_path: Path) -> None:
    reporter = make_reporter()
    attrs: dict[str, Any] = {"path": "/ckpt/7"}
    reporter.span("checkpoint_save", 1.0, 2.0, attrs=attrs)
    attrs["path"] = "/ckpt/8"  # the caller reuses its dict before the writer gets to it
    reporter.flush()
    assert [e["attrs"] for e in spooled(tmp_path)] == [{"path": "/ckpt/7"}]


def test_an_invalid_identity_drops_every_event(make_reporter: MakeReporter,
                                               tmp_path: Path) -> None:
    reporter = make_reporter(job="", rank=1)
    assert reporter.span("eval", 1.0, 2.0) is None
    assert reporter.mark("heartbeat", 1.0) is None
    reporter.flush()
    assert reporter.dropped_invalid == 2 and spooled(tmp_path) == []


def test_a_burst_is_written_once_a_batch_is_queued(make_reporter: MakeReporter,
                                                   tmp_path: Path) -> None:
    """A burst wakes the writer at WRITE_BATCH events, not at the next interval (an hour
    here): its events are written while it lasts instead of piling up in memory."""
    from collector.reporter import WRITE_BATCH

    reporter = make_reporter(flush_interval_s=3600.0)
    for i in range(WRITE_BATCH):
        reporter.span("eval", float(i), float(i) + 1.0)
    deadline = time.monotonic() + 10.0
    while not list(tmp_path.glob("*.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert list(tmp_path.glob("*.jsonl"))


def test_the_identity_is_read_only(make_reporter: MakeReporter) -> None:
    reporter = make_reporter(job="j", attempt=2)
    with pytest.raises(AttributeError):
        reporter.job = "other"  # type: ignore[misc]
    assert (reporter.job, reporter.attempt) == ("j", 2)


# --------------------------------------------------------------------------- never break training
def test_invalid_events_are_counted_and_warned_once_per_reason(
        make_reporter: MakeReporter, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    reporter = make_reporter()
    with caplog.at_level(logging.WARNING, logger="ett.reporter"):
        assert reporter.span("Bad Phase", 1.0, 2.0) is None
        assert reporter.span("Another Bad", 1.0, 2.0) is None
        assert reporter.span("eval", 5.0, 4.0) is None
        assert reporter.span("train", 1.0, 2.0) is None  # a train span needs steps
        assert reporter.span("eval", 1.0, 2.0, attrs={"obj": object()}) is None
        assert reporter.span("eval", 1.0, 2.0, attrs={"loss": float("nan")}) is None
        assert reporter.attempt_end("exploded") is None
        kept = reporter.span("eval", 1.0, 2.0)
    reporter.flush()

    assert reporter.dropped_invalid == 7
    warned = [r.getMessage() for r in caplog.records]
    # the two bad phase names share one reason, and so do the two attrs that are not JSON
    assert len(warned) == 5
    assert any("'attrs' is not JSON" in w for w in warned)
    assert any("'phase' must match" in w for w in warned)
    assert any("span end before start" in w for w in warned)
    assert [e["id"] for e in spooled(tmp_path)] == [kept]


def test_full_queue_drops_and_counts_without_blocking(make_reporter: MakeReporter,
                                                      tmp_path: Path) -> None:
    reporter = make_reporter(queue_size=4)
    gate = threading.Event()
    write = reporter._writer.write

    def stalled_write(lines: list[str]) -> int:  # a disk that stalls, as NFS can
        gate.wait(10)
        return write(lines)

    reporter._writer.write = stalled_write  # type: ignore[method-assign]
    started = time.monotonic()
    ids = [reporter.span("eval", float(i), float(i) + 1) for i in range(60)]
    elapsed = time.monotonic() - started
    gate.set()
    assert reporter.flush()

    kept = [i for i in ids if i is not None]
    assert elapsed < 0.5
    assert reporter.dropped_full == 60 - len(kept) >= 50
    assert sorted(e["id"] for e in spooled(tmp_path)) == sorted(kept)


def test_unwritable_spool_is_counted_not_raised(tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    reporter = Reporter(job="j", spool_dir=blocker / "spool", heartbeat_s=0)
    with caplog.at_level(logging.WARNING, logger="ett.reporter"):
        reporter.span("eval", 1.0, 2.0)
        reporter.flush()
        reporter.span("eval", 2.0, 3.0)
        reporter.shutdown()
    assert reporter.dropped_full == 2
    assert len([r for r in caplog.records if "cannot write spool" in r.getMessage()]) == 1


# --------------------------------------------------------------------------- flush and shutdown
def test_flush_makes_events_visible_and_shutdown_is_final(make_reporter: MakeReporter,
                                                          tmp_path: Path) -> None:
    reporter = make_reporter(flush_interval_s=5.0, fsync=True)
    first = reporter.heartbeat(step=1)
    assert reporter.flush()
    assert [e["id"] for e in spooled(tmp_path)] == [first]
    second = reporter.heartbeat(step=2)

    assert reporter.shutdown()  # writes what is queued before stopping
    assert reporter.shutdown()
    assert [e["id"] for e in spooled(tmp_path)] == [first, second]
    assert reporter.heartbeat(step=3) is None
    assert reporter.dropped_full == 1
    assert not reporter.flush()


# --------------------------------------------------------------------------- fork safety
def _fork(child: Callable[[], bool]) -> int:
    """Run ``child`` in a forked process; return its exit status (0 when it returned True)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if child() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_forked_child_writes_its_own_spool_file(make_reporter: MakeReporter,
                                                tmp_path: Path) -> None:
    reporter = make_reporter()
    parent_ids = [reporter.span("data_init", float(i), i + 0.5) for i in range(200)]

    def child() -> bool:  # emitted while the parent's queue may still hold events
        reporter.span("eval", 1000.0, 1001.0)
        return reporter.flush() and reporter.spool_path.name.count(f".{os.getpid()}.") == 1

    assert _fork(child) == 0
    parent_ids.append(reporter.span("eval", 2000.0, 2001.0))
    reporter.shutdown()

    files = sorted(tmp_path.glob("*.jsonl"))
    assert len(files) == 2
    by_file = {path: [parse_event(line) for line in path.read_text().splitlines()]
               for path in files}
    parent_events = by_file.pop(reporter.spool_path)
    (child_events,) = by_file.values()
    assert [e["id"] for e in parent_events] == parent_ids  # none lost, none duplicated
    assert [(e["phase"], e["start"]) for e in child_events] == [("eval", 1000.0)]


def test_reporter_shut_down_before_fork_stays_shut_in_child(make_reporter: MakeReporter,
                                                            tmp_path: Path) -> None:
    reporter = make_reporter()
    reporter.shutdown()
    assert _fork(lambda: reporter.heartbeat() is None and not reporter.flush()) == 0
    assert list(tmp_path.glob("*.jsonl")) == []


# --------------------------------------------------------------------------- spool bound, SIGTERM
def test_full_spool_drops_count_exactly_and_reach_the_sidecar(make_reporter: MakeReporter,
                                                             tmp_path: Path) -> None:
    from collector.spool import dropped_events

    reporter = make_reporter(max_spool_bytes=4096, flush_interval_s=0.01)
    started = time.monotonic()
    ids = [reporter.span("eval", float(i), float(i) + 1) for i in range(500)]
    assert time.monotonic() - started < 0.5  # emit never waits for the disk
    assert reporter.shutdown()
    kept = len(spooled(tmp_path))
    assert all(i is not None for i in ids)
    assert 0 < kept < 500
    assert sum(p.stat().st_size for p in tmp_path.glob("*.jsonl")) <= 4096
    assert reporter.dropped_full == 500 - kept == dropped_events(tmp_path)


SIGTERM_CHILD = """
import os, signal, sys, time
from collector import Reporter
chained = sys.argv[2] == "chain"
if chained:
    signal.signal(signal.SIGTERM, lambda *_: (print("previous handler ran", flush=True),
                                               sys.exit(3)))
reporter = Reporter(job="sig", spool_dir=sys.argv[1], heartbeat_s=0, flush_interval_s=60)
for i in range(100):
    reporter.span("eval", float(i), float(i) + 1)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(5)
print("not terminated", flush=True)
"""


@pytest.mark.parametrize("mode", ["default", "chain"])
def test_sigterm_flushes_then_hands_the_signal_on(tmp_path: Path, mode: str) -> None:
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", SIGTERM_CHILD, str(tmp_path), mode],
                          cwd=repo, capture_output=True, text=True, timeout=30, check=False)
    assert len(spooled(tmp_path)) == 100  # written although the writer waits 60 s per pass
    if mode == "chain":
        assert proc.returncode == 3 and "previous handler ran" in proc.stdout
    else:
        assert proc.returncode == -15 and "not terminated" not in proc.stdout


def test_fsync_policy_names_the_bad_value(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fsync must be one of"):
        Reporter(job="j", spool_dir=tmp_path, fsync="sometimes", heartbeat_s=0)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB filesystem (tmpfs): writes past it fail with ENOSPC."""
    import subprocess

    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_drops_on_a_full_disk_reach_the_sidecar(small_disk: Path) -> None:
    """ENOSPC: every event that did not fit is counted, and the count reaches the sidecar the
    agent ships, although the disk has no room left for a new file (the counts used to go
    through a temp file, which a full disk refused: they never reached the agent)."""
    from collector.spool import dropped_events

    reporter = Reporter(job="full", spool_dir=small_disk, heartbeat_s=0, flush_interval_s=0.01)
    for i in range(100):
        reporter.span("eval", float(i), float(i) + 1)
    assert reporter.flush()
    filler = os.open(small_disk / "filler", os.O_WRONLY | os.O_CREAT)  # someone fills it
    with contextlib.suppress(OSError):
        while os.write(filler, b"x" * 4096):
            pass
    os.close(filler)
    for i in range(100, 350):
        reporter.span("eval", float(i), float(i) + 1)
    assert reporter.shutdown()
    assert len(spooled(small_disk)) == 100
    assert reporter.dropped_full == 250 == dropped_events(small_disk)


def test_a_reporter_started_on_a_full_disk_still_counts_its_drops(small_disk: Path) -> None:
    """A trainer restarted while the spool's disk is full: not one event fits, and not one
    byte of a new file either; the counts still reach the agent (in the sidecar's name)."""
    from collector.spool import dropped_events

    filler = os.open(small_disk / "filler", os.O_WRONLY | os.O_CREAT)
    with contextlib.suppress(OSError):
        while os.write(filler, b"x" * 4096):
            pass
    os.close(filler)
    reporter = Reporter(job="late", spool_dir=small_disk, heartbeat_s=0, flush_interval_s=0.01)
    for i in range(120):
        reporter.span("eval", float(i), float(i) + 1)
    assert reporter.shutdown()
    assert spooled(small_disk) == [] and reporter.dropped_full == 120
    assert dropped_events(small_disk) == 120
