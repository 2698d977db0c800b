"""``python -m collector.run``: attempts, launch spans and exit statuses of a wrapped command.

Real processes throughout: the wrapper runs as ``python -m collector.run`` around small
pure-Python commands (exit 0, exit 3, SIGKILL, SIGTERM) and a torch-free stand-in for
torchrun's restarts (tests/collector/fake_torchrun.py); what it wrote is read back from the
spool and attributed by the engine, as ETT would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from collector import run_attempts, run_exits, run_watch
from collector.run import gpus_of_command, main, parse
from collector.run_exits import POSSIBLY_OOM, OomEvidence, ending_of
from collector.run_spool import FirstEvents
from collector.schema import parse_event
from collector.spool_reader import read_records
from ettweb.attribution.engine import attribute

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
#: A command that reports one span through its own Reporter, after ``delay`` seconds.
REPORTS = """
import os, signal, sys, time
from collector import Reporter
from collector.identity import identity_from_env
reporter = Reporter(identity_from_env().job, heartbeat_s=0)
time.sleep({delay})
with reporter.phase("model_init"):
    time.sleep(0.05)
reporter.shutdown()
print("out", flush=True)
print("err", file=sys.stderr, flush=True)
{then}
"""


def command(then: str = "", delay: float = 0.2) -> list[str]:
    return [sys.executable, "-c", REPORTS.format(delay=delay, then=then)]


def wrapper(spool: Path, cmd: Sequence[str], *options: str) -> list[str]:
    return [sys.executable, "-m", "collector.run", "--spool-dir", str(spool), *options, "--",
            *cmd]


def environment(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("ETT_", "SLURM_", "TORCHELASTIC_")) and key != "RANK"}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def run(spool: Path, cmd: Sequence[str], *options: str, job: str = "j1",
        **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(wrapper(spool, cmd, "--job", job, *options), capture_output=True,
                          text=True, env=environment(**env), timeout=60, cwd=ROOT)


def spooled(spool: Path) -> list[dict[str, Any]]:
    """Every event in the spool, validated as ingestion would."""
    events = []
    for path in sorted(spool.glob("*.jsonl")):
        for _, payload, problem in read_records(path, final=True):
            assert problem is None, (path, problem)
            if payload is not None:
                events.append(parse_event(payload))
    return sorted(events, key=lambda e: e.get("ts", e.get("start")))


def marks(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == "mark" and e["mark"] == name]


def spans(events: list[dict[str, Any]], phase: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == "span" and e["phase"] == phase]


def the_end(events: list[dict[str, Any]]) -> dict[str, Any]:
    (end,) = marks(events, "attempt_end")
    return dict(end["attrs"])


# --------------------------------------------------------------------------- exit statuses

def test_exit_0_is_a_completed_attempt_with_its_launch_span(tmp_path: Path) -> None:
    before = time.time()
    done = run(tmp_path, command(delay=0.3), "--team", "ads")
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == ("out\n", "err\n")  # passed through untouched
    events = spooled(tmp_path)
    (start,) = marks(events, "attempt_start")
    (launch,) = spans(events, "launch")
    (own,) = spans(events, "model_init")  # the command's own Reporter, in the same job
    assert {e["job"] for e in events} == {"j1"} and {e["attempt"] for e in events} == {0}
    assert start["attrs"] == {"gpus": 1, "team": "ads"}
    # The attempt starts when the wrapper's process did (to the clock tick).
    assert before - 0.02 <= start["ts"] <= launch["start"] == start["ts"]
    assert launch["end"] == own["start"] and launch["end"] - launch["start"] >= 0.3
    assert launch["attrs"] == {"until": "model_init", "until_rank": 0}
    assert the_end(events) == {"status": "completed", "exit_code": 0}
    assert marks(events, "attempt_end")[0]["ts"] >= own["end"]
    assert not marks(events, "heartbeat")  # the job's last event must stay the job's own


def test_a_non_zero_exit_is_a_failed_attempt(tmp_path: Path) -> None:
    done = run(tmp_path, command("sys.exit(3)"))
    assert done.returncode == 3
    assert the_end(spooled(tmp_path)) == {"status": "failed", "reason": "exit 3", "exit_code": 3}


def test_a_sigkill_is_a_failure_and_says_whether_the_oom_killer_sent_it(tmp_path: Path) -> None:
    done = run(tmp_path, command("os.kill(os.getpid(), signal.SIGKILL)"))
    assert done.returncode == 128 + signal.SIGKILL
    # No OOM here: the reason is SIGKILL where the cgroup or the kernel log can say so.
    readable = OomEvidence.of_this_process().killed([]) is not None
    assert the_end(spooled(tmp_path)) == {"status": "failed", "exit_code": 137,
                                          "reason": "SIGKILL" if readable else POSSIBLY_OOM}


def test_the_oom_killer_is_told_from_the_cgroup_counter_else_the_kernel_log(
        tmp_path: Path) -> None:
    counter = tmp_path / "memory.events"
    counter.write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n")
    evidence = OomEvidence(counter, kmsg=tmp_path / "no-kmsg")
    assert evidence.killed([42]) is False
    counter.write_text("oom 2\noom_kill 2\n")
    assert evidence.killed([42]) is True
    killed = ending_of(-signal.SIGKILL, oom_killed=evidence.checker([42]))
    assert (killed.status, killed.reason, killed.exit_code) == ("failed", "oom", 137)
    # No counter: the kernel log decides, by pid, from the attempt's start on.
    kmsg = tmp_path / "kmsg"
    uptime = time.monotonic()
    kmsg.write_text(f"6,1,{int((uptime - 5000) * 1e6)},-;Killed process 42 (python)\n"
                    f"3,2,{int(uptime * 1e6)},-;Memory cgroup out of memory: "
                    "Killed process 77 (python) total-vm:1kB\n")
    logged = OomEvidence(None, kmsg=kmsg)
    assert logged.killed([42]) is False  # that 42 was killed long before the attempt
    assert logged.killed([77]) is True
    assert OomEvidence(None, kmsg=tmp_path / "no-kmsg").killed([77]) is None
    unknown = ending_of(-signal.SIGKILL, oom_killed=lambda: None)
    assert unknown.reason == POSSIBLY_OOM


def test_exit_statuses_map_to_attempt_statuses() -> None:
    assert ending_of(0).attrs() == {"exit_code": 0}
    assert (ending_of(0).status, ending_of(2).reason) == ("completed", "exit 2")
    assert (ending_of(-signal.SIGSEGV).reason, ending_of(-signal.SIGSEGV).exit_code) == \
        ("SIGSEGV", 139)
    stopped = ending_of(0, received=signal.SIGTERM)
    assert (stopped.status, stopped.reason, stopped.exit_code) == ("cancelled", "SIGTERM", 0)
    assert ending_of(-15, received=signal.SIGTERM, sigterm_preempts=True).status == "preempted"
    assert ending_of(-2, received=signal.SIGINT, sigterm_preempts=True).status == "cancelled"


# --------------------------------------------------------------------------- signals

def _started(spool: Path, cmd: Sequence[str], *options: str,
             **env: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(wrapper(spool, cmd, "--job", "j1", *options), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=environment(**env), cwd=ROOT)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"  # the command runs: the wrapper is waiting
    return proc


WAITS = [sys.executable, "-c",
         "import os, time; print('ready', flush=True); print(os.getpid(), flush=True); "
         "time.sleep(60)"]
GRACEFUL = [sys.executable, "-c",
            "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
            "print('ready', flush=True)\ntime.sleep(60)"]


def test_sigterm_to_the_wrapper_is_passed_on_and_cancels_the_attempt(tmp_path: Path) -> None:
    proc = _started(tmp_path, WAITS)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert the_end(spooled(tmp_path)) == {"status": "cancelled", "reason": "SIGTERM",
                                          "exit_code": 143}


@pytest.mark.parametrize(("cmd", "option", "env", "code"), [
    (WAITS, "--sigterm-preempts", {}, 143),
    (GRACEFUL, "--verbose", {"ETT_SIGTERM_PREEMPTS": "1"}, 0),
], ids=["flag", "environment, command exits cleanly"])
def test_sigterm_is_a_preemption_when_the_scheduler_says_so(
        tmp_path: Path, cmd: list[str], option: str, env: dict[str, str], code: int) -> None:
    proc = _started(tmp_path, cmd, option, **env)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == code
    assert the_end(spooled(tmp_path)) == {"status": "preempted", "reason": "SIGTERM",
                                          "exit_code": code}


def test_a_sigterm_the_command_gets_from_elsewhere_is_a_failure(tmp_path: Path) -> None:
    proc = _started(tmp_path, WAITS)
    assert proc.stdout is not None
    os.kill(int(proc.stdout.readline()), signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert the_end(spooled(tmp_path)) == {"status": "failed", "reason": "SIGTERM",
                                          "exit_code": 143}


# --------------------------------------------------------------------------- restarts

@pytest.mark.slow
def test_an_outer_scheduler_restarting_the_wrapper_gives_each_run_its_attempt(
        tmp_path: Path) -> None:
    """The job from the environment (no --job), the attempt from SLURM_RESTART_COUNT; the
    gap between the runs is the restart gap, exactly as the marks say."""
    for count, then in (("0", "sys.exit(3)"), ("1", "")):
        subprocess.run(wrapper(tmp_path, command(then, delay=0.0)), timeout=60, cwd=ROOT,
                       env=environment(SLURM_JOB_ID="777", SLURM_RESTART_COUNT=count),
                       capture_output=True, check=False)
        time.sleep(0.3)
    events = spooled(tmp_path)
    assert {e["job"] for e in events} == {"777"}
    (job,) = attribute(events).jobs
    assert [(a.attempt, a.status) for a in job.attempts] == [(0, "failed"), (1, "completed")]
    end0 = marks(events, "attempt_end")[0]
    start1 = next(m for m in marks(events, "attempt_start") if m["attempt"] == 1)
    assert job.lost_s["restart_gap"] == pytest.approx(start1["ts"] - end0["ts"])
    assert job.lost_s["restart_gap"] >= 0.3
    assert job.lost_s["launch"] > 0


@pytest.mark.slow
def test_torchrun_restarts_are_attempts_seen_in_proc(tmp_path: Path) -> None:
    """A torch-free launcher that behaves as torchrun --max-restarts 1: each worker group is
    one attempt, bounded by its workers' exits and starts, not by when they were noticed."""
    seen_file = tmp_path / "seen.json"
    spool = tmp_path / "spool"
    done = run(spool, [sys.executable, str(HERE / "fake_torchrun.py"), str(seen_file)])
    assert done.returncode == 0, done.stderr
    seen = json.loads(seen_file.read_text())
    events = spooled(spool)
    ends = {m["attempt"]: m for m in marks(events, "attempt_end")}
    starts = {m["attempt"]: m for m in marks(events, "attempt_start")}
    assert sorted(ends) == sorted(starts) == [0, 1]
    assert ends[0]["attrs"] == {"status": "failed", "reason": "SIGKILL", "exit_code": 137,
                                "rank": 1, "restarted_by": "torchrun", "restart_count": 0}
    assert ends[1]["attrs"] == {"status": "completed", "exit_code": 0}
    # Attempt 0 ends when its last worker exited: after the launcher stopped rank 0, as the
    # launcher saw it gone (both are woken by that exit; slack for a busy machine); attempt 1
    # starts when the new workers did (to the clock tick), not when they were noticed.
    assert seen["rank1_reaped"] <= ends[0]["ts"] <= seen["group0_gone"] + 0.1
    assert seen["group1_started"] - 0.02 <= starts[1]["ts"] <= seen["group1_started"] + 0.1
    launches = {s["attempt"]: s for s in spans(events, "launch")}
    own = {s["attempt"]: min(e["start"] for e in spans(events, "model_init")
                             if e["attempt"] == s["attempt"]) for s in launches.values()}
    assert sorted(launches) == [0, 1]
    assert all(launches[a]["start"] == starts[a]["ts"] and launches[a]["end"] == own[a]
               for a in (0, 1))
    (job,) = attribute(events).jobs
    assert job.lost_s["restart_gap"] == pytest.approx(starts[1]["ts"] - ends[0]["ts"])
    assert job.lost_s["restart_gap"] >= 0.3  # the launcher's rendezvous pause


