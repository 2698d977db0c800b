"""One training process of the reference trainer: ``python -m trainer.train`` (one per rank).

It reports every lifecycle phase through the ETT Reporter (ETT_SPEC §4) — and knows nothing
else about ETT. The supervisor (``python -m trainer``) owns the attempt: it emits
``attempt_start``/``attempt_end`` and restarts this process after a failure; this process
resumes from the newest good checkpoint, so the steps between that checkpoint and the crash
are trained again (what ETT calls repeated training). Started without the supervisor (by a
torchrun that restarts the ranks itself, or by hand) rank 0 marks its own attempt: from the
moment the kernel created the process to its exit; a crash leaves the attempt without an end,
which ETT reads as ``lost``.

With ``--device cuda`` the process group is ``cpu:gloo,cuda:nccl``: the CPU-sharded embedding
tables, checkpoints and object collectives use gloo, the GPU-resident dense part's DDP uses
NCCL (trainer.model explains the hybrid placement). Each batch's dense features and labels
are moved to the GPU inside the training step; its sparse ids stay on the CPU, where the
tables are.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import torch
import torch.distributed as dist
from torchrec.datasets.utils import Batch
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.types import ShardingPlan
from torchrec.models.dlrm import DLRMTrain
from torchrec.optim.keyed import CombinedOptimizer

from collector.reporter import Reporter, TrainTracker
from trainer import checkpoint, plan_cache, publish, recovery, warmup
from trainer.checkpoint import Checkpointer
from trainer.config import LAUNCH_TS_ENV, SUPERVISED_ENV, TrainConfig, parse_train_config
from trainer.data import StepLoader, SyntheticClicks
from trainer.model import (
    DeferredTableInit,
    ModelShape,
    attach_sparse_optimizer,
    build_optimizer,
    build_unsharded,
    deferred_table_init,
    dense_arches,
    dlrm_of,
    embedding_tables,
    plan_sharding,
    shard,
    sharders,
    table_init_deferrable,
)
from trainer.pt2 import (
    CompileWatch,
    compile_arches,
    inductor_options,
    load_mega_cache,
    save_mega_cache,
)

EXIT_SIMULATED_FAILURE = 1
EXIT_INTERRUPTED = 130
#: Batches the init-overlap data warm-up prepares ahead of training.
WARM_BATCHES = 4
#: Recent step times kept for the recovery interval's step time.
STEP_TIMES_KEPT = 50
#: Longest wait for the compile warm-up before compiling without it.
WARM_UP_TIMEOUT_S = 1800.0


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
    watch: CompileWatch
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

    def train_step(self, batch: Batch, tracker: TrainTracker) -> float:
        """One optimizer step; the embedding optimizer runs fused inside ``backward``.

        The compile watch holds the tracker only here, so a compilation (the first step's, a
        recompile, a lazily compiled backward) pauses exactly the training it interrupts.
        """
        self.watch.tracker = tracker
        try:
            self.optimizer.zero_grad()
            loss, _ = self.dmp(on_device(batch, self.device))
            loss.backward()
            self.optimizer.step()
            return float(loss.item())
        finally:
            self.watch.tracker = None

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

        Compile time is not measured here: PyTorch's compile hooks report it (trainer.pt2) and
        pause the tracker meanwhile, so the train spans hold only training.
        """
        tracker = self.reporter.train(self.step)
        try:
            while self.step < self.cfg.steps:
                self.crash_if_due()
                began = time.monotonic()
                writing = self.checkpointer.writing
                loss = self.train_step(self.loader.next_batch(), tracker)
                if self._mega_cache_due and self.watch.compilations:
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


def dense_device(cfg: TrainConfig) -> torch.device:
    """This rank's device for the dense part: the CPU, or on cuda the GPU of its local rank."""
    if not cfg.on_cuda:
        return torch.device("cpu")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    available = torch.cuda.device_count()
    if local_rank >= available:
        raise RuntimeError(f"--device cuda: local rank {local_rank} has no GPU "
                           f"({available} visible); one GPU per rank is needed")
    return torch.device("cuda", local_rank)


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


