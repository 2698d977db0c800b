"""A stand-in for ``torchrun --nproc-per-node 2 --max-restarts 1`` without torch, for
tests/collector/test_run.py: it starts worker groups the way torchelastic does (each worker
in its own session, with ``TORCHELASTIC_RESTART_COUNT`` and ``RANK`` in its environment),
rank 1 of the first group kills itself with SIGKILL, and the group is restarted once.

Like torchrun it notices a failed worker only at its next look (``MONITOR_S``), then stops
the rest with SIGTERM. It writes what it saw, with its own clock, to the JSON file named by
its first argument, so the test can hold the wrapper's attempt boundaries against it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

MONITOR_S = 0.3
RENDEZVOUS_S = 0.4
WORKER = """
import os, signal, sys, time
from collector import Reporter
from collector.identity import identity_from_env
ident = identity_from_env()
reporter = Reporter(ident.job, heartbeat_s=0)
time.sleep(0.2)
with reporter.phase("model_init"):
    time.sleep(0.1)
reporter.flush()
first_group = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0"
if first_group and ident.rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)
if first_group:
    time.sleep(60)  # until the launcher stops it
with reporter.train(start_step=0) as train:
    for step in range(3):
        time.sleep(0.05)
        train.advance(step + 1)
reporter.shutdown()
"""


def start_group(restart_count: int) -> tuple[list[subprocess.Popen[bytes]], float]:
    started = time.time()
    workers = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "TORCHELASTIC_RESTART_COUNT": str(restart_count),
               "TORCHELASTIC_MAX_RESTARTS": "1"}
        workers.append(subprocess.Popen([sys.executable, "-c", WORKER], env=env,
                                        start_new_session=True))
    return workers, started


def main() -> int:
    seen: dict[str, float] = {}
    group, seen["group0_started"] = start_group(0)
    while group[1].poll() is None:  # like torchrun's monitor: look now and then
        time.sleep(MONITOR_S)
    seen["rank1_reaped"] = time.time()
    os.kill(group[0].pid, signal.SIGTERM)
    group[0].wait()
    seen["group0_gone"] = time.time()
    time.sleep(RENDEZVOUS_S)
    group, seen["group1_started"] = start_group(1)
    codes = [worker.wait() for worker in group]
    with open(sys.argv[1], "w") as out:
        json.dump({**seen, "group1_codes": codes}, out)
    return 0 if codes == [0, 0] else 1


if __name__ == "__main__":
    sys.exit(main())
