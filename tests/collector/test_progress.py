"""The progress file: the last completed step outlives a hard kill, and becomes a final
heartbeat written on the dead process's behalf, once, by whoever outlives it."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from spooled_events import spooled

from collector import Reporter
from collector.agent import Agent
from collector.config import STATE_FILE_NAME, AgentConfig
from collector.final_heartbeats import write_final_heartbeats
from collector.integrations._lifecycle import SUPERVISED_ENV, AttemptLifecycle
from collector.progress import (
    _SLOTS,
    PROGRESS_SUFFIX,
    Progress,
    ProgressWriter,
    claim_orphans,
    read_progress,
)
from collector.reporter import DEFAULT_HEARTBEAT_S, HEARTBEAT_ENV
from collector.schema import parse_event

ROOT = Path(__file__).resolve().parents[2]
IDENTITY = {"job": "j", "attempt": 2, "rank": 1, "host": "node-7"}
#: A trainer that completes steps 100..170 of attempt 1, then kills itself (SIGKILL);
#: ``{fork}``: first fork a child that outlives it by two seconds.
KILLED = """
import os, signal, sys, time
from collector import Reporter
reporter = Reporter(sys.argv[1], attempt=1, rank=0, spool_dir=sys.argv[2], heartbeat_s=0)
with reporter.train(start_step=100) as train:
    for step in range(101, 171):
        train.advance(step)
    if {fork} and os.fork() == 0:
        time.sleep(2)
        os._exit(0)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def killed_trainer(spool: Path, job: str = "j", *, fork: bool = False) -> None:
    done = subprocess.run([sys.executable, "-c", KILLED.format(fork=fork), job, str(spool)],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert done.returncode == -signal.SIGKILL



def progress_files(spool: Path) -> list[Path]:
    return sorted(spool.glob(f"*{PROGRESS_SUFFIX}*"))


# --------------------------------------------------------------------------- the file
def test_the_file_holds_the_last_step_and_its_time(tmp_path: Path) -> None:
    writer = ProgressWriter.open(tmp_path, "j.a2.r1.1.abc", IDENTITY)
    assert writer is not None
    for step in range(5, 9):
        writer.record(step, 1000.0 + step)
    assert read_progress(writer.path.read_bytes()) == Progress(**IDENTITY, step=8, ts=1008.0)
    writer.close()
    assert not writer.path.exists()


def test_a_torn_write_falls_back_on_the_step_before(tmp_path: Path) -> None:
    writer = ProgressWriter.open(tmp_path, "s", IDENTITY)
    assert writer is not None
    writer.record(41, 1041.5)
    writer.record(42, 1042.5)  # seq 2: the second slot
    data = bytearray(writer.path.read_bytes())
    data[_SLOTS[0] + 8] ^= 0xFF  # the step of the latest write, half written
    found = read_progress(bytes(data))
    assert found is not None and (found.step, found.ts) == (41, 1041.5)
    writer.close()


def test_a_file_without_an_intact_step_says_nothing() -> None:
    assert read_progress(b"") is None
    assert read_progress(b"not a progress file".ljust(4096, b"\0")) is None


def test_a_live_writer_is_never_claimed_and_a_gone_one_once(tmp_path: Path) -> None:
    writer = ProgressWriter.open(tmp_path, "s", IDENTITY)
    assert writer is not None
    writer.record(7, 1007.0)
    emitted: list[Progress] = []
    assert claim_orphans(tmp_path, emitted.append) == []  # locked: its process lives
    writer.close(remove=False)  # as a kill leaves it: unlocked, in place
    assert claim_orphans(tmp_path, emitted.append, job="another") == []
    assert claim_orphans(tmp_path, emitted.append) == emitted
    assert [p.step for p in emitted] == [7]
    assert progress_files(tmp_path) == []
    assert claim_orphans(tmp_path, emitted.append) == []


def test_a_failed_heartbeat_leaves_the_file_for_the_next_look(tmp_path: Path) -> None:
    writer = ProgressWriter.open(tmp_path, "s", IDENTITY)
    assert writer is not None
    writer.record(7, 1007.0)
    writer.close(remove=False)

    def fail(_: Progress) -> None:
        raise OSError("disk full")

    assert claim_orphans(tmp_path, fail) == []
    assert len(progress_files(tmp_path)) == 1


def test_a_file_that_cannot_be_deleted_is_claimed_once(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A spool with the sticky bit lets no other user delete a trainer's file: the claimant
    must not write its final heartbeat again at every look."""
    writer = ProgressWriter.open(tmp_path, "s", IDENTITY)
    assert writer is not None
    writer.record(7, 1007.0)
    writer.close(remove=False)

    def refuse(path: Any) -> None:
        raise PermissionError("sticky")

    monkeypatch.setattr(os, "unlink", refuse)
    emitted: list[Progress] = []
    assert [p.step for p in claim_orphans(tmp_path, emitted.append)] == [7]
    assert claim_orphans(tmp_path, emitted.append) == [] and len(emitted) == 1


def test_no_file_can_be_made_and_training_goes_on(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    reporter = Reporter("j", spool_dir=blocked / "spool", heartbeat_s=0)
    with caplog.at_level(logging.WARNING), reporter.train(0) as train:
        train.advance(1)
    assert reporter.progress is None and train.step == 1
    assert "no progress file" in caplog.text
    reporter.shutdown()


# --------------------------------------------------------------------------- the Reporter
def test_a_clean_shutdown_removes_the_file(tmp_path: Path) -> None:
    reporter = Reporter("j", spool_dir=tmp_path, heartbeat_s=0)
    assert progress_files(tmp_path) == []  # made by the first train tracker, not before
    with reporter.train(3) as train:
        train.advance()
        assert len(progress_files(tmp_path)) == 1
    assert reporter.heartbeat() is not None
    reporter.shutdown()
    assert progress_files(tmp_path) == []
    (beat,) = [e for e in spooled(tmp_path) if e["kind"] == "mark"]
    assert beat["step"] == 4  # the heartbeat carries the last completed step


def test_the_heartbeat_period_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    monkeypatch.setenv(HEARTBEAT_ENV, "0.25")
    assert Reporter("j", spool_dir=tmp_path).heartbeat_s == 0.25
    assert Reporter("j", spool_dir=tmp_path, heartbeat_s=3).heartbeat_s == 3
    monkeypatch.setenv(HEARTBEAT_ENV, "often")
    assert Reporter("j", spool_dir=tmp_path).heartbeat_s == DEFAULT_HEARTBEAT_S


def test_a_heartbeat_is_written_at_once_not_at_the_next_flush(tmp_path: Path) -> None:
    """What is still queued dies with a killed process: a heartbeat must not wait there."""
    reporter = Reporter("j", spool_dir=tmp_path, heartbeat_s=0.05, flush_interval_s=30)
    reporter.start_heartbeat()
    time.sleep(0.5)
    beats = [e for e in spooled(tmp_path) if e.get("mark") == "heartbeat"]
    reporter.shutdown()
    assert len(beats) >= 3


def test_a_supervised_adapter_still_heartbeats_its_step(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    """Under collector.run the wrapper marks the attempt; the adapter sends no marks of its
    own but keeps beating, so its step is heard when the process is killed outright."""
    monkeypatch.setenv(SUPERVISED_ENV, "1")
    life = AttemptLifecycle(job="j", spool_dir=tmp_path)
    life.reporter = Reporter("j", spool_dir=tmp_path, heartbeat_s=0.02)
    assert life.begin(gpus=1)
    life.step_begin(0)
    life.step_end(5)
    time.sleep(0.2)
    life.end("completed")
    events = spooled(tmp_path)
    assert not [e for e in events if e.get("mark") in ("attempt_start", "attempt_end")]
    assert {e["step"] for e in events if e.get("mark") == "heartbeat"} == {5}


# --------------------------------------------------------------------------- a real kill
def test_a_killed_trainers_step_becomes_its_final_heartbeat(tmp_path: Path) -> None:
    killed_trainer(tmp_path)
    (left,) = progress_files(tmp_path)
    assert left.name.startswith("j.a1.r0.")
    (claimed,) = write_final_heartbeats(tmp_path, job="j")
    assert (claimed.attempt, claimed.rank, claimed.step) == (1, 0, 170)
    (beat,) = [e for e in spooled(tmp_path) if e.get("mark") == "heartbeat"]
    assert (beat["job"], beat["attempt"], beat["rank"], beat["step"]) == ("j", 1, 0, 170)
    assert beat["ts"] == pytest.approx(claimed.ts, abs=1e-6) and beat["ts"] <= time.time()
    assert progress_files(tmp_path) == [] and write_final_heartbeats(tmp_path) == []


def test_a_forked_child_does_not_keep_a_dead_parents_file_locked(tmp_path: Path) -> None:
    killed_trainer(tmp_path, fork=True)  # the child sleeps 2 s, holding the file open
    # The child lets go in its at-fork hook, which a loaded machine may schedule a moment
    # after the parent died: claim as the agent does, again until well before the child ends.
    deadline = time.monotonic() + 1.5
    while not (found := write_final_heartbeats(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.05)
    (claimed,) = found
    assert claimed.step == 170


def test_the_wrapper_writes_the_final_heartbeat_of_its_killed_command(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "collector.run", "--job", "j", "--spool-dir", str(tmp_path),
         "--", sys.executable, "-c", KILLED.format(fork=False), "j", str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=60)
    assert done.returncode == 128 + signal.SIGKILL
    events = spooled(tmp_path)
    (beat,) = [e for e in events if e.get("mark") == "heartbeat"]
    (end,) = [e for e in events if e.get("mark") == "attempt_end"]
    assert beat["step"] == 170 and beat["ts"] <= end["ts"]
    assert end["attrs"]["reason"] == "SIGKILL" and progress_files(tmp_path) == []


def test_the_wrapper_leaves_another_jobs_file_to_the_agent(tmp_path: Path) -> None:
    killed_trainer(tmp_path, job="other")
    done = subprocess.run(
        [sys.executable, "-m", "collector.run", "--job", "j", "--spool-dir", str(tmp_path),
         "--", sys.executable, "-c", "pass"],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=60)
    assert done.returncode == 0
    assert len(progress_files(tmp_path)) == 1


class Kept:
    """A publisher that keeps what the agent ships."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def publish(self, lines: list[str]) -> None:
        self.lines += lines

    def publish_health(self, stats: dict[str, Any]) -> None:
        """Health is not what this test looks at."""

    def reset(self) -> None:
        """Nothing to redial."""

    def close(self) -> None:
        """Nothing to close."""


def test_the_node_agent_ships_the_final_heartbeat_of_a_killed_trainer(tmp_path: Path) -> None:
    killed_trainer(tmp_path)
    kept = Kept()
    config = AgentConfig(broker_url="redis://unused", spool_dir=tmp_path,
                         state_file=tmp_path / STATE_FILE_NAME, source="node-1", once=True)
    assert Agent(config, publisher=kept).run() == 0
    beats = [e for e in map(parse_event, kept.lines) if e.get("mark") == "heartbeat"]
    assert [(e["attempt"], e["step"]) for e in beats] == [(1, 170)]
    assert progress_files(tmp_path) == []