def report_process_start(reporter: Reporter, start: float | None) -> None:
    """Report interpreter start and imports as ``container_start`` (cluster_runtime, §4).

    Why: torch and TorchRec take seconds to import; without this span that time would be
    ``unattributed``. ``start`` is when the supervisor launched us, else when the kernel
    created this process.
    """
    now = time.time()
    if start is not None and start <= now:
        reporter.span("container_start", start, now)


def launched_at() -> float | None:
    """The moment this process was launched: the supervisor's word, else the kernel's."""
    try:
        return float(os.environ[LAUNCH_TS_ENV])
    except (KeyError, ValueError):
        return process_created_at()


def process_created_at() -> float | None:
    """This process's creation time from ``/proc`` (Linux), or None where there is none.

    Why: under torchrun's own restarts nobody outside the process saw it start, and its
    imports are still the attempt's time.
    """
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        started_after_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - (uptime - started_after_boot)


def join_process_group(reporter: Reporter, device: torch.device) -> tuple[int, int]:
    """Rendezvous (find the peers through the store) then create the group: two phases.

    On CPU the group is gloo. With the dense part on a GPU it is ``cpu:gloo,cuda:nccl``: CPU
    tensors (embedding all-to-alls, checkpoint and object collectives, barriers) go through
    gloo, CUDA tensors (DDP's gradient all-reduce) through NCCL. The GPU is made current
    first, as NCCL requires. NCCL creates its communicator lazily, on the first CUDA
    collective: one tiny all-reduce here makes that happen inside ``process_group_init``,
    where its seconds belong, instead of inside the first training step. (Not
    ``init_process_group(device_id=...)``: a bound device would also send barriers through
    NCCL, while this trainer's barriers and checkpoint collectives are meant for gloo.)
    """
    backend = "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
        backend = "cpu:gloo,cuda:nccl"
    with reporter.phase("rendezvous"):
        store, rank, world_size = next(dist.rendezvous("env://"))
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT")
        if restart is not None:
            # torchrun may keep one store across its restarts; gloo would then read the
            # previous round's peer addresses (measured: "Connection refused" on some
            # restarts). A key prefix per restart keeps the rounds apart.
            store = dist.PrefixStore(f"ett/restart-{restart}", store)
    with reporter.phase("process_group_init", backend=backend):
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size)
        if device.type == "cuda":
            dist.all_reduce(torch.zeros(1, device=device))
            torch.cuda.synchronize(device)
    return rank, world_size