@pytest.mark.slow
def test_a_worker_reporting_under_another_attempt_is_warned_about(tmp_path: Path) -> None:
    """ETT_ATTEMPT pins every worker group to one attempt number (it comes before torchrun's
    restart count), so the restarted workers' events would land in the failed attempt."""
    seen_file = tmp_path / "seen.json"
    done = run(tmp_path / "spool", [sys.executable, str(HERE / "fake_torchrun.py"),
                                    str(seen_file)], ETT_ATTEMPT="0")
    assert done.returncode == 0
    assert "rank 0 reports as attempt 0 (from ETT_ATTEMPT) while the wrapper records " \
           "attempt 1" in done.stderr
    assert done.stderr.count("reports as attempt") == 1  # once, not per worker


# --------------------------------------------------------------------------- never in the way

def test_a_command_that_cannot_start_is_a_failed_attempt(tmp_path: Path) -> None:
    done = run(tmp_path, ["/nonexistent/train"])
    assert done.returncode == 127
    assert "/nonexistent/train" in done.stderr
    assert the_end(spooled(tmp_path)) == {"status": "failed", "reason": "command not found",
                                          "exit_code": 127}


def test_reporting_problems_never_fail_the_command(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    done = run(blocked, [sys.executable, "-c", "print('trained'); raise SystemExit(3)"])
    assert (done.returncode, done.stdout) == (3, "trained\n")


@pytest.mark.parametrize("broken", ["Attempts.end", "Attempts.begin", "Watcher.start",
                                    "OomEvidence.of_this_process"])
def test_the_wrappers_own_errors_never_change_the_exit_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str) -> None:
    owner, name = broken.split(".")
    module = {"Attempts": run_attempts, "Watcher": run_watch, "OomEvidence": run_exits}[owner]

    def fails(*args: object, **kwargs: object) -> None:
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(getattr(module, owner), name, fails)
    code = main(["--job", "j", "--spool-dir", str(tmp_path), "--", sys.executable, "-c",
                 "raise SystemExit(5)"])
    assert code == 5


