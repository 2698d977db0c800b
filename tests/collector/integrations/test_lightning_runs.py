"""The Lightning adapter on real ``Trainer.fit`` runs (CPU, a tiny model, no network).

The main test crashes a fit at a known step, resumes a second attempt from the last
checkpoint, sends the spooled events through the real ingest path, and checks the job's
ETT%, repeated steps and attempt statuses against what the test measured with its own clock
(``adapter_runs.RunClock``). The others check what one run's events hold: compile spans
where ``torch.compile`` compiled, and asynchronous checkpoint writes as non-blocking spans.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from adapter_runs import (
    RunClock,
    assert_resumed_run_matches,
    assert_spans_hold,
    ingest_spool,
    overlaps,
    spool_events,
)
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import AsyncCheckpointIO
from torch.utils.data import DataLoader, TensorDataset

from collector.integrations.lightning import ETTCallback

#: A real run measures its own steps: one intra-op thread, and no partition cache left
#: from a rolled-back test (tests/collector/integrations/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_partition_cache", "one_thread")

JOB = "lightning-adapter-run"
STEP_S = 0.02
SAVE_EVERY = 10
CRASH_AT = 25  # global step: the last checkpoint before it is step 20
MAX_STEPS = 40
EVAL_EVERY = 25  # at the crash step: the resumed run's repeated steps fill whole train spans


class InjectedCrash(RuntimeError):
    """The failure the test injects into a training step."""


class Tiny(pl.LightningModule):
    """A linear model whose steps take ``STEP_S`` (a sleep), timed by the test's clock."""

    def __init__(self, clock: RunClock, attempt: int, crash_at: int | None = None) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.clock, self.attempt, self.crash_at = clock, attempt, crash_at
        self._eval_start = 0.0

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.clock.step_start(self.attempt, self.global_step)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == self.crash_at:
            self.clock.crashed[self.attempt] = time.time()
            raise InjectedCrash(f"injected at step {self.global_step}")
        time.sleep(STEP_S)
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.clock.step_end(self.attempt)

    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        time.sleep(STEP_S / 2)
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def on_validation_start(self) -> None:
        self._eval_start = time.time()

    def on_validation_end(self) -> None:
        if not self.trainer.sanity_checking:
            self.clock.exclude("eval", self._eval_start, time.time())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class TimedTrainer(pl.Trainer):
    """A Trainer whose checkpoint saves the test times itself."""

    clock: RunClock

    def save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        with self.clock.not_training("save"):
            super().save_checkpoint(*args, **kwargs)


def _loaders() -> tuple[DataLoader[Any], DataLoader[Any]]:
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(256, 4, generator=generator),
                         torch.randn(256, 1, generator=generator))
    return DataLoader(data, batch_size=4), DataLoader(data, batch_size=4)


def _trainer(clock: RunClock, callbacks: list[Any], **options: Any) -> TimedTrainer:
    settings: dict[str, Any] = dict(
        max_steps=MAX_STEPS, logger=False, enable_progress_bar=False,
        enable_model_summary=False, accelerator="cpu", devices=1,
        val_check_interval=EVAL_EVERY, limit_val_batches=2, num_sanity_val_steps=2)
    trainer = TimedTrainer(callbacks=callbacks, **{**settings, **options})
    trainer.clock = clock
    return trainer


