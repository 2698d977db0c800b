"""What the adapters wrap where a framework gives no hook: methods of one trainer, PyTorch's
compile callbacks, and the process group's start.

Why wrapping: Lightning has no hook around a checkpoint save, a checkpoint load or its
strategy's set-up; Hugging Face's ``on_save`` fires after the save is done and nothing marks
the start of an evaluation or a checkpoint load; neither reports compilation. NVIDIA's
resiliency extension times Lightning's saves the same way (it wraps the trainer's checkpoint
IO). Every wrap here is of one object's attribute (never a class the user shares with other
trainers, except where noted), keeps the wrapped call's result and exception untouched, and
is undone when the attempt ends (:class:`Patches`). The compile watch is the plain-PyTorch
hook's (``torch_compile.CompileSpans``) reporting through the adapter's lifecycle, so both
ways in report compilations alike. torch is imported only when a watch is installed, so this
module imports with the collector's core alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from collector.integrations._lifecycle import AttemptLifecycle
from collector.integrations.torch_compile import CompileSpans

__all__ = ["CompileWatch", "Patches", "ProcessGroupWatch", "timed"]

Wrapper = Callable[[Callable[..., Any]], Callable[..., Any]]

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


class CompileWatch(CompileSpans):
    """Reports every ``torch.compile`` compilation of this process as a ``compile`` span,
    through the adapter's attempt lifecycle.

    The plain-PyTorch hook's :class:`CompileSpans` (the same callbacks, counters and attrs)
    with three steps changed: a compilation counts only while the attempt is open, training
    is paused through the lifecycle (which owns the adapters' train tracker), and the span
    goes through the lifecycle, which holds it until the attempt's Reporter exists.
    """

    def __init__(self, life: AttemptLifecycle) -> None:
        super().__init__(None)
        self.life = life

    def install(self) -> bool:
        return self.register() is None

    def remove(self) -> None:
        if self._registered:
            self.unregister()

    def wanted(self) -> bool:
        return self.life.active

    def pause(self, args: Any) -> Any:
        self.life.pause("compile")  # first: the train slice must end before the compile
        return True

    def resume(self, paused: Any) -> None:
        if paused:
            self.life.resume("compile")

    def emit(self, start: float, end: float, attrs: dict[str, Any]) -> None:
        self.life.span("compile", start, end, attrs=attrs)


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
