"""One training process of the reference trainer: ``python -m trainer.train`` (one per rank).

It reports every lifecycle phase through the ETT Reporter (ETT_SPEC §4) — and knows nothing
else about ETT. The supervisor (``python -m trainer``) owns the attempt: it emits
``attempt_start``/``attempt_end`` and restarts this process after a failure; this process
resumes from the newest good checkpoint, so the steps between that checkpoint and the crash
are trained again (what ETT calls repeated training).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torchrec.datasets.utils import Batch
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.optim.keyed import CombinedOptimizer

from collector.reporter import Reporter, TrainTracker
from trainer import checkpoint
from trainer.config import TrainConfig, parse_train_config
from trainer.data import SyntheticClicks
from trainer.model import (
    ModelShape,
    attach_sparse_optimizer,
    build_optimizer,
    build_unsharded,
    compile_dense,
    plan_sharding,
    shard,
)

#: Set by the supervisor just before it spawns this process (epoch seconds).
LAUNCH_TS_ENV = "ETT_LAUNCH_TS"
EXIT_SIMULATED_FAILURE = 1
EXIT_INTERRUPTED = 130


class SimulatedFailure(RuntimeError):
    """Raised by ``--fail-at-step``: a crash in the middle of training, on attempt 0 only."""


@dataclass
class Trainer:
    """The sharded model, its optimizer and data, and where training stands."""

    cfg: TrainConfig
    reporter: Reporter
    rank: int
    world_size: int
    dmp: DistributedModelParallel
    optimizer: CombinedOptimizer
    data: SyntheticClicks
    step: int = 0
    last_saved: int | None = None
    _last_beat: float = field(default_factory=time.monotonic)
    _last_log: tuple[float, int] = (0.0, 0)

    def train_step(self, batch: Batch) -> float:
        """One optimizer step; the embedding optimizer runs fused inside ``backward``."""
        self.optimizer.zero_grad()
        loss, _ = self.dmp(batch)
        loss.backward()
        self.optimizer.step()
        return float(loss.item())

    def crash_if_due(self) -> None:
        if self.cfg.fail_at_step == self.step and self.reporter.attempt == 0:
            raise SimulatedFailure(f"simulated failure at step {self.step} (--fail-at-step)")

    def train(self) -> None:
        """Train from ``self.step`` to ``cfg.steps``, with periodic checkpoints.

        With ``--compile`` the first step runs inside the ``compile`` phase and the train tracker
        starts only after it: that step's extra time is compilation, not training (ETT_SPEC §4),
        and starting the tracker at ``step + 1`` keeps the train spans' step ranges exact.
        """
        tracker: TrainTracker | None = None if self.cfg.compile else self.reporter.train(self.step)
        try:
            while self.step < self.cfg.steps:
                self.crash_if_due()
                batch = self.data.batch(self.step)
                if tracker is None:
                    with self.reporter.phase("compile", step=self.step):
                        compile_dense(self.dmp)  # wrapping imports dynamo: a second of compile
                        loss = self.train_step(batch)
                    self.step += 1
                    tracker = self.reporter.train(self.step)
                else:
                    loss = self.train_step(batch)
                    self.step += 1
                    tracker.advance(self.step)
                self._after_step(loss, tracker)
        finally:
            if tracker is not None:
                tracker.close()  # also on a crash: the slice trained so far is reported

    def _after_step(self, loss: float, tracker: TrainTracker) -> None:
        self._heartbeat_if_due()
        self._log_progress(loss)
        every = self.cfg.checkpoint_every
        # The checkpoint of the last step is saved after training, outside the tracker.
        if every and self.step % every == 0 and self.step < self.cfg.steps:
            with tracker.paused():
                self.save_checkpoint()

    def save_checkpoint(self) -> None:
        with self.reporter.phase("checkpoint_save", step=self.step):
            path = checkpoint.save(Path(self.cfg.checkpoint_dir), self.step, self.dmp,
                                   self.optimizer)
        self.last_saved = self.step
        self.say(f"checkpoint saved: {path}")

    def load_latest_checkpoint(self) -> None:
        directory = Path(self.cfg.checkpoint_dir)
        step = checkpoint.latest_step(directory)
        if step is None:
            return
        with self.reporter.phase("checkpoint_load", step=step):
            self.step = checkpoint.load(directory, step, self.dmp, self.optimizer)
        self.last_saved = step
        self.say(f"resumed from checkpoint at step {step}")

    def evaluate(self) -> None:
        """Loss and accuracy on held-out batches (every rank takes part: lookups are sharded).

        ``force_eager`` keeps eval from recompiling the dense part for ``no_grad``: that would
        be compile time hidden inside eval.
        """
        if self.cfg.eval_batches == 0:
            return
        with self.reporter.phase("eval", batches=self.cfg.eval_batches):
            self.dmp.eval()
            losses, correct, seen = [], 0, 0
            with torch.no_grad(), torch.compiler.set_stance("force_eager"):
                for index in range(self.cfg.eval_batches):
                    batch = self.data.batch(index, eval_split=True)
                    loss, (_, logits, labels) = self.dmp(batch)
                    losses.append(float(loss))
                    correct += int(((logits > 0).float() == labels).sum())
                    seen += labels.numel()
            self.dmp.train()
        self.say(f"eval: loss {sum(losses) / len(losses):.4f} accuracy {correct / seen:.3f}")

    def _heartbeat_if_due(self) -> None:
        now = time.monotonic()
        if self.reporter.heartbeat_s > 0 and now - self._last_beat >= self.reporter.heartbeat_s:
            self.reporter.heartbeat(self.step)
            self._last_beat = now

    def _log_progress(self, loss: float) -> None:
        if self.step % self.cfg.log_every and self.step != self.cfg.steps:
            return
        now = time.monotonic()
        then, then_step = self._last_log
        rate = (self.step - then_step) / (now - then) if then else 0.0
        self._last_log = (now, self.step)
        self.say(f"step {self.step}/{self.cfg.steps} loss {loss:.9g}"
                 + (f" {rate:.1f} steps/s" if rate else ""))

    def say(self, message: str) -> None:
        """A progress line on stderr, from rank 0 only (the others say the same)."""
        if self.rank == 0:
            print(f"[{self.cfg.job} attempt {self.reporter.attempt}] {message}",
                  file=sys.stderr, flush=True)


def default_distributed_env() -> None:
    """Let a plain ``python -m trainer.train`` run as a world of one (torchrun sets these)."""
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(free_port())
    for name, value in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("WORLD_SIZE", "1"),
                        ("LOCAL_RANK", "0")):
        os.environ.setdefault(name, value)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def report_process_start(reporter: Reporter) -> None:
    """Report interpreter start and imports as ``container_start`` (cluster_runtime, §4).

    Why: torch and TorchRec take seconds to import; without this span that time would be
    ``unattributed``. The supervisor passes the moment it launched us.
    """
    launched = os.environ.get(LAUNCH_TS_ENV, "")
    try:
        start = float(launched)
    except ValueError:
        return
    now = time.time()
    if start <= now:
        reporter.span("container_start", start, now)


def join_process_group(reporter: Reporter) -> tuple[int, int]:
    """Rendezvous (find the peers through the store) then create the gloo group: two phases."""
    with reporter.phase("rendezvous"):
        store, rank, world_size = next(dist.rendezvous("env://"))
    with reporter.phase("process_group_init", backend="gloo"):
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    return rank, world_size


def build_trainer(cfg: TrainConfig, reporter: Reporter, rank: int, world_size: int) -> Trainer:
    shape = ModelShape(cfg.embedding_rows, cfg.embedding_dim, cfg.dense_features,
                       cfg.sparse_features)
    with reporter.phase("model_init", stage="build"):
        model = build_unsharded(shape, cfg.seed)
        attach_sparse_optimizer(model, cfg.lr)
    pg = dist.group.WORLD
    assert pg is not None
    with reporter.phase("sharding_plan", world_size=world_size):
        plan = plan_sharding(model, pg, cfg.batch_size)
    with reporter.phase("model_init", stage="shard"):
        dmp = shard(model, pg, plan)
        optimizer = build_optimizer(dmp, cfg.lr)
    with reporter.phase("data_init"):
        data = SyntheticClicks(cfg.seed, cfg.batch_size, cfg.dense_features,
                               cfg.sparse_features, cfg.embedding_rows, rank)
    return Trainer(cfg, reporter, rank, world_size, dmp, optimizer, data)


def run(cfg: TrainConfig, reporter: Reporter) -> None:
    """The whole life of one attempt on this rank, phase by phase."""
    rank, world_size = join_process_group(reporter)
    trainer = build_trainer(cfg, reporter, rank, world_size)
    trainer.load_latest_checkpoint()
    trainer.say(f"training steps {trainer.step}..{cfg.steps} on {world_size} rank(s)")
    trainer.train()
    if trainer.last_saved != cfg.steps:
        trainer.save_checkpoint()
    trainer.evaluate()
    with reporter.phase("shutdown"):
        dist.destroy_process_group()
    trainer.say("done")


@contextmanager
def crash_on_simulated_failure(reporter: Reporter) -> Iterator[None]:
    """Turn a SimulatedFailure into a real crash: flush the spool, then ``os._exit(1)``.

    Why ``os._exit``: a real crash runs no cleanup (no process-group teardown, no atexit), so
    the supervisor and ETT see what they would see in production; flushing first keeps the
    events emitted so far (the spec's "a crash loses at most one slice").
    """
    try:
        yield
    except SimulatedFailure as failure:
        print(f"[{reporter.job} attempt {reporter.attempt} rank {reporter.rank}] {failure}",
              file=sys.stderr, flush=True)
        reporter.flush()
        os._exit(EXIT_SIMULATED_FAILURE)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_train_config(argv)
    torch.set_num_threads(cfg.threads)
    default_distributed_env()
    reporter = Reporter(cfg.job, spool_dir=cfg.spool_dir)
    report_process_start(reporter)
    try:
        with crash_on_simulated_failure(reporter):
            run(cfg, reporter)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        reporter.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
