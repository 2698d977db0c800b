"""``python -m collector.run --job JOB -- CMD ARGS...``: run any training command and report
what only the outside sees.

Why a wrapper: a job's own Reporter (or a framework adapter) cannot report the seconds before
it was imported, nor an attempt killed by SIGKILL or the OOM killer, nor how long torchrun
took to restart its workers. This process starts the command, passes it ``ETT_JOB_ID`` and
``ETT_SPOOL_DIR`` so the job's own events land in the same job (and ``ETT_SUPERVISED=1``:
the attempt marks are the wrapper's, an adapter inside sends none), and writes through a
:class:`collector.Reporter`: ``attempt_start`` when the command starts, a ``launch`` span
until the job's own first event, and ``attempt_end`` with the status its exit says. With
``torchrun --max-restarts``, each worker group is an attempt (``collector.run_watch``).

It never makes the command fail: its own errors are logged, the command's output is not
touched, and its exit code is the command's (``128 + N`` when signal N killed it).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from collector.identity import SUPERVISED_ENV, identity_from_env
from collector.reporter import DEFAULT_SPOOL_DIR
from collector.run_attempts import Attempts, Generations, RunIdentity
from collector.run_exits import Ending, OomEvidence, ending_of, shell_exit_code
from collector.run_procs import process_start, read_stat
from collector.run_watch import Watcher

__all__ = ["SIGTERM_PREEMPTS_ENV", "build_parser", "gpus_of_command", "main"]

log = logging.getLogger("ett.run")

SIGTERM_PREEMPTS_ENV = "ETT_SIGTERM_PREEMPTS"
#: Signals that stop the attempt: passed on to the command, status cancelled (or preempted).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Signals only passed on (Slurm's ``--signal`` warnings, reload requests).
PASSED_SIGNALS = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
EXIT_NOT_FOUND, EXIT_NOT_EXECUTABLE = 127, 126
TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")

DESCRIPTION = """\
Run a training command (a torchrun line included) and report to ETT what only the outside
sees, as schema-v1 events in the spool the collector agent ships:

  attempt_start   when the command starts (attrs: --gpus, --model, --team, --cluster)
  launch          a span from the start to the first event of the job's own Reporter
                  (phase launch, owned by cluster_runtime); none if the job never reports
  attempt_end     when it exits: exit 0 -> completed; exit N -> failed, reason "exit N";
                  killed by a signal -> failed, reason the signal's name; SIGKILL by the
                  OOM killer (the cgroup's oom_kill count went up, else the kernel log
                  says so) -> failed, reason "oom", or "SIGKILL (possibly OOM)" when
                  neither can be read; SIGTERM or SIGINT sent to this wrapper -> passed on
                  to the command, status cancelled (preempted with --sigterm-preempts)
  heartbeat       when the command exits or torchrun restarts its workers: for each
                  process of the job killed outright (SIGKILL, OOM, a segfault), its last
                  completed step and that step's time, from the progress file its Reporter
                  kept in the spool, on its behalf (its attempt and rank)

The command gets ETT_JOB_ID and ETT_SPOOL_DIR, so its own Reporter or adapter reports into
the same job, and ETT_SUPERVISED=1, so an adapter (Lightning, Hugging Face) or the reference
trainer leaves the attempt marks to the wrapper. Job, attempt and rank come from the
environment as for every reporter (ETT_JOB_ID, TORCHELASTIC_RUN_ID, SLURM_JOB_ID, Kubernetes
labels; ETT_ATTEMPT, TORCHELASTIC_RESTART_COUNT, SLURM_RESTART_COUNT; RANK, SLURM_PROCID), so
a scheduler that reruns this wrapper gives each run its attempt, and the time between a
failed attempt and the next is counted as restart_gap.

torchrun --max-restarts: each worker group is one attempt. The wrapper watches the
command's processes in /proc; a worker's environment carries TORCHELASTIC_RESTART_COUNT and
RANK, and a higher restart count is a new attempt: the failed one ends when its last worker
exited (reason: the first worker that failed, and its rank), the next begins when the new
workers started.

The command's output passes through untouched and the wrapper's exit code is the command's
(128+N when signal N killed it; 127 and 126 when it cannot be started). The wrapper's own
problems are logged on stderr and never fail the command."""

EPILOG = """\
example: python -m collector.run --job ranker-42 -- torchrun --nproc-per-node 8 \\
           --max-restarts 3 train.py --config big.yaml
