"""What the adapters wrap where a framework gives no hook: methods of one trainer, PyTorch's
compile callbacks, and the process group's start.

Why wrapping: Lightning has no hook around a checkpoint save, a checkpoint load or its
strategy's set-up; Hugging Face's ``on_save`` fires after the save is done and nothing marks
the start of an evaluation or a checkpoint load; neither reports compilation. NVIDIA's
resiliency extension times Lightning's saves the same way (it wraps the trainer's checkpoint
IO). Every wrap here is of one object's attribute (never a class the user shares with other
trainers, except where noted), keeps the wrapped call's result and exception untouched, and
is undone when the attempt ends (:class:`Patches`). torch is imported only when a watch is
installed, so this module imports with the collector's core alone.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from collector.integrations._lifecycle import AttemptLifecycle

__all__ = ["CompileWatch", "Patches", "ProcessGroupWatch", "timed"]

Wrapper = Callable[[Callable[..., Any]], Callable[..., Any]]

#: Compile-cache counters (``torch._dynamo.utils.counters[group][name]``) put in a compile
#: span's attrs as the change over that compilation: a cache rollout's saving shows per job.
CACHE_COUNTERS = {
    ("inductor", "fxgraph_cache_hit"): "fxgraph_cache_hit",
    ("inductor", "fxgraph_cache_miss"): "fxgraph_cache_miss",
    ("aot_autograd", "autograd_cache_hit"): "autograd_cache_hit",
    ("aot_autograd", "autograd_cache_miss"): "autograd_cache_miss",
    ("stats", "unique_graphs"): "unique_graphs",
}


class Patches:
    """Attributes an adapter replaced on objects it does not own, put back by :meth:`undo`."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, bool, Any]] = []

    def wrap(self, obj: Any, name: str, wrapper: Wrapper) -> bool:
        """Replace ``obj.name`` (a callable) by ``wrapper(original)`` on the instance.

        False, and nothing done, when there is no such callable or the object refuses a new
        attribute (``__slots__``): the adapter then falls back on the hooks it has.
        """
        original = getattr(obj, name, None)
        if not callable(original):
            return False
        own = getattr(obj, "__dict__", None)
        had = own is not None and name in own
        previous = own.get(name) if had and own is not None else None
        try:
            setattr(obj, name, wrapper(original))
        except (AttributeError, TypeError):
            return False
        self._undo.append((obj, name, had, previous))
        return True

    def undo(self) -> None:
        while self._undo:
            obj, name, had, previous = self._undo.pop()
            try:
                if had:
                    setattr(obj, name, previous)
                else:
                    delattr(obj, name)
            except (AttributeError, TypeError):
                pass


def timed(life: AttemptLifecycle, phase: str, *, pause: bool = True,
          blocking: bool = True, **attrs: Any) -> Wrapper:
    """A wrapper that reports each call as a ``phase`` span (:meth:`AttemptLifecycle.phase`)."""

    def wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            if not life.active:
                return original(*args, **kwargs)
            with life.phase(phase, pause=pause, blocking=blocking, **attrs):
                return original(*args, **kwargs)

        return call

    return wrapper


def _compile_counters() -> dict[str, int]:
    from torch._dynamo.utils import counters

    return {key: int(counters[group][name]) for (group, name), key in CACHE_COUNTERS.items()}


class CompileWatch:
    """Reports every ``torch.compile`` compilation of this process as a ``compile`` span.

    Dynamo calls its start/end callbacks (``torch._dynamo.callback``) around each
    compilation: the first step's, a recompile after a guard failed, a backward graph
    compiled lazily on its first use. So the compile seconds are measured where they happen,
    not guessed from a slow first step, and training is paused meanwhile: they leave the
    ``train`` span. The span's attrs carry the trigger, Dynamo's compile id, whether it was a
    recompile, and the compile-cache hits and misses of that compilation.
    """

    def __init__(self, life: AttemptLifecycle) -> None:
        self.life = life
        self.compilations = 0
        self._open: dict[int, tuple[float, dict[str, int]]] = {}
        self._installed = False

    def install(self) -> bool:
        try:
            from torch._dynamo.callback import callback_handler
        except ImportError:  # a torch without Dynamo's callbacks: compile time stays in train
            return False
        callback_handler.register_start_callback(self._on_start)
        callback_handler.register_end_callback(self._on_end)
        self._installed = True
        return True

    def remove(self) -> None:
        if not self._installed:
            return
        from torch._dynamo.callback import callback_handler

        self._installed = False
        for callbacks, fn in ((callback_handler.start_callbacks, self._on_start),
                              (callback_handler.end_callbacks, self._on_end)):
            if fn in callbacks:
                callbacks.remove(fn)

    def _on_start(self, args: Any) -> None:
        self.life.guard.call("compile start", self._start)

    def _on_end(self, args: Any) -> None:
        self.life.guard.call("compile end", self._end, args)

    def _start(self) -> None:
        if not self.life.active:
            return
        self.life.pause("compile")  # first: the train slice must end before the compile
        self._open[threading.get_ident()] = (time.time(), _compile_counters())

    def _end(self, args: Any) -> None:
        opened = self._open.pop(threading.get_ident(), None)
        if opened is None:
            return
        start, before = opened
        self.compilations += 1
        after = _compile_counters()
        attrs: dict[str, Any] = {key: after[key] - before[key] for key in after}
        compile_id = str(getattr(args, "compile_id", ""))
        attrs["trigger"] = str(getattr(getattr(args, "callback_trigger", None), "name",
                                       "DYNAMO")).lower()
        attrs["compile_id"] = compile_id
        attrs["recompile"] = _is_recompile(compile_id)
        try:
            self.life.span("compile", start, time.time(), attrs=attrs)
        finally:
            self.life.resume("compile")


def _is_recompile(compile_id: str) -> bool:
    """Dynamo's compile ids read ``frame/attempt`` (``0/1``): attempt > 0 recompiles a frame."""
    _, _, attempt = compile_id.strip("[]").partition("/")
    digits = attempt.split("_")[0]
    return digits.isdigit() and int(digits) > 0


class ProcessGroupWatch:
    """Reports ``torch.distributed.init_process_group`` as a ``process_group_init`` span.

    Why a module attribute: Hugging Face starts the process group while its
    ``TrainingArguments`` are built (through accelerate), before any callback hook, and both
    accelerate and Lightning call it as ``torch.distributed.init_process_group(...)``. This is
    the one wrap of a shared function: it is installed while an attempt is open, calls the
    original with the same arguments, and is removed when the attempt ends.
    """

    def __init__(self, life: AttemptLifecycle) -> None:
        self.life = life
        self._patches = Patches()

    def install(self) -> bool:
        try:
            import torch.distributed as dist
        except ImportError:
            return False
        if not dist.is_available() or dist.is_initialized():
            return False
        return self._patches.wrap(dist, "init_process_group",
                                  timed(self.life, "process_group_init", pause=False))

    def remove(self) -> None:
        self._patches.undo()
