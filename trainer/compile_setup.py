"""An attempt's compile set-up: the compile warm-up it waits for, the mega-cache, compiling.

Why apart from the model build: with ``init_overlap`` the compile warm-up (a process of its
own, ``trainer.warmup``) fills the PT2 caches while the model is built and sharded, and the
attempt waits for it only here, right before compiling the dense part, so as much of it as
possible hides behind init. A GPU attempt with ``compile_cache`` also loads the portable
mega-cache an earlier attempt or job kept (``trainer.loop`` saves it after the first step
that compiled).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from torchrec.distributed.model_parallel import DistributedModelParallel

from collector.reporter import Reporter
from trainer import warmup
from trainer.config import TrainConfig
from trainer.model import dense_arches, dlrm_of
from trainer.pt2 import compile_arches, inductor_options, load_mega_cache

#: Longest wait for the compile warm-up before compiling without it.
WARM_UP_TIMEOUT_S = 1800.0


@dataclass
class CompileWarmUp:
    """The init-overlap compile warm-up of this attempt (trainer.warmup): its lock file, and
    its process when this trainer started it (the supervisor reaps its own)."""

    lock_file: Path
    process: subprocess.Popen[bytes] | None = None

    def wait(self) -> str:
        """Block until the warm-up has filled the caches; its verdict (``ok`` or why not).

        Not until its process exits: it releases the lock before its interpreter teardown
        (trainer.warmup), which :meth:`close` reaps later.
        """
        verdict = warmup.wait(self.lock_file, WARM_UP_TIMEOUT_S)
        if verdict == "timeout" and self.process is not None:
            self.process.kill()
        return verdict

    def close(self) -> None:
        """Reap a warm-up this trainer started and drop its lock folder (the supervisor
        reaps its own)."""
        if self.process is not None:
            self.process.wait()
            shutil.rmtree(self.lock_file.parent, ignore_errors=True)


def start_compile_warm_up(cfg: TrainConfig) -> CompileWarmUp | None:
    """The warm-up the supervisor started for this attempt, or one of our own.

    Started first thing, before the process group: the earlier it starts, the more of its
    compile hides behind init.
    """
    if not (cfg.compile and cfg.has("init_overlap")):
        return None
    given = os.environ.get(warmup.WARM_UP_ENV)
    if given:  # the supervisor decided (trainer.warmup.needed) and started it
        return CompileWarmUp(Path(given))
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not warmup.needed(cfg, Path(cache) if cache else None):
        return None
    lock = Path(tempfile.mkdtemp(prefix="ett-warm-up-")) / "warm-up.lock"
    return CompileWarmUp(lock, warmup.spawn(cfg.to_argv(), lock))


def mega_cache_folder(cfg: TrainConfig) -> Path | None:
    """Where a GPU attempt keeps the portable mega-cache (its compile cache folder, which the
    compile store shares), or None: on CPU, or without ``compile_cache``."""
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not (cfg.on_cuda and cfg.compile and cfg.has("compile_cache") and folder):
        return None
    return Path(folder)


def compile_dense(cfg: TrainConfig, reporter: Reporter, dmp: DistributedModelParallel,
                  device: torch.device, compile_warm_up: CompileWarmUp | None) -> None:
    """Wrap the dense part's modules in ``torch.compile`` (``compile`` span, stage ``setup``),
    after waiting for the warm-up and loading the mega-cache. The compiling itself happens on
    the first steps, where ``trainer.pt2``'s hooks report it."""
    with reporter.phase("compile", stage="setup") as span:
        if compile_warm_up is not None:
            span.attrs["warm_up"] = compile_warm_up.wait()[:120]
        if (mega_cache := mega_cache_folder(cfg)) is not None:
            span.attrs["mega_cache"] = load_mega_cache(mega_cache)
        vec_isa = compile_arches(
            dense_arches(dlrm_of(dmp)), dynamic_batch=cfg.has("dynamic_shapes"),
            options=inductor_options(cfg.has("autotune_pruning"), device.type),
            device_type=device.type)
        if vec_isa:
            span.attrs["vec_isa"] = vec_isa
