"""Sharded checkpoints of model + optimizer + step with ``torch.distributed.checkpoint``.

Why this layout: every rank writes its shards into ``step-<N>.tmp``; once the collective save
is complete (the coordinator has written ``.metadata``), rank 0 writes a manifest of every
file's size and CRC-32 and renames the folder to ``step-<N>``. A rename is atomic, so a crash
mid-save leaves only a ``.tmp`` folder that is never loaded. On load, rank 0 verifies the
manifest of the newest checkpoint and falls back to the previous one when a file is missing,
truncated or corrupted, saying so: a damaged checkpoint is never loaded. Only the last
:data:`KEEP` are kept, so disk use stays bounded.

Two ways to save (the ``async_checkpoint`` switch): :meth:`Checkpointer.save` blocks for the
whole write; with ``async_save`` only the staging copy blocks (``checkpoint_save``, blocking)
and the write runs in a background thread (``checkpoint_save``, ``blocking: false``), on a
process group of its own so that its collectives never interleave with training's.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse
from torch.optim import Optimizer

from collector.reporter import Reporter
from trainer.integrity import crc32_of

KEEP = 2
_NAME = re.compile(r"step-(\d{8})")
_METADATA = ".metadata"
MANIFEST = "manifest.json"


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"step-{step:08d}"


def good_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints, oldest first (an interrupted save has no renamed folder)."""
    if not directory.is_dir():
        return []
    found = []
    for child in directory.iterdir():
        match = _NAME.fullmatch(child.name)
        if match and (child / _METADATA).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def write_manifest(folder: Path, step: int) -> None:
    """Record every file's size and CRC-32, so a later load can prove the folder intact."""
    files = {p.name: [p.stat().st_size, crc32_of(p)] for p in sorted(folder.iterdir())
             if p.is_file() and p.name != MANIFEST}
    (folder / MANIFEST).write_text(json.dumps({"step": step, "files": files}))


