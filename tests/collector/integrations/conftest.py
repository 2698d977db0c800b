"""Fixtures the adapters' real runs share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist

from ettweb.ingest import partitions


@pytest.fixture
def fresh_partition_cache() -> Iterator[None]:
    """Partitions made inside a rolled-back test transaction are gone: forget them."""
    partitions.forget_known()
    yield
    partitions.forget_known()


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One intra-op thread: on a loaded two-core machine two threads only fight, and the
    steps' lengths (what the test measures) would wander."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def no_group() -> Iterator[None]:
    """The test creates the default process group itself (that is what is hooked); gone
    after."""
    assert not dist.is_initialized()
    yield
    if dist.is_initialized():
        dist.destroy_process_group()
