"""Compile time from PyTorch's own compile hooks: every Dynamo compilation as a ``compile`` span.

Why hooks and not a timer around the first step: compilation also happens later — a recompile
when a guard fails (a smaller last batch), a backward graph compiled lazily on its first use —
and those seconds would otherwise hide inside ``train`` spans and count as productive. Dynamo
calls the ``torch._dynamo.callback`` start/end callbacks around every compilation (``DYNAMO``
and ``LAZY_BACKWARD`` triggers); :class:`CompileSpans` turns each into a ``compile`` span,
pauses the train tracker of the thread that compiles, and puts what the compilation hit in
the PT2 caches in the span's ``attrs`` (so a compile-cache rollout's saving shows per job):

- from ``torch._dynamo.utils.counters``, this compilation's share of ``fxgraph_cache_hit``,
  ``fxgraph_cache_miss``, ``autograd_cache_hit``, ``autograd_cache_miss``, ``unique_graphs``;
- from the compilation's metrics context (what Dynamo logs as its ``CompilationMetrics``,
  read while still open because the record is written only after the end callback): remote
  cache hits and misses, ``cache_time_saved_s`` (compile time the caches' hits saved),
  ``graph_breaks``, ``recompile_reason``, Inductor's and AOTAutograd's compile seconds.

Everything read from torch is looked up defensively (another torch release lacks a name: the
value is left out), and nothing here raises into Dynamo, hence into the user's model call: a
failure is logged once and the compilation goes on unreported. The same class serves plain
PyTorch (a Reporter) and the framework adapters (their attempt's lifecycle): it reports to a
``collector.integrations._hooks.Target``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from collector.integrations._hooks import ReporterTarget, Resume, Target

if TYPE_CHECKING:
    from collector.reporter import Reporter

__all__ = ["CACHE_COUNTERS", "CompileSpans", "compile_counters", "is_recompile"]

log = logging.getLogger("ett.integrations.torch")

#: counters[group][name] read from ``torch._dynamo.utils.counters`` → attrs key.
CACHE_COUNTERS = {
    ("inductor", "fxgraph_cache_hit"): "fxgraph_cache_hit",
    ("inductor", "fxgraph_cache_miss"): "fxgraph_cache_miss",
    ("aot_autograd", "autograd_cache_hit"): "autograd_cache_hit",
    ("aot_autograd", "autograd_cache_miss"): "autograd_cache_miss",
    ("stats", "unique_graphs"): "unique_graphs",
}
#: The open compilation's metrics context key → (attrs key, scale); absent keys are left out.
CONTEXT_METRICS: dict[str, tuple[str, float]] = {
    "inductor_fx_remote_cache_hit_count": ("fxgraph_remote_cache_hit", 1),
    "inductor_fx_remote_cache_miss_count": ("fxgraph_remote_cache_miss", 1),
    "aotautograd_remote_cache_hit_count": ("autograd_remote_cache_hit", 1),
    "aotautograd_remote_cache_miss_count": ("autograd_remote_cache_miss", 1),
    # What CompilationMetrics reports as remote_cache_time_saved_s: the original compile time
    # of every FX graph served from a cache, local or remote.
    "distributed_ephemeral_timeout_us": ("cache_time_saved_s", 1e-6),
    "num_graph_breaks": ("graph_breaks", 1),
    "inductor_cumulative_compile_time_us": ("inductor_compile_s", 1e-6),
    "aot_autograd_cumulative_compile_time_us": ("aot_autograd_compile_s", 1e-6),
    "recompile_reason": ("recompile_reason", 1),
}
MAX_TEXT = 200


def compile_counters() -> dict[str, int]:
    """PT2's cache and graph counters of this process so far ({} where torch has none)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return {}
    found = {}
    for (group, name), key in CACHE_COUNTERS.items():
        try:
            found[key] = int(counters[group][name])
        except (KeyError, TypeError, ValueError):
            continue
    return found


def context_metrics() -> dict[str, Any]:
    """What the compilation open on this thread has recorded so far ({} when none is open)."""
    try:
        from torch._dynamo.utils import get_metrics_context

        context = get_metrics_context()
        metrics = getattr(context, "_metrics", None) if context.in_progress() else None
    except Exception:  # another torch release: the attrs lose these keys, nothing more
        return {}
    if not isinstance(metrics, dict):
        return {}
    found: dict[str, Any] = {}
    for source, (key, scale) in CONTEXT_METRICS.items():
        value = metrics.get(source)
        if isinstance(value, str) and value:
            found[key] = value[:MAX_TEXT]
        elif isinstance(value, int | float) and not isinstance(value, bool):
            found[key] = round(value * scale, 6) if scale != 1 else value
    return found


