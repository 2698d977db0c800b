"""Plain PyTorch, no framework: ETT spans from what PyTorch itself exposes, in one line.

Why: a trainer written directly on PyTorch already makes the calls whose seconds ETT must
attribute — it joins a process group, saves and loads checkpoints with
``torch.distributed.checkpoint``, compiles with ``torch.compile``, starts DataLoader workers —
so ``install(reporter)`` reports them without a hand-written span at each call:

==============================================  ============================================
hooked                                          reported
==============================================  ============================================
``torch.distributed.init_process_group``        ``process_group_init``
``torch.distributed.checkpoint.save``           ``checkpoint_save``
``torch.distributed.checkpoint.async_save``     ``checkpoint_save`` for the call (staging,
                                                blocking) and ``checkpoint_save``
                                                ``blocking: false`` until the returned
                                                future completes (the upload)
``torch.distributed.checkpoint.load``           ``checkpoint_load``
Dynamo's compile start/end callbacks            ``compile`` (``torch_compile``)
a DataLoader iterator up to its first batch     ``data_init``
==============================================  ============================================

A blocking hook that runs on the thread of the Reporter's open train tracker pauses it, so a
save or a compile inside the loop is not counted as training (ETT_SPEC §3: a train span
wins over every other phase). Each hook replaces one attribute (or registers a callback),
and the returned :class:`Uninstall` puts back what it found; installing while installed
does nothing. A name this torch lacks is left out and said so (``Uninstall.not_hooked`` and
one log line), never an error. A hook never raises into the caller: the hooked call's own
exceptions pass through untouched, and a failing Reporter is logged once. The process-group
and compile hooks are the ones the Lightning and Hugging Face adapters install too
(``_hooks``, ``torch_compile``): one implementation, reporting to a Reporter here.
"""

from __future__ import annotations

import functools
import importlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import CancelledError
from types import TracebackType
from typing import TYPE_CHECKING, Any

from collector.integrations._hooks import (
    Hooks,
    Patch,
    Patches,
    ReporterTarget,
    process_group_attrs,
    process_group_patches,
)
from collector.integrations.torch_compile import CompileSpans

if TYPE_CHECKING:
    from collector.reporter import Reporter

__all__ = ["HOOKS", "Uninstall", "install", "process_group_attrs"]

log = logging.getLogger("ett.integrations.torch")

#: What :func:`install` can hook, by the names ``skip`` takes.
HOOKS = ("process_group", "checkpoint", "compile", "data_loader")
#: The functions of ``torch.distributed.checkpoint`` hooked, with their phase.
CHECKPOINT_CALLS = {"save": "checkpoint_save", "async_save": "checkpoint_save",
                    "load": "checkpoint_load"}
#: Where a DataLoader iterator keeps the start of its ``data_init`` until its first batch.
FIRST_BATCH = "_ett_data_init"
MAX_TEXT = 200
_lock = threading.Lock()
_active: Uninstall | None = None


class Uninstall:
    """What :func:`install` hooked and what it did not (with why); call it to undo the hooks
    (or leave its ``with`` block). Calling it twice does nothing more."""

    def __init__(self, hooked: list[str], not_hooked: dict[str, str],
                 compile_spans: CompileSpans | None, patches: Patches) -> None:
        self.hooked = hooked
        self.not_hooked = not_hooked
        #: The compile hook, when installed: its ``compilations`` counts what it reported.
        self.compile = compile_spans
        self._patches = patches
        self._done = not (hooked or len(patches))

    @property
    def active(self) -> bool:
        return not self._done

    def __call__(self) -> None:
        global _active
        with _lock:
            if self._done:
                return
            self._done = True
            for patch in self._patches.undo():
                log.warning("ETT torch hooks: %s.%s was replaced after install; left as "
                            "it is", getattr(patch.owner, "__name__", patch.owner),
                            patch.name)
            if self.compile is not None:
                self.compile.unregister()
            if _active is self:
                _active = None

    def __enter__(self) -> Uninstall:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self()


