"""A torchrun worker for tests/collector/test_run_torchrun.py: a few gloo train steps on the
CPU, reported through collector.Reporter, and rank 1 killing itself once (SIGKILL) in the
first attempt, so torchrun --max-restarts restarts the worker group.

Job, attempt and rank come from the environment (collector.identity): the job from the
ETT_JOB_ID that collector.run passes, the attempt from torchrun's TORCHELASTIC_RESTART_COUNT,
the rank from RANK. Usage: torchrun ... torchrun_worker.py STEPS KILL_AT_STEP
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from collector import Reporter
from collector.identity import identity_from_env


def main() -> int:
    steps, kill_at = int(sys.argv[1]), int(sys.argv[2])
    ident = identity_from_env()
    # Short slices, so rank 1's steps reach the spool before it kills itself.
    reporter = Reporter(ident.job, attempt=ident.attempt, rank=ident.rank, heartbeat_s=0,
                        train_slice_s=0.05)
    with reporter.phase("process_group_init"):
        dist.init_process_group("gloo")
    with reporter.train(start_step=0) as train:
        for step in range(steps):
            total = torch.ones(1)
            dist.all_reduce(total)
            time.sleep(0.05)
            train.advance(step + 1)
            if ident.attempt == 0 and ident.rank == 1 and step + 1 == kill_at:
                train.close()
                reporter.flush()
                os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    dist.destroy_process_group()
    reporter.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