def is_recompile(compile_id: str) -> bool:
    """Dynamo's compile ids read ``frame/attempt`` (e.g. ``0/1``): attempt > 0 is a recompile
    of a frame already compiled once, after a guard failed."""
    _, _, attempt = compile_id.strip("[]").partition("/")
    digits = attempt.split("_")[0]
    return digits.isdigit() and int(digits) > 0


def _trigger(args: Any) -> str:
    """What started a compilation (``dynamo``, ``lazy_backward``, …), from Dynamo's args."""
    return str(getattr(getattr(args, "callback_trigger", None), "name", "DYNAMO")).lower()


class CompileSpans:
    """Reports every PT2 compilation of this process as a ``compile`` span.

    Given a Reporter, a compilation on the thread of its open train tracker pauses it, so the
    compile seconds leave the ``train`` span; given another :class:`Target` (an adapter's
    lifecycle), the target decides what pausing training means. ``blocking=False`` reports
    every compilation as background work (a warm-up process that fills the caches while
    nobody waits for it).
    Dynamo runs the start callback when the first of concurrent compilations starts and the
    end callback when the last one ends, possibly on another thread: one span covers them.
    """

    def __init__(self, target: Reporter | Target, *, blocking: bool = True) -> None:
        self.target = target if isinstance(target, Target) else ReporterTarget(target)
        self.blocking = blocking
        #: Compilations reported so far.
        self.compilations = 0
        self._open: tuple[float, dict[str, int], Resume | None] | None = None
        self._registered = False
        self._warned = False

    def register(self) -> str | None:
        """Add the callbacks to Dynamo's handler; None when done, else why it could not."""
        try:
            from torch._dynamo.callback import callback_handler

            callback_handler.register_start_callback(self.on_start)
            callback_handler.register_end_callback(self.on_end)
        except Exception as exc:
            self.unregister()
            return f"torch._dynamo.callback has no usable callback_handler ({exc!r:.120})"
        self._registered = True
        return None

    def unregister(self) -> None:
        """Take the callbacks out again (what is not there is skipped)."""
        try:
            from torch._dynamo.callback import callback_handler
        except Exception:
            return
        for remove, callback in (("remove_start_callback", self.on_start),
                                 ("remove_end_callback", self.on_end)):
            try:
                getattr(callback_handler, remove)(callback)
            except Exception:  # not registered (half a registration failed): nothing to do
                continue
        self._registered = False

    @contextmanager
    def installed(self) -> Iterator[CompileSpans]:
        """The callbacks registered for the ``with`` block."""
        why = self.register()
        if why is not None:
            log.warning("ETT torch hooks: compile not hooked: %s", why)
        try:
            yield self
        finally:
            self.unregister()

    def _warn_once(self, exc: BaseException) -> None:
        if not self._warned:
            self._warned = True
            log.warning("ETT torch hooks: a compile span was lost (%r); training goes on and "
                        "further failures are not logged", exc)

    def on_start(self, args: Any) -> None:
        try:
            # First: the train slice ends before the compile starts. A lazily compiled
            # backward runs on autograd's thread (on a GPU, its device thread) while the loop
            # waits in backward(): it stops training all the same.
            lazy = _trigger(args) == "lazy_backward"
            resume = self.target.interrupt("compile", any_thread=lazy) if self.blocking else None
            self._open = (time.time(), compile_counters(), resume)
        except Exception as exc:
            self._warn_once(exc)

    def on_end(self, args: Any) -> None:
        try:
            self._end(args)
        except Exception as exc:
            self._warn_once(exc)

    def _end(self, args: Any) -> None:
        opened, self._open = self._open, None
        if opened is None:
            return
        start, before, resume = opened
        try:
            self.compilations += 1
            after = compile_counters()
            attrs: dict[str, Any] = {key: after[key] - before.get(key, 0) for key in after}
            attrs.update(context_metrics())
            attrs["trigger"] = _trigger(args)
            attrs["compile_id"] = str(getattr(args, "compile_id", ""))[:MAX_TEXT]
            attrs["recompile"] = is_recompile(attrs["compile_id"])
            self.target.span("compile", start, max(time.time(), start),
                             blocking=self.blocking, attrs=attrs)
        finally:
            if resume is not None:
                resume()