class _Hooks(Hooks):
    """The wrappers of one installation, all reporting to one Reporter: the shared timed
    wrapper (:class:`collector.integrations._hooks.Hooks`) and the DCP and DataLoader ones."""

    def __init__(self, reporter: Reporter) -> None:
        super().__init__(ReporterTarget(reporter))

    # ------------------------------------------------------------ async_save
    def async_save(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``dcp.async_save``: the call blocks (staging), the upload overlaps training."""
        hooks = self

        @functools.wraps(original)
        def async_save(*args: Any, **kwargs: Any) -> Any:
            if hooks.nested("checkpoint_save"):
                return original(*args, **kwargs)
            begun = hooks.begin("checkpoint_save")
            hooks.open_phases().add("checkpoint_save")
            error: BaseException | None = None
            staged = begun[0]
            try:
                response = original(*args, **kwargs)
            except BaseException as exc:
                error = exc
                raise
            finally:
                hooks.open_phases().discard("checkpoint_save")
                staged = hooks.end("checkpoint_save", begun,
                                   lambda: checkpoint_attrs("async_save", kwargs, "staging"),
                                   error)
            hooks.watch_upload(response, begun[0], staged,
                               checkpoint_attrs("async_save", kwargs, "upload"))
            return response

        return async_save

    def watch_upload(self, response: Any, called: float, staged: float,
                     attrs: dict[str, Any]) -> None:
        """A non-blocking ``checkpoint_save`` from ``staged`` to the upload's completion
        (an ``AsyncSaveResponse``'s ``upload_completion``, else the returned future)."""
        try:
            upload = getattr(response, "upload_completion", response)
            staging = getattr(response, "staging_completion", None)
            staging_done: list[float] = []
            if staging is not None:
                staging.add_done_callback(lambda _: staging_done.append(time.time()))

            def finished(future: Any) -> None:
                try:
                    end = max(time.time(), staged)
                    if staging_done:
                        attrs["staging_s"] = round(staging_done[0] - called, 6)
                    failure = CancelledError() if future.cancelled() else future.exception()
                    if failure is not None:
                        attrs["error"] = type(failure).__name__
                    self.target.span("checkpoint_save", staged, end, blocking=False,
                                     attrs=attrs)
                except Exception as exc:
                    self.warn_once(exc)

            upload.add_done_callback(finished)
        except Exception as exc:  # not a future: the blocking span is all there is
            self.warn_once(exc)

    # ------------------------------------------------------------ DataLoader
    def data_loader_iter(self, original: Callable[..., Any],
                         hooked_next: Callable[..., Any]) -> Callable[..., Any]:
        """``DataLoader.__iter__``: ``data_init`` opens here and closes at the first batch."""
        hooks = self

        @functools.wraps(original)
        def __iter__(loader: Any) -> Any:
            begun = hooks.begin("data_init")
            try:
                iterator = original(loader)
            except BaseException as exc:
                hooks.end("data_init", begun, lambda: loader_attrs(loader), exc)
                raise
            try:
                if type(iterator).__next__ is hooked_next:
                    iterator.__dict__[FIRST_BATCH] = (begun, loader_attrs(loader))
                    return iterator
            except Exception as exc:
                hooks.warn_once(exc)
            # An iterator whose first batch the hook cannot see: its creation alone.
            hooks.end("data_init", begun,
                      lambda: {**loader_attrs(loader), "first_batch": False})
            return iterator

        return __iter__

    def data_loader_next(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``_BaseDataLoaderIter.__next__``: closes a pending ``data_init`` at the first batch;
        every later batch costs one dict lookup."""
        hooks = self

        @functools.wraps(original)
        def __next__(iterator: Any) -> Any:
            try:
                pending = iterator.__dict__.pop(FIRST_BATCH, None)
            except AttributeError:
                pending = None
            if pending is None:
                return original(iterator)
            begun, attrs = pending
            error: BaseException | None = None
            try:
                return original(iterator)
            except StopIteration:
                attrs["empty"] = True
                raise
            except BaseException as exc:
                error = exc
                raise
            finally:
                hooks.end("data_init", begun, lambda: attrs, error)

        return __next__


def checkpoint_attrs(call: str, kwargs: dict[str, Any], stage: str = "") -> dict[str, Any]:
    attrs: dict[str, Any] = {"api": f"dcp.{call}"}
    if call != "load":
        attrs["mode"] = "async" if call == "async_save" else "sync"
    if stage:
        attrs["stage"] = stage
    if kwargs.get("checkpoint_id") is not None:
        attrs["checkpoint_id"] = str(kwargs["checkpoint_id"])[-MAX_TEXT:]
    return attrs


def _dcp_attrs(call: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    return checkpoint_attrs(call, kwargs)


def loader_attrs(loader: Any) -> dict[str, Any]:
    workers = getattr(loader, "num_workers", None)
    return {"num_workers": workers} if isinstance(workers, int) else {}


# ---------------------------------------------------------------- finding what to hook
Found = dict[str, "list[Patch] | str"]


def _process_group(hooks: _Hooks) -> Found:
    return {"process_group": process_group_patches(hooks)}


def _checkpoint(hooks: _Hooks) -> Found:
    try:
        dcp = importlib.import_module("torch.distributed.checkpoint")
    except ImportError as exc:
        return {"checkpoint": f"torch.distributed.checkpoint does not import ({exc})"[:MAX_TEXT]}
    found: Found = {}
    for call, phase in CHECKPOINT_CALLS.items():
        original = getattr(dcp, call, None)
        if original is None:
            found[f"checkpoint.{call}"] = f"torch.distributed.checkpoint has no {call}"
        elif call == "async_save":
            found[f"checkpoint.{call}"] = [Patch(dcp, call, hooks.async_save(original))]
        else:
            wrapper = hooks.timed(phase, original, functools.partial(_dcp_attrs, call))
            found[f"checkpoint.{call}"] = [Patch(dcp, call, wrapper)]
    return found


def _data_loader(hooks: _Hooks) -> Found:
    module = importlib.import_module("torch.utils.data.dataloader")
    loader = getattr(module, "DataLoader", None)
    base_iter = getattr(module, "_BaseDataLoaderIter", None)
    if loader is None or base_iter is None or "__next__" not in vars(base_iter):
        return {"data_loader": "torch.utils.data.dataloader has no DataLoader/"
                               "_BaseDataLoaderIter.__next__"}
    hooked_next = hooks.data_loader_next(vars(base_iter)["__next__"])
    hooked_iter = hooks.data_loader_iter(loader.__iter__, hooked_next)  # a function
    return {"data_loader": [Patch(loader, "__iter__", hooked_iter),
                            Patch(base_iter, "__next__", hooked_next)]}


FINDERS: dict[str, Callable[[_Hooks], Found]] = {
    "process_group": _process_group, "checkpoint": _checkpoint, "data_loader": _data_loader}


def install(reporter: Reporter, *, skip: Iterable[str] = ()) -> Uninstall:
    """Hook PyTorch's lifecycle calls to report to ``reporter``; returns the way to undo it.

    ``skip`` names hooks of :data:`HOOKS` to leave alone (a trainer that times a phase by hand
    with more around the call, e.g. its own ``checkpoint_save`` span, skips that hook: the two
    would nest). Calls made through a reference taken before installing (``from
    torch.distributed.checkpoint import save``) are not seen. Installing while installed
    returns a handle that does nothing.
    """
    global _active
    skipped = set(skip)
    if skipped - set(HOOKS):
        log.warning("ETT torch hooks: unknown names in skip: %s (known: %s)",
                    ", ".join(sorted(skipped - set(HOOKS))), ", ".join(HOOKS))
    with _lock:
        if _active is not None:
            log.warning("ETT torch hooks: already installed; this install() does nothing")
            return Uninstall([], {"all": "already installed"}, None, Patches())
        hooks = _Hooks(reporter)
        hooked: list[str] = []
        not_hooked: dict[str, str] = {}
        patches = Patches()
        compile_spans = None
        for name in HOOKS:
            if name in skipped:
                not_hooked[name] = "skipped"
                continue
            if name == "compile":
                candidate = CompileSpans(hooks.target)
                why = candidate.register()
                if why is None:
                    compile_spans = candidate
                    hooked.append(name)
                else:
                    not_hooked[name] = why
                continue
            try:
                found = FINDERS[name](hooks)
            except Exception as exc:  # another torch's layout: say so, hook the rest
                found = {name: f"{type(exc).__name__}: {exc}"[:MAX_TEXT]}
            for hook, result in found.items():
                if isinstance(result, str):
                    not_hooked[hook] = result
                    continue
                refused = [p.name for p in result if not patches.apply(p)]
                if refused:
                    not_hooked[hook] = f"cannot replace {', '.join(refused)}"
                else:
                    hooked.append(hook)
        handle = Uninstall(hooked, not_hooked, compile_spans, patches)
        if handle.active:
            _active = handle
    unexpected = {k: v for k, v in not_hooked.items() if v != "skipped"}
    (log.warning if unexpected else log.info)(
        "ETT torch hooks: hooked %s%s", ", ".join(hooked) or "nothing",
        "".join(f"; not hooked: {k} ({v})" for k, v in unexpected.items()))
    return handle