More: docs/instrument.md ("Any command: collector.run")."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m collector.run", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s [options] -- COMMAND [ARG ...]")
    parser.add_argument("--job", default=None,
                        help="job id, stable across restarts (default: from the environment, "
                             "see above; else a local id, with a warning)")
    parser.add_argument("--gpus", type=_positive_int, default=None, metavar="N",
                        help="accelerators the job holds on all its nodes (default: from a "
                             "torchrun command line, processes per node x nodes; else 1)")
    parser.add_argument("--model", default=None, help="model name (attempt_start attrs)")
    parser.add_argument("--team", default=None, help="team that owns the job")
    parser.add_argument("--cluster", default=None, help="cluster it runs on")
    parser.add_argument("--spool-dir", default=None, metavar="DIR",
                        help=f"where events are written (default: $ETT_SPOOL_DIR, else "
                             f"{DEFAULT_SPOOL_DIR})")
    parser.add_argument("--sigterm-preempts", action="store_true",
                        default=os.environ.get(SIGTERM_PREEMPTS_ENV, "") not in ("", "0"),
                        help="a SIGTERM sent to the wrapper is the scheduler preempting the "
                             "job: status preempted, not cancelled (also "
                             f"${SIGTERM_PREEMPTS_ENV}=1)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log each attempt's start and end on stderr")
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """The wrapper's options and the command (everything after ``--``)."""
    parser = build_parser()
    args = list(argv)
    if "--" in args:
        at = args.index("--")
        options, command = parser.parse_args(args[:at]), args[at + 1:]
    else:
        options, rest = parser.parse_known_args(args)
        command = rest
        if command and command[0].startswith("-"):
            parser.error(f"unrecognized arguments: {' '.join(command)}")
    if not command:
        parser.error("no command: put it after --, e.g. python -m collector.run -- "
                     "python train.py")
    return options, command


def _flag_value(command: Sequence[str], *names: str) -> str | None:
    for i, arg in enumerate(command):
        for name in names:
            if arg == name and i + 1 < len(command):
                return command[i + 1]
            if arg.startswith(name + "="):
                return arg[len(name) + 1:]
    return None


def gpus_of_command(command: Sequence[str]) -> int | None:
    """``--nproc-per-node`` x ``--nnodes`` of a torchrun command line, when both are
    numbers (a range of nodes counts as its lower bound); None for any other command."""
    torchrun = Path(command[0]).name == "torchrun" or \
        any(module in command[1:3] for module in TORCHRUN_MODULES)
    if not torchrun:
        return None
    per_node = _flag_value(command, "--nproc-per-node", "--nproc_per_node")
    nodes = (_flag_value(command, "--nnodes") or "1").split(":")[0]
    if per_node is None or not per_node.isdigit() or not nodes.isdigit():
        return None
    return max(1, int(per_node) * int(nodes))


@dataclass
class _Stop:
    """The stop signal the wrapper got, if any."""

    signum: int | None = None


