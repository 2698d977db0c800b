"""What every hook into PyTorch shares, whoever it reports to: where its spans go, the
attributes it replaced, and the process group's start.

Why one module: plain PyTorch (``collector.integrations.torch``, reporting to a Reporter) and
the framework adapters (Lightning, Hugging Face: reporting through an ``AttemptLifecycle``,
whose Reporter exists only once the attempt begins and which pauses training by reason) hook
the same PyTorch calls — ``init_process_group`` and Dynamo's compile callbacks. Each hook is
written once, against a :class:`Target`: where a span goes and how training is paused around
blocking work. Replacing an attribute and putting back exactly what was there
(:class:`Patch`, :class:`Patches`) is shared too. torch is imported only when a hook is
built, so this module imports with the collector's core alone.
"""

from __future__ import annotations

import functools
import importlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collector.reporter import Reporter

__all__ = ["Hooks", "Patch", "Patches", "ReporterTarget", "Target", "process_group_attrs",
           "process_group_patches"]

log = logging.getLogger("ett.integrations.torch")

MAX_TEXT = 200
_MISSING = object()

#: Puts training back after :meth:`Target.interrupt` paused it.
Resume = Callable[[], None]
#: When a hooked call began, and how to resume the training it paused (None: none paused).
Begun = tuple[float, "Resume | None"]
Describe = Callable[[], dict[str, Any]]
Wrapper = Callable[[Callable[..., Any]], Callable[..., Any]]


class Target:
    """Where a hook's spans go, and how it pauses training around blocking work it saw."""

    def span(self, phase: str, start: float, end: float, *, blocking: bool = True,
             attrs: dict[str, Any] | None = None) -> None:
        raise NotImplementedError

    def interrupt(self, reason: str, *, any_thread: bool = False) -> Resume | None:
        """Pause training for blocking work (``reason``: what it is) when it counts as
        interrupting it; the callable resumes training, None when nothing was paused.
        ``any_thread``: the loop waits for this work even when another thread runs it (a
        backward graph compiled lazily on autograd's device thread)."""
        raise NotImplementedError


class ReporterTarget(Target):
    """A Reporter: training is its open train tracker (``reporter.tracker``), paused only
    when the work runs on the loop's own thread (``TrainTracker.interrupt``)."""

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter

    def span(self, phase: str, start: float, end: float, *, blocking: bool = True,
             attrs: dict[str, Any] | None = None) -> None:
        self.reporter.span(phase, start, end, blocking=blocking,
                           **({} if attrs is None else {"attrs": attrs}))

    def interrupt(self, reason: str, *, any_thread: bool = False) -> Resume | None:
        tracker = self.reporter.tracker
        if tracker is not None and tracker.interrupt(any_thread=any_thread):
            return tracker.resume
        return None


class Patch:
    """One attribute replaced by a hook, and what was there before."""

    def __init__(self, owner: Any, name: str, wrapper: Any) -> None:
        self.owner, self.name, self.wrapper = owner, name, wrapper
        self.original = _own(owner).get(name, _MISSING)  # _MISSING: inherited, not its own

    def apply(self) -> None:
        setattr(self.owner, self.name, self.wrapper)

    def restore(self) -> bool:
        """Put the original back; False (and nothing done) when someone replaced the hook
        meanwhile, or the owner refuses."""
        if _own(self.owner).get(self.name, _MISSING) is not self.wrapper:
            return False
        try:
            if self.original is _MISSING:
                delattr(self.owner, self.name)
            else:
                setattr(self.owner, self.name, self.original)
        except (AttributeError, TypeError):
            return False
        return True


def _own(owner: Any) -> Mapping[str, Any]:
    """The owner's own attributes ({} for an object with ``__slots__`` only)."""
    own = getattr(owner, "__dict__", None)
    return own if isinstance(own, Mapping) else {}


class Patches:
    """The patches applied so far, put back by :meth:`undo` (last applied, first restored)."""

    def __init__(self) -> None:
        self._applied: list[Patch] = []

    def __len__(self) -> int:
        return len(self._applied)

    def apply(self, patch: Patch) -> bool:
        """Apply ``patch``; False, and nothing done, when the owner refuses the attribute."""
        try:
            patch.apply()
        except (AttributeError, TypeError):
            return False
        self._applied.append(patch)
        return True

    def wrap(self, obj: Any, name: str, wrapper: Wrapper) -> bool:
        """Replace ``obj.name`` (a callable) by ``wrapper(original)`` on that object.

        False, and nothing done, when there is no such callable or the object refuses a new
        attribute (``__slots__``): the caller then falls back on the hooks it has.
        """
        original = getattr(obj, name, None)
        if not callable(original):
            return False
        return self.apply(Patch(obj, name, wrapper(original)))

    def undo(self) -> list[Patch]:
        """Put everything back; the patches that could not be (replaced since) are returned."""
        left: list[Patch] = []
        while self._applied:
            patch = self._applied.pop()
            if not patch.restore():
                left.append(patch)
        return left


