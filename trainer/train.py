"""One training process of the reference trainer: ``python -m trainer.train`` (one per rank).

It reports every lifecycle phase through the ETT Reporter (ETT_SPEC §4) — and knows nothing
else about ETT. The supervisor (``python -m trainer``) owns the attempt: it emits
``attempt_start``/``attempt_end`` and restarts this process after a failure; this process
resumes from the newest good checkpoint, so the steps between that checkpoint and the crash
are trained again (what ETT calls repeated training). Started without the supervisor (by a
torchrun that restarts the ranks itself, or by hand) rank 0 marks its own attempt: from the
moment the kernel created the process to its exit; a crash leaves the attempt without an end,
which ETT reads as ``lost``.

This module is the process's life, start to exit: when it was launched, the attempt's
phases in order, a simulated failure turned into a real crash, and an exit without the
interpreter's teardown. ``trainer.startup`` joins the process group and builds the trainer
(``trainer.compile_setup`` for the compile part), ``trainer.loop`` trains, checkpoints,
evaluates and publishes.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import torch
import torch.distributed as dist

from collector.integrations import torch as torch_hooks
from collector.reporter import Reporter
from trainer.compile_setup import start_compile_warm_up
from trainer.config import LAUNCH_TS_ENV, SUPERVISED_ENV, TrainConfig, parse_train_config
from trainer.loop import SimulatedFailure
from trainer.startup import build_trainer, default_distributed_env, dense_device, join_process_group

EXIT_SIMULATED_FAILURE = 1
EXIT_INTERRUPTED = 130
#: Torch hooks the trainer does without: its ``checkpoint_save`` and ``checkpoint_load``
#: spans time more than the DCP call (barriers, the manifest and atomic rename that publish a
#: save, loading the state into the model; the step in ``attrs``), and its data is no
#: DataLoader. The two would nest, so the hooks for them stay off.
TIMED_BY_HAND = ("checkpoint", "data_loader")


def report_process_start(reporter: Reporter, start: float | None) -> None:
    """Report interpreter start and imports as ``container_start`` (cluster_runtime, §4).

    Why: torch and TorchRec take seconds to import; without this span that time would be
    ``unattributed``. ``start`` is when the supervisor launched us, else when the kernel
    created this process.
    """
    now = time.time()
    if start is not None and start <= now:
        reporter.span("container_start", start, now)


def launched_at() -> float | None:
    """The moment this process was launched: the supervisor's word, else the kernel's."""
    try:
        return float(os.environ[LAUNCH_TS_ENV])
    except (KeyError, ValueError):
        return process_created_at()


def process_created_at() -> float | None:
    """This process's creation time from ``/proc`` (Linux), or None where there is none.

    Why: under torchrun's own restarts nobody outside the process saw it start, and its
    imports are still the attempt's time.
    """
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        started_after_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - (uptime - started_after_boot)


def run(cfg: TrainConfig, reporter: Reporter) -> None:
    """The whole life of one attempt on this rank, phase by phase."""
    device = dense_device(cfg)
    compile_warm_up = start_compile_warm_up(cfg)
    with torch_hooks.install(reporter, skip=TIMED_BY_HAND) as hooks:
        rank, world_size = join_process_group(reporter, device)
        trainer = build_trainer(cfg, reporter, rank, world_size, hooks.compile, device,
                                compile_warm_up)
        trainer.load_latest_checkpoint()
        trainer.plan_checkpoints()
        trainer.say(f"training steps {trainer.step}..{cfg.steps} on {world_size} rank(s) "
                    f"with {','.join(cfg.opts) or 'no optimizations'}"
                    + (f"; dense part on {device}, embeddings on cpu" if cfg.on_cuda else ""))
        trainer.train()
        if compile_warm_up is not None:
            compile_warm_up.close()
        if trainer.last_saved != cfg.steps:
            trainer.save_checkpoint()
        trainer.evaluate()
        if trainer.checkpointer.asynchronous:  # the final save must be on disk before we exit
            with reporter.phase("checkpoint_save", step=cfg.steps, stage="wait"):
                trainer.checkpointer.wait()
        trainer.publish()
    with reporter.phase("shutdown"):
        dist.destroy_process_group()
    trainer.say("done")


@contextmanager
def crash_on_simulated_failure(reporter: Reporter) -> Iterator[None]:
    """Turn a SimulatedFailure into a real crash: flush the spool, then ``os._exit(1)``.

    Why ``os._exit``: a real crash runs no cleanup (no process-group teardown, no atexit), so
    the supervisor and ETT see what they would see in production; flushing first keeps the
    events emitted so far (the spec's "a crash loses at most one slice").
    """
    try:
        yield
    except SimulatedFailure as failure:
        print(f"[{reporter.job} attempt {reporter.attempt} rank {reporter.rank}] {failure}",
              file=sys.stderr, flush=True)
        reporter.flush()
        os._exit(EXIT_SIMULATED_FAILURE)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_train_config(argv)
    torch.set_num_threads(cfg.threads)
    if cfg.on_cuda:
        # TF32 GEMMs, as GPU recommendation models train; it also lets inductor's Triton GEMM
        # templates compete with cuBLAS in max-autotune. CPU numerics are untouched.
        torch.set_float32_matmul_precision("high")
    default_distributed_env()
    reporter = Reporter(cfg.job, spool_dir=cfg.spool_dir)
    start = launched_at()
    marks_attempt = SUPERVISED_ENV not in os.environ and os.environ.get("RANK", "0") == "0"
    if marks_attempt:
        reporter.attempt_start(gpus=int(os.environ.get("WORLD_SIZE", "1")), ts=start,
                               model="dlrm", launcher=_launcher())
    report_process_start(reporter, start)
    status = "failed"
    try:
        with crash_on_simulated_failure(reporter):
            run(cfg, reporter)
        status = "completed"
    except KeyboardInterrupt:
        status = "cancelled"
        return EXIT_INTERRUPTED
    finally:
        if marks_attempt:
            reporter.attempt_end(status)
        reporter.shutdown()
    return 0


def _launcher() -> str:
    return "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "python"


def exit_now(code: int) -> NoReturn:
    """Leave without the interpreter's teardown, once everything that must outlive the
    process is out: the final checkpoint was waited for, the process group destroyed, the
    Reporter shut down (spool flushed); here the ``atexit`` handlers run (Inductor's compile
    workers are stopped there) and stdout/stderr are flushed.

    Why: finalizing the interpreter with torch, TorchRec and gloo loaded takes a noticeable
    time after the last ``atexit`` handler: wall time of the job that nothing explains.
    """
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
