"""The training loop of one rank, and what surrounds it within an attempt.

``Trainer`` holds the sharded model, its optimizer and data, and where training stands: it
trains in steps, saves checkpoints on a schedule (fixed, or with ``recovery`` Young/Daly's
interval from the measured cost), resumes from the newest verified checkpoint, evaluates,
and publishes the final checkpoint. Each of these is reported as its lifecycle phase; the
train spans hold only training (compiles, checkpoint saves and the mega-cache save pause
the tracker). ``trainer.startup`` builds it; ``trainer.train`` runs it.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torchrec.datasets.utils import Batch
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.optim.keyed import CombinedOptimizer

from collector.integrations.torch_compile import CompileSpans
from collector.reporter import Reporter, TrainTracker
from trainer import checkpoint, publish, recovery
from trainer.checkpoint import Checkpointer
from trainer.compile_setup import mega_cache_folder
from trainer.config import TrainConfig
from trainer.data import StepLoader
from trainer.model import DeferredTableInit
from trainer.pt2 import save_mega_cache

#: Recent step times kept for the recovery interval's step time.
STEP_TIMES_KEPT = 50


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
    loader: StepLoader
    checkpointer: Checkpointer
    #: The compile hook (collector.integrations.torch), None where it is not installed.
    watch: CompileSpans | None
    step: int = 0
    last_saved: int | None = None
    checkpoint_every: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    table_init: DeferredTableInit = field(default_factory=DeferredTableInit)
    _step_times: deque[float] = field(default_factory=lambda: deque(maxlen=STEP_TIMES_KEPT))
    _writing_step_times: deque[float] = field(
        default_factory=lambda: deque(maxlen=STEP_TIMES_KEPT))
    _last_beat: float = field(default_factory=time.monotonic)
    _last_log: tuple[float, int] = (0.0, 0)
    #: Rank 0 of a GPU attempt with ``compile_cache`` keeps the mega-cache after the first
    #: step that compiled; elsewhere nothing is due, and the step loop checks one bool.
    _mega_cache_due: bool = False

    def __post_init__(self) -> None:
        self._mega_cache_due = self.rank == 0 and mega_cache_folder(self.cfg) is not None

    def train_step(self, batch: Batch) -> float:
        """One optimizer step; the embedding optimizer runs fused inside ``backward``.

        A compilation here (the first step's, a recompile, a lazily compiled backward) pauses
        the train tracker for exactly its seconds: the compile hook pauses the Reporter's open
        tracker when the compiling thread is the loop's.
        """
        self.optimizer.zero_grad()
        loss, _ = self.dmp(on_device(batch, self.device))
        loss.backward()
        self.optimizer.step()
        return float(loss.item())

    def save_mega_cache(self) -> None:
        """After the first step that compiled (a GPU attempt with ``compile_cache``): keep the
        mega-cache in the cache folder, so a restart and, through the compile store, the next
        job of this model load it. Rank 0 writes it; a ``compile`` span holds the seconds."""
        self._mega_cache_due = False
        folder = mega_cache_folder(self.cfg)
        assert folder is not None  # due only when there is one
        with self.reporter.phase("compile", stage="mega_cache_save") as span:
            span.attrs["bytes"] = save_mega_cache(folder)

    def crash_if_due(self) -> None:
        if self.cfg.fail_step_of(self.reporter.attempt) == self.step:
            raise SimulatedFailure(f"simulated failure at step {self.step} "
                                   f"(failure schedule, attempt {self.reporter.attempt})")

    def train(self) -> None:
        """Train from ``self.step`` to ``cfg.steps``, with periodic checkpoints.

        Compile time is not measured here: PyTorch's compile hooks report it
        (collector.integrations.torch) and pause the tracker meanwhile, so the train spans
        hold only training.
        """
        tracker = self.reporter.train(self.step)
        try:
            while self.step < self.cfg.steps:
                self.crash_if_due()
                began = time.monotonic()
                writing = self.checkpointer.writing
                loss = self.train_step(self.loader.next_batch())
                if self._mega_cache_due and self.watch is not None and self.watch.compilations:
                    with tracker.paused():
                        self.save_mega_cache()
                self.step += 1
                tracker.advance(self.step)
                times = self._writing_step_times if writing else self._step_times
                times.append(time.monotonic() - began)
                self._after_step(loss, tracker)
        finally:
            tracker.close()  # also on a crash: the slice trained so far is reported

    def _after_step(self, loss: float, tracker: TrainTracker) -> None:
        self._heartbeat_if_due()
        self._log_progress(loss)
        every = self.checkpoint_every
        since = self.step - (self.last_saved or 0)
        # The checkpoint of the last step is saved after training, outside the tracker.
        if every and since >= every and self.step < self.cfg.steps:
            with tracker.paused():
                self.save_checkpoint()

    def save_checkpoint(self) -> None:
        self.checkpointer.save(self.step, self.dmp, self.optimizer, self.loader.state_dict())
        self.last_saved = self.step
        self.say(f"checkpoint {'started' if self.checkpointer.asynchronous else 'saved'}: "
                 f"step {self.step}")
        if self.cfg.has("recovery"):
            self._retune_interval()

    @property
    def step_s(self) -> float:
        """The median of the recent step times with no checkpoint being written (a step that
        compiled is an outlier)."""
        return statistics.median(self._step_times) if self._step_times else 0.0

    @property
    def writing_step_s(self) -> float:
        """The same while an asynchronous save was writing (0 when no step overlapped one)."""
        return statistics.median(self._writing_step_times) if self._writing_step_times else 0.0

    def _retune_interval(self) -> None:
        """Young/Daly: the next interval from this save's cost and the recent step time.

        Every rank must checkpoint at the same steps (the save is collective), so the inputs
        are the slowest rank's, agreed by an all-reduce. Rank 0 keeps them for a restart.
        """
        background = self.checkpointer.last_background_s or 0.0
        inputs = torch.tensor([self.checkpointer.last_blocking_s or 0.0, self.step_s, background,
                               recovery.interference_s(background, self.step_s,
                                                       self.writing_step_s)],
                              dtype=torch.float64)
        dist.all_reduce(inputs, op=dist.ReduceOp.MAX)
        measured = recovery.Measured(*(float(v) for v in inputs))
        if self.rank == 0:
            recovery.save_measured(Path(self.cfg.checkpoint_dir), measured)
        self._use_interval(measured, "measured")

    def _use_interval(self, measured: recovery.Measured, source: str) -> None:
        self.checkpoint_every = measured.interval_steps(self.cfg.mtbf)
        self.say(f"recovery ({source}): checkpoint cost {measured.cost_s:.3f} s blocked + "
                 f"{measured.interference_s:.3f} s of slower steps while writing, step "
                 f"{measured.step_s * 1000:.1f} ms, MTBF {self.cfg.mtbf:g} s -> every "
                 f"{self.checkpoint_every} steps")

    def plan_checkpoints(self) -> None:
        """``recovery``, at attempt start: Young/Daly's interval from the measurement an
        earlier attempt kept, or, with none, an early first save that measures the cost.

        Rank 0 reads the file and every rank uses its answer: all must save at the same steps.
        """
        if not self.cfg.has("recovery"):
            return
        kept: list[recovery.Measured | None] = [
            recovery.load_measured(Path(self.cfg.checkpoint_dir)) if self.rank == 0 else None]
        dist.broadcast_object_list(kept, src=0)
        if kept[0] is not None:
            self._use_interval(kept[0], "kept from an earlier attempt")
            return
        configured = self.cfg.checkpoint_every
        self.checkpoint_every = min(configured, recovery.PROBE_STEPS) if configured \
            else recovery.PROBE_STEPS
        self.say(f"recovery: first checkpoint {self.checkpoint_every} steps in, to measure "
                 "its cost")

    def load_latest_checkpoint(self) -> None:
        """Resume from the newest verified checkpoint (a damaged one is skipped, saying so)."""
        directory = Path(self.cfg.checkpoint_dir)
        step = checkpoint.latest_step(directory, self.say)
        if step is None:
            self.initialize_tables()
            return
        self.table_init.discard()
        with self.reporter.phase("checkpoint_load", step=step):
            loaded = self.checkpointer.load(step, self.dmp, self.optimizer)
        self.loader.load_state_dict(loaded["loader"])
        if self.loader.next_step != step:
            raise RuntimeError(f"checkpoint {step}: the data loader is at step "
                               f"{self.loader.next_step}, not {step}")
        self.step = step
        self.last_saved = step
        self.say(f"resumed from checkpoint at step {step}")

    def initialize_tables(self) -> None:
        """Run the tables' random init that sharding held back expecting a checkpoint to load
        (``init_overlap``), now that none will."""
        if not self.table_init.pending:
            return
        with self.reporter.phase("model_init", stage="table_init"):
            self.table_init.run()
        self.say("no checkpoint loaded after all: embedding tables initialized now")

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
                    batch = on_device(self.loader.data.batch(index, eval_split=True),
                                      self.device)
                    loss, (_, logits, labels) = self.dmp(batch)
                    losses.append(float(loss))
                    correct += int(((logits > 0).float() == labels).sum())
                    seen += labels.numel()
            self.dmp.train()
        self.say(f"eval: loss {sum(losses) / len(losses):.4f} accuracy {correct / seen:.3f}")

    def publish(self) -> None:
        """Turn the final checkpoint into an inference artifact (rank 0).

        In band (the baseline) the trainer does the export itself, a blocking ``publish`` span;
        with ``oob_publish`` a separate process does it and reports a non-blocking one.
        """
        if not self.cfg.publish or self.rank != 0:
            return
        folder = checkpoint.checkpoint_path(Path(self.cfg.checkpoint_dir), self.cfg.steps)
        if self.cfg.has("oob_publish"):
            process = publish.spawn(self.cfg, folder)
            self.say(f"publishing {folder.name} out of band (pid {process.pid})")
            return
        with self.reporter.phase("publish", step=self.cfg.steps, mode="in_band"):
            artifact = publish.publish_checkpoint(self.cfg, folder)
        self.say(f"published {artifact}")

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


def on_device(batch: Batch, device: torch.device) -> Batch:
    """The batch with its dense features and labels on the dense part's device.

    The sparse ids (a KeyedJaggedTensor) stay on the CPU: the embedding tables are there. On
    CPU the batch itself is returned, untouched.
    """
    if device.type == "cpu":
        return batch
    return Batch(dense_features=batch.dense_features.to(device),
                 sparse_features=batch.sparse_features, labels=batch.labels.to(device))