def build_trainer(cfg: TrainConfig, reporter: Reporter, rank: int, world_size: int,
                  watch: CompileWatch, device: torch.device | None = None,
                  compile_warm_up: CompileWarmUp | None = None) -> Trainer:
    """Model, plan, shards, optimizer, data and compiled dense part, phase by phase.

    With ``init_overlap`` the data warm-up (a thread) and the compile warm-up (a process,
    trainer.warmup, which fills the PT2 caches) run while the model is built, planned and
    sharded; this process waits for them only where it needs their result. A restart also
    skips the embedding tables' random init, which its checkpoint load overwrites
    (:class:`~trainer.model.DeferredTableInit`).
    """
    shape = ModelShape(cfg.embedding_rows, cfg.embedding_dim, cfg.dense_features,
                       cfg.sparse_features)
    device = device or torch.device("cpu")
    overlap = cfg.has("init_overlap")
    resume_hint = _newest_checkpoint_step(cfg) if overlap else 0
    with reporter.phase("data_init", blocking=not overlap):
        data = SyntheticClicks(cfg.seed, cfg.batch_size, cfg.dense_features,
                               cfg.sparse_features, cfg.embedding_rows, rank)
        loader = StepLoader(data, cfg.batch_size_at)
    with reporter.phase("model_init", stage="build"):
        model = build_unsharded(shape, cfg.seed, device)
        attach_sparse_optimizer(model, cfg.lr)
    if overlap:
        loader.warm_up(resume_hint, WARM_BATCHES)
    pg = dist.group.WORLD
    assert pg is not None
    plan = sharding_plan(cfg, reporter, model, pg, world_size)
    # A restart skips the tables' random init that its checkpoint load will overwrite.
    defer = resume_hint > 0 and table_init_deferrable(plan)
    with reporter.phase("model_init", stage="shard") as span:
        with deferred_table_init(enabled=defer) as table_init:
            dmp = shard(model, pg, plan, init_sync=not overlap)
        span.attrs["table_init"] = "deferred" if table_init.pending else "done"
        optimizer = build_optimizer(dmp, cfg.lr)
        checkpointer = Checkpointer(Path(cfg.checkpoint_dir), reporter,
                                    asynchronous=cfg.has("async_checkpoint"))
    if cfg.compile:
        with reporter.phase("compile", stage="setup") as span:
            if compile_warm_up is not None:
                span.attrs["warm_up"] = compile_warm_up.wait()[:120]
            if (mega_cache := mega_cache_folder(cfg)) is not None:
                span.attrs["mega_cache"] = load_mega_cache(mega_cache)
            vec_isa = compile_arches(
                dense_arches(dlrm_of(dmp)), dynamic_batch=cfg.has("dynamic_shapes"),
                options=inductor_options(cfg.has("autotune_pruning"), device.type),
                device_type=device.type)
            if vec_isa:
                span.attrs["vec_isa"] = vec_isa
    trainer = Trainer(cfg, reporter, rank, world_size, dmp, optimizer, loader, checkpointer,
                      watch, checkpoint_every=cfg.checkpoint_every, device=device,
                      table_init=table_init)
    return trainer


def sharding_plan(cfg: TrainConfig, reporter: Reporter, model: DLRMTrain,
                  pg: dist.ProcessGroup, world_size: int) -> ShardingPlan:
    """Plan collectively, or (``plan_cache``) load the plan an earlier attempt saved."""
    if not cfg.has("plan_cache"):
        with reporter.phase("sharding_plan", world_size=world_size, cached=False):
            return plan_sharding(model, pg, cfg.batch_size)
    key = plan_cache.plan_key(embedding_tables(model), world_size, cfg.batch_size, sharders())
    directory = Path(cfg.checkpoint_dir)
    with reporter.phase("sharding_plan", world_size=world_size, key=key) as span:
        plan = plan_cache.load_plan(directory, key)
        span.attrs["cached"] = plan is not None
        if plan is None:
            plan = plan_sharding(model, pg, cfg.batch_size)
            if dist.get_rank(pg) == 0:
                plan_cache.save_plan(directory, key, plan)
    return plan


@dataclass
class CompileWarmUp:
    """The init-overlap compile warm-up of this attempt (trainer.warmup): its lock file, and
    its process when this trainer started it (the supervisor reaps its own)."""

    lock_file: Path
    process: subprocess.Popen[bytes] | None = None

    def wait(self) -> str:
        """Block until the warm-up has filled the caches; its verdict (``ok`` or why not).

        Not until its process exits: it releases the lock before its interpreter teardown
        (trainer.warmup), which :meth:`close` reaps later.
        """
        verdict = warmup.wait(self.lock_file, WARM_UP_TIMEOUT_S)
        if verdict == "timeout" and self.process is not None:
            self.process.kill()
        return verdict

    def close(self) -> None:
        """Reap a warm-up this trainer started and drop its lock folder (the supervisor
        reaps its own)."""
        if self.process is not None:
            self.process.wait()
            shutil.rmtree(self.lock_file.parent, ignore_errors=True)


def start_compile_warm_up(cfg: TrainConfig) -> CompileWarmUp | None:
    """The warm-up the supervisor started for this attempt, or one of our own.

    Started first thing, before the process group: the earlier it starts, the more of its
    compile hides behind init.
    """
    if not (cfg.compile and cfg.has("init_overlap")):
        return None
    given = os.environ.get(warmup.WARM_UP_ENV)
    if given:  # the supervisor decided (trainer.warmup.needed) and started it
        return CompileWarmUp(Path(given))
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not warmup.needed(cfg, Path(cache) if cache else None):
        return None
    lock = Path(tempfile.mkdtemp(prefix="ett-warm-up-")) / "warm-up.lock"
    return CompileWarmUp(lock, warmup.spawn(cfg.to_argv(), lock))