class Run:
    """One run of the wrapper: the command, its attempts, the signals passed on."""

    def __init__(self, options: argparse.Namespace, command: list[str]) -> None:
        self.options, self.command = options, command
        self.started = _own_start()
        self.stop = _Stop()
        self.child: subprocess.Popen[bytes] | None = None
        ident = identity_from_env(job=options.job)
        if ident.job_source == "local":
            log.warning("no job id given (--job) or in the environment: reporting as %r",
                        ident.job)
        self.job, self.first_attempt = ident.job, ident.attempt
        spool = options.spool_dir or os.environ.get("ETT_SPOOL_DIR") or DEFAULT_SPOOL_DIR
        self.spool_dir = Path(spool).absolute()
        attrs = {key: value for key in ("model", "team", "cluster")
                 if (value := getattr(options, key))}
        gpus = options.gpus or gpus_of_command(command) or 1
        self.attempts = Attempts(RunIdentity(ident.job, ident.rank, self.spool_dir, gpus, attrs),
                                 OomEvidence.of_this_process())
        self.generations = Generations(self.attempts)

    def child_env(self) -> dict[str, str]:
        """The command's environment: the job and spool to report into, and
        ``ETT_SUPERVISED=1``, since this wrapper marks the attempts (an adapter or the
        reference trainer inside then marks none: one ``attempt_start``/``attempt_end`` each)."""
        return {**os.environ, "ETT_JOB_ID": self.job, "ETT_SPOOL_DIR": str(self.spool_dir),
                SUPERVISED_ENV: "1"}

    def run(self) -> int:
        previous = self._pass_signals_on()  # first: a stop from now on is passed on
        try:
            self.attempts.begin(self.first_attempt, self.started)
        except Exception as exc:
            log.warning("cannot report the start of the attempt: %s", exc)
        try:
            return self._run_command()
        finally:
            for signum, handler in previous.items():
                with contextlib.suppress(ValueError, OSError):
                    signal.signal(signum, handler)

    def _run_command(self) -> int:
        try:
            self.child = subprocess.Popen(self.command, env=self.child_env())
        except OSError as exc:
            code = EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_NOT_EXECUTABLE
            reason = "command not found" if code == EXIT_NOT_FOUND else "cannot execute"
            print(f"collector.run: {self.command[0]}: {exc.strerror or exc}", file=sys.stderr)
            try:
                self.attempts.end(time.time(), Ending("failed", reason, code))
            except Exception as error:
                log.warning("cannot report the end of the attempt: %s", error)
            return code
        watcher = self._watch(self.child.pid)
        if self.stop.signum is not None:  # a stop came while the command was starting
            self._pass(self.stop.signum)
        returncode = self.child.wait()
        exit_ts = time.time()
        try:
            self._record_exit(returncode, exit_ts, watcher)
        except Exception as exc:  # the command's exit code is returned all the same
            log.warning("cannot report the end of the attempt: %s", exc)
        return shell_exit_code(returncode)

    def _record_exit(self, returncode: int, exit_ts: float, watcher: Watcher | None) -> None:
        if watcher is not None:
            watcher.stop()
        assert self.child is not None
        ending = ending_of(returncode, received=self.stop.signum,
                           sigterm_preempts=self.options.sigterm_preempts,
                           oom_killed=self.attempts.oom.checker([self.child.pid]))
        extra = self.generations.final_attrs() if returncode != 0 else {}
        self.attempts.end(exit_ts, ending, **extra)

    def _watch(self, pid: int) -> Watcher | None:
        try:
            watcher = Watcher(pid, self.attempts, self.generations)
            watcher.start()
            return watcher
        except Exception as exc:
            log.warning("cannot watch the command's processes (%s): no launch span, and "
                        "torchrun's restarts are not seen", exc)
            return None

    # ------------------------------------------------------------------ signals
    def _pass_signals_on(self) -> dict[int, Any]:
        previous: dict[int, Any] = {}
        for signum in (*STOP_SIGNALS, *PASSED_SIGNALS):
            with contextlib.suppress(ValueError, OSError):
                previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if signum in STOP_SIGNALS and self.stop.signum is None:
            self.stop.signum = signum
        if signum == signal.SIGINT and _from_the_terminal():
            return  # the terminal sent Ctrl-C to our process group: the command has it
        self._pass(signum)

    def _pass(self, signum: int) -> None:
        child = self.child
        if child is not None and child.returncode is None:
            with contextlib.suppress(OSError):
                os.kill(child.pid, signum)


def _from_the_terminal() -> bool:
    """Whether this process's group is its terminal's foreground group (a Ctrl-C there
    reaches the command too, which runs in the same group)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _own_start() -> float:
    """When this process started (the attempt's start): from /proc, else now."""
    stat = read_stat(os.getpid())
    return time.time() if stat is None else min(time.time(), process_start(stat.start_ticks))


def main(argv: Sequence[str] | None = None) -> int:
    options, command = parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO if options.verbose else logging.WARNING,
                        stream=sys.stderr, format="[ett run] %(message)s")
    try:
        run = Run(options, command)
    except Exception as exc:  # reporting cannot be set up: run the command all the same
        log.warning("cannot report this run (%s); running the command anyway", exc)
        return _run_bare(command)
    return run.run()


def _run_bare(command: list[str]) -> int:
    try:
        returncode = subprocess.call(command)
    except OSError as exc:
        print(f"collector.run: {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_NOT_EXECUTABLE
    return shell_exit_code(returncode)


if __name__ == "__main__":
    sys.exit(main())
