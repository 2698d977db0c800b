"""A tiny Lightning fit run as the command of ``python -m collector.run``, for
test_adapter_under_run.py.

Its ETTCallback gets no arguments: job, attempt and spool come from the environment the
wrapper gives (``collector.identity``), as they would for a job instrumented with one line.
The test's own clock (``adapter_runs.RunClock``) times each step; the steps and the
environment the wrapper passed are written to the JSON file named by the first argument.
Usage: python lightning_child.py OUT.json
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from adapter_runs import RunClock
from torch.utils.data import DataLoader, TensorDataset

from collector.integrations.lightning import ETTCallback

STEPS = 6
STEP_S = 0.01
PASSED = ("ETT_JOB_ID", "ETT_SPOOL_DIR", "ETT_SUPERVISED")


class Tiny(pl.LightningModule):
    """A linear model whose steps the clock times."""

    def __init__(self, clock: RunClock) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.clock = clock

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.clock.step_start(0, self.global_step)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        time.sleep(STEP_S)
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.clock.step_end(0)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> int:
    torch.set_num_threads(1)
    clock = RunClock()
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    trainer = pl.Trainer(max_steps=STEPS, callbacks=[ETTCallback()], logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, accelerator="cpu", devices=1)
    trainer.fit(Tiny(clock), DataLoader(data, batch_size=4))
    Path(sys.argv[1]).write_text(json.dumps({
        "steps": clock.steps[0], "env": {name: os.environ.get(name) for name in PASSED}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