def test_the_job_spool_and_supervision_reach_the_command(tmp_path: Path) -> None:
    """ETT_SUPERVISED=1: an adapter or the reference trainer inside leaves the attempt marks
    to the wrapper (tests/collector/integrations/test_adapter_under_run.py runs one)."""
    show = [sys.executable, "-c", "import os; print(os.environ['ETT_JOB_ID'], "
            "os.environ['ETT_SPOOL_DIR'], os.environ['ETT_SUPERVISED'])"]
    done = subprocess.run(wrapper(Path("relative-spool"), show), capture_output=True,
                          text=True, env=environment(ETT_JOB_ID="from-env"), cwd=tmp_path,
                          timeout=60)
    assert done.stdout.split() == ["from-env", str(tmp_path / "relative-spool"), "1"]


def test_the_command_line() -> None:
    options, cmd = parse(["--job", "j", "--gpus", "4", "--", "python", "--job", "x"])
    assert (options.job, options.gpus, cmd) == ("j", 4, ["python", "--job", "x"])
    assert parse(["python", "train.py", "--lr", "1"])[1] == ["python", "train.py", "--lr", "1"]
    for bad in ([], ["--job", "j"], ["--gpus", "0", "--", "x"]):
        with pytest.raises(SystemExit) as exit_:
            parse(bad)
        assert exit_.value.code == 2


