"""``make demo``: two real jobs' ETT%, end to end, on this machine alone.

What it does, with progress on the console:
  1. starts (or attaches to) the embedded Postgres and Redis — or uses DATABASE_URL /
     CELERY_BROKER_URL when they are set;
  2. migrates and prints a dashboard login;
  3. loads a small simulated fleet beside it (``manage.py simulate_fleet``: 90 days, 300 jobs,
     staged optimization rollouts and one change nobody recorded; ``--no-fleet`` skips it), so
     the trend, lost-time and rollout pages have months to show, gives its components owner
     teams and some of them owners (``manage.py simulate_owners``), detects its changes
     (``manage.py ett_detect_changes``) and computes its rollouts' verdicts
     (``manage.py ett_warm_impacts``) so ``/changes/`` and ``/rollouts/`` show them at once;
  4. starts a Celery worker, Celery beat (the periodic tasks of ``ettweb/platform/schedule.py``: the
     stale-rollup sweep among them), the collector agent and the web server
     (http://127.0.0.1:8000, also the ``ETT_BASE_URL`` of every link in the e-mail report
     unless it is set);
  5. runs the reference TorchRec trainer for about two minutes, then a PyTorch Lightning job
     instrumented by its ``ETTCallback`` alone (``trainer.lightning_job``; ``--no-lightning``
     skips it), each with one injected failure and a restart from its last checkpoint;
  6. waits until every spooled event is stored, prints each job's ETT%, and serves the dashboard
     (and last week's e-mail report at /reports/preview/) until Ctrl-C, then shuts everything
     down (the embedded servers too, if it started them).

It imports no Django and no torch: it only orchestrates processes, the way an operator would.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ettweb.platform import demo_training, embedded

REPO_ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
#: The simulated fleet step 3 loads: small enough to take seconds, long enough for rollouts.
FLEET_DAYS, FLEET_JOBS = 90, 300


#: How long a process group has to stop after SIGTERM before it is killed.
STOP_TIMEOUT_S = 20.0


@dataclass
class Child:
    """A background process of the demo (the leader of its own process group, so a worker's
    pool processes stop with it) and the log file it writes."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes] = field(repr=False)


