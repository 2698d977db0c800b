"""One attempt on one rank, as the framework adapters report it: what Lightning's and Hugging
Face's callbacks share.

Why one module: both adapters see different hooks but must report the same things the same
way — the attempt's start and end (its status read from how the run ended), set-up phases
that follow one another (``model_init``, ``data_init``, …), phases timed around a call
(checkpoint save and load, eval, compile) that pause training, and training itself as
``train`` spans with global-step ranges (``collector.spans.TrainTracker``, closed and reopened
at least every ``train_slice_s``). Keeping that state machine here, free of any framework
and of torch, lets each adapter be only the mapping from its framework's moments to these
calls, and lets the state machine be tested without a framework.

Two rules hold everywhere: nothing here raises into the user's training (a failure is logged
once per kind and the adapter carries on; see :class:`Guard`), and an adapter set off by
``ETT_DISABLE=1`` does nothing at all.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

# SUPERVISED_ENV: set by a supervisor that marks the attempt itself (``collector.run``, the
# reference trainer's): an adapter then reports phases and training, never a second
# ``attempt_start``/``attempt_end``.
from collector.identity import SUPERVISED_ENV, identity_from_env
from collector.reporter import Reporter
from collector.spans import TrainTracker

__all__ = ["AUTOLOAD_ENV", "DISABLE_ENV", "SUPERVISED_ENV", "AttemptLifecycle", "Guard",
           "autoload_wanted", "disabled", "status_from_exception"]

log = logging.getLogger("ett.integrations")

#: ``ETT_DISABLE=1``: every adapter does nothing (explicit callbacks included).
DISABLE_ENV = "ETT_DISABLE"
#: ``ETT_AUTOLOAD=0``: the Lightning entry point attaches no callback (explicit ones still work).
AUTOLOAD_ENV = "ETT_AUTOLOAD"
#: What tells the entry point that ETT is in use on this node (see :func:`autoload_wanted`).
CONFIGURED_ENV = ("ETT_JOB_ID", "ETT_SPOOL_DIR")
#: Spans kept before the Reporter exists (set-up before the framework names the rank).
MAX_EARLY_SPANS = 64
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

T = TypeVar("T")


def disabled(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``ETT_DISABLE`` asks every adapter to stay out of the way."""
    env = os.environ if env is None else env
    return env.get(DISABLE_ENV, "").strip().lower() in _TRUE


def autoload_wanted(env: Mapping[str, str] | None = None) -> bool:
    """Whether an auto-loaded callback (no code change) should attach itself.

    The polite default: only when this node says ETT is in use — ``ETT_JOB_ID`` or
    ``ETT_SPOOL_DIR`` is set — and neither ``ETT_DISABLE=1`` nor ``ETT_AUTOLOAD=0`` is. An
    installed extra must not start writing spool files into every Lightning run on a laptop.
    """
    env = os.environ if env is None else env
    if disabled(env) or env.get(AUTOLOAD_ENV, "").strip().lower() in _FALSE:
        return False
    return any(env.get(name, "").strip() for name in CONFIGURED_ENV)


def status_from_exception(exc: BaseException | None) -> str:
    """The ``attempt_end`` status for a run that ended with ``exc`` (None: it returned).

    ``KeyboardInterrupt`` is ``cancelled`` (someone stopped it); Lightning's
    ``SIGTERMException`` is ``preempted`` (SIGTERM is how schedulers take the hardware back);
    ``SystemExit`` with status 0 is ``completed``; anything else is ``failed``.
    """
    if exc is None:
        return "completed"
    if isinstance(exc, KeyboardInterrupt):
        return "cancelled"
    if any(cls.__name__ == "SIGTERMException" for cls in type(exc).__mro__):
        return "preempted"
    if isinstance(exc, SystemExit) and exc.code in (0, None):
        return "completed"
    return "failed"