def mega_cache_folder(cfg: TrainConfig) -> Path | None:
    """Where a GPU attempt keeps the portable mega-cache (its compile cache folder, which the
    compile store shares), or None: on CPU, or without ``compile_cache``."""
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not (cfg.on_cuda and cfg.compile and cfg.has("compile_cache") and folder):
        return None
    return Path(folder)


def _newest_checkpoint_step(cfg: TrainConfig) -> int:
    """Where this attempt will probably resume: a hint, for the data warm-up and for holding the
    tables' init back. The verified load decides (a wrong hint costs a wasted warm-up, or a
    replayed table init)."""
    found = checkpoint.good_checkpoints(Path(cfg.checkpoint_dir))
    return found[-1][0] if found else 0


def run(cfg: TrainConfig, reporter: Reporter) -> None:
    """The whole life of one attempt on this rank, phase by phase."""
    device = dense_device(cfg)
    compile_warm_up = start_compile_warm_up(cfg)
    rank, world_size = join_process_group(reporter, device)
    watch = CompileWatch(reporter)
    with watch.installed():
        trainer = build_trainer(cfg, reporter, rank, world_size, watch, device,
                                compile_warm_up)
        trainer.load_latest_checkpoint()
        trainer.plan_checkpoints()
        trainer.say(f"training steps {trainer.step}..{cfg.steps} on {world_size} rank(s) "
                    f"with {','.join(cfg.opts) or 'no optimizations'}"
                    + (f"; dense part on {device}, embeddings on cpu" if cfg.on_cuda else ""))
        trainer.train()
        if compile_warm_up is not None:
            compile_warm_up.close()
        if trainer.last_saved != cfg.steps:
            trainer.save_checkpoint()
        trainer.evaluate()
        if trainer.checkpointer.asynchronous:  # the final save must be on disk before we exit
            with reporter.phase("checkpoint_save", step=cfg.steps, stage="wait"):
                trainer.checkpointer.wait()
        trainer.publish()
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
    if cfg.on_cuda:
        # TF32 GEMMs, as GPU recommendation models train; it also lets inductor's Triton GEMM
        # templates compete with cuBLAS in max-autotune. CPU numerics are untouched.
        torch.set_float32_matmul_precision("high")
    default_distributed_env()
    reporter = Reporter(cfg.job, spool_dir=cfg.spool_dir)
    start = launched_at()
    marks_attempt = SUPERVISED_ENV not in os.environ and os.environ.get("RANK", "0") == "0"
    if marks_attempt:
        reporter.attempt_start(gpus=int(os.environ.get("WORLD_SIZE", "1")), ts=start,
                               model="dlrm", launcher=_launcher())
    report_process_start(reporter, start)
    status = "failed"
    try:
        with crash_on_simulated_failure(reporter):
            run(cfg, reporter)
        status = "completed"
    except KeyboardInterrupt:
        status = "cancelled"
        return EXIT_INTERRUPTED
    finally:
        if marks_attempt:
            reporter.attempt_end(status)
        reporter.shutdown()
    return 0


def _launcher() -> str:
    return "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "python"


def exit_now(code: int) -> NoReturn:
    """Leave without the interpreter's teardown, once everything that must outlive the
    process is out: the final checkpoint was waited for, the process group destroyed, the
    Reporter shut down (spool flushed); here the ``atexit`` handlers run (Inductor's compile
    workers are stopped there) and stdout/stderr are flushed.

    Why: finalizing the interpreter with torch, TorchRec and gloo loaded took ~1.0 s after the
    last ``atexit`` handler (measured on 2 cores): wall time of the job that nothing explains.
    """
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