def started_at(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22),
    None once it is gone: with the pid, it names one process, so a pid reused after a reboot
    or a long pause is never signalled by ``--stop``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs. Zombies do not count: they are dead,
    waiting for a parent to collect them (a killed demo's children are collected by init)."""
    proc = Path("/proc")
    if not proc.is_dir():  # no procfs: ask the kernel, zombies included
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for stat in proc.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            state, _, group = stat.read_text().rpartition(")")[2].split()[:3]
            if int(group) == pgid and state not in ("Z", "X"):
                return True
    return False


def stop_groups(groups: list[tuple[str, int]], timeout: float = STOP_TIMEOUT_S,
                reap: Callable[[], object] = lambda: None) -> list[str]:
    """SIGTERM every process group, wait up to ``timeout`` for all of them, SIGKILL what is
    left; returns what was stopped, in words ("worker (pid 123)", "beat (pid 124, killed)").
    ``reap`` collects the leaders when they are our children: an unreaped leader is a
    zombie, and a zombie still counts as a member of its group."""
    for _, pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reap()
        if not any(group_alive(pgid) for _, pgid in groups):
            break
        time.sleep(0.1)
    stopped = []
    for name, pgid in groups:
        killed = group_alive(pgid)
        if killed:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        stopped.append(f"{name} (pid {pgid}{', killed' if killed else ''})")
    return stopped


class ProcessTable:
    """``var/demo/processes.json``: the groups a running demo started, so ``make stop``
    (``python -m ettweb.platform.demo --stop``) can stop whatever a demo that was killed outright
    (SIGKILL, a closed terminal) left running."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, children: list[Child]) -> None:
        rows = [{"name": c.name, "pid": c.popen.pid, "started": started_at(c.popen.pid)}
                for c in children]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(rows))

    def alive(self) -> list[tuple[str, int]]:
        """The recorded groups whose leader is still the process the demo started."""
        try:
            rows = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return []
        return [(row["name"], row["pid"]) for row in rows
                if row.get("started") and started_at(row["pid"]) == row["started"]]

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


def _say(step: str, text: str) -> None:
    print(f"\033[1m[{step}]\033[0m {text}", flush=True)


class Demo:
    """Owns every process the demo starts, so that Ctrl-C or an error stops them all."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(args.var_dir).resolve() / "demo"
        self.spool = self.work / "spool"
        self.logs = self.work / "logs"
        self.children: list[Child] = []
        self.table = ProcessTable(self.work / "processes.json")
        self.started_embedded = False
        self.env = dict(os.environ)
        self.env.setdefault("DJANGO_SETTINGS_MODULE", "ettweb.settings.local")
        # A user's demo shows the site's own error pages, never Django's debug pages (a
        # debug 404 lists every URL pattern); a developer sets DJANGO_DEBUG=true for them.
        self.env.setdefault("DJANGO_DEBUG", "false")
        # Links in the e-mail report (its preview included) point at the address the demo
        # serves, not the production default; a user's own ETT_BASE_URL wins (an empty one
        # counts as unset, as it does for the settings).
        if not self.env.get("ETT_BASE_URL", "").strip():
            self.env["ETT_BASE_URL"] = f"http://127.0.0.1:{args.port}"
        self.env["ETT_SPOOL_DIR"] = str(self.spool)
        self.env["PYTHONUNBUFFERED"] = "1"

    # ------------------------------------------------------------------ steps
    def servers(self) -> None:
        need_pg = not os.environ.get("DATABASE_URL")
        need_redis = not os.environ.get("CELERY_BROKER_URL")
        if need_pg or need_redis:
            _say("1/7", "starting embedded Postgres and Redis (data in var/)…")
            was_running = embedded.status()
            # Set before starting: a Ctrl-C during the start must still stop them.
            self.started_embedded = not all(was_running.values())
            urls = embedded.start(postgres=need_pg, redis=need_redis)
            if urls.database_url:
                self.env["DATABASE_URL"] = urls.database_url
            if urls.broker_url:
                self.env["CELERY_BROKER_URL"] = urls.broker_url
        else:
            _say("1/7", "using DATABASE_URL and CELERY_BROKER_URL from the environment")

    def migrate_and_login(self) -> str:
        _say("2/7", "migrating the database…")
        self.manage("migrate", "--noinput", quiet=True)
        out = self.manage("ett_login", self.args.username, quiet=True)
        return out.strip().splitlines()[-1]

    def simulated_fleet(self) -> None:
        """The simulated fleet (seed 0, ending today): months of jobs and rollouts to browse
        while the live job trains; a second demo on the same database stores nothing new."""
        if self.args.no_fleet:
            _say("3/7", "no simulated fleet (--no-fleet)")
            return
        _say("3/7", f"loading a simulated fleet: {FLEET_DAYS} days, {FLEET_JOBS} jobs…")
        out = self.manage("simulate_fleet", "--seed", "0", "--days", str(FLEET_DAYS),
                          "--jobs", str(FLEET_JOBS), "--no-progress", quiet=True)
        print(f"      {out.strip().splitlines()[-1]}", flush=True)
        # Owners first, so the component pages name them. Beat detects changes hourly and
        # computes the rollouts' verdicts every 10 minutes; run both once now so /changes/
        # and /rollouts/ show the fleet's at once.
        for command in ("simulate_owners", "ett_detect_changes", "ett_warm_impacts"):
            out = self.manage(command, quiet=True)
            print(f"      {out.strip().splitlines()[-1]}", flush=True)

    def collector_credential(self) -> dict[str, str]:
        """A credential for the demo's collector, which signs batches as in production.

        ``demo-node`` on a fresh database; a second demo on the same database gets a new
        suffixed name (names are unique and the old secret was shown only once).
        """
        for name in ("demo-node", f"demo-node-{os.urandom(3).hex()}"):
            proc = subprocess.run([PY, str(REPO_ROOT / "manage.py"), "ett_collector", "create",
                                   name], cwd=REPO_ROOT, env=self.env, capture_output=True,
                                  text=True)
            if proc.returncode == 0:
                pairs = (line.partition("=") for line in proc.stdout.splitlines())
                return {key: value for key, _, value in pairs
                        if key in ("ETT_COLLECTOR_ID", "ETT_COLLECTOR_SECRET")}
            if "already exists" not in proc.stderr:
                break
        raise SystemExit(f"demo: manage.py ett_collector create failed:\n{proc.stderr.strip()}")

    def start_services(self) -> None:
        _say("4/7", f"starting worker, beat, collector and web server (logs in {self.logs})…")
        credential = self.collector_credential()
        self.spawn("worker", ["-m", "celery", "-A", "ettweb.celery", "worker", "-n", "demo@%h",
                              "--loglevel", "INFO", "--concurrency", "1", "--without-heartbeat",
                              "--without-mingle", "--without-gossip"])
        self.spawn("beat", self.beat_argv())
        # It asks the web server below whether its credential is accepted (a rejection is an
        # ERROR in collector.log); until web answers, it says it cannot hear yet.
        self.spawn("collector", ["-m", "collector", "--spool-dir", str(self.spool),
                                 "--poll-interval", "0.5", "--server-url",
                                 f"http://127.0.0.1:{self.args.port}"], extra_env=credential)
        self.spawn("web", [str(REPO_ROOT / "manage.py"), "runserver", "--noreload",
                           f"127.0.0.1:{self.args.port}"])

    def beat_argv(self) -> list[str]:
        """Celery beat, as deployments run it: without it the stale-rollup sweep and the
        other periodic tasks never run in the demo. Its schedule file (last run times) lives
        in the demo's own directory, not in the current one."""
        return ["-m", "celery", "-A", "ettweb.celery", "beat", "--loglevel", "INFO",
                "--schedule", str(self.work / "celerybeat-schedule")]

    def train(self) -> int:
        a = self.args
        _say("5/7", f"training job {a.job}: {a.steps} steps, one injected failure at step "
                    f"{a.fail_at_step}, then a restart from the last checkpoint…")
        status = demo_training.train_torchrec(a, self.spool, self.work, self.env)
        if status != 0 or a.no_lightning:
            return status
        print(f"      then the Lightning job {a.lightning_job} ({a.lightning_steps} steps, "
              "instrumented by its ETTCallback alone), with one failure too…", flush=True)
        return demo_training.train_lightning(a, self.spool, self.work, self.env)

    def jobs(self) -> list[str]:
        return [self.args.job] + ([] if self.args.no_lightning else [self.args.lightning_job])

    def wait_stored(self) -> dict[str, object]:
        """Wait until every spooled event is stored, then report on the STORED events.

        The report reads ``manage.py ett_export``'s file, not the spool: the collector
        deletes shipped segments 10 minutes later, and a report on what is left of them
        printed other numbers than the dashboard (1 attempt instead of 2) without a warning.
        """
        _say("6/7", "waiting for the collector and worker to store every event…")
        for job in self.jobs():
            lines = sum(1 for p in self.spool.glob(f"{job}.a*.jsonl")
                        for ln in p.open() if ln.strip())
            out = self.manage("ett_wait_ingested", "--events", str(lines), "--job", job,
                              "--timeout", str(self.args.drain_timeout), quiet=True)
            print(f"      {job}: {out.strip()}", flush=True)
        export = self.work / f"{self.args.job}.jsonl"
        self.manage("ett_export", "--job", *self.jobs(), "--output", str(export), quiet=True)
        print(f"      stored events exported to {export} "
              f"(offline report: python -m ettweb.attribution {export})", flush=True)
        report = subprocess.run(
            [PY, "-m", "ettweb.attribution", str(export)],
            cwd=REPO_ROOT, env=self.env, check=True, capture_output=True, text=True)
        result: dict[str, object] = json.loads(report.stdout)
        return result

    # ------------------------------------------------------------------ processes
    def manage(self, *argv: str, quiet: bool = False) -> str:
        proc = subprocess.run([PY, str(REPO_ROOT / "manage.py"), *argv], cwd=REPO_ROOT,
                              env=self.env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"demo: manage.py {argv[0]} failed:\n{proc.stderr.strip()}")
        if not quiet:
            print(proc.stdout, end="")
        return proc.stdout

    def spawn(self, name: str, argv: list[str],
              extra_env: dict[str, str] | None = None) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        log_path = self.logs / f"{name}.log"
        log = open(log_path, "ab")  # noqa: SIM115 - closed in stop_children
        env = {**self.env, **(extra_env or {})}
        # Its own session: Ctrl-C reaches the demo alone, which stops the children in order.
        popen = subprocess.Popen([PY, *argv], cwd=REPO_ROOT, env=env, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        self.children.append(Child(name, popen, log_path, log))
        self.table.write(self.children)

    def check_children(self) -> None:
        for child in self.children:
            if child.popen.poll() is not None:
                raise SystemExit(f"demo: {child.name} exited with {child.popen.returncode}; "
                                 f"see {child.log_path}")

    def stop_children(self) -> list[str]:
        """Stop every child's whole process group (a Celery worker's pool processes are
        its children: signalling the leader alone left them running); returns what was
        stopped, in words."""
        groups = [(child.name, child.popen.pid) for child in reversed(self.children)]
        stopped = stop_groups(groups, reap=lambda: [c.popen.poll() for c in self.children])
        for child in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(timeout=5)
            child.log.close()
        self.children.clear()
        self.table.clear()
        return stopped

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        try:
            yield
        finally:
            with signals_held():
                stopped = self.stop_children()
                if stopped:
                    print(f"stopped {', '.join(stopped)}", flush=True)
                if self.started_embedded and not self.args.keep_servers:
                    embedded.stop()
                    print("embedded Postgres and Redis stopped", flush=True)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Finish the shutdown whatever signals come meanwhile: make passes Ctrl-C on, and an
    impatient user presses it twice; the second one used to abort the clean-up half-way
    and leave the worker, beat and the servers running."""
    def still_stopping(signum: int, frame: object) -> None:
        print("still stopping: every process the demo started is being stopped…",
              file=sys.stderr, flush=True)

    held = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {signum: signal.signal(signum, still_stopping) for signum in held}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _print_job(report: dict[str, object]) -> None:
    jobs = report.get("jobs")
    for job in jobs if isinstance(jobs, list) else []:
        lost = sorted(job["lost_by_component_s"].items(), key=lambda kv: -kv[1])
        print(f"      job {job['job']}: {job['attempts']} attempts, wall {job['wall_s']:.1f} s, "
              f"ETT {job['ett_pct']:.2f}%", flush=True)
        print("      lost by component: " + ", ".join(f"{c} {s:.1f}s" for c, s in lost
                                                    if round(s, 1) > 0),
              flush=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_leftovers(args: argparse.Namespace) -> int:
    """``--stop`` (``make stop``): stop what a demo that could not clean up left running (its
    recorded process groups), then the embedded servers."""
    table = ProcessTable(Path(args.var_dir).resolve() / "demo" / "processes.json")
    stopped = stop_groups(table.alive())
    table.clear()
    print(f"stopped {', '.join(stopped)}" if stopped else "no demo process was running",
          flush=True)
    if args.keep_servers:
        return 0
    servers = [name for name, was in embedded.stop().items() if was]
    print(f"embedded {' and '.join(servers)} stopped" if servers
          else "no embedded server was running", flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.stop:
        return stop_leftovers(args)
    # Ctrl-C, `kill` and a closed terminal all end the demo cleanly, also when it was started
    # in the background (a non-interactive shell starts background jobs with SIGINT ignored).
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    demo = Demo(args)
    with demo.running():
        demo.servers()
        login = demo.migrate_and_login()
        demo.simulated_fleet()
        demo.start_services()
        time.sleep(2.0)
        demo.check_children()
        url = f"http://127.0.0.1:{args.port}/"
        print(f"      dashboard (live while it trains): {url}   {login}", flush=True)
        status = demo.train()
        if status != 0:
            print(f"demo: the trainer exited with {status}", file=sys.stderr)
            return status
        demo.check_children()
        _print_job(demo.wait_stored())
        if args.no_serve:
            return 0
        _say("7/7", f"dashboard: {url}   {login}   — Ctrl-C to stop everything")
        print(f"      last week's e-mail report: {url}reports/preview/   (python manage.py "
              "send_weekly_reports --to YOU@EXAMPLE.COM prints it, or sends it once EMAIL_HOST "
              "names a relay)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(1.0)
                demo.check_children()
        print("\nstopping…", flush=True)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m ettweb.platform.demo", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--job", default=f"demo-dlrm-{time.strftime('%Y%m%d-%H%M%S')}",
                        help="job id (default: demo-dlrm-<timestamp>)")
    parser.add_argument("--steps", type=int, default=2000, help="global steps to train")
    parser.add_argument("--fail-at-step", type=int, default=1150,
                        help="the first attempt crashes at this step")
    parser.add_argument("--restart-delay", type=float, default=5.0,
                        help="seconds between the crash and the restart (the restart gap)")
    parser.add_argument("--trainer-arg", action="append", default=[], metavar="ARG",
                        help="extra argument for `python -m trainer` (repeatable)")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    parser.add_argument("--lightning-job", default=f"demo-lightning-{stamp}",
                        help="the Lightning job's id (default: demo-lightning-<timestamp>)")
    parser.add_argument("--lightning-steps", type=int, default=600,
                        help="the Lightning job's steps (it fails once at 70%% of them)")
    parser.add_argument("--no-lightning", action="store_true",
                        help="train only the TorchRec job, not the Lightning one after it")
    parser.add_argument("--port", type=int, default=8000, help="web server port")
    parser.add_argument("--username", default="demo", help="dashboard login to create")
    parser.add_argument("--var-dir", default=str(embedded.var_dir()),
                        help="where the demo's spool, checkpoints and logs go")
    parser.add_argument("--drain-timeout", type=float, default=120.0,
                        help="seconds to wait for every event to be stored")
    parser.add_argument("--no-fleet", action="store_true",
                        help="do not load the simulated fleet beside the live job")
    parser.add_argument("--no-serve", action="store_true",
                        help="exit after the job is stored instead of serving until Ctrl-C")
    parser.add_argument("--keep-servers", action="store_true",
                        help="leave the embedded Postgres and Redis running at the end")
    parser.add_argument("--stop", action="store_true",
                        help="stop what an earlier demo left running (its worker, beat, "
                             "collector and web server) and the embedded servers, then exit")
    args = parser.parse_args(argv)
    if not 0 < args.fail_at_step < args.steps:
        parser.error("--fail-at-step must be between 1 and --steps - 1")
    if args.lightning_steps < 5:
        parser.error("--lightning-steps must be at least 5")
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        return run(parse_args(argv))
    except KeyboardInterrupt:
        print("demo: interrupted; everything it started is stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
