"""``python -m bench.soak.trainer``: one simulated trainer emitting through a real Reporter.

Why a process of its own and a real ``collector.Reporter``: the soak must exercise what a
training job runs — the bounded queue, the background writer, segment rolling and sealing,
the spool bound and the drop counters — not a stand-in. Events are a plausible lifecycle
(attempt start, init phases, train slices with step ranges, heartbeats, checkpoints, evals,
failed and preempted attempts restarting from the last checkpoint) at a steady rate, with
real timestamps. The trainer rotates to a new job every ``--events-per-job`` events, so no
job grows without bound (a rollup refresh recomputes the whole job).

At the end it writes every event id the Reporter accepted (``emit`` returned an id) to
``--ids-file``, one per line, and its drop counters to ``--manifest`` (JSON). The soak's
accounting needs exactly that: which ids must be stored once, and how many of them the
Reporter itself says it dropped (``dropped_full + dropped_invalid`` minus the emits that
returned None, whose ids were never handed out).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from collector import Reporter

TICK_S = 0.05
STEPS_PER_SLICE = 10
CHECKPOINT_EVERY = 25
EVAL_EVERY = 40
INIT_PHASES = ("rendezvous", "process_group_init", "model_init", "data_init", "compile")


class Emitter:
    """Emits one trainer's lifecycle and keeps the books the accounting needs."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.ids: list[str] = []
        self.none_returns = 0
        self.dropped_full = 0
        self.dropped_invalid = 0
        self.shutdown_ok = True
        self.jobs: list[str] = []
        self.reporter: Reporter | None = None
        self.last = time.time()
        self.step = 0
        self.checkpoint_step = 0
        self.cycle = 0

    # ------------------------------------------------------------------ emitting
    def _record(self, event_id: str | None) -> None:
        if event_id is None:
            self.none_returns += 1
        else:
            self.ids.append(event_id)

    def _span(self, phase: str, **fields: Any) -> None:
        assert self.reporter is not None
        now = max(time.time(), self.last)
        self._record(self.reporter.span(phase, self.last, now, **fields))
        self.last = now

    def _mark(self, mark: str, **fields: Any) -> None:
        assert self.reporter is not None
        now = max(time.time(), self.last)
        self._record(self.reporter.mark(mark, now, **fields))
        self.last = now

    def _open_attempt(self, job: str, attempt: int) -> None:
        args = self.args
        self.reporter = Reporter(job, attempt=attempt, rank=0, host=args.host,
                                 spool_dir=args.spool_dir, heartbeat_s=0,
                                 flush_interval_s=0.1, segment_bytes=args.segment_bytes,
                                 max_spool_bytes=args.max_spool_bytes or None,
                                 install_signal_handlers=False)
        self._mark("attempt_start", attrs={"gpus": args.gpus, "model": "soak-dlrm",
                                           "team": f"team-{args.node % 3}",
                                           "cluster": "soak"})
        for phase in INIT_PHASES:
            self._span(phase)
        if attempt:
            self._span("checkpoint_load")
            self.step = self.checkpoint_step  # restart from the checkpoint: repeated steps

    def _close_attempt(self, status: str | None) -> None:
        reporter = self.reporter
        if reporter is None:
            return
        if status is not None:
            self._mark("attempt_end", attrs={"status": status})
        if not reporter.shutdown(timeout=60.0):
            self.shutdown_ok = False
        self.dropped_full += reporter.dropped_full
        self.dropped_invalid += reporter.dropped_invalid
        self.reporter = None

    def _cycle(self) -> None:
        """One training slice: a train span over the next steps and a heartbeat; now and
        then a checkpoint save or an eval."""
        self.cycle += 1
        start_step = self.step
        self.step += STEPS_PER_SLICE
        self._span("train", step_start=start_step, step_end=self.step)
        self._mark("heartbeat", step=self.step)
        if self.cycle % CHECKPOINT_EVERY == 0:
            self._span("checkpoint_save")
            self.checkpoint_step = self.step
        elif self.cycle % EVAL_EVERY == 0:
            self._span("eval", blocking=True)

    # ------------------------------------------------------------------ the run
    def run(self, stop: list[bool]) -> None:
        args = self.args
        began = time.monotonic()
        deadline = began + args.seconds
        per_job = max(50, args.events_per_job)
        job_no = 0
        while time.monotonic() < deadline and not stop[0]:
            job = f"{args.job_prefix}-j{job_no}"
            self.jobs.append(job)
            attempts = 1 + self.rng.randrange(3)  # 1-3 attempts; the last one completes
            per_attempt = max(20, per_job // attempts)
            self.step = self.checkpoint_step = 0
            for attempt in range(attempts):
                self._open_attempt(job, attempt)
                base = len(self.ids) + self.none_returns
                while (len(self.ids) + self.none_returns - base < per_attempt
                       and time.monotonic() < deadline and not stop[0]):
                    self._pace(began)
                    self._cycle()
                out_of_time = time.monotonic() >= deadline or stop[0]
                if out_of_time:
                    # The fleet is still running when the soak ends: some jobs stay open.
                    self._close_attempt(None if self.rng.random() < 0.5 else "completed")
                    break
                last = attempt == attempts - 1
                self._close_attempt("completed" if last else
                                    self.rng.choice(("failed", "preempted")))
            job_no += 1

    def _pace(self, began: float) -> None:
        """Hold ``--rate`` events a second: sleep while ahead of the schedule."""
        emitted = len(self.ids) + self.none_returns
        ahead = emitted / self.args.rate - (time.monotonic() - began)
        if ahead > TICK_S:
            time.sleep(ahead)

    def write(self) -> None:
        args = self.args
        tmp = Path(f"{args.ids_file}.tmp")
        tmp.write_text("".join(f"{i}\n" for i in self.ids))
        os.replace(tmp, args.ids_file)
        manifest = {
            "node": args.node, "trainer": args.trainer, "jobs": self.jobs,
            "accepted": len(self.ids), "none_returns": self.none_returns,
            "dropped_full": self.dropped_full, "dropped_invalid": self.dropped_invalid,
            # what the Reporter dropped after handing out an id: those ids are in the ids file
            "dropped_accepted": self.dropped_full + self.dropped_invalid - self.none_returns,
            "shutdown_ok": self.shutdown_ok,
        }
        tmp = Path(f"{args.manifest}.tmp")
        tmp.write_text(json.dumps(manifest))
        os.replace(tmp, args.manifest)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak.trainer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spool-dir", required=True)
    parser.add_argument("--job-prefix", required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--node", type=int, required=True)
    parser.add_argument("--trainer", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--rate", type=float, required=True, help="events per second")
    parser.add_argument("--events-per-job", type=int, default=5000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--segment-bytes", type=int, default=256 * 1024)
    parser.add_argument("--max-spool-bytes", type=int, default=0, help="0: unbounded")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ids-file", required=True)
    parser.add_argument("--manifest", required=True)
    args = parser.parse_args(argv)
    if args.rate <= 0 or args.seconds <= 0:
        parser.error("--rate and --seconds must be > 0")

    stop = [False]

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        stop[0] = True  # finish the attempt in hand, write the books, exit

    signal.signal(signal.SIGTERM, on_term)
    emitter = Emitter(args)
    try:
        emitter.run(stop)
    finally:
        emitter._close_attempt(None)
        emitter.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
