"""Fixtures of the trainer tests.

Why a session-wide compile cache: the first, cold inductor compile costs ~30 s on 2 cores; later
runs in the session reuse the folder, as a real job's restarts reuse a kept cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("inductor-cache")
