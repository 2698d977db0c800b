"""The adapters stay out of the user's way: a broken Reporter never reaches training, an
interrupted run is ``cancelled``, ``ETT_DISABLE`` silences them, and Lightning's entry point
attaches a callback only where ETT is configured and never beside an explicit one."""

from __future__ import annotations

import importlib
import pickle
import signal
import tomllib
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import pytorch_lightning
import torch
from adapter_runs import spool_events
from torch.utils.data import DataLoader, TensorDataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

from collector.integrations import lightning as lightning_adapter
from collector.integrations import transformers as transformers_adapter
from collector.reporter import Reporter

ROOT = Path(__file__).resolve().parents[3]
STEPS = 6


class Broken(Reporter):
    """A Reporter whose every event fails: the adapter must carry on regardless."""

    def emit(self, kind: str, **fields: Any) -> str | None:
        raise RuntimeError("the reporter is broken")


class _TinyBody:
    """A linear model's steps, for either Lightning package's LightningModule."""

    global_step: int

    def __init__(self, interrupt_at: int | None = None) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.interrupt_at = interrupt_at

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == self.interrupt_at:
            raise KeyboardInterrupt
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.layer.parameters(), lr=0.01)


class Tiny(_TinyBody, pl.LightningModule):
    pass


class TinyStandalone(_TinyBody, pytorch_lightning.LightningModule):
    pass


def _fit(callbacks: list[Any], model: Any = None, *,
         trainer_class: type[Any] = pl.Trainer) -> Any:
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    trainer = trainer_class(max_steps=STEPS, callbacks=callbacks, logger=False,
                            enable_progress_bar=False, enable_model_summary=False,
                            enable_checkpointing=False, accelerator="cpu", devices=1)
    trainer.fit(model or Tiny(), DataLoader(data, batch_size=4))
    return trainer


class Interrupt(TrainerCallback):
    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == 2:
            raise KeyboardInterrupt


def _train(tmp_path: Path, callbacks: list[Any]) -> Trainer:
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32,
                                       n_positions=8, bos_token_id=0, eos_token_id=0))
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 32, (32, 8))]
    args = TrainingArguments(output_dir=str(tmp_path / "output"), max_steps=STEPS,
                             per_device_train_batch_size=4, save_steps=3, use_cpu=True,
                             report_to=[], disable_tqdm=True, logging_steps=1000)
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)
    trainer.train()
    return trainer


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ETT variables from the caller's shell, and SIGINT as it was: Lightning ignores
    SIGINT after a KeyboardInterrupt (it shuts down gracefully), which must not outlive a
    test."""
    for name in ("ETT_JOB_ID", "ETT_SPOOL_DIR", "ETT_DISABLE", "ETT_AUTOLOAD",
                 "ETT_SUPERVISED", "RANK"):
        monkeypatch.delenv(name, raising=False)
    handler = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, handler)


def test_a_broken_reporter_never_reaches_lightning_training(tmp_path: Path) -> None:
    callback = lightning_adapter.ETTCallback(
        reporter=Broken("broken", attempt=0, spool_dir=tmp_path, heartbeat_s=0))
    trainer = _fit([callback])
    assert trainer.global_step == STEPS and trainer.state.finished
    assert callback.lifecycle.guard.failures > 0  # it did fail, and said so once per kind


def test_a_broken_reporter_never_reaches_transformers_training(tmp_path: Path) -> None:
    callback = transformers_adapter.ETTCallback(
        reporter=Broken("broken", attempt=0, spool_dir=tmp_path, heartbeat_s=0))
    trainer = _train(tmp_path, [callback])
    assert trainer.state.global_step == STEPS
    assert callback.lifecycle.guard.failures > 0
    assert trainer.train.__func__ is Trainer.train  # type: ignore[attr-defined]  # unwrapped


def test_an_interrupted_lightning_fit_is_cancelled(tmp_path: Path) -> None:
    callback = lightning_adapter.ETTCallback(job="interrupted", attempt=0, spool_dir=tmp_path)
    with pytest.raises(SystemExit):  # Lightning's graceful shutdown after Ctrl-C
        _fit([callback], Tiny(interrupt_at=3))
    end = [e for e in spool_events(tmp_path) if e.get("mark") == "attempt_end"]
    assert [e["attrs"] for e in end] == [{"status": "cancelled", "error": "KeyboardInterrupt"}]


def test_an_interrupted_transformers_run_is_cancelled(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    callback = transformers_adapter.ETTCallback(job="interrupted", attempt=0, spool_dir=spool)
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path, [callback, Interrupt()])
    end = [e for e in spool_events(spool) if e.get("mark") == "attempt_end"]
    assert [e["attrs"] for e in end] == [{"status": "cancelled", "error": "KeyboardInterrupt"}]


def test_ett_disable_silences_an_explicit_callback(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ETT_DISABLE", "1")
    spool = tmp_path / "spool"
    _fit([lightning_adapter.ETTCallback(job="off", spool_dir=spool)])
    _train(tmp_path, [transformers_adapter.ETTCallback(job="off", spool_dir=spool)])
    assert not spool.exists()


@pytest.mark.parametrize("factory", [lightning_adapter.callbacks_factory,
                                     lightning_adapter.pytorch_lightning_callbacks_factory])
def test_the_factory_attaches_nothing_unless_ett_is_configured(
        factory: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert factory() == []
    monkeypatch.setenv("ETT_SPOOL_DIR", str(tmp_path))
    (callback,) = factory()
    assert callback.autoloaded
    monkeypatch.setenv("ETT_AUTOLOAD", "0")
    assert factory() == []


def test_the_standalone_factory_builds_a_pytorch_lightning_callback(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ETT_JOB_ID", "standalone")
    monkeypatch.setenv("ETT_SPOOL_DIR", str(tmp_path))
    (callback,) = lightning_adapter.pytorch_lightning_callbacks_factory()
    assert isinstance(callback, pytorch_lightning.Callback)
    _fit([callback], TinyStandalone(), trainer_class=pytorch_lightning.Trainer)
    marks = [e["mark"] for e in spool_events(tmp_path) if e["kind"] == "mark"]
    assert marks == ["attempt_start", "attempt_end"]


def test_an_explicit_callback_silences_the_auto_loaded_one(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ETT_JOB_ID", "auto")
    monkeypatch.setenv("ETT_SPOOL_DIR", str(tmp_path / "auto"))
    explicit = lightning_adapter.ETTCallback(job="explicit", spool_dir=tmp_path / "explicit")
    _fit([explicit, *lightning_adapter.callbacks_factory()])
    assert not (tmp_path / "auto").exists()
    starts = [e for e in spool_events(tmp_path / "explicit") if e.get("mark") == "attempt_start"]
    assert [e["job"] for e in starts] == ["explicit"]


@pytest.mark.parametrize(("group", "package"), [
    ("lightning.pytorch.callbacks_factory", pl),
    ("pytorch_lightning.callbacks_factory", pytorch_lightning),
])
def test_pyproject_registers_a_factory_lightning_can_load(group: str, package: Any,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    """The entry point names a function Lightning's loader can load and call (it does
    ``entry_point.load()()``); the installed metadata follows at the next ``pip install``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (name, value), = project["entry-points"][group].items()
    factory = EntryPoint(name=name, value=value, group=group).load()
    module, _, attribute = value.partition(":")
    assert factory is getattr(importlib.import_module(module), attribute)
    monkeypatch.setenv("ETT_SPOOL_DIR", str(tmp_path))
    (callback,) = factory()
    assert isinstance(callback, package.Callback)


