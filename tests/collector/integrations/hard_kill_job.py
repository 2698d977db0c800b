"""A tiny training job that checkpoints, then dies outright at a known step, for
test_hard_kills.py: Lightning, Hugging Face's Trainer, or plain PyTorch with ``install()``
(also as a ``torchrun`` worker).

It keeps its own clock: each step's start and end, each save and load, and the moment it
kills itself are appended, one JSON object a line, to the clock file (one ``os.write`` each,
so what was written survives the kill). Job, attempt, rank and spool come from the
environment, as for any job run under ``collector.run``; in attempt 0 the process kills
itself once global step ``KILL_AT`` is done, in one of four ways: ``sigkill``, ``exit``
(``os._exit``), ``segv`` (a read of address 0) or ``oom`` (it moves into the memory cgroup
named by ``--cgroup`` and allocates past its limit). A later attempt resumes from the last
checkpoint and trains to ``STEPS``.

Usage: hard_kill_job.py FRAMEWORK CLOCK CHECKPOINTS --kill HOW --kill-at N [--cgroup DIR]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from collector.identity import SUPERVISED_ENV, identity_from_env

STEPS = 40
SAVE_EVERY = 20
STEP_S = 0.02
#: What an out-of-memory kill allocates past the cgroup's limit (bytes).
OOM_BYTES = 1 << 30


class Clock:
    """The job's own record of what it did, appended line by line to a file."""

    def __init__(self, path: Path, attempt: int, rank: int) -> None:
        self.attempt, self.rank = attempt, rank
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def note(self, what: str, **fields: Any) -> None:
        line = {"attempt": self.attempt, "rank": self.rank, "what": what, "t": time.time(),
                **fields}
        os.write(self._fd, (json.dumps(line) + "\n").encode())

    @contextmanager
    def not_training(self, kind: str) -> Iterator[None]:
        start = time.time()
        try:
            yield
        finally:
            self.note("pause", kind=kind, start=start, end=time.time())


def die(how: str, cgroup: str | None, clock: Clock) -> None:
    """End this process outright, the way ``how`` says; first note when."""
    clock.note("crash", how=how)
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "exit":
        os._exit(3)
    elif how == "segv":
        ctypes.string_at(0)
    elif how == "oom":
        assert cgroup is not None
        Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))
        hog = bytearray(OOM_BYTES)
        for at in range(0, OOM_BYTES, 4096):  # touch each page: charged to the cgroup
            hog[at] = 1
    time.sleep(30)  # not reached: a kill that did not kill fails the test's timing
    raise SystemExit(f"{how} did not end the process")


def latest(checkpoints: Path, prefix: str) -> Path | None:
    found = sorted(checkpoints.glob(f"{prefix}*"), key=lambda p: int(p.name.split("-")[-1]))
    return found[-1] if found else None


# ---------------------------------------------------------------------------- Lightning
def run_lightning(clock: Clock, checkpoints: Path, kill: Callable[[], None], kill_at: int,
                  attempt: int) -> None:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader, TensorDataset

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
            clock.note("step_start", step=self.global_step)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            time.sleep(STEP_S)
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            # After every callback's hook: the adapter has counted this step, the
            # checkpoint callback has saved.
            clock.note("step_end", step=self.global_step)
            if attempt == 0 and self.global_step == kill_at:
                kill()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class ClockTrainer(pl.Trainer):
        def save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
            with clock.not_training("save"):
                super().save_checkpoint(*args, **kwargs)

    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    saves = ModelCheckpoint(dirpath=checkpoints, every_n_train_steps=SAVE_EVERY,
                            save_last=True, save_top_k=-1)
    # No ETTCallback here: the entry point attaches one (ETT_JOB_ID is set), as for a job
    # with no ETT code in it.
    trainer = ClockTrainer(max_steps=STEPS, callbacks=[saves], logger=False,
                           enable_progress_bar=False, enable_model_summary=False,
                           accelerator="cpu", devices=1, num_sanity_val_steps=0)
    trainer.fit(Tiny(), DataLoader(data, batch_size=4), ckpt_path="last")


