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
     skips it), each with one injected failure and a restart from its last checkpoint. A
     Ctrl-C meanwhile ends the job's attempt ``cancelled`` and waits (up to
     ``WIND_DOWN_DRAIN_S``) until that end is stored before the services stop, so the job
     page never shows a job the demo stopped as still running;
  6. waits until every spooled event is stored, prints each job's ETT%, and serves the dashboard
     (and last week's e-mail report at /reports/preview/) until Ctrl-C, then shuts everything
     down (the embedded servers too, if it started them).

It imports no Django and no torch: it only orchestrates processes, the way an operator would.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ettweb.platform import demo_training, embedded
from ettweb.platform.demo_processes import ProcessTable, stop_groups

REPO_ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
#: The simulated fleet step 3 loads: small enough to take seconds, long enough for rollouts.
FLEET_DAYS, FLEET_JOBS = 90, 300


#: After a Ctrl-C during training: the most seconds to wait for the job's last events (its
#: ``attempt_end``) to be stored and its rollups refreshed before the services stop. Seconds
#: on an idle machine; a machine busy with other work took more than a minute in CI.
WIND_DOWN_DRAIN_S = 120.0


@dataclass
class Child:
    """A background process of the demo (the leader of its own process group, so a worker's
    pool processes stop with it) and the log file it writes."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes] = field(repr=False)


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
        #: The training job now running in the foreground (its own process group), if any.
        self.trainer: subprocess.Popen[bytes] | None = None
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
        """Run the live jobs; on Ctrl-C (or SIGTERM, SIGHUP) end the one training first."""
        try:
            return self._train()
        except KeyboardInterrupt:
            self.wind_down()
            raise

    def _train(self) -> int:
        a = self.args
        _say("5/7", f"training job {a.job}: {a.steps} steps, one injected failure at step "
                    f"{a.fail_at_step}, then a restart from the last checkpoint…")
        status = demo_training.train_torchrec(a, self.spool, self.work, self.env,
                                              self.started_trainer)
        if status != 0 or a.no_lightning:
            return status
        print(f"      then the Lightning job {a.lightning_job} ({a.lightning_steps} steps, "
              "instrumented by its ETTCallback alone), with one failure too…", flush=True)
        return demo_training.train_lightning(a, self.spool, self.work, self.env,
                                             self.started_trainer)

    def started_trainer(self, popen: subprocess.Popen[bytes]) -> None:
        """Record the job's process group, so ``make stop`` finds it after a killed demo."""
        self.trainer = popen
        self.table.write(self.groups())

    def wind_down(self) -> None:
        """The demo was interrupted while a job trained: stop the job (its supervisor ends
        the attempt ``cancelled``), end any attempt still open, and wait until those ends are
        stored and rolled up, before :meth:`running` stops the collector and the worker.

        Why: the services used to stop at once, and the job's ``attempt_end``, shipped but not
        yet stored, waited in the broker for the next start while the job page showed the job
        running. Further signals are held meanwhile; every wait here is bounded."""
        with signals_held():
            print("\nstopping the training job: its attempt ends as cancelled…", flush=True)
            if self.trainer is not None:
                demo_training.stop_job(self.trainer)
            for job, attempt in demo_training.end_open_attempts(self.spool, self.jobs()):
                print(f"      {job}: attempt {attempt} left open by its process; the demo "
                      "ended it (cancelled)", flush=True)
            print(f"      storing the jobs' last events before the services stop (at most "
                  f"{WIND_DOWN_DRAIN_S:.0f} s)…", flush=True)
            for job, problem in self.drain(WIND_DOWN_DRAIN_S).items():
                print(f"      {job}: {problem}", file=sys.stderr, flush=True)

    def jobs(self) -> list[str]:
        return [self.args.job] + ([] if self.args.no_lightning else [self.args.lightning_job])

    def wait_stored(self) -> dict[str, object]:
        """Wait until every spooled event is stored, then report on the STORED events.

        The report reads ``manage.py ett_export``'s file, not the spool: the collector
        deletes shipped segments 10 minutes later, and a report on what is left of them
        printed other numbers than the dashboard (1 attempt instead of 2) without a warning.
        """
        _say("6/7", "waiting for the collector and worker to store every event…")
        problems = self.drain(self.args.drain_timeout, say=True)
        if problems:
            raise SystemExit("demo: manage.py ett_wait_ingested failed:\n" +
                             "\n".join(problems.values()))
        export = self.work / f"{self.args.job}.jsonl"
        self.manage("ett_export", "--job", *self.jobs(), "--output", str(export), quiet=True)
        print(f"      stored events exported to {export} "
              f"(offline report: python -m ettweb.attribution {export})", flush=True)
        report = subprocess.run(
            [PY, "-m", "ettweb.attribution", str(export)],
            cwd=REPO_ROOT, env=self.env, check=True, capture_output=True, text=True)
        result: dict[str, object] = json.loads(report.stdout)
        return result

    def drain(self, timeout: float, say: bool = False) -> dict[str, str]:
        """Wait until each job's spooled events, its ``attempt_end`` marks by id among them,
        are stored and its rollups current; returns what went wrong per job (nothing: done).
        A job with nothing spooled is skipped."""
        problems = {}
        for job in self.jobs():
            lines = sum(1 for p in self.spool.glob(f"{glob.escape(job)}.a*.jsonl")
                        for ln in p.open() if ln.strip())
            if not lines:
                continue
            ends = [arg for end in demo_training.end_ids(self.spool, job)
                    for arg in ("--event-id", end)]
            proc = subprocess.run(
                [PY, str(REPO_ROOT / "manage.py"), "ett_wait_ingested", "--events", str(lines),
                 "--job", job, "--timeout", str(timeout), *ends],
                cwd=REPO_ROOT, env=self.env, capture_output=True, text=True)
            if proc.returncode != 0:
                problems[job] = proc.stderr.strip()
            elif say:
                print(f"      {job}: {proc.stdout.strip()}", flush=True)
        return problems

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
        self.table.write(self.groups())

    def groups(self) -> list[tuple[str, int]]:
        """(name, process group) of every process the demo started that may still run."""
        groups = [(child.name, child.popen.pid) for child in self.children]
        if self.trainer is not None and self.trainer.poll() is None:
            groups.append(("trainer", self.trainer.pid))
        return groups

    def check_children(self) -> None:
        for child in self.children:
            if child.popen.poll() is not None:
                raise SystemExit(f"demo: {child.name} exited with {child.popen.returncode}; "
                                 f"see {child.log_path}")

    def stop_children(self) -> list[str]:
        """Stop every child's whole process group (a Celery worker's pool processes are
        its children: signalling the leader alone left them running); returns what was
        stopped, in words."""
        groups = list(reversed(self.groups()))  # a trainer still running stops first
        trainer = [] if self.trainer is None else [self.trainer]
        stopped = stop_groups(groups, reap=lambda: [p.poll() for p in
                                                    [c.popen for c in self.children] + trainer])
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
