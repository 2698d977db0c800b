"""The supervisor, ``python -m trainer``: owns a job's attempts and restarts it after a failure.

Why a separate process: an attempt's boundaries must be reported by something that outlives the
attempt. The supervisor emits ``attempt_start`` (hardware allocated) before it spawns the
training process and ``attempt_end`` after that process exits, including when it crashed and
could report nothing itself. The wait before a restart stands in for a scheduler finding new
hardware: ETT sees it as ``restart_gap``. It imports no torch, so flag errors are instant.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from collector.reporter import Reporter
from trainer import compile_store, store_key, warmup
from trainer.config import (
    LAUNCH_TS_ENV,
    SUPERVISED_ENV,
    OneLineParser,
    TrainConfig,
    add_training_args,
    config_from_args,
    cuda_device_count,
    non_negative_float,
    non_negative_int,
    positive_int,
    safe_name,
)

RESTARTERS = ("supervisor", "torchrun")
COMPILE_CACHE_FOLDER = "compile-cache"
STOP_GRACE_S = 10.0
EXIT_CANCELLED = 130


@dataclass(frozen=True)
class SupervisorOptions:
    """What the supervisor adds to the training flags."""

    nproc_per_node: int
    restart_delay: float
    max_restarts: int
    team: str | None
    cluster: str | None
    compile_cache_dir: str | None
    restarts_by: str = "supervisor"
    compile_store: str | None = None


class Cancelled(Exception):
    """The supervisor was asked to stop (Ctrl-C or SIGTERM)."""


def build_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="python -m trainer",
        description="Train the reference TorchRec DLRM on synthetic Criteo-like data, reporting "
                    "every lifecycle phase to ETT, and restart it from its latest checkpoint "
                    "when it fails.",
        epilog="Demo (about 2 minutes on 2 cores, one crash and restart): python -m trainer "
               "--job demo --fail-at-step 1150",
    )
    add_training_args(parser)
    sup = parser.add_argument_group("supervisor")
    sup.add_argument("--nproc-per-node", type=positive_int, default=1,
                     help="training processes (ranks); >1 launches them with torchrun "
                          "(default: %(default)s)")
    sup.add_argument("--restart-delay", type=non_negative_float, default=5.0,
                     help="seconds to wait before a restart, as a scheduler would "
                          "(default: %(default)s)")
    sup.add_argument("--max-restarts", type=non_negative_int, default=3,
                     help="restarts after failures before giving up (default: %(default)s)")
    sup.add_argument("--restarts-by", choices=RESTARTERS, default="supervisor",
                     help="who restarts a failed attempt: this supervisor (it marks each "
                          "attempt, waits --restart-delay, and restarts up to --max-restarts "
                          "times) or torchrun itself (torchrun --max-restarts; rank 0 of the "
                          "trainer then marks its attempts, and a crashed one is seen as "
                          "lost; no restart delay) (default: %(default)s)")
    sup.add_argument("--team", default=None, help="team that owns the job (attempt_start attrs)")
    sup.add_argument("--cluster", default=None, help="cluster it runs on (attempt_start attrs)")
    sup.add_argument("--compile-cache-dir", default=None,
                     help="inductor cache for every attempt (default: $TORCHINDUCTOR_CACHE_DIR; "
                          f"else <checkpoint-dir>/{COMPILE_CACHE_FOLDER} with --opt "
                          "compile_cache, or a fresh folder per attempt without it)")
    sup.add_argument("--compile-store", default=None, metavar="DIR",
                     help="with --opt compile_cache: the compile caches shared across jobs; a "
                          "new job of the same model, config, torch version, device and world "
                          "size starts from its entry, and an attempt that compiled something "
                          "new publishes to it (default: $" + compile_store.STORE_ENV + ", else "
                          "<checkpoint-dir>/../" + compile_store.STORE_FOLDER + "; not used with "
                          "--compile-cache-dir, which is already shared). Entries are signed: "
                          "the key is $" + store_key.KEY_FILE_ENV + " or $" + store_key.KEY_ENV +
                          ", else ~/.config/ett/compile-store.key, made on first use")
    sup.add_argument("--no-compile-store", action="store_true",
                     help="keep the job's compile caches to itself")
    return parser


def parse(argv: list[str] | None = None) -> tuple[TrainConfig, SupervisorOptions]:
    parser = build_parser()
    args: argparse.Namespace = parser.parse_args(sys.argv[1:] if argv is None else argv)
    cfg = config_from_args(args, parser)
    if cfg.on_cuda and args.nproc_per_node > (gpus := cuda_device_count()):
        # NCCL refuses two ranks on one GPU ("Duplicate GPU detected"): say so before starting.
        parser.error(f"--nproc-per-node {args.nproc_per_node} with --device cuda needs one GPU "
                     f"per rank; {gpus} available")
    cache = args.compile_cache_dir or os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    options = SupervisorOptions(args.nproc_per_node, args.restart_delay, args.max_restarts,
                                args.team, args.cluster,
                                str(Path(cache).absolute()) if cache else None,
                                args.restarts_by, store_folder(args, cfg))
    if options.compile_store is not None:
        try:
            store_key.load_key()  # a key setting that cannot be used stops the job here
        except store_key.StoreKeyError as exc:
            parser.error(f"compile store: {exc}")
    return cfg, options


def store_folder(args: argparse.Namespace, cfg: TrainConfig) -> str | None:
    """The shared compile store this job uses, or None: only a job whose caches are its own
    (``compile_cache``, no operator folder) has anything to fetch or share."""
    if args.no_compile_store or not cfg.compile or "compile_cache" not in cfg.opts:
        return None
    if args.compile_cache_dir or os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return None
    folder = (args.compile_store or os.environ.get(compile_store.STORE_ENV)
              or Path(cfg.checkpoint_dir).parent / compile_store.STORE_FOLDER)
    return str(Path(folder).absolute())


class Supervisor:
    """Runs attempt after attempt of one job until one completes or restarts run out."""

    def __init__(self, cfg: TrainConfig, options: SupervisorOptions) -> None:
        self.cfg = cfg
        self.options = options
        self.store = StoreSync(cfg, options, self.say) if options.compile_store else None

    def run(self) -> int:
        """Returns the process exit status: 0 completed, 1 failed, 130 cancelled."""
        try:
            if self.options.restarts_by == "torchrun":
                return self.run_under_torchrun()
            return self.run_attempts()
        finally:
            if self.store is not None:
                self.store.wait()  # a job's last publish finishes before the supervisor exits

    def run_attempts(self) -> int:
        attempt = 0
        while True:
            status = self.run_attempt(attempt)
            if status == "completed":
                return 0
            if status == "cancelled":
                return EXIT_CANCELLED
            if attempt >= self.options.max_restarts:
                self.say(f"attempt {attempt} failed; no restarts left "
                         f"(--max-restarts {self.options.max_restarts})")
                return 1
            self.say(f"attempt {attempt} failed; restarting in {self.options.restart_delay:g} s "
                     f"(restart {attempt + 1} of {self.options.max_restarts})")
            try:
                time.sleep(self.options.restart_delay)
            except Cancelled:
                return EXIT_CANCELLED
            attempt += 1

    def run_attempt(self, attempt: int) -> str:
        """One attempt: mark its start, run the training process(es), mark how it ended."""
        reporter = Reporter(self.cfg.job, attempt=attempt, rank=0, spool_dir=self.cfg.spool_dir,
                            heartbeat_s=0)  # liveness comes from the trainer, which knows steps
        try:
            reporter.attempt_start(gpus=self.options.nproc_per_node, **self._attempt_attrs())
            if self.store is not None:
                self.store.fetch(self.compile_cache(attempt), reporter)
            self.say(f"attempt {attempt} starting: {' '.join(self.command())}")
            env = self.child_env(attempt)
            warm_up = self._start_warm_up(attempt, env)
            try:
                status, detail = self._run_child(env)
            finally:
                _reap_warm_up(warm_up)
            reporter.attempt_end(status, **detail)
            self.say(f"attempt {attempt} {status} (exit code {detail['exit_code']})")
            if self.store is not None:
                self.store.publish_soon(self.compile_cache(attempt))
            return status
        finally:
            reporter.shutdown()
            self._drop_fresh_cache(attempt)

    def run_under_torchrun(self) -> int:
        """One torchrun that restarts the ranks itself (``--max-restarts``).

        The attempt marks then come from the trainer (rank 0; the attempt number is torchrun's
        restart count), since nothing outlives an attempt but torchrun, which reports nothing.
        The compile cache folder is the same for every restart: torchrun restarts on the same
        host, whose folders survive.
        """
        env = self.child_env(0, supervised=False)
        if self.store is not None:
            self.store.fetch(self.compile_cache(0), None)
        self.say(f"torchrun restarts failed attempts (up to {self.options.max_restarts}): "
                 f"{' '.join(self.command())}")
        child = subprocess.Popen(self.command(), env=env, start_new_session=True)
        try:
            code = child.wait()
        except Cancelled:
            stop(child)
            return EXIT_CANCELLED
        finally:
            self._drop_fresh_cache(0)
            if self.store is not None:
                self.store.publish_soon(self.compile_cache(0))
        self.say("torchrun: " + ("completed" if code == 0 else f"failed (exit code {code})"))
        return 0 if code == 0 else 1

    def _attempt_attrs(self) -> dict[str, Any]:
        """Free-form attempt attrs. ``gpus`` (set by the caller) is ``--nproc-per-node``: one
        accelerator per rank on cuda. ``device`` is added only on cuda, so a CPU attempt's
        attrs stay as they always were."""
        attrs = {"model": "dlrm", "team": self.options.team, "cluster": self.options.cluster,
                 "device": "cuda" if self.cfg.on_cuda else None}
        return {key: value for key, value in attrs.items() if value}

    def _start_warm_up(self, attempt: int,
                       env: dict[str, str]) -> subprocess.Popen[bytes] | None:
        """``init_overlap``: the compile warm-up process (trainer.warmup), started before the
        trainer so that its torch import overlaps the trainer's; the trainer finds its lock
        file in the environment and waits for it before compiling. One per attempt, shared by
        all ranks of this node (they compile the same graphs into the same cache); none on a
        warm cache (:func:`trainer.warmup.needed`)."""
        if not warmup.needed(self.cfg, self.compile_cache(attempt)):
            return None
        lock = self.compile_cache(attempt) / f"warm-up-attempt-{attempt}.lock"
        env[warmup.WARM_UP_ENV] = str(lock)
        return warmup.spawn(self.cfg.to_argv(), lock, env)

    def _run_child(self, env: dict[str, str]) -> tuple[str, dict[str, int]]:
        # Its own session: a terminal's Ctrl-C reaches only the supervisor, which forwards one
        # SIGINT, so the child is never interrupted twice in the middle of its cleanup.
        child = subprocess.Popen(self.command(), env=env, start_new_session=True)
        try:
            code = child.wait()
        except Cancelled:
            return "cancelled", {"exit_code": stop(child)}
        return ("completed" if code == 0 else "failed"), {"exit_code": code}

    def command(self) -> list[str]:
        """``python -m trainer.train ...``, or torchrun around it for several ranks.

        torchrun gets ``--max-restarts 0`` when restarts are this supervisor's job, so that each
        one is a new ETT attempt with its own marks; with ``--restarts-by torchrun`` it gets
        ``--max-restarts`` and always runs, also for one rank.
        """
        train_args = ["-m", "trainer.train", *self.cfg.to_argv()]
        by_torchrun = self.options.restarts_by == "torchrun"
        if self.options.nproc_per_node == 1 and not by_torchrun:
            return [sys.executable, *train_args]
        restarts = self.options.max_restarts if by_torchrun else 0
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", str(self.options.nproc_per_node),
                "--max-restarts", str(restarts), *train_args]

    def child_env(self, attempt: int, *, supervised: bool = True) -> dict[str, str]:
        """The attempt number, spool, launch time and a compile cache that survives restarts.

        ``supervised=False`` (torchrun restarts): no attempt number, launch time or supervised
        flag, which would be stale after torchrun's first restart; the trainer finds its own.

        Why the cache settings: inductor's default cache is under /tmp, which a rescheduled
        container loses; a kept folder turns the restart's compile from ~30 s into ~3 s on CPU,
        and TORCH_COMPILE_JOB_ID lets PT2 reuse its saved shape profiles (PYTORCH_NOTES): the
        job's name, or with the compile store its artifact key, so the next job of the model
        finds them too.
        """
        env = dict(os.environ)
        env.update({"ETT_SPOOL_DIR": self.cfg.spool_dir,
                    "TORCHINDUCTOR_CACHE_DIR": str(self.compile_cache(attempt))})
        if supervised:
            env.update({"ETT_ATTEMPT": str(attempt), SUPERVISED_ENV: "1",
                        LAUNCH_TS_ENV: repr(time.time())})
        if self.store is not None:  # the saved shape profiles travel with the store's entry
            env["TORCH_COMPILE_JOB_ID"] = f"ett-{compile_store.key_digest(self.store.key)}"
        elif self.options.compile_cache_dir or "compile_cache" in self.cfg.opts:
            env["TORCH_COMPILE_JOB_ID"] = self.cfg.job
        return env

    def _drop_fresh_cache(self, attempt: int) -> None:
        """A per-attempt cache dies with its attempt (the container's /tmp would)."""
        cache = self.compile_cache(attempt)
        if cache.name == f"attempt-{attempt}":
            shutil.rmtree(cache.parent, ignore_errors=True)

    def compile_cache(self, attempt: int) -> Path:
        """Where this attempt's PT2 caches live (the ``compile_cache`` switch).

        An operator's folder (flag or environment) always wins. Otherwise ``compile_cache``
        keeps them beside the checkpoints, which survive a restart; without it each attempt
        starts from an empty folder, as a rescheduled container does with its ``/tmp``.
        """
        if self.options.compile_cache_dir:
            return Path(self.options.compile_cache_dir)
        if "compile_cache" in self.cfg.opts:
            return Path(self.cfg.checkpoint_dir) / COMPILE_CACHE_FOLDER
        fresh = Path(self.cfg.checkpoint_dir).parent / f".compile-cache-{safe_name(self.cfg.job)}"
        return fresh / f"attempt-{attempt}"

    def say(self, message: str) -> None:
        print(f"[{self.cfg.job} supervisor] {message}", file=sys.stderr, flush=True)


class StoreSync:
    """One job's side of the shared compile store (trainer.compile_store).

    Before an attempt whose cache folder is still empty (a new job), the entry for this job's
    artifact key is unpacked into it, reported as a blocking ``compile`` span (stage
    ``store_fetch``: the seconds belong to pt2_compiler). After an attempt, what it compiled is
    published in a background thread, so neither the restart nor the job's end waits for the
    tar; the next fetch or publish, and the supervisor's exit, wait for it.
    """

    def __init__(self, cfg: TrainConfig, options: SupervisorOptions,
                 say: Callable[[str], None]) -> None:
        assert options.compile_store is not None
        self.store = compile_store.CompileStore(Path(options.compile_store), store_key.load_key())
        self.cfg = cfg
        self.world_size = options.nproc_per_node
        self.say = say
        self._key: dict[str, Any] | None = None
        self._known: dict[str, list[int]] = {}
        self._publishing: threading.Thread | None = None

    @property
    def key(self) -> dict[str, Any]:
        if self._key is None:  # nvidia-smi on a GPU: asked once, when first needed
            self._key = compile_store.artifact_key(self.cfg, self.world_size)
        return self._key

    def fetch(self, cache: Path, reporter: Reporter | None) -> None:
        """Fill an empty ``cache`` from the store; ``reporter`` reports the span (None under
        torchrun's restarts, where no attempt is marked by this process yet)."""
        self.wait()
        if compile_store.has_artifacts(cache):
            return
        start = time.time()
        outcome, self._known = self.store.fetch(self.key, cache)
        if reporter is not None:
            reporter.span("compile", start, max(time.time(), start),
                          attrs={"stage": "store_fetch", **outcome.attrs()})
        entry = self.store.entry(self.key)
        if outcome.status == "damaged":
            self.say(f"compile store entry skipped, compiling without it: {outcome.reason}")
        elif outcome.status == "miss" and not outcome.reason:
            self.say(f"compile store {entry}: no entry yet; this job compiles cold and "
                     "publishes one for the next job of this model")
        else:
            self.say(f"compile store {entry}: {outcome.describe()}")

    def publish_soon(self, cache: Path) -> None:
        self.wait()

        def publish() -> None:
            outcome, self._known = self.store.publish(self.key, cache, self._known)
            if outcome.status != "unchanged":
                self.say(f"compile store {self.store.entry(self.key)}: {outcome.describe()}")

        self._publishing = threading.Thread(target=publish, name="compile-store-publish")
        self._publishing.start()

    def wait(self) -> None:
        if self._publishing is not None:
            self._publishing.join()
            self._publishing = None


def _reap_warm_up(warm_up: subprocess.Popen[bytes] | None) -> None:
    """A warm-up outliving its attempt (the trainer crashed before compiling) is killed."""
    if warm_up is None:
        return
    if warm_up.poll() is None:
        warm_up.kill()
    warm_up.wait()


def stop(child: subprocess.Popen[bytes]) -> int:
    """Stop a child politely (SIGINT, as Ctrl-C would), then firmly; returns its exit code."""
    for sig, wait_s in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGTERM, STOP_GRACE_S)):
        if child.poll() is not None:
            break
        child.send_signal(sig)
        try:
            return child.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue
        except Cancelled:  # asked again: stop waiting politely
            break
    child.kill()
    return child.wait()


def _cancel(signum: int, frame: FrameType | None) -> None:
    raise Cancelled(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    cfg, options = parse(argv)
    signal.signal(signal.SIGINT, _cancel)
    signal.signal(signal.SIGTERM, _cancel)
    return Supervisor(cfg, options).run()