@pytest.mark.django_db
@pytest.mark.slow
def test_a_crashed_then_resumed_fit_reports_the_ett_the_test_measured(tmp_path: Path) -> None:
    clock, spool, checkpoints = RunClock(), tmp_path / "spool", tmp_path / "checkpoints"
    for attempt in (0, 1):
        clock.started[attempt] = time.time()
        callback = ETTCallback(job=JOB, attempt=attempt, spool_dir=spool, team="research")
        saving = ModelCheckpoint(dirpath=checkpoints, every_n_train_steps=SAVE_EVERY,
                                 save_top_k=-1)
        trainer = _trainer(clock, [callback, saving])
        resume = None
        if attempt == 1:  # the latest checkpoint before the crash
            assert sorted(p.name for p in checkpoints.iterdir()) == [
                "epoch=0-step=10.ckpt", "epoch=0-step=20.ckpt"]
            resume = checkpoints / "epoch=0-step=20.ckpt"
        model = Tiny(clock, attempt, CRASH_AT if attempt == 0 else None)
        try:
            trainer.fit(model, *_loaders(), ckpt_path=resume)
        except InjectedCrash:
            assert attempt == 0
        clock.ended[attempt] = time.time()
    assert trainer.global_step == MAX_STEPS
    assert clock.steps[1][0][0] == 20  # resumed from the step-20 checkpoint

    expected = clock.expected()
    assert expected.repeated_steps == CRASH_AT - 20
    assert_resumed_run_matches(ingest_spool(spool, JOB), expected, model="Tiny", team="research")

    events = spool_events(spool)
    spans = [e for e in events if e["kind"] == "span"]
    train = [s for s in spans if s["phase"] == "train"]
    saves = [s for s in spans if s["phase"] == "checkpoint_save"]
    evals = [s for s in spans if s["phase"] == "eval"
             and not s.get("attrs", {}).get("sanity_check")]
    assert_spans_hold(saves, clock.intervals("save"))
    assert_spans_hold(evals, clock.intervals("eval"), around=False)
    for other in saves + evals:  # paused around saves and evaluations
        assert not any(overlaps(t, other) for t in train), other
    by_attempt = {a: [t for t in train if t["attempt"] == a] for a in (0, 1)}
    for attempt, slices in by_attempt.items():  # contiguous step ranges
        for before, after in itertools.pairwise(slices):
            assert after["step_start"] == before["step_end"], (attempt, before, after)
    assert by_attempt[0][0]["step_start"] == 0 and by_attempt[0][-1]["step_end"] == CRASH_AT
    assert by_attempt[1][0]["step_start"] == 20 and by_attempt[1][-1]["step_end"] == MAX_STEPS
    loads = [s for s in spans if s["phase"] == "checkpoint_load"]
    assert loads and {s["attempt"] for s in loads} == {1}
    starts = [e for e in events if e.get("mark") == "attempt_start"]
    assert [(e["attempt"], e["attrs"]["gpus"]) for e in starts] == [(0, 1), (1, 1)]


def test_compilation_is_a_compile_span_outside_training(tmp_path: Path) -> None:
    """``torch.compile``d: the first step's compilation (Dynamo's compile callbacks) is a
    ``compile`` span inside that step, and no train span overlaps it."""
    clock, spool = RunClock(), tmp_path / "spool"
    clock.started[0] = time.time()
    callback = ETTCallback(job="lightning-compiled", attempt=0, spool_dir=spool)
    trainer = _trainer(clock, [callback], enable_checkpointing=False, max_steps=5)
    model = Tiny(clock, 0)
    trainer.fit(torch.compile(model, backend="eager"), *_loaders())  # type: ignore[arg-type]
    spans = [e for e in spool_events(spool) if e["kind"] == "span"]
    compiles = [s for s in spans if s["phase"] == "compile"]
    assert compiles, "no compile span"
    first_step = clock.steps[0][0]
    train_compiles = [c for c in compiles if first_step[1] <= c["start"] <= first_step[2]]
    assert train_compiles, (first_step, compiles)
    assert all(c["attrs"]["trigger"] in ("dynamo", "lazy_backward") for c in compiles)
    train = [s for s in spans if s["phase"] == "train"]
    assert train and not any(overlaps(t, c) for t in train for c in compiles)


def test_asynchronous_checkpoint_writes_are_non_blocking_spans(tmp_path: Path) -> None:
    """With ``AsyncCheckpointIO`` the save call blocks (staging) and the write runs in a
    thread: a blocking and a non-blocking ``checkpoint_save`` per save."""
    clock, spool = RunClock(), tmp_path / "spool"
    clock.started[0] = time.time()
    callback = ETTCallback(job="lightning-async", attempt=0, spool_dir=spool)
    saving = ModelCheckpoint(dirpath=tmp_path / "checkpoints", every_n_train_steps=SAVE_EVERY,
                             save_top_k=-1)
    trainer = _trainer(clock, [callback, saving], plugins=[AsyncCheckpointIO()], max_steps=20)
    trainer.fit(Tiny(clock, 0), *_loaders())
    saves = [e for e in spool_events(spool) if e.get("phase") == "checkpoint_save"]
    blocking = [s for s in saves if s.get("blocking", True)]
    background = [s for s in saves if not s.get("blocking", True)]
    assert len(blocking) == len(background) == len(clock.intervals("save")) == 2
    assert all(s["attrs"]["stage"] == "async_write" for s in background)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "epoch=0-step=10.ckpt", "epoch=0-step=20.ckpt"]
