"""Jobs killed outright and resumed, measured against the job's own clock (issue 41).

A process killed by SIGKILL, ``os._exit``, a segfault or its cgroup's memory limit takes its
open ``train`` slice with it. Under ``python -m collector.run`` its progress file
(``collector.progress``) becomes a final heartbeat with its last completed step, and ETT_SPEC
§3 rule 3 turns that into the lost slice: the repeated steps come out exact and ETT% as the
job's own clock says. Each case is a real job (``hard_kill_job.py``: Lightning, Hugging
Face's Trainer, plain PyTorch with ``install()``, and torchrun with two workers) that
checkpoints at step 20, dies after step 30 and resumes from step 20 in the next attempt.
ETT's numbers come from the offline engine over what the collector spooled.

The job's clock cannot see the interpreter start before its first line nor the wrapper's
attempt marks, so its ETT% is its productive seconds over the wall time the attempt marks
span; what is checked is how ETT attributes the seconds in between.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from adapter_runs import RunClock

from collector.final_heartbeats import write_final_heartbeats
from collector.progress import PROGRESS_SUFFIX
from collector.schema import parse_event
from collector.spool_reader import read_records
from ettweb.attribution.engine import JobAttribution, attribute

ROOT = Path(__file__).resolve().parents[3]
JOB_SCRIPT = Path(__file__).with_name("hard_kill_job.py")
KILL_AT, SAVED_AT = 30, 20  # hard_kill_job.SAVE_EVERY
HEARTBEAT_S = 0.1
#: Memory the killed attempt may hold in its cgroup before the OOM killer ends it.
CGROUP_LIMIT = 64 << 20
MEMORY_CGROUPS = Path("/sys/fs/cgroup/memory")
TIMEOUT_S = 180


def _environment(attempt: int | None, **extra: str) -> dict[str, str]:
    """This process's environment without ETT's, a scheduler's or torchrun's variables,
    with a short heartbeat and one thread per process (two cores, shared)."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("ETT_", "SLURM_", "TORCHELASTIC_")) and key != "RANK"}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", ETT_HEARTBEAT_S=str(HEARTBEAT_S),
               TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1", **extra)
    if attempt is not None:
        env["ETT_ATTEMPT"] = str(attempt)
    return env


class Job:
    """One job's spool, clock and checkpoints under ``tmp_path``."""

    def __init__(self, tmp_path: Path, framework: str) -> None:
        self.framework = framework
        self.name = f"{framework}-{uuid.uuid4().hex[:6]}"
        self.spool, self.clock, self.checkpoints = (tmp_path / "spool", tmp_path / "clock",
                                                    tmp_path / "checkpoints")

    def command(self, kill: str, cgroup: Path | None = None) -> list[str]:
        return [sys.executable, str(JOB_SCRIPT), self.framework, str(self.clock),
                str(self.checkpoints), "--kill", kill, "--kill-at", str(KILL_AT),
                *(["--cgroup", str(cgroup)] if cgroup else [])]

    def wrapped(self, command: list[str], attempt: int | None) -> int:
        """``command`` under ``collector.run``; its exit code."""
        done = subprocess.run(
            [sys.executable, "-m", "collector.run", "--job", self.name, "--spool-dir",
             str(self.spool), "--", *command], env=_environment(attempt), cwd=ROOT,
            capture_output=True, text=True, timeout=TIMEOUT_S)
        self.stderr = done.stderr
        return done.returncode

    def bare(self, command: list[str], attempt: int) -> int:
        """``command`` alone: the adapter's callback is all there is."""
        env = _environment(attempt, ETT_JOB_ID=self.name, ETT_SPOOL_DIR=str(self.spool))
        done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=TIMEOUT_S)
        self.stderr = done.stderr
        return done.returncode

    def notes(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.clock.read_text().splitlines()]

    def attributed(self) -> JobAttribution:
        events = []
        for path in sorted(self.spool.glob("*.jsonl")):
            for _, payload, problem in read_records(path, final=True):
                assert problem is None, path
                if payload is not None:
                    events.append(parse_event(payload))
        (job,) = attribute(events).jobs
        return job


