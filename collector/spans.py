"""Timing a trainer's phases and training steps as ``span`` events (ETT_SPEC §2).

Why these helpers exist: the attribution engine needs each phase as a closed span and
training as contiguous step ranges, and a trainer should get both by wrapping its code,
not by computing timestamps. A span's end never precedes its start, even when the wall
clock steps back, so a real span never turns into an invalid event. Each works through a
:class:`~collector.reporter.Reporter`, which never blocks and never raises into training.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

if TYPE_CHECKING:
    from collector.reporter import Reporter

P = ParamSpec("P")
R = TypeVar("R")


class PhaseSpan(contextlib.ContextDecorator):
    """A span of one phase: ``with reporter.phase("compile"):`` or ``@reporter.phase("eval")``."""

    def __init__(self, reporter: Reporter, name: str, blocking: bool,
                 attrs: dict[str, Any]) -> None:
        self.reporter, self.name, self.blocking, self.attrs = reporter, name, blocking, attrs
        self.start: float | None = None

    def _recreate_cm(self) -> PhaseSpan:
        # As a decorator one instance wraps every call: give each call its own start time,
        # or recursive and concurrent calls would overwrite each other's.
        return PhaseSpan(self.reporter, self.name, self.blocking, self.attrs)

    def __enter__(self) -> PhaseSpan:
        self.start = time.time()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        start = self.start if self.start is not None else time.time()
        attrs = dict(self.attrs)
        if exc_type is not None:
            attrs["error"] = exc_type.__name__
        fields: dict[str, Any] = {"blocking": self.blocking}
        if attrs:
            fields["attrs"] = attrs
        self.reporter.span(self.name, start, _now_after(start), **fields)


class TrainTracker:
    """Turns per-step progress into ``train`` spans with step ranges (ETT_SPEC §2).

    The loop, in one of two styles::

        with reporter.train(start_step=resumed, steps=total) as train:
            for step in train:          # global steps resumed .. total - 1
                ...                     # the step counts once the body completes

        with reporter.train(start_step=resumed) as train:
            while ...:
                ...
                train.advance()         # one more step done (or advance(step) to say which)

    A slice is closed and a new one opened once ``train_slice_s`` has passed, so a crash loses
    at most one slice; each completed step is also written to the Reporter's progress file
    (``collector.progress``), from which the slice a hard kill took is told again. Call
    :meth:`pause` around non-training work inside the loop (a checkpoint save, an eval) so
    that time is not counted as training; hooks that see such work themselves
    (``collector.integrations``) call :meth:`interrupt` and :meth:`resume`. The Reporter
    keeps the open tracker as ``reporter.tracker`` for those hooks.
    """

    def __init__(self, reporter: Reporter, start_step: int, steps: int | None = None) -> None:
        self.reporter = reporter
        self.step = start_step
        #: The global step training stops at (iteration ends there); None: no end.
        self.steps = steps
        #: The thread running the loop: only work on this thread interrupts training.
        self.thread = threading.get_ident()
        reporter.last_step = start_step
        reporter.tracker = self
        self._slice_start_step = start_step
        self._slice_start: float | None = time.time()
        #: Where each completed step is also kept for after a hard kill (collector.progress).
        self._progress = reporter.open_progress()
        if self._progress is not None:
            self._progress.record(start_step, self._slice_start)

    def advance(self, step: int | None = None) -> None:
        """Record that global step ``step`` is complete (``step`` = steps done so far; None:
        one more than the last).

        After :meth:`pause` without :meth:`resume`, the new slice opens now and still starts
        at the last recorded step, so step ranges stay contiguous (the time of that first
        step is not known; call :meth:`resume` when training restarts to keep it). A step
        below the last one is an in-process rollback: the open slice is closed and a new one
        starts at ``step``.
        """
        now = time.time()
        if step is None:
            step = self.step + 1
        if step < self.step:
            self._close_slice(now)
            self._slice_start, self._slice_start_step = now, step
        elif self._slice_start is None:
            self._slice_start, self._slice_start_step = now, self.step
        self.step = step
        self.reporter.last_step = step
        if self._progress is not None:
            self._progress.record(step, now)
        if now - self._slice_start >= self.reporter.train_slice_s:
            self._close_slice(now)
            self._slice_start, self._slice_start_step = now, step

    def __iter__(self) -> Iterator[int]:
        """The global steps from the current one up to ``steps`` (for ever when None); each
        is advanced past once the loop body completes, unless the body advanced itself (a
        rollback included: iteration continues from there). A ``break`` counts no step."""
        while self.steps is None or self.step < self.steps:
            step = self.step
            yield step
            if self.step == step:
                self.advance(step + 1)

    @property
    def running(self) -> bool:
        """Whether a slice is open (training is being counted)."""
        return self._slice_start is not None

    def _close_slice(self, now: float) -> None:
        if self._slice_start is None:
            return
        self.reporter.span("train", self._slice_start, max(now, self._slice_start),
                           step_start=self._slice_start_step, step_end=self.step)
        self._slice_start = None

    def pause(self) -> None:
        """Close the open slice; the next :meth:`advance` or :meth:`resume` opens a new one.

        A slice in which no step completed is dropped, not reported: a pause that comes
        inside the first step (``torch.compile`` compiles the model when the first batch
        runs) would otherwise report the moments before compiling as training, and the job's
        time to start (ETT_SPEC §3.8: to its first train span) would end before the compile
        it waits on. Training is counted from the slice in which a step completes."""
        if self._slice_start is not None and self.step == self._slice_start_step:
            self._slice_start = None
            return
        self._close_slice(time.time())

    def interrupt(self, *, any_thread: bool = False) -> bool:
        """Pause for blocking work seen by a hook, when it runs on the loop's thread while a
        slice is open; True when it paused (the hook then calls :meth:`resume`). A tracker
        the loop paused itself, or work on another thread, is left alone — unless the hook
        knows the loop waits for that work (``any_thread``): a backward graph compiled on
        autograd's device thread while the loop blocks in ``backward()``."""
        if self._slice_start is None or (threading.get_ident() != self.thread
                                         and not any_thread):
            return False
        self.pause()
        return True

    def resume(self) -> None:
        if self._slice_start is None:
            self._slice_start, self._slice_start_step = time.time(), self.step

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def close(self) -> None:
        self._close_slice(time.time())
        if self.reporter.tracker is self:
            self.reporter.tracker = None

    def __enter__(self) -> TrainTracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _now_after(start: float) -> float:
    """The current time, never before ``start``: a wall-clock step back (NTP) must not turn
    a real span into an invalid one (end before start)."""
    return max(time.time(), start)


def traced(reporter: Reporter, phase: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorator form for a module-level function: ``@traced(reporter, "eval")``."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def inner(*args: P.args, **kwargs: P.kwargs) -> R:
            with reporter.phase(phase):
                return fn(*args, **kwargs)

        return inner

    return wrap