def test_gpus_from_a_torchrun_command_line() -> None:
    assert gpus_of_command(["torchrun", "--nproc-per-node", "8", "--nnodes=2", "t.py"]) == 16
    assert gpus_of_command(["/usr/bin/torchrun", "--nproc_per_node=4", "t.py"]) == 4
    assert gpus_of_command(["python", "-m", "torch.distributed.run", "--nnodes", "1:3",
                            "--nproc-per-node", "2", "t.py"]) == 2
    assert gpus_of_command(["torchrun", "--nproc-per-node", "gpu", "t.py"]) is None
    assert gpus_of_command(["python", "train.py", "--nproc-per-node", "8"]) is None


def test_the_first_event_is_the_jobs_own_and_this_runs(tmp_path: Path) -> None:
    """The wrapper's own segments, other attempts and an earlier run's files are skipped;
    of what the job wrote, the earliest start wins (an outer span closes last)."""
    def segment(name: str, *events: dict[str, Any], age_s: float = 0.0) -> None:
        path = tmp_path / name
        path.write_text("".join(json.dumps(e) + "\n" for e in events))
        os.utime(path, (time.time() - age_s, time.time() - age_s))

    base = {"v": 1, "job": "a.b", "attempt": 1, "kind": "span", "rank": 2}
    segment("a_b.a1.r0.111.0000aaaa.00000.jsonl", {**base, "phase": "launch", "start": 5.0,
                                                   "end": 6.0})  # the wrapper's own
    segment("a_b.a0.r2.222.0000bbbb.00000.jsonl", {**base, "attempt": 0, "phase": "x",
                                                   "start": 1.0, "end": 2.0})
    segment("a_b.a1.r2.333.0000cccc.00000.jsonl", {**base, "phase": "old", "start": 2.0,
                                                   "end": 3.0}, age_s=3600)
    first = FirstEvents(tmp_path, "a.b", own_pid=111)
    since = time.time() - 60
    assert first.find(1, since) is None
    segment("a_b.a1.r2.444.0000dddd.00000.jsonl",
            {**base, "phase": "inner", "start": 20.0, "end": 21.0},
            {**base, "phase": "outer", "start": 10.0, "end": 30.0})
    found = first.find(1, since)
    assert found is not None and (found.time, found.what, found.rank) == (10.0, "outer", 2)


def test_help_explains_the_wrapper_and_is_in_the_cli_reference() -> None:
    shown = subprocess.run([sys.executable, "-m", "collector.run", "--help"], text=True,
                           capture_output=True, env=environment(COLUMNS="100"), cwd=ROOT,
                           timeout=60, check=True).stdout
    for words in ("launch", "SIGKILL (possibly OOM)", "TORCHELASTIC_RESTART_COUNT",
                  "restart_gap", "--sigterm-preempts", "128+N"):
        assert words in shown
    reference = (ROOT / "docs" / "reference" / "cli.md").read_text()
    assert f"```text\n{shown}```" in reference


def test_the_command_is_told_the_wrapper_marks_its_attempts(tmp_path: Path) -> None:
    """ETT_SUPERVISED: an adapter or the reference trainer under the wrapper sends no
    attempt marks of its own, so each attempt is marked once (by the wrapper)."""
    shown = "import os; print(os.environ['ETT_SUPERVISED'], os.environ['ETT_JOB_ID'])"
    done = run(tmp_path, [sys.executable, "-c", shown])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "j1"]