def clocks(notes: list[dict[str, Any]]) -> dict[int, RunClock]:
    """The job's own clock, one per rank, from its notes."""
    by_rank: dict[int, RunClock] = {}
    for note in notes:
        clock = by_rank.setdefault(note["rank"], RunClock())
        attempt, what, t = note["attempt"], note["what"], note["t"]
        if what == "start":
            clock.started[attempt] = t
        elif what == "step_start":
            clock.step_start(attempt, note["step"])
            clock.steps[attempt][-1][1] = t
        elif what == "step_end":
            clock.steps[attempt][-1][2] = t
        elif what == "pause":
            clock.exclude(note["kind"], note["start"], note["end"])
        elif what in ("crash", "end"):
            clock.ended[attempt] = t
            if what == "crash":
                clock.crashed[attempt] = t
    return by_rank


def assert_matches_the_clock(job: Job, ranks: int = 1) -> dict[str, float]:
    """ETT's repeated steps exact (±1) and its ETT% within 0.5 pts of the job's clock.

    The jobs are tiny, so their ETT% is small (start-up dominates) and 0.5 pts is a loose
    bound on seconds; the productive and repeated seconds are also held to a tenth of a
    second (five steps) of the clock's. Without rule 3 the repeated time reads 0, and the
    productive time is right only when the lost slice and its re-run took equally long."""
    ett = job.attributed()
    own = clocks(job.notes())
    assert sorted(own) == list(range(ranks))
    expected_steps = sum(clock.expected().repeated_steps for clock in own.values())
    assert expected_steps == ranks * (KILL_AT - SAVED_AT)
    clock = own[0].expected()  # rule 4.1: training time follows the lowest rank's spans
    numbers = {"repeated_steps": ett.repeated_steps, "expected_steps": expected_steps,
               "ett_pct": 100.0 * ett.productive_s / ett.wall_s,
               "clock_pct": 100.0 * clock.productive_s / ett.wall_s,
               "productive_s": ett.productive_s, "clock_productive_s": clock.productive_s,
               "repeated_s": ett.lost_s.get("repeated_training", 0.0),
               "clock_repeated_s": clock.repeated_s}
    print(f"{job.name}: {numbers}")  # shown with -s
    assert abs(ett.repeated_steps - expected_steps) <= 1, numbers
    assert abs(numbers["ett_pct"] - numbers["clock_pct"]) <= 0.5, numbers
    assert abs(ett.productive_s - clock.productive_s) <= 0.1, numbers
    assert abs(numbers["repeated_s"] - clock.repeated_s) <= 0.1, numbers
    assert [a.status for a in ett.attempts] == ["failed", "completed"], ett.attempts
    assert not list(job.spool.glob(f"*{PROGRESS_SUFFIX}*")), "progress files left behind"
    return numbers


def kill_and_resume(job: Job, kill: str, cgroup: Path | None = None) -> None:
    """Attempt 0 dies after step KILL_AT; attempt 1 resumes from step SAVED_AT."""
    code = job.wrapped(job.command(kill, cgroup), attempt=0)
    assert code != 0, job.stderr[-3000:]
    assert job.wrapped(job.command(kill), attempt=1) == 0, job.stderr[-3000:]


