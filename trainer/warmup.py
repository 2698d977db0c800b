"""The init-overlap compile warm-up: ``python -m trainer.warmup``, a process of its own.

Why a process and not a thread: compiling is Python work (Dynamo tracing, Inductor codegen)
and so is trainer init (planning, DMP construction). In one process they take turns on the
GIL, and on a small host the warm-up thread made ``model_init``/``sharding_plan`` ~50% slower
(measured on 2 cores: 1.7 to 2.3 s per attempt became 2.7 to 2.9 s). A separate process compiles on
another core, at lower CPU priority (``nice`` +10) so the trainer's own init keeps its core,
and leaves what it compiled in the PT2 caches of ``TORCHINDUCTOR_CACHE_DIR``: the trainer's
own compile of the same graphs then hits the FX-graph and AOTAutograd caches.

The handoff is a lock file. Whoever spawns the warm-up creates the file, takes an exclusive
``flock`` on it and hands that descriptor to the child, so the lock is held from the first
instant and released by the kernel when the child exits, however it exits. The trainer,
in its ``compile`` setup, waits for a shared lock on the same file, then reads the child's
one-word verdict (``ok`` / ``failed: ...``). The supervisor spawns it at attempt start, before
the trainer, so its torch import overlaps the trainer's (``ETT_COMPILE_WARM_UP`` names the
file); a trainer started without it spawns its own.

This module imports no torch at the top: the supervisor uses :func:`spawn`.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from trainer.compile_store import has_artifacts
from trainer.config import TrainConfig, helper_env

if TYPE_CHECKING:
    from collector.reporter import Reporter

WARM_UP_ENV = "ETT_COMPILE_WARM_UP"
NICE = 10


def _lower_priority() -> None:
    os.nice(NICE)


def needed(cfg: TrainConfig, cache: Path | None) -> bool:
    """Whether an attempt compiling into ``cache`` gets a warm-up: with ``init_overlap``, unless
    the cache already holds artifacts (a restart with ``compile_cache``, or a job the compile
    store filled). Then the trainer's own compile hits the cache, and a warm-up would only be
    waited for (measured on 2 cores: 3.3 s of blocking wait a warm attempt, for a compile that
    hit the cache in 2.2 s anyway; Dynamo's tracing is per process)."""
    if not (cfg.compile and cfg.has("init_overlap")):
        return False
    return cache is None or not has_artifacts(cache)


def spawn(train_argv: list[str], lock_file: Path,
          env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start the warm-up for the trainer flags ``train_argv``; the lock is held from now on."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return subprocess.Popen(
            [sys.executable, "-m", "trainer.warmup", "--lock-fd", str(fd), *train_argv],
            env=helper_env(env), pass_fds=(fd,), preexec_fn=_lower_priority,
            start_new_session=True)
    finally:
        os.close(fd)  # the child's copy keeps the lock


def wait(lock_file: Path, timeout_s: float) -> str:
    """Wait for the warm-up behind ``lock_file`` to end; returns its verdict.

    ``missing`` when there is no such file, ``timeout`` when it ran longer than ``timeout_s``
    (the trainer then compiles by itself: a warm-up may only ever save time).
    """
    try:
        fd = os.open(lock_file, os.O_RDONLY)
    except FileNotFoundError:
        return "missing"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return "timeout"
                time.sleep(0.02)
        verdict = os.pread(fd, 4096, 0).decode(errors="replace").strip()
        return verdict or "failed: the warm-up exited without a verdict"
    finally:
        os.close(fd)


def _verdict(fd: int, text: str) -> None:
    """Write the verdict and release the lock now, not at exit: tearing down an interpreter
    that has compiled (Inductor's worker pool, atexit hooks) took ~3 s, which the trainer
    would have waited for."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode(), 0)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def run(lock_fd: int, train_argv: list[str]) -> int:
    """Compile the dense part for the trainer's shapes and options, then say how it went."""
    try:
        reporter = warm_up(train_argv)
    except BaseException as exc:  # the verdict must be written whatever happened
        _verdict(lock_fd, f"failed: {type(exc).__name__}: {exc}"[:400])
        print(f"[compile warm-up] failed: {exc!r}", file=sys.stderr, flush=True)
        return 1
    _verdict(lock_fd, "ok")
    reporter.shutdown()  # its compile spans reach the spool after the handoff
    return 0


def warm_up(train_argv: list[str]) -> Reporter:
    """One forward and backward of freshly built dense arches, compiled as the trainer will.

    The graphs must be the ones the trainer compiles, or its compile misses the caches: the
    same arches and shapes (from the flags), the same Inductor options and dynamic-batch
    marking, the same thread count and, on a GPU, the same matmul precision. The weights do
    not matter: parameters are graph inputs. Returns the Reporter holding its compile spans,
    still open (the caller shuts it down once the trainer is released).
    """
    import torch

    from collector.integrations.torch_compile import CompileSpans
    from collector.reporter import Reporter
    from trainer.config import parse_train_config
    from trainer.model import ModelShape, build_unsharded, dense_arches
    from trainer.pt2 import compile_arches, inductor_options

    cfg = parse_train_config(train_argv)
    torch.set_num_threads(cfg.threads)
    device = torch.device("cpu")
    if cfg.on_cuda:
        torch.set_float32_matmul_precision("high")
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    shape = ModelShape(cfg.embedding_rows, cfg.embedding_dim, cfg.dense_features,
                       cfg.sparse_features)
    arches = dense_arches(build_unsharded(shape, cfg.seed, device).model)
    compile_arches(arches, dynamic_batch=cfg.has("dynamic_shapes"),
                   options=inductor_options(cfg.has("autotune_pruning"), device.type),
                   device_type=device.type)
    reporter = Reporter(cfg.job, spool_dir=cfg.spool_dir, rank=0, heartbeat_s=0)
    watch = CompileSpans(reporter, blocking=False)  # nobody waits for these compiles yet
    try:
        with watch.installed():
            dense = arches[0](torch.randn(cfg.batch_size, cfg.dense_features, device=device))
            sparse = torch.zeros(cfg.batch_size, cfg.sparse_features, cfg.embedding_dim,
                                 device=device, requires_grad=True)
            # keywords, as DLRM calls its interaction arch: the same graph, the same guards
            arches[2](arches[1](dense_features=dense, sparse_features=sparse)).sum().backward()
    except BaseException:
        reporter.shutdown()
        raise
    return reporter


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[0] != "--lock-fd" or not args[1].isdigit():
        print("usage: python -m trainer.warmup --lock-fd FD TRAINER-FLAGS... "
              "(started by the trainer or its supervisor, not by hand)", file=sys.stderr)
        return 2
    return run(int(args[1]), args[2:])


if __name__ == "__main__":
    sys.exit(main())