# ---------------------------------------------------------------------------- transformers
def run_transformers(clock: Clock, checkpoints: Path, kill: Callable[[], None], kill_at: int,
                     attempt: int) -> None:
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from collector.integrations.transformers import ETTCallback

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            time.sleep(STEP_S)
            return {"loss": torch.nn.functional.mse_loss(self.layer(x), labels)}

    class Steps(TrainerCallback):
        """After ETTCallback in the list: it sees each step once the adapter counted it."""

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            clock.note("step_start", step=state.global_step)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            clock.note("step_end", step=state.global_step)
            if attempt == 0 and state.global_step == kill_at:
                kill()

    class ClockTrainer(Trainer):
        def _save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
            with clock.not_training("save"):
                super()._save_checkpoint(*args, **kwargs)

    callback = ETTCallback()  # before TrainingArguments (they may start a process group)
    args = TrainingArguments(
        output_dir=str(checkpoints), max_steps=STEPS, save_strategy="steps",
        save_steps=SAVE_EVERY, per_device_train_batch_size=4, logging_strategy="no",
        report_to=[], use_cpu=True, dataloader_num_workers=0, disable_tqdm=True,
        remove_unused_columns=False)
    data = [{"x": torch.randn(4), "labels": torch.randn(1)} for _ in range(64)]
    trainer = ClockTrainer(model=Tiny(), args=args, train_dataset=data,
                           callbacks=[callback, Steps()])
    trainer.train(resume_from_checkpoint=latest(checkpoints, "checkpoint-") is not None)


# ---------------------------------------------------------------------------- plain torch
def run_torch(clock: Clock, checkpoints: Path, kill: Callable[[], None], kill_at: int,
              attempt: int) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from collector import Reporter
    from collector.integrations.torch import install

    ident = identity_from_env()
    reporter = Reporter(ident.job)
    install(reporter)
    if os.environ.get(SUPERVISED_ENV):
        reporter.start_heartbeat()  # the wrapper marks the attempt
    else:
        reporter.attempt_start(gpus=int(os.environ.get("WORLD_SIZE", "1")))
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    state = {"model": model.state_dict(), "step": torch.zeros((), dtype=torch.int64)}
    resumed = latest(checkpoints, "step-")
    if resumed is not None:
        dcp.load(state, checkpoint_id=str(resumed))
        model.load_state_dict(state["model"])
    start = int(state["step"])
    try:
        with reporter.train(start_step=start) as train:
            for step in range(start, STEPS):
                clock.note("step_start", step=step)
                time.sleep(STEP_S)
                loss = torch.nn.functional.mse_loss(model(torch.randn(4, 4)),
                                                    torch.randn(4, 1))
                optimizer.zero_grad()
                loss.backward()
                if distributed:
                    for param in model.parameters():
                        dist.all_reduce(param.grad)
                optimizer.step()
                train.advance(step + 1)
                clock.note("step_end", step=step + 1)
                if (step + 1) % SAVE_EVERY == 0:
                    state["step"] = torch.tensor(step + 1)
                    with clock.not_training("save"):
                        dcp.save(state, checkpoint_id=str(checkpoints / f"step-{step + 1}"))
                if attempt == 0 and step + 1 == kill_at and ident.rank == world_size() - 1:
                    kill()
    except Exception:
        clock.note("crash", how="exception")  # a peer's death reached this rank
        raise
    if not os.environ.get(SUPERVISED_ENV):
        reporter.attempt_end("completed")
    reporter.shutdown()


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


JOBS = {"lightning": run_lightning, "transformers": run_transformers, "torch": run_torch}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("framework", choices=sorted(JOBS))
    parser.add_argument("clock", type=Path)
    parser.add_argument("checkpoints", type=Path)
    parser.add_argument("--kill", choices=("sigkill", "exit", "segv", "oom"),
                        default="sigkill")
    parser.add_argument("--kill-at", type=int, default=30)
    parser.add_argument("--cgroup", default=None)
    options = parser.parse_args()
    torch.set_num_threads(1)
    ident = identity_from_env()
    clock = Clock(options.clock, ident.attempt, ident.rank)
    clock.note("start")
    JOBS[options.framework](clock, options.checkpoints,
                            lambda: die(options.kill, options.cgroup, clock),
                            options.kill_at, ident.attempt)
    clock.note("end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
