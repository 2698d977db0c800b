"""What the adapters wrap where a framework gives no hook: methods of one trainer, and — through
the hooks plain PyTorch uses too — PyTorch's compile callbacks and the process group's start.

Why wrapping: Lightning has no hook around a checkpoint save, a checkpoint load or its
strategy's set-up; Hugging Face's ``on_save`` fires after the save is done and nothing marks
the start of an evaluation or a checkpoint load; neither reports compilation. NVIDIA's
resiliency extension times Lightning's saves the same way (it wraps the trainer's checkpoint
IO). Every wrap of a trainer's method is of one object's attribute (never a class the user
shares with other trainers), keeps the wrapped call's result and exception untouched, and is
undone when the attempt ends (``Patches``).

Why the PyTorch hooks are not written here: ``collector.integrations.torch`` hooks the same
calls for plain PyTorch. :class:`TorchWatch` installs those very hooks (``torch_compile``'s
``CompileSpans``, ``_hooks``' process-group wrap) with the attempt's lifecycle as their
target (:class:`LifecycleTarget`): spans before the attempt begins are kept until it does,
and training is paused by reason, as for every other phase an adapter sees. torch is imported
only when a hook is installed, so this module imports with the collector's core alone.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable
from typing import Any

from collector.integrations._hooks import (
    Hooks,
    Patches,
    Resume,
    Target,
    Wrapper,
    process_group_patches,
)
from collector.integrations._lifecycle import AttemptLifecycle
from collector.integrations.torch_compile import CompileSpans

__all__ = ["LifecycleTarget", "Patches", "TorchWatch", "timed"]

log = logging.getLogger("ett.integrations")


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


class LifecycleTarget(Target):
    """An adapter's attempt as the target of the shared PyTorch hooks.

    A span goes through the lifecycle (kept until the attempt begins, dropped once it ended);
    blocking work pauses training under its reason (``compile``, ``process_group_init``)
    until the hook resumes it, so it nests with the adapter's own pauses (a compile inside an
    evaluation).
    """

    def __init__(self, life: AttemptLifecycle) -> None:
        self.life = life

    def span(self, phase: str, start: float, end: float, *, blocking: bool = True,
             attrs: dict[str, Any] | None = None) -> None:
        life = self.life
        if life.active:
            fields: dict[str, Any] = {"blocking": blocking, **({"attrs": attrs} if attrs else {})}
            life.guard.call(f"{phase} span", life.span, phase, start, end, **fields)

    def interrupt(self, reason: str, *, any_thread: bool = False) -> Resume | None:
        life = self.life
        if not life.active:
            return None
        # Paused even when a failing Reporter breaks the slice's close: resumed all the same.
        life.guard.call("pausing training", life.pause, reason)
        return functools.partial(life.guard.call, "resuming training", life.resume, reason)


class TorchWatch:
    """The PyTorch hooks an adapter shares with ``collector.integrations.torch``: every
    ``torch.compile`` compilation as a ``compile`` span (Dynamo's compile callbacks, with the
    cache counters of ``torch_compile``), and ``init_process_group`` as a
    ``process_group_init`` span. Each is installed on demand and removed by :meth:`remove`.
    """

    def __init__(self, life: AttemptLifecycle) -> None:
        self.target = LifecycleTarget(life)
        #: The compile hook: its ``compilations`` counts what it reported.
        self.compile = CompileSpans(self.target)
        self._compile_registered = False
        self._patches = Patches()

    def watch_compile(self) -> bool:
        """Register the compile callbacks (once); False where this torch has none (compile
        time then stays in training)."""
        if not self._compile_registered:
            why = self.compile.register()
            if why is not None:
                log.info("ETT adapter: compile not reported: %s", why)
                return False
            self._compile_registered = True
        return True

    def watch_process_group(self) -> bool:
        """Wrap ``init_process_group`` until :meth:`remove`; False when there is nothing to
        see (no ``torch.distributed``, or the group already exists)."""
        try:
            dist = importlib.import_module("torch.distributed")
        except ImportError:
            return False
        if len(self._patches) or not dist.is_available() or dist.is_initialized():
            return False
        found = process_group_patches(Hooks(self.target))
        if isinstance(found, str):
            log.info("ETT adapter: process group start not reported: %s", found)
            return False
        return all([self._patches.apply(patch) for patch in found])

    def remove(self) -> None:
        if self._compile_registered:
            self._compile_registered = False
            self.compile.unregister()
        self._patches.undo()
