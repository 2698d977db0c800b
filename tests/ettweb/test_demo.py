"""`make demo` runs `python -m ettweb.platform.demo`: here with a tiny job and --no-serve,
against the test database and broker, so the orchestration (migrate, login, worker,
collector, web, trainer, drain) is exercised by real processes."""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from collector.reporter import Reporter
from ettweb.access.models import ComponentOwner
from ettweb.components.models import Component
from ettweb.ingest.models import CollectorCredential, Event, QuarantinedEvent
from ettweb.platform import demo as demo_module
from ettweb.platform import demo_training
from ettweb.platform.demo import Demo, parse_args
from ettweb.platform.demo_processes import group_alive
from ettweb.rollouts.models import Rollout
from ettweb.rollups.models import JobRollup
from ettweb.settings.env import database_url

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spool(spool: Path, job: str, attempt: int, *marks: str) -> None:
    reporter = Reporter(job, attempt=attempt, rank=0, spool_dir=spool, heartbeat_s=0,
                        install_signal_handlers=False)
    for name in marks:
        if name == "attempt_end":
            reporter.attempt_end("failed")
        else:
            reporter.mark(name)
    reporter.shutdown()


def _ends(spool: Path, job: str) -> list[tuple[int, dict[str, object]]]:
    return sorted((e["attempt"], e["attrs"]) for e in demo_training.spooled(spool, job)
                  if e.get("mark") == "attempt_end")


def test_an_attempt_its_process_left_open_is_ended_cancelled(tmp_path: Path) -> None:
    """The demo's safety net after a Ctrl-C: the job's latest attempt with no attempt_end
    gets one (cancelled), once; a job whose latest attempt ended, or with nothing spooled,
    is left alone."""
    _spool(tmp_path, "j", 0, "attempt_start", "attempt_end")
    _spool(tmp_path, "j", 1, "attempt_start", "heartbeat")
    _spool(tmp_path, "done", 0, "attempt_start", "attempt_end")
    assert demo_training.open_attempt(tmp_path, "j") == 1
    ended = demo_training.end_open_attempts(tmp_path, ["j", "done", "never-ran"])
    assert ended == [("j", 1)]
    assert _ends(tmp_path, "j") == [(0, {"status": "failed"}),
                                    (1, {"status": "cancelled", "ended_by": "demo"})]
    assert len(demo_training.end_ids(tmp_path, "j")) == 2
    assert demo_training.end_open_attempts(tmp_path, ["j", "done"]) == []
    assert _ends(tmp_path, "done") == [(0, {"status": "failed"})]


def test_a_job_that_ignores_the_interrupt_is_killed_after_the_grace(tmp_path: Path) -> None:
    started: list[subprocess.Popen[bytes]] = []
    ignores = ("import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
               "print('ready', flush=True); time.sleep(60)")
    thread = threading.Thread(target=demo_training._wait, daemon=True,
                              args=([sys.executable, "-c", ignores], os.environ, started.append))
    thread.start()
    deadline = time.monotonic() + 10
    while not started and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # its handler is installed
    proc = started[0]
    assert os.getpgid(proc.pid) == proc.pid != os.getpgid(0)  # its own group: no terminal ^C
    begin = time.monotonic()
    assert demo_training.stop_job(proc, grace_s=1.0) == -signal.SIGKILL
    assert 1.0 <= time.monotonic() - begin < 5.0
    thread.join(timeout=5)