def test_a_callback_crosses_to_a_spawned_process_without_its_reporter(tmp_path: Path) -> None:
    """``ddp_spawn`` pickles the callbacks: a child gets the settings, a fresh lifecycle and
    no Reporter thread of the parent's."""
    callback = lightning_adapter.ETTCallback(job="spawned", attempt=2, spool_dir=tmp_path,
                                             team="nlp")
    callback.lifecycle.begin(gpus=2, rank_hint=0)
    child = pickle.loads(pickle.dumps(callback))
    assert child.lifecycle is not callback.lifecycle and child.lifecycle.reporter is None
    assert child.lifecycle.started_at == callback.lifecycle.started_at
    assert child.lifecycle.attrs == {"team": "nlp"} and not child.lifecycle.began
    callback.lifecycle.end("completed")


class BrokenData(pl.LightningDataModule):
    def prepare_data(self) -> None:
        raise OSError("dataset bucket unreachable")


def test_a_fit_that_fails_before_setup_is_a_failed_attempt(tmp_path: Path) -> None:
    callback = lightning_adapter.ETTCallback(job="early", attempt=0, spool_dir=tmp_path)
    trainer = pl.Trainer(max_steps=STEPS, callbacks=[callback], logger=False,
                         enable_progress_bar=False, accelerator="cpu", devices=1)
    with pytest.raises(OSError, match="unreachable"):
        trainer.fit(Tiny(), datamodule=BrokenData())
    events = spool_events(tmp_path)
    assert [e.get("mark", e.get("phase")) for e in events] == [
        "attempt_start", "model_init", "data_init", "process_group_init", "attempt_end"]
    assert events[-1]["attrs"] == {"status": "failed", "error": "OSError"}


def test_two_callbacks_on_one_trainer_report_one_attempt(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Passed twice, or passed while Lightning auto-loads one too: the job is reported once."""
    monkeypatch.setenv("ETT_SPOOL_DIR", str(tmp_path))
    _fit([lightning_adapter.ETTCallback(job="twice"), lightning_adapter.ETTCallback(job="twice"),
          *lightning_adapter.callbacks_factory()])
    marks = [e["mark"] for e in spool_events(tmp_path) if e["kind"] == "mark"]
    assert marks == ["attempt_start", "attempt_end"]