class Guard:
    """Runs the adapter's own bookkeeping so that it never raises into training.

    A failure is logged once per ``key`` (with its traceback) and counted; the caller gets
    ``None`` and training goes on. Only ``Exception`` is caught: a ``KeyboardInterrupt`` that
    arrives during a hook is the user's, not ours.
    """

    def __init__(self) -> None:
        self.failures = 0
        self._warned: set[str] = set()

    def call(self, key: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        try:
            return fn(*args, **kwargs)
        except Exception:
            self.failures += 1
            if key not in self._warned:
                self._warned.add(key)
                log.warning("ETT adapter: %s failed; training goes on without it (further "
                            "failures of this kind are only counted)", key, exc_info=True)
            return None


class AttemptLifecycle:
    """The events of one attempt on one rank, driven by an adapter's hooks.

    The Reporter is created lazily (:meth:`begin`), when the framework knows this process's
    global rank: a launcher that starts one process per device may set no ``RANK``. Job,
    attempt and rank come from ``collector.identity``; an argument given here wins.
    """

    def __init__(self, *, job: str | None = None, attempt: int | None = None,
                 rank: int | None = None, reporter: Reporter | None = None,
                 spool_dir: str | os.PathLike[str] | None = None,
                 started_at: float | None = None, marks_attempt: bool | None = None,
                 attrs: Mapping[str, Any] | None = None) -> None:
        self.enabled = not disabled()
        self.guard = Guard()
        self.started_at = time.time() if started_at is None else started_at
        self.reporter = reporter
        self._owns_reporter = reporter is None
        self._job, self._attempt, self._rank = job, attempt, rank
        self._spool_dir = None if spool_dir is None else Path(spool_dir)
        self._marks_attempt = marks_attempt
        self.attrs = dict(attrs or {})
        self.began = self.ended = False
        self.marks = False
        self.tracker: TrainTracker | None = None
        self._stretch: tuple[str, float] | None = None
        self._open: dict[str, tuple[str, float, dict[str, Any]]] = {}
        self._paused: dict[str, int] = {}
        self._early: list[tuple[str, float, float, dict[str, Any]]] = []
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ attempt
    @property
    def active(self) -> bool:
        """Enabled and not ended: the moments an adapter sees now belong to this attempt.

        Before :meth:`begin` (no Reporter yet) spans are kept and emitted when it comes."""
        return self.enabled and not self.ended

    def _make_reporter(self, rank_hint: int | None) -> Reporter:
        identity = identity_from_env(job=self._job, attempt=self._attempt, rank=self._rank)
        rank = identity.rank
        if identity.rank_source == "default" and rank_hint is not None:
            rank = rank_hint  # the framework knows the global rank the environment did not say
        return Reporter(identity.job, attempt=identity.attempt, rank=rank,
                        spool_dir=self._spool_dir)

    def begin(self, *, gpus: int, rank_hint: int | None = None, **attrs: Any) -> bool:
        """Start reporting this attempt: ``attempt_start`` at ``started_at`` (rank 0 only,
        and only when no supervisor marks attempts) and heartbeats carrying the last
        completed step (every rank, supervised or not: ETT_SPEC §3 rule 3 reads them after
        a hard kill); False when nothing will be reported."""
        if not self.enabled or self.ended:
            return False
        if self.began:
            return True
        if self.reporter is None:
            self.reporter = self._make_reporter(rank_hint)
        marks = self._marks_attempt
        if marks is None:
            marks = self.reporter.rank == 0 and not os.environ.get(SUPERVISED_ENV)
        self.began, self.marks = True, marks
        if marks:
            self.reporter.attempt_start(gpus=max(1, int(gpus)), ts=self.started_at,
                                        **{**self.attrs, **attrs})
            _end_at_exit(self)
        else:  # every rank beats, marked or not: its last step outlives a hard kill
            self.reporter.start_heartbeat()
        early, self._early = self._early, []
        for phase, start, end, fields in early:
            self.reporter.span(phase, start, end, **fields)
        return True

    def end(self, status: str, **attrs: Any) -> None:
        """Close whatever is open and mark the attempt's end; later calls do nothing."""
        with self._lock:
            if not (self.active and self.began):
                return
            self.ended = True
        now = time.time()
        reporter = self.reporter
        assert reporter is not None
        self.guard.call("closing training", self._close_training)
        for name in list(self._open):
            self.guard.call(f"closing {name}", self.close, name, error=status != "completed")
        self.guard.call("closing set-up", self._end_stretch, now)
        if self.marks:
            self.guard.call("attempt_end", reporter.attempt_end, status, **attrs)
        if self._owns_reporter:
            self.guard.call("reporter shutdown", reporter.shutdown, 5.0)
        else:
            self.guard.call("reporter flush", reporter.flush, 5.0)

    # ------------------------------------------------------------------ spans
    def span(self, phase: str, start: float, end: float, **fields: Any) -> None:
        """Emit a span measured by the caller; before :meth:`begin`, keep it until then."""
        if not self.enabled:
            return
        if self.reporter is not None and self.began:
            self.reporter.span(phase, start, max(start, end), **fields)
        elif not self.ended and len(self._early) < MAX_EARLY_SPANS:
            self._early.append((phase, start, max(start, end), fields))

    def stretch(self, phase: str | None, at: float | None = None) -> None:
        """End the set-up phase in progress (emitting its span) and start ``phase``.

        Set-up phases follow one another from hook to hook (``model_init`` until the data
        is set up, ``data_init`` until the first step, …); ``None`` starts nothing.
        """
        at = time.time() if at is None else at
        with self._lock:
            self._end_stretch(at)
            if phase is not None and self.active:
                self._stretch = (phase, at)

    def _end_stretch(self, at: float) -> None:
        if self._stretch is not None:
            phase, start = self._stretch
            self._stretch = None
            if at > start:
                self.span(phase, start, at)

    def open(self, name: str, phase: str, *, pause: bool = True,
             start: float | None = None, **attrs: Any) -> None:
        """Start a span that a later hook closes (:meth:`close`), pausing training."""
        if not self.active or name in self._open:
            return
        if pause:  # first: the train slice must end before this span starts
            self.pause(name)
        self._open[name] = (phase, time.time() if start is None else start, attrs)

    def close(self, name: str, *, error: bool = False, emit: bool = True) -> None:
        """Emit the span :meth:`open` started under ``name`` and resume training;
        ``emit=False`` forgets it instead (what it expected did not happen)."""
        opened = self._open.pop(name, None)
        if opened is None:
            return
        phase, start, attrs = opened
        if error:
            attrs = {**attrs, "error": True}
        if emit:
            self.span(phase, start, time.time(), **({"attrs": attrs} if attrs else {}))
        self.resume(name)

    def is_open(self, name: str) -> bool:
        return name in self._open

    @contextmanager
    def phase(self, phase: str, *, pause: bool = True, blocking: bool = True,
              **attrs: Any) -> Iterator[dict[str, Any]]:
        """Time one call as a ``phase`` span; training is paused meanwhile (when ``pause``).

        The caller's exception passes through untouched; the span is still emitted, with
        ``error`` in its attrs. The yielded dict is the span's attrs, to add to.
        """
        if not self.active:
            yield attrs
            return
        if pause:  # first: the train slice must end before this span starts
            self.guard.call("pausing training", self.pause, phase)
        start = time.time()
        failed = False
        try:
            yield attrs
        except BaseException:
            failed = True
            raise
        finally:
            fields: dict[str, Any] = {"blocking": blocking}
            if attrs or failed:
                fields["attrs"] = {**attrs, **({"error": True} if failed else {})}
            self.guard.call(f"{phase} span", self.span, phase, start, time.time(), **fields)
            if pause:
                self.guard.call("resuming training", self.resume, phase)

    # ------------------------------------------------------------------ training
    def step_begin(self, step: int) -> None:
        """A training step starts; ``step`` = global steps done before it.

        The first one ends the set-up and opens the train tracker at ``step`` (the step a
        resumed run restarts from: the steps it trains again count as repeated, ETT_SPEC §3).
        """
        if not (self.active and self.began):
            return
        if self.tracker is None:
            assert self.reporter is not None
            self.stretch(None)
            self.tracker = self.reporter.train(step)
            if self._paused:
                self.tracker.pause()

    def step_end(self, step: int) -> None:
        """A training step ended with ``step`` global steps done.

        Not while paused (a step cannot end inside a save): the next slice, opened when the
        pause ends, starts at the last step recorded and takes these steps with it, so the
        step ranges stay contiguous."""
        if self.tracker is not None and self.active and not self._paused:
            self.tracker.advance(step)

    def pause(self, reason: str) -> None:
        """Stop counting training (eval, a checkpoint save, a compile) until :meth:`resume`."""
        with self._lock:
            was_training = not self._paused
            self._paused[reason] = self._paused.get(reason, 0) + 1
            if was_training and self.tracker is not None:
                self.tracker.pause()

    def resume(self, reason: str) -> None:
        with self._lock:
            count = self._paused.get(reason, 0)
            if count <= 1:
                self._paused.pop(reason, None)
            else:
                self._paused[reason] = count - 1
            if not self._paused and self.tracker is not None and self.active:
                self.tracker.resume()

    def training_done(self) -> None:
        """Training is over (the loop left): close the open train slice."""
        self._close_training()

    def _close_training(self) -> None:
        tracker, self.tracker = self.tracker, None
        if tracker is not None:
            # pause, not close: a slice in which no step completed (after the last save, the
            # loop's own wind-down) is not training and is dropped (TrainTracker.pause).
            tracker.pause()


# ---------------------------------------------------------------------- ending at exit
_unended: weakref.WeakSet[AttemptLifecycle] = weakref.WeakSet()
_exit_hook_installed = False


def _end_at_exit(life: AttemptLifecycle) -> None:
    """Mark an attempt still open when the interpreter exits as ended.

    Why: a framework may give no hook for a run that ends with an exception (a callback added
    to a Hugging Face ``Trainer`` after it was built sees none). ``sys.last_exc``/
    ``last_type`` is set when an exception went unhandled: ``KeyboardInterrupt`` means
    ``cancelled``, anything else ``failed``; a clean exit with training still open is
    ``failed`` too (the loop never told us it finished). Registered after the Reporter's own
    exit hook, so it runs first (atexit runs last-registered first).
    """
    global _exit_hook_installed
    _unended.add(life)
    if not _exit_hook_installed:
        atexit.register(_end_unended)
        _exit_hook_installed = True


def _end_unended() -> None:
    unhandled = getattr(sys, "last_type", None)
    for life in list(_unended):
        if not life.active:
            continue
        if unhandled is not None and issubclass(unhandled, KeyboardInterrupt):
            life.end("cancelled", reason="interrupted")
        else:
            life.end("failed", reason="process exited before the run ended")
