"""PyTorch Lightning → ETT: ``ETTCallback``, and the factory Lightning's entry point auto-loads.

Why a callback plus a few wraps: Lightning's hooks mark most of an attempt's moments (set-up,
each training batch, validation, the end of training, an exception), but nothing marks the
start of ``fit``, the strategy's set-up (device and process group), or a checkpoint save or
load. So the first ETTCallback created in a process wraps ``Trainer.fit`` (the class's, once:
the wrapper only acts for a trainer holding an ETTCallback and otherwise calls straight
through), and at ``fit`` each callback wraps, on that trainer only, ``strategy.
setup_environment``, ``save_checkpoint``, ``strategy.load_checkpoint`` and, with
``AsyncCheckpointIO``, the background write — as NVIDIA's resiliency extension wraps the
checkpoint IO. Everything is undone when ``fit`` returns. What each moment becomes is the
table in ``docs/instrument.md``; the state machine behind it is ``_lifecycle``'s.

Use::

    trainer = pl.Trainer(callbacks=[ETTCallback(job="my-job")], ...)

or let the entry point attach one (``callbacks_factory``; set ``ETT_JOB_ID`` or
``ETT_SPOOL_DIR``, opt out with ``ETT_AUTOLOAD=0``).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from typing import Any

from collector.integrations._lifecycle import (
    AttemptLifecycle,
    autoload_wanted,
    status_from_exception,
)
from collector.integrations._patches import Patches, TorchWatch, timed
from collector.reporter import Reporter

try:
    import lightning.pytorch as pl
except ImportError:  # only the standalone package is installed
    import pytorch_lightning as pl  # type: ignore[no-redef]

__all__ = ["ETTCallback", "callbacks_factory", "pytorch_lightning_callbacks_factory"]

log = logging.getLogger("ett.integrations")


class _LightningHooks:
    """The hooks of ETTCallback, apart from the ``Callback`` base they are mixed into: the same
    code serves ``lightning.pytorch`` and the standalone ``pytorch_lightning`` (whose
    ``Callback`` is another class)."""

    #: The Trainer class whose ``fit`` this callback's package uses (set per subclass).
    _trainer_class: type[Any]

    def __init__(self, job: str | None = None, *, attempt: int | None = None,
                 rank: int | None = None, reporter: Reporter | None = None,
                 spool_dir: str | os.PathLike[str] | None = None,
                 started_at: float | None = None, marks_attempt: bool | None = None,
                 model: str | None = None, **attrs: Any) -> None:
        """``job``/``attempt``/``rank`` override the environment (``collector.identity``);
        ``started_at`` (epoch s) is the attempt's start, default now; ``marks_attempt``
        (default: rank 0 unless ``ETT_SUPERVISED`` is set) says whether this callback emits
        ``attempt_start``/``attempt_end``; ``model`` and ``attrs`` (team, cluster) go into
        ``attempt_start``."""
        super().__init__()
        self._config: dict[str, Any] = dict(
            job=job, attempt=attempt, rank=rank, reporter=reporter, spool_dir=spool_dir,
            started_at=time.time() if started_at is None else started_at,
            marks_attempt=marks_attempt, attrs=attrs)
        self._model = model
        self.autoloaded = False
        self._setup()
        self._life.guard.call("wrapping Trainer.fit", _wrap_fit, self._trainer_class)

    def _setup(self) -> None:
        self._life = AttemptLifecycle(**self._config)
        self._patches = Patches()
        self._torch = TorchWatch(self._life)
        self._entered = False
        self._via_fit = False
        self._resuming = False

    def __getstate__(self) -> dict[str, Any]:
        """Picklable for ``ddp_spawn``: a child gets a fresh lifecycle, no Reporter thread."""
        config = {**self._config, "reporter": None}
        return {"_config": config, "_model": self._model, "autoloaded": self.autoloaded}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup()

    @property
    def lifecycle(self) -> AttemptLifecycle:
        return self._life

    # ------------------------------------------------------------------ fit
    def _enter(self, trainer: Any, *, via_fit: bool) -> bool:
        """``fit`` started (or, without the fit wrapper, its ``setup`` hook came): wrap what
        has no hook on this trainer; False when this callback stays out of it."""
        life = self._life
        if self._entered or not life.active:
            return self._entered
        if _reporting_callback(trainer, self) is not self:
            life.enabled = False  # another ETT callback on this trainer reports its attempt
            return False
        self._entered, self._via_fit = True, via_fit
        if via_fit:
            life.stretch("model_init", at=life.started_at)  # the model and Trainer built
            life.stretch("data_init")  # prepare_data and the datamodule's setup
            self._patches.wrap(trainer.strategy, "setup_environment",
                               timed(life, "process_group_init", pause=False))
        else:
            life.stretch("model_init", at=life.started_at)
        self._patches.wrap(trainer, "save_checkpoint", timed(life, "checkpoint_save"))
        self._patches.wrap(trainer.strategy, "load_checkpoint", self._timed_load)
        self._wrap_async_save(trainer)
        self._torch.watch_compile()
        return True

    def _timed_load(self, original: Any) -> Any:
        """``strategy.load_checkpoint`` (reading a checkpoint to resume from) as a
        ``checkpoint_load``; it also tells ``on_fit_start`` that this fit resumes."""
        load = timed(self._life, "checkpoint_load")(original)

        @functools.wraps(original)
        def resume(*args: Any, **kwargs: Any) -> Any:
            self._resuming = True
            return load(*args, **kwargs)

        return resume

    def _wrap_async_save(self, trainer: Any) -> None:
        """With ``AsyncCheckpointIO`` the save call only stages (clones the tensors) and hands
        the write to a thread: the call is a blocking ``checkpoint_save`` (inside
        ``save_checkpoint``'s), the write a non-blocking one."""
        io = trainer.strategy.checkpoint_io
        inner = getattr(io, "checkpoint_io", None)
        if type(io).__name__ == "AsyncCheckpointIO" and inner is not None:
            self._patches.wrap(inner, "save_checkpoint",
                               timed(self._life, "checkpoint_save", pause=False,
                                     blocking=False, stage="async_write"))

    def _begin(self, trainer: Any, pl_module: Any) -> bool:
        model = self._model or ("" if pl_module is None else type(pl_module).__name__)
        return self._life.begin(gpus=trainer.world_size, rank_hint=trainer.global_rank,
                                **({"model": model} if model else {}))

    def _leave(self, exc: BaseException | None, trainer: Any) -> None:
        """``fit`` ended (``exc``: how). A fit that failed before ``setup`` is reported too:
        the attempt begins here, so its failure is not lost."""
        if exc is not None and not self._life.began:
            self._life.guard.call("late begin", self._begin, trainer,
                                  getattr(trainer, "lightning_module", None))
        status = status_from_exception(exc)
        detail = {} if exc is None else {"error": type(exc).__name__}
        self._finish(status, **detail)

    def _finish(self, status: str, **detail: Any) -> None:
        self._life.end(status, **detail)
        self._torch.remove()
        self._patches.undo()

    # ------------------------------------------------------------------ hooks
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self._life.guard.call("setup", self._on_setup, trainer, pl_module)

    def _on_setup(self, trainer: Any, pl_module: Any) -> None:
        if self._enter(trainer, via_fit=False) and self._begin(trainer, pl_module):
            self._life.stretch("model_init")  # module setup, configure_model, strategy setup

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        # Restoring optimizer and loop state when resuming; else setting up the train data.
        phase = "checkpoint_load" if self._resuming else "data_init"
        self._life.guard.call("on_fit_start", self._life.stretch, phase)

    def on_sanity_check_start(self, trainer: Any, pl_module: Any) -> None:
        self._life.guard.call("on_sanity_check_start", self._sanity_start)

    def _sanity_start(self) -> None:
        self._life.stretch(None)
        self._life.open("sanity_check", "eval", sanity_check=True)

    def on_sanity_check_end(self, trainer: Any, pl_module: Any) -> None:
        self._life.guard.call("on_sanity_check_end", self._sanity_end)

    def _sanity_end(self) -> None:
        self._life.close("sanity_check")
        self._life.stretch("data_init")

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        # From here to the first batch: the loader's iterator, workers, the first batch.
        self._life.guard.call("on_train_start", self._life.stretch, "data_init")

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        self._life.guard.call("on_train_batch_start", self._life.step_begin,
                              trainer.global_step)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self._life.guard.call("on_train_batch_end", self._life.step_end, trainer.global_step)

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self._life.guard.call("on_validation_start", self._life.open, "validation", "eval")

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self._life.guard.call("on_validation_end", self._life.close, "validation")

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._life.guard.call("on_train_end", self._life.training_done)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._life.guard.call("on_exception", self._leave, exception, trainer)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit" and self._entered and not self._via_fit:
            self._life.guard.call("teardown", self._finish, "completed")


def _wrap_fit(trainer_class: type[Any]) -> None:
    """Wrap ``trainer_class.fit`` once per process: the only moment before ``setup`` that a
    callback can know of, and a last word on how ``fit`` ended."""
    fit = trainer_class.fit
    if getattr(fit, "__ett_original__", None) is not None:
        return

    @functools.wraps(fit)
    def ett_fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        entered = [cb for cb in getattr(self, "callbacks", ())
                   if isinstance(cb, _LightningHooks)
                   and cb._life.guard.call("fit start", cb._enter, self, via_fit=True)]
        try:
            result = fit(self, *args, **kwargs)
        except BaseException as exc:
            for cb in entered:
                cb._life.guard.call("fit end", cb._leave, exc, self)
            raise
        for cb in entered:
            cb._life.guard.call("fit end", cb._leave, None, self)
        return result

    ett_fit.__ett_original__ = fit  # type: ignore[attr-defined]
    trainer_class.fit = ett_fit


class ETTCallback(_LightningHooks, pl.Callback):
    """Reports a Lightning ``fit`` to ETT: one attempt, its set-up, training, evaluation,
    checkpoints and compilation (the table in ``docs/instrument.md``).

    Never raises into training: a failure of its own is logged once and skipped.
    """

    _trainer_class = pl.Trainer


_standalone_class: type[Any] | None = None


def _standalone_callback_class() -> type[Any]:
    """ETTCallback for the standalone ``pytorch_lightning`` package (its own Callback)."""
    global _standalone_class
    if _standalone_class is None:
        import pytorch_lightning

        if pytorch_lightning.Callback is pl.Callback:
            _standalone_class = ETTCallback
        else:
            _standalone_class = type("ETTCallback", (_LightningHooks, pytorch_lightning.Callback),
                                     {"_trainer_class": pytorch_lightning.Trainer,
                                      "__doc__": ETTCallback.__doc__,
                                      "__module__": __name__})
    return _standalone_class


def _reporting_callback(trainer: Any, callback: Any) -> Any:
    """The one ETT callback of a trainer that reports: the first the user attached, else the
    first auto-loaded one (a factory's output passed explicitly, then Lightning's own). A job
    is never reported twice, however many callbacks reached its trainer."""
    ours = [cb for cb in getattr(trainer, "callbacks", []) if isinstance(cb, _LightningHooks)]
    return next((cb for cb in ours if not cb.autoloaded), ours[0] if ours else callback)


def _autoloaded(make: Any) -> list[Any]:
    if not autoload_wanted():
        return []
    try:
        callback = make()
    except Exception:  # a Trainer must never fail to start because of us
        log.warning("ETT adapter: could not create the auto-loaded callback", exc_info=True)
        return []
    callback.autoloaded = True
    return [callback]


def callbacks_factory() -> list[Any]:
    """The ``lightning.pytorch.callbacks_factory`` entry point: one ETTCallback, or none.

    None unless ETT is configured on this node (``ETT_JOB_ID`` or ``ETT_SPOOL_DIR``) and
    neither ``ETT_DISABLE=1`` nor ``ETT_AUTOLOAD=0`` is set. An ETTCallback the user passed
    explicitly takes precedence: the auto-loaded one then stays silent.
    """
    return _autoloaded(ETTCallback)


def pytorch_lightning_callbacks_factory() -> list[Any]:
    """The same for the standalone package (``pytorch_lightning.callbacks_factory``)."""
    return _autoloaded(lambda: _standalone_callback_class()())
