"""Sharded checkpoints of model + optimizer + step with ``torch.distributed.checkpoint``.

Why this layout: every rank writes its shards into ``step-<N>.tmp``; once the collective save
returns (the coordinator has written ``.metadata``), rank 0 renames the folder to
``step-<N>``. A rename is atomic, so a crash mid-save leaves only a ``.tmp`` folder that is
never loaded: "the latest good checkpoint" is simply the highest ``step-<N>`` folder that has
metadata. Only the last :data:`KEEP` are kept, so disk use stays bounded.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.optim import Optimizer

KEEP = 2
_NAME = re.compile(r"step-(\d{8})")
_METADATA = ".metadata"


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


def latest_step(directory: Path) -> int | None:
    """The step of the newest good checkpoint, decided by rank 0 and shared with every rank.

    Why broadcast: on a shared file system ranks could list the folder at slightly different
    moments; they must all load the same checkpoint.
    """
    if dist.get_rank() == 0:
        found = good_checkpoints(directory)
        decided: list[int | None] = [found[-1][0] if found else None]
    else:
        decided = [None]
    dist.broadcast_object_list(decided, src=0)
    return decided[0]


def _state(model: nn.Module, optimizer: Optimizer, step: int) -> dict[str, Any]:
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}


def save(directory: Path, step: int, model: nn.Module, optimizer: Optimizer) -> Path:
    """Save collectively, then publish atomically by renaming (rank 0) and prune old ones."""
    final = checkpoint_path(directory, step)
    tmp = final.with_name(final.name + ".tmp")
    if dist.get_rank() == 0:
        directory.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)  # leftover of a save that crashed
    dist.barrier()
    dcp.save(_state(model, optimizer, step), checkpoint_id=str(tmp))
    if dist.get_rank() == 0:
        shutil.rmtree(final, ignore_errors=True)  # a re-save of the same step replaces it
        tmp.rename(final)
        _prune(directory)
    dist.barrier()  # nobody moves on (or crashes) believing in a checkpoint not yet published
    return final


def _prune(directory: Path) -> None:
    for _, path in good_checkpoints(directory)[:-KEEP]:
        shutil.rmtree(path, ignore_errors=True)
    for stale in directory.glob("step-*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)


def load(directory: Path, step: int, model: nn.Module, optimizer: Optimizer) -> int:
    """Load checkpoint ``step`` in place into a freshly sharded model and its optimizer."""
    state = _state(model, optimizer, -1)
    dcp.load(state, checkpoint_id=str(checkpoint_path(directory, step)))
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    loaded = int(state["step"])
    if loaded != step:
        raise RuntimeError(f"checkpoint {checkpoint_path(directory, step)} holds step {loaded}")
    return loaded