def test_impossible_plan_is_refused_before_any_work(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(["--steps", "100", "--fail-at-step", "100"])
    assert exc.value.code == 2
    assert "--fail-at-step" in capsys.readouterr().err


def test_the_simulated_fleet_is_loaded_unless_no_fleet() -> None:
    assert parse_args([]).no_fleet is False
    assert parse_args(["--no-fleet"]).no_fleet is True


def test_the_demo_starts_celery_beat_beside_the_worker(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Without beat the README's stale-rollup sweep (and every periodic task) never ran."""
    demo = Demo(parse_args(["--var-dir", str(tmp_path)]))
    started: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(demo, "collector_credential", dict)
    monkeypatch.setattr(demo, "spawn", lambda name, argv, extra_env=None:
                        started.append((name, argv)))
    demo.start_services()
    assert [name for name, _ in started] == ["worker", "beat", "collector", "web"]
    collector = dict(started)["collector"]  # it hears the credential's verdict from web
    assert collector[collector.index("--server-url") + 1] == f"http://127.0.0.1:{demo.args.port}"
    beat = dict(started)["beat"]
    assert beat[:5] == ["-m", "celery", "-A", "ettweb.celery", "beat"]
    assert beat[beat.index("--schedule") + 1] == str(tmp_path / "demo" / "celerybeat-schedule")


def test_the_mails_links_point_at_the_address_the_demo_serves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The e-mail report and its preview link to ETT_BASE_URL; the demo serves
    127.0.0.1:<port>, so every process it starts (web, worker, beat, manage.py) gets that
    address, as a child reads it from the settings. One the user set is theirs to keep."""
    monkeypatch.delenv("ETT_BASE_URL", raising=False)
    demo = Demo(parse_args(["--var-dir", str(tmp_path), "--port", "8123"]))
    assert demo.env["ETT_BASE_URL"] == "http://127.0.0.1:8123"
    read = demo.manage("shell", "-c", "from django.conf import settings; "
                                      "print(settings.ETT_BASE_URL)", quiet=True)
    assert read.strip().splitlines()[-1] == "http://127.0.0.1:8123"  # after shell's notes
    started: dict[str, dict[str, str]] = {}
    monkeypatch.setattr(demo, "collector_credential", dict)
    monkeypatch.setattr(demo, "spawn", lambda name, argv, extra_env=None:
                        started.update({name: {**demo.env, **(extra_env or {})}}))
    demo.start_services()
    assert {name: env["ETT_BASE_URL"] for name, env in started.items()} == dict.fromkeys(
        ("worker", "beat", "collector", "web"), "http://127.0.0.1:8123")

    monkeypatch.setenv("ETT_BASE_URL", "  ")  # blank is unset, as the settings read it
    assert Demo(parse_args(["--var-dir", str(tmp_path)])).env["ETT_BASE_URL"] == \
        "http://127.0.0.1:8000"
    monkeypatch.setenv("ETT_BASE_URL", "https://ett.example.com")
    assert Demo(parse_args(["--var-dir", str(tmp_path), "--port", "8123"])).env[
        "ETT_BASE_URL"] == "https://ett.example.com"


#: A child that starts a grandchild in its own process group, as a Celery worker starts its
#: pool, and ignores SIGTERM for a moment while "shutting down".
POOL = ("import os, signal, subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(0.5), sys.exit(0)))\n"
        "time.sleep(120)\n")


def _group_gone(pgid: int) -> bool:
    """No process of the group runs (zombies are dead: their parent has yet to reap them)."""
    return not group_alive(pgid)


@pytest.mark.slow
def test_stopping_the_demo_stops_every_process_group_it_spawned(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo = Demo(parse_args(["--var-dir", str(tmp_path)]))
    for name in ("worker", "beat"):
        demo.spawn(name, ["-c", POOL])
    time.sleep(1.0)  # the grandchildren are started
    groups = [child.popen.pid for child in demo.children]
    stopped = demo.stop_children()
    assert stopped == [f"beat (pid {groups[1]})", f"worker (pid {groups[0]})"]
    assert all(_group_gone(pgid) for pgid in groups)  # the "pool" processes too
    assert demo.children == [] and not (tmp_path / "demo" / "processes.json").exists()


@pytest.mark.slow
def test_a_second_signal_during_the_shutdown_does_not_abort_it(tmp_path: Path) -> None:
    demo = Demo(parse_args(["--var-dir", str(tmp_path)]))
    demo.spawn("worker", ["-c", POOL])
    time.sleep(1.0)
    pgid = demo.children[0].popen.pid
    # Signals arrive while the worker takes its time to stop: both are held, not raised.
    timers = [threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
              for delay in (0.1, 0.3)]
    handlers = {s: signal.signal(s, demo_module._interrupt) for s in (signal.SIGINT,)}
    try:
        with pytest.raises(KeyboardInterrupt), demo.running():
            for timer in timers:
                timer.start()
            raise KeyboardInterrupt
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
    assert _group_gone(pgid)


@pytest.mark.slow
def test_stop_stops_what_a_killed_demo_left_running(tmp_path: Path) -> None:
    """``make stop`` after a demo died without cleaning up (SIGKILL): its recorded groups
    are stopped; a recorded pid now used by another process is left alone."""
    demo = Demo(parse_args(["--var-dir", str(tmp_path)]))
    demo.spawn("web", ["-c", POOL])
    time.sleep(1.0)
    pgid = demo.children[0].popen.pid
    table = tmp_path / "demo" / "processes.json"
    rows = json.loads(table.read_text())
    rows.append({"name": "reused", "pid": os.getpid(), "started": "0"})  # not that process
    table.write_text(json.dumps(rows))
    proc = subprocess.run([sys.executable, "-m", "ettweb.platform.demo", "--stop", "--keep-servers",
                           "--var-dir", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"stopped web (pid {pgid})"
    demo.children[0].popen.wait(timeout=5)
    assert _group_gone(pgid) and not table.exists()


#: A demo test's own limit: its subprocess waits up to 540 s, so pytest-timeout's default
#: (300 s) would stop the test first and leave the demo's services running.
DEMO_TEST_TIMEOUT_S = 600


@pytest.fixture
def demo_alone() -> Iterator[None]:
    """Run one whole demo at a time across the test processes: two at once share the
    session's broker, so each one's worker stores the other's batches in its own database
    (one such test saw 0 of its 16 events stored). The conftest's xdist group was meant to
    keep them apart, but ``make test`` ran them side by side all the same."""
    with open(Path(tempfile.gettempdir()) / "ett-demo-tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.mark.integration
@pytest.mark.timeout(DEMO_TEST_TIMEOUT_S)
@pytest.mark.django_db(transaction=True)
def test_demo_trains_a_job_and_stores_every_event(tmp_path: Path, demo_alone: None) -> None:
    env = dict(os.environ, DATABASE_URL=database_url(connection.settings_dict),
               CELERY_BROKER_URL=str(settings.CELERY_BROKER_URL),
               DJANGO_SETTINGS_MODULE="ettweb.settings.test")
    job = "demo-test-job"
    proc = subprocess.run(
        [sys.executable, "-m", "ettweb.platform.demo", "--no-serve", "--job", job, "--steps", "40",
         "--fail-at-step", "25", "--restart-delay", "1", "--port", str(_free_port()),
         "--var-dir", str(tmp_path), "--trainer-arg=--checkpoint-every=20",
         "--trainer-arg=--embedding-rows=1000", "--trainer-arg=--batch-size=64",
         "--lightning-job", f"{job}-lightning", "--lightning-steps", "10"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"job {job}: 2 attempts" in proc.stdout
    # The Lightning job beside it, reported by its ETTCallback alone: a failure, a resume.
    assert f"job {job}-lightning: 2 attempts" in proc.stdout
    lightning = set(Event.objects.filter(job=f"{job}-lightning").values_list("phase", flat=True))
    assert {"train", "checkpoint_save", "checkpoint_load", "model_init"} <= lightning
    assert "login: demo / " in proc.stdout
    # Step 3 loaded the simulated fleet beside the live job (``[k/7]`` step lines).
    assert "[3/7]" in proc.stdout and "[6/7]" in proc.stdout
    assert re.search(r"simulated [\d,]+ jobs \(seed 0, 90 days to .*, 14 rollouts; fleet ETT% ",
                     proc.stdout), proc.stdout[:3000]
    assert Rollout.objects.filter(simulated=True).count() == 14
    # ...and gave its components owner teams and some of them owners (simulate_owners).
    assert "owners created: ada, grace, ken, barbara" in proc.stdout
    assert set(ComponentOwner.objects.filter(component="checkpointing")
               .values_list("user__username", flat=True)) == {"ada"}
    assert Component.objects.get(name="pt2_compiler").owner_team == "pytorch-compiler"
    spool = tmp_path / "demo" / "spool"
    spooled = sum(len(p.read_text().splitlines()) for p in spool.glob(f"{job}.a*.jsonl"))
    assert Event.objects.filter(job=job).count() == spooled > 0
    # The demo's collector signs with the credential `ett_collector create demo-node` made.
    assert CollectorCredential.objects.filter(name="demo-node", active=True).exists()
    assert not QuarantinedEvent.objects.filter(job=job).exists()
    phases = set(Event.objects.filter(job=job).values_list("phase", flat=True))
    assert {"compile", "checkpoint_save", "checkpoint_load", "train"} <= phases
    # Beat ran beside the worker (and was stopped with it: the demo returned).
    assert "beat: Starting..." in (tmp_path / "demo" / "logs" / "beat.log").read_text()


def _answers(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _trains(spool: Path, job: str) -> bool:
    """A train slice of the job is spooled: it is in the middle of its training."""
    return any(e.get("phase") == "train" for e in demo_training.spooled(spool, job))


@pytest.mark.integration
@pytest.mark.timeout(DEMO_TEST_TIMEOUT_S)
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("signum", "times"), [(signal.SIGINT, 2), (signal.SIGTERM, 1)],
                         ids=["ctrl-c-twice", "sigterm"])
def test_stopping_the_demo_mid_training_ends_the_job_and_every_process(
        tmp_path: Path, signum: int, times: int, demo_alone: None) -> None:
    """What a user's double Ctrl-C (SIGINT to the whole foreground group, twice) or a
    ``kill`` does to ``make demo`` while its job trains. The job's attempt ends ``cancelled``
    and that end is stored and rolled up before the services stop: the job page never shows
    a stopped job as running (it used to, until the next start). Afterwards no process the
    demo started runs and its port is free."""
    env = dict(os.environ, DATABASE_URL=database_url(connection.settings_dict),
               CELERY_BROKER_URL=str(settings.CELERY_BROKER_URL),
               DJANGO_SETTINGS_MODULE="ettweb.settings.test")
    port, job = _free_port(), f"stopped-{signum}"
    spool = tmp_path / "demo" / "spool"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ettweb.platform.demo", "--no-fleet", "--job", job,
         "--steps", "100000", "--fail-at-step", "99999", "--port", str(port),
         "--var-dir", str(tmp_path), "--trainer-arg=--embedding-rows=1000",
         "--trainer-arg=--batch-size=64", "--trainer-arg=--checkpoint-every=50"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not (_answers(port) and _trains(spool, job)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() \
                if proc.stdout else ""
            time.sleep(0.5)
        table = json.loads((tmp_path / "demo" / "processes.json").read_text())
        assert [row["name"] for row in table] == ["worker", "beat", "collector", "web",
                                                  "trainer"]
        for _ in range(times):
            os.killpg(proc.pid, signum)
            time.sleep(0.3)
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    leftovers = [row["name"] for row in table if not _group_gone(row["pid"])]
    assert leftovers == [], out[-3000:]
    assert _group_gone(proc.pid), out[-3000:]
    assert not _answers(port)
    assert "stopped web (pid" in out and "worker (pid" in out, out[-3000:]
    assert not (tmp_path / "demo" / "processes.json").exists()
    # The supervisor ended the attempt; it was spooled, stored and rolled up.
    assert [attrs["status"] for _, attrs in _ends(spool, job)] == ["cancelled"]
    stored = Event.objects.filter(job=job, mark="attempt_end")
    assert [e.attrs["status"] for e in stored] == ["cancelled"], out[-3000:]
    assert JobRollup.objects.get(job=job).status == "cancelled", out[-3000:]