def verify(folder: Path) -> str | None:
    """None when the checkpoint is intact, else the reason it must not be loaded."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        files: dict[str, list[int]] = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"no readable manifest ({exc.__class__.__name__})"
    for name, (size, crc) in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, expected {size}"
        if crc32_of(path) != crc:
            return f"{name} fails its checksum"
    return None


def latest_verified(directory: Path, say: Any = print) -> int | None:
    """The newest checkpoint that passes :func:`verify`, naming each one skipped."""
    for step, path in reversed(good_checkpoints(directory)):
        problem = verify(path)
        if problem is None:
            return step
        say(f"checkpoint {path.name} is damaged ({problem}); falling back to the previous one")
    return None


def latest_step(directory: Path, say: Any = print) -> int | None:
    """The step of the newest verified checkpoint, decided by rank 0 and shared with every rank.

    Why broadcast: on a shared file system ranks could list the folder at slightly different
    moments; they must all load the same checkpoint.
    """
    decided: list[int | None] = [latest_verified(directory, say) if dist.get_rank() == 0
                                 else None]
    dist.broadcast_object_list(decided, src=0)
    return decided[0]


def _state(model: nn.Module, optimizer: Optimizer, step: int,
           loader: dict[str, int] | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                             "step": step}
    if loader is not None:
        state["loader"] = dict(loader)
    return state


def _publish(directory: Path, step: int, tmp: Path) -> Path:
    """Rank 0: manifest, atomic rename, prune (after every rank's shards are written)."""
    final = checkpoint_path(directory, step)
    write_manifest(tmp, step)
    shutil.rmtree(final, ignore_errors=True)  # a re-save of the same step replaces it
    tmp.rename(final)
    _prune(directory, keep_tmp=None)
    return final


def _prune(directory: Path, keep_tmp: Path | None) -> None:
    for _, path in good_checkpoints(directory)[:-KEEP]:
        shutil.rmtree(path, ignore_errors=True)
    for stale in directory.glob("step-*.tmp"):
        if stale != keep_tmp:
            shutil.rmtree(stale, ignore_errors=True)


@dataclass
class PendingSave:
    """An asynchronous save still being written in the background."""

    step: int
    finished: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class Checkpointer:
    """Saves and loads one job's checkpoints; remembers the blocking cost of the last save."""

    def __init__(self, directory: Path, reporter: Reporter, *, asynchronous: bool) -> None:
        self.directory = directory
        self.reporter = reporter
        self.asynchronous = asynchronous
        self.last_blocking_s: float | None = None
        self.last_background_s: float | None = None
        self._pending: PendingSave | None = None
        # Why its own group: the background write's collectives run in another thread; on the
        # training group they could interleave with the step's all-to-alls and all-reduces.
        self._async_pg = dist.new_group(backend="gloo") if asynchronous else None

    def save(self, step: int, model: nn.Module, optimizer: Optimizer,
             loader: dict[str, int] | None = None) -> None:
        """Save ``step``; the blocking part is a ``checkpoint_save`` span."""
        self.wait()  # never two saves in flight: the previous one must be published first
        tmp = checkpoint_path(self.directory, step).with_name(f"step-{step:08d}.tmp")
        started = time.time()
        with self.reporter.phase("checkpoint_save", step=step,
                                 mode="async" if self.asynchronous else "sync"):
            if dist.get_rank() == 0:
                self.directory.mkdir(parents=True, exist_ok=True)
                shutil.rmtree(tmp, ignore_errors=True)  # leftover of a save that crashed
            dist.barrier()
            state = _state(model, optimizer, step, loader)
            if self.asynchronous:
                self._start_async(step, tmp, state)
            else:
                dcp.save(state, checkpoint_id=str(tmp))
                if dist.get_rank() == 0:
                    _publish(self.directory, step, tmp)
                # nobody moves on (or crashes) believing in a checkpoint not yet published
                dist.barrier()
        self.last_blocking_s = time.time() - started

    def _start_async(self, step: int, tmp: Path, state: dict[str, Any]) -> None:
        future = dcp.async_save(state, checkpoint_id=str(tmp), process_group=self._async_pg)
        staged = time.time()
        pending = self._pending = PendingSave(step)
        # Without an async stager this is a plain Future; with one, the upload part of it.
        upload: Future[Any] = (future.upload_completion
                               if isinstance(future, AsyncSaveResponse) else future)

        def finish(done: Any) -> None:
            try:
                done.result()
                if dist.get_rank() == 0:
                    _publish(self.directory, step, tmp)
            except BaseException as exc:  # kept for wait(), which raises it in the trainer
                pending.error = exc
            finally:
                end = time.time()
                self.last_background_s = end - staged
                self.reporter.span("checkpoint_save", staged, end, blocking=False,
                                   attrs={"step": step, "mode": "async", "stage": "write",
                                          **({"error": type(pending.error).__name__}
                                             if pending.error else {})})
                pending.finished.set()

        upload.add_done_callback(finish)

    @property
    def writing(self) -> bool:
        """Whether an asynchronous save is still being written in the background."""
        pending = self._pending
        return pending is not None and not pending.finished.is_set()

    def wait(self) -> None:
        """Block until the previous asynchronous save is written and published."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        pending.finished.wait()
        if pending.error is not None:
            raise RuntimeError(f"checkpoint step {pending.step} failed: {pending.error}")

    def load(self, step: int, model: nn.Module, optimizer: Optimizer) -> dict[str, Any]:
        """Load checkpoint ``step`` in place; returns its ``step`` and ``loader`` entries."""
        state = _state(model, optimizer, -1, {"next_step": -1})
        dcp.load(state, checkpoint_id=str(checkpoint_path(self.directory, step)))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        loaded = int(state["step"])
        if loaded != step:
            raise RuntimeError(f"checkpoint {checkpoint_path(self.directory, step)} holds "
                               f"step {loaded}")
        return {"step": loaded, "loader": state["loader"]}
