"""Fixtures of the trainer tests.

Why a session-wide compile cache: the first, cold inductor compile costs ~30 s on 2 cores; later
runs in the session reuse the folder, as a real job's restarts reuse a kept cache.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch.distributed as dist

from trainer.startup import free_port


@pytest.fixture(scope="session")
def compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("inductor-cache")


@pytest.fixture(scope="module")
def world() -> Iterator[dist.ProcessGroup]:
    """A one-rank gloo process group for the tests of one module."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    store = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    assert dist.group.WORLD is not None
    yield dist.group.WORLD
    dist.destroy_process_group()
