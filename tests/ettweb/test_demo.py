"""`make demo` runs `python -m ettweb.demo`: here with a tiny job and --no-serve, against the test
database and broker, so the orchestration (migrate, login, worker, collector, web, trainer, drain)
is exercised by real processes."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from ettweb.demo import Demo, parse_args
from ettweb.ingest.models import CollectorCredential, Event, QuarantinedEvent
from ettweb.rollouts.models import Rollout
from ettweb.settings.env import database_url

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


def test_stopping_the_demo_stops_every_process_it_spawned(tmp_path: Path) -> None:
    demo = Demo(parse_args(["--var-dir", str(tmp_path)]))
    for name in ("worker", "beat"):
        demo.spawn(name, ["-c", "import time; time.sleep(120)"])
    popens = [child.popen for child in demo.children]
    demo.stop_children()
    assert [p.returncode for p in popens] == [-15, -15]  # SIGTERM, as the real ones get
    assert demo.children == []


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_demo_trains_a_job_and_stores_every_event(tmp_path: Path) -> None:
    env = dict(os.environ, DATABASE_URL=database_url(connection.settings_dict),
               CELERY_BROKER_URL=str(settings.CELERY_BROKER_URL),
               DJANGO_SETTINGS_MODULE="ettweb.settings.test")
    job = "demo-test-job"
    proc = subprocess.run(
        [sys.executable, "-m", "ettweb.demo", "--no-serve", "--job", job, "--steps", "40",
         "--fail-at-step", "25", "--restart-delay", "1", "--port", str(_free_port()),
         "--var-dir", str(tmp_path), "--trainer-arg=--checkpoint-every=20",
         "--trainer-arg=--embedding-rows=1000", "--trainer-arg=--batch-size=64"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=420)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"job {job}: 2 attempts" in proc.stdout
    assert "login: demo / " in proc.stdout
    # Step 3 loaded the simulated fleet beside the live job (``[k/7]`` step lines).
    assert "[3/7]" in proc.stdout and "[6/7]" in proc.stdout
    assert re.search(r"simulated [\d,]+ jobs \(seed 0, 90 days to .*, 14 rollouts; fleet ETT% ",
                     proc.stdout), proc.stdout[:3000]
    assert Rollout.objects.filter(simulated=True).count() == 14
    spool = tmp_path / "demo" / "spool"
    spooled = sum(len(p.read_text().splitlines()) for p in spool.glob("*.jsonl"))
    assert Event.objects.filter(job=job).count() == spooled > 0
    # The demo's collector signs with the credential `ett_collector create demo-node` made.
    assert CollectorCredential.objects.filter(name="demo-node", active=True).exists()
    assert not QuarantinedEvent.objects.filter(job=job).exists()
    phases = set(Event.objects.filter(job=job).values_list("phase", flat=True))
    assert {"compile", "checkpoint_save", "checkpoint_load", "train"} <= phases
    # Beat ran beside the worker (and was stopped with it: the demo returned).
    assert "beat: Starting..." in (tmp_path / "demo" / "logs" / "beat.log").read_text()