class Hooks:
    """Wrappers that report each call as a blocking span to one :class:`Target`.

    A failure of the target is logged once (further ones are not) and never reaches the
    caller; the wrapped call's own result and exception pass through untouched.
    """

    def __init__(self, target: Target) -> None:
        self.target = target
        self._warned = False
        self._local = threading.local()

    def warn_once(self, exc: BaseException) -> None:
        if not self._warned:
            self._warned = True
            log.warning("ETT torch hooks: a span was lost (%r); training goes on and further "
                        "failures are not logged", exc)

    def begin(self, phase: str) -> Begun:
        """Pause training (the target says whether this call interrupts it), note the start."""
        resume = None
        try:
            resume = self.target.interrupt(phase)
        except Exception as exc:
            self.warn_once(exc)
        return time.time(), resume

    def end(self, phase: str, begun: Begun, describe: Describe,
            error: BaseException | None = None) -> float:
        """Emit the blocking span begun at ``begun`` and resume training; its end time."""
        start, resume = begun
        end = max(time.time(), start)
        try:
            attrs = describe()
            if error is not None:
                attrs["error"] = type(error).__name__
            self.target.span(phase, start, end, blocking=True, attrs=attrs)
        except Exception as exc:
            self.warn_once(exc)
        finally:
            if resume is not None:
                try:
                    resume()
                except Exception as exc:
                    self.warn_once(exc)
        return end

    def nested(self, phase: str) -> bool:
        """Whether this thread is already inside a hooked call of ``phase`` (one span)."""
        return phase in self.open_phases()

    def open_phases(self) -> set[str]:
        phases: set[str] | None = getattr(self._local, "phases", None)
        if phases is None:
            phases = self._local.phases = set()
        return phases

    def timed(self, phase: str, original: Callable[..., Any],
              describe: Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any]]
              ) -> Callable[..., Any]:
        """``original`` reporting each outermost call as a blocking span of ``phase``."""
        hooks = self

        @functools.wraps(original)
        def hooked(*args: Any, **kwargs: Any) -> Any:
            if hooks.nested(phase):
                return original(*args, **kwargs)
            begun = hooks.begin(phase)
            hooks.open_phases().add(phase)
            error: BaseException | None = None
            try:
                return original(*args, **kwargs)
            except BaseException as exc:
                error = exc
                raise
            finally:
                hooks.open_phases().discard(phase)
                hooks.end(phase, begun, lambda: describe(args, kwargs), error)

        return hooked


# ---------------------------------------------------------------------- the process group
def process_group_attrs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The backend, world size and kind of rendezvous of an ``init_process_group`` call."""
    attrs: dict[str, Any] = {}
    backend = kwargs.get("backend", args[0] if args else None)
    init_method = kwargs.get("init_method", args[1] if len(args) > 1 else None)
    dist = importlib.import_module("torch.distributed")
    if dist.is_initialized():
        backend = backend or dist.get_backend()
        attrs["world_size"] = int(dist.get_world_size())
    if backend:
        attrs["backend"] = str(backend)[:MAX_TEXT]
    if isinstance(init_method, str) and "://" in init_method:
        attrs["init_method"] = init_method.split("://", 1)[0][:MAX_TEXT]
    elif kwargs.get("store") is not None:
        attrs["init_method"] = "store"
    return attrs


def process_group_patches(hooks: Hooks) -> list[Patch] | str:
    """``init_process_group`` as a ``process_group_init`` span: the patches to apply, or why
    there are none.

    Both names are replaced, ``torch.distributed.init_process_group`` (what accelerate,
    Lightning and most trainers call) and the module that defines it, so a caller of either
    is seen. Hugging Face starts the group while its ``TrainingArguments`` are built, before
    any callback hook: a module attribute is the only place to see it.
    """
    dist = importlib.import_module("torch.distributed")
    if not dist.is_available():
        return "torch.distributed is not available in this build"
    c10d = importlib.import_module("torch.distributed.distributed_c10d")
    original = getattr(c10d, "init_process_group", None)
    if original is None:
        return "torch.distributed has no init_process_group"
    wrapper = hooks.timed("process_group_init", original, process_group_attrs)
    return [Patch(owner, "init_process_group", wrapper) for owner in (dist, c10d)
            if getattr(owner, "init_process_group", None) is original]
