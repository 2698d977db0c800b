"""Hugging Face transformers → ETT: ``ETTCallback``, a ``TrainerCallback``.

Why hooks plus wraps: ``TrainerCallback`` events mark set-up's end (``on_init_end``,
``on_train_begin``), each optimizer step (``on_step_begin``/``on_step_end``) and training's
end, but they come *after* an evaluation (``on_evaluate``) or a checkpoint save (``on_save``),
nothing marks a checkpoint load, and no event fires when ``train()`` raises. So the callback
finds its ``Trainer`` (the one whose ``__init__`` calls ``on_init_end``, or the one given to
:meth:`ETTCallback.attach`) and wraps, on that instance only, ``train`` (how the run ended,
exception included), ``evaluate``, ``_save_checkpoint``, the checkpoint loads
(``_load_from_checkpoint``, ``_load_optimizer_and_scheduler``, ``_load_scaler``,
``_load_rng_state``) and ``get_train_dataloader``; all are undone when ``train`` returns.
The underscore methods are private to transformers (present in 5.x): a missing one is
skipped, and the callback falls back on what the events alone can tell (a save timed from
the step's end to ``on_save``; see ``docs/instrument.md``).

Use::

    callback = ETTCallback(job="my-job")  # before TrainingArguments: it starts the process group
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
    trainer.train()
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

from transformers import Trainer, TrainerCallback

from collector.integrations._lifecycle import AttemptLifecycle, status_from_exception
from collector.integrations._patches import Patches, TorchWatch, timed
from collector.reporter import Reporter

__all__ = ["ETTCallback"]

#: The Trainer's methods timed as checkpoint loads when it resumes from a checkpoint.
CHECKPOINT_LOADS = ("_load_from_checkpoint", "_load_optimizer_and_scheduler", "_load_scaler",
                    "_load_rng_state")
#: How far up the stack ``on_init_end`` looks for the Trainer that called it.
FRAMES_SEARCHED = 12


class ETTCallback(TrainerCallback):
    """Reports a Hugging Face ``Trainer.train`` to ETT: one attempt, its set-up, training,
    evaluation, checkpoints and compilation (the table in ``docs/instrument.md``).

    Create it before ``TrainingArguments`` (they start the process group). Never raises into
    training: a failure of its own is logged once and skipped.
    """

    def __init__(self, job: str | None = None, *, attempt: int | None = None,
                 rank: int | None = None, reporter: Reporter | None = None,
                 spool_dir: str | os.PathLike[str] | None = None,
                 started_at: float | None = None, marks_attempt: bool | None = None,
                 model: str | None = None, trainer: Trainer | None = None,
                 **attrs: Any) -> None:
        """Arguments as Lightning's ETTCallback's; ``trainer`` is for a callback added after
        the Trainer was built (same as :meth:`attach`)."""
        self._life = life = AttemptLifecycle(
            job=job, attempt=attempt, rank=rank, reporter=reporter, spool_dir=spool_dir,
            started_at=started_at, marks_attempt=marks_attempt, attrs=attrs)
        self._model = model
        self._patches = Patches()
        self._torch = TorchWatch(life)
        self._trainer: Trainer | None = None
        self._times_train = self._times_eval = self._times_save = False
        life.guard.call("process group hook", self._torch.watch_process_group)
        # Until on_init_end: the arguments (device, process group), the model, the Trainer.
        life.guard.call("model_init", life.stretch, "model_init", life.started_at)
        if trainer is not None:
            self.attach(trainer)

    @property
    def lifecycle(self) -> AttemptLifecycle:
        return self._life

    # ------------------------------------------------------------------ the Trainer
    def attach(self, trainer: Trainer) -> None:
        """Wrap what has no event on ``trainer`` (done for you when ``on_init_end`` finds it)."""
        self._life.guard.call("attach", self._attach, trainer)

    def _attach(self, trainer: Trainer) -> None:
        if self._trainer is not None or not self._life.active:
            return
        self._trainer = trainer
        life, wrap = self._life, self._patches.wrap
        self._times_train = wrap(trainer, "train", self._wrap_train)
        self._times_eval = wrap(trainer, "evaluate", timed(life, "eval"))
        self._times_save = wrap(trainer, "_save_checkpoint", timed(life, "checkpoint_save"))
        for name in CHECKPOINT_LOADS:
            wrap(trainer, name, timed(life, "checkpoint_load"))
        wrap(trainer, "get_train_dataloader", timed(life, "data_init"))

    def _wrap_train(self, original: Any) -> Any:
        @functools.wraps(original)
        def train(*args: Any, **kwargs: Any) -> Any:
            # From here to on_train_begin: wrapping and preparing the model (accelerate),
            # the optimizer; the loads and the train loader inside it are their own spans.
            self._life.guard.call("train start", self._life.stretch, "model_init")
            try:
                result = original(*args, **kwargs)
            except BaseException as exc:
                self._life.guard.call("train end", self._finish, status_from_exception(exc),
                                      error=type(exc).__name__)
                raise
            self._life.guard.call("train end", self._finish, "completed")
            return result

        return train

    def _finish(self, status: str, **detail: Any) -> None:
        self._life.end(status, **detail)
        self._torch.remove()
        self._patches.undo()

    def _begin(self, args: Any, model: Any) -> None:
        life = self._life
        if life.began or not life.active:
            return
        gpus = max(1, int(getattr(args, "world_size", 1) or 1), int(getattr(args, "n_gpu", 0)))
        name = self._model or _model_name(model)
        if life.begin(gpus=gpus, rank_hint=getattr(args, "process_index", None),
                      **({"model": name} if name else {})):
            self._torch.watch_compile()

    # ------------------------------------------------------------------ events
    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._life.guard.call("on_init_end", self._init_end, args, kwargs.get("model"))

    def _init_end(self, args: Any, model: Any) -> None:
        trainer = self._trainer or _calling_trainer()
        if trainer is not None:
            self._attach(trainer)
        self._life.stretch(None)  # the time until train() is the script's own
        self._begin(args, model)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._life.guard.call("on_train_begin", self._train_begin, args, kwargs.get("model"))

    def _train_begin(self, args: Any, model: Any) -> None:
        self._begin(args, model)  # added after the Trainer was built: no on_init_end came
        # From here to the first step: the loader's iterator, skipping the batches a resumed
        # run already trained, the first batch.
        self._life.stretch("data_init")

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._life.guard.call("on_step_begin", self._step_begin, state.global_step)

    def _step_begin(self, step: int) -> None:
        for expected in ("eval", "save"):  # expected by _expect, and never came
            self._life.close(expected, emit=False)
        self._life.step_begin(step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._life.guard.call("on_step_end", self._step_end, state.global_step, control)

    def _step_end(self, step: int, control: Any) -> None:
        self._life.step_end(step)
        self._expect(control)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._life.guard.call("on_epoch_end", self._expect, control)

    def _expect(self, control: Any) -> None:
        """Without the wraps, time an evaluation and a save from the events alone: the flags
        the default flow set in this step's end say what comes before the next step."""
        if not self._times_eval and control.should_evaluate:
            self._life.open("eval", "eval")
        elif not self._times_save and control.should_save:
            self._life.open("save", "checkpoint_save", timed_by="events")

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._life.guard.call("on_evaluate", self._evaluated, control)

    def _evaluated(self, control: Any) -> None:
        if self._times_eval:
            return
        self._life.close("eval")
        if not self._times_save and (control.should_save or _saves_best(self._trainer)):
            self._life.open("save", "checkpoint_save", timed_by="events")

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self._times_save:
            self._life.guard.call("on_save", self._life.close, "save")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._life.guard.call("on_train_end", self._train_end)

    def _train_end(self) -> None:
        self._life.training_done()
        self._life.stretch(None)
        if not self._times_train:  # no wrap saw train() return: it is done now
            self._finish("completed")


def _saves_best(trainer: Trainer | None) -> bool:
    """Whether saves follow the best metric (decided after ``on_evaluate``)."""
    strategy = getattr(getattr(trainer, "args", None), "save_strategy", None)
    return str(getattr(strategy, "value", strategy)) == "best"


def _calling_trainer() -> Trainer | None:
    """The Trainer whose ``__init__`` is calling ``on_init_end`` (a few frames up), if any."""
    frame = sys._getframe(1)
    for _ in range(FRAMES_SEARCHED):
        if frame is None:
            return None
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _model_name(model: Any) -> str:
    """The checkpoint a model was loaded from, else its class (a model built from a config)."""
    if model is None:
        return ""
    name = getattr(getattr(model, "config", None), "_name_or_path", "") or ""
    return str(name) or type(model).__name__