# ------------------------------------------------------------------------- the cgroup
def _own_memory_cgroup() -> Path | None:
    """This process's cgroup-v1 memory cgroup directory, when there is one."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return MEMORY_CGROUPS / path.lstrip("/")
    return None


@pytest.fixture
def memory_cgroup() -> Iterator[Path]:
    """A child memory cgroup with a small limit, or a skip that says why there is none."""
    parent = _own_memory_cgroup()
    if parent is None or not parent.is_dir():
        pytest.skip("no cgroup-v1 memory hierarchy (/proc/self/cgroup names none)")
    cgroup = parent / f"ett-test-{uuid.uuid4().hex[:8]}"
    try:
        cgroup.mkdir()
        (cgroup / "memory.limit_in_bytes").write_text(str(CGROUP_LIMIT))
        (cgroup / "memory.memsw.limit_in_bytes").write_text(str(CGROUP_LIMIT))
    except OSError as exc:
        if cgroup.is_dir():
            cgroup.rmdir()
        pytest.skip(f"cannot make a memory cgroup under {parent}: {exc}")
    yield cgroup
    cgroup.rmdir()


def _oom_kills(cgroup: Path) -> int:
    for line in (cgroup / "memory.oom_control").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    raise AssertionError(f"no oom_kill count in {cgroup}")


# ------------------------------------------------------------------------- the targets
@pytest.mark.slow
@pytest.mark.parametrize("kill", ["sigkill", "exit", "segv"])
def test_plain_torch_killed_outright_under_the_wrapper(tmp_path: Path, kill: str) -> None:
    job = Job(tmp_path, "torch")
    kill_and_resume(job, kill)
    assert_matches_the_clock(job)


@pytest.mark.slow
def test_plain_torch_killed_by_its_cgroup_memory_limit(tmp_path: Path,
                                                       memory_cgroup: Path) -> None:
    job = Job(tmp_path, "torch")
    kill_and_resume(job, "oom", memory_cgroup)
    assert _oom_kills(memory_cgroup) == 1  # the kernel's OOM killer ended it, nothing else
    assert_matches_the_clock(job)


@pytest.mark.slow
@pytest.mark.parametrize("kill", ["sigkill", "segv"])
def test_lightning_killed_outright_under_the_wrapper(tmp_path: Path, kill: str) -> None:
    job = Job(tmp_path, "lightning")
    kill_and_resume(job, kill)
    assert_matches_the_clock(job)


@pytest.mark.slow
@pytest.mark.parametrize("kill", ["sigkill", "exit"])
def test_transformers_killed_outright_under_the_wrapper(tmp_path: Path, kill: str) -> None:
    job = Job(tmp_path, "transformers")
    kill_and_resume(job, kill)
    assert_matches_the_clock(job)


@pytest.mark.slow
def test_a_torchrun_worker_killed_outright_under_the_wrapper(tmp_path: Path) -> None:
    """Rank 1 is SIGKILLed after step 30; rank 0's next all_reduce fails; torchrun restarts
    the group (attempt 1), which resumes from the step-20 checkpoint on both ranks."""
    job = Job(tmp_path, "torch")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                "--max-restarts", "1", "--rdzv-backend", "c10d",
                "--rdzv-endpoint", "127.0.0.1:0", *job.command("sigkill")[1:]]
    assert job.wrapped(torchrun, attempt=None) == 0, job.stderr[-3000:]
    assert_matches_the_clock(job, ranks=2)


@pytest.mark.slow
def test_without_the_wrapper_a_kill_loses_at_most_a_heartbeat_of_steps(tmp_path: Path) -> None:
    """A Lightning callback alone, the process SIGKILLed: the last heartbeat's step stands
    for the lost slice, so at most the steps of one heartbeat interval go uncounted. The
    node agent's claim of the progress file (``write_final_heartbeats``) makes it exact."""
    job = Job(tmp_path, "lightning")
    assert job.bare(job.command("sigkill"), attempt=0) != 0, job.stderr[-3000:]
    assert job.bare(job.command("sigkill"), attempt=1) == 0, job.stderr[-3000:]
    notes = job.notes()
    crash = next(n["t"] for n in notes if n["what"] == "crash")
    last_interval = sum(1 for n in notes if n["what"] == "step_end" and n["attempt"] == 0
                        and crash - HEARTBEAT_S <= n["t"] <= crash)
    expected = KILL_AT - SAVED_AT
    heard = job.attributed().repeated_steps
    assert expected - last_interval - 1 <= heard <= expected

    claimed = write_final_heartbeats(job.spool)  # what the node agent does between batches
    assert [(p.attempt, p.step) for p in claimed] == [(0, KILL_AT)]
    exact = job.attributed().repeated_steps
    print(f"{job.name} without the wrapper: {heard} repeated steps from the heartbeats "
          f"({last_interval} steps in the last interval), {exact} once claimed, of {expected}")
    assert abs(exact - expected) <= 1
