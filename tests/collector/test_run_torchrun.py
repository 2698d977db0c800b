"""``collector.run`` around a real ``torchrun --nproc-per-node 2 --max-restarts 1`` (gloo,
CPU), one worker killed once, its events through the real ingest path into the job page.

The worker (tests/collector/torchrun_worker.py) reports its steps through collector.Reporter
with the job collector.run passes it and torchrun's restart count as its attempt; rank 1
kills itself with SIGKILL in the first attempt. The spool is imported as ``manage.py
ett_import`` does (``import_lines`` + ``refresh_imported``), and the job's numbers are read
with ``calculate(JobQuery(...))``, as its page reads them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from spooled_events import spooled

from ettweb.attribution.engine import attribute
from ettweb.ingest import partitions
from ettweb.ingest.imports import import_lines, read_lines, refresh_imported
from ettweb.ingest.models import Event
from ettweb.queries.job_detail import JobQuery, JobResult
from ettweb.queries.registry import calculate

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().with_name("torchrun_worker.py")
STEPS, KILL_AT = 6, 3


@pytest.fixture(autouse=True)
def fresh_partition_cache() -> Iterator[None]:
    """Partitions made inside a rolled-back test transaction are gone: forget them."""
    partitions.forget_known()
    yield
    partitions.forget_known()



@pytest.mark.django_db
@pytest.mark.slow
def test_torchrun_restarts_under_collector_run_reach_the_job_page(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("ETT_", "SLURM_", "TORCHELASTIC_")) and key != "RANK"}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               # torch shares the rendezvous TCPStore across restarts by default, and the
               # restarted gloo group would read the dead group's addresses from it.
               TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                "--max-restarts", "1", "--rdzv-backend", "c10d",
                "--rdzv-endpoint", "127.0.0.1:0", str(WORKER), str(STEPS), str(KILL_AT)]
    done = subprocess.run([sys.executable, "-m", "collector.run", "--job", "elastic-1",
                           "--spool-dir", str(spool), "--", *torchrun],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]

    events = spooled(spool)
    ends = {e["attempt"]: e for e in events if e["kind"] == "mark" and e["mark"] == "attempt_end"}
    starts = {e["attempt"]: e for e in events
              if e["kind"] == "mark" and e["mark"] == "attempt_start"}
    assert ends[0]["attrs"]["reason"] == "SIGKILL" and ends[0]["attrs"]["rank"] == 1
    assert [starts[a]["attrs"]["gpus"] for a in (0, 1)] == [2, 2]  # from --nproc-per-node
    gap = starts[1]["ts"] - ends[0]["ts"]

    lines: list[bytes] = []
    for path in sorted(spool.glob("*.jsonl")):
        lines += read_lines(path)
    summary = import_lines(lines, source="import:spool", workers=1)
    assert (summary.stored, summary.rejected, summary.jobs) == (len(events), 0, ("elastic-1",))
    refresh_imported(summary.jobs, workers=1)

    result = calculate(JobQuery(job="elastic-1"))
    assert isinstance(result, JobResult)
    headline = result.headline
    assert [(a.attempt, a.status) for a in headline.attempts] == [(0, "failed"),
                                                                  (1, "completed")]
    trained = set(Event.objects.filter(job="elastic-1", kind="span", phase="train")
                  .values_list("attempt", "rank"))
    assert trained == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert {lane.attempt for lane in result.lanes} == {0, 1}
    assert gap > 0
    assert headline.lost_s["restart_gap"] == pytest.approx(gap)
    assert headline.failures == 1
    # Each attempt was launching until the job's first event: cluster_runtime's time. The
    # page holds what the engine makes of the spool itself (nothing lost on the way).
    for attempt in (0, 1):
        (launch,) = [e for e in events if e["kind"] == "span" and e["phase"] == "launch"
                     and e["attempt"] == attempt]
        own = [e.get("start", e.get("ts")) for e in events
               if e["attempt"] == attempt and e["phase" if e["kind"] == "span" else "mark"]
               not in ("launch", "attempt_start", "attempt_end")]
        assert launch["start"] == starts[attempt]["ts"] and launch["end"] in own
    (offline,) = attribute(events).jobs
    assert headline.lost_s == pytest.approx(offline.lost_s)
    assert headline.lost_s["launch"] > 0
    assert result.lost_by_component_s["cluster_runtime"] == pytest.approx(
        headline.lost_s["launch"])
    # Attempt 1 trains from step 0 again: both ranks repeat the steps done before the kill
    # (rank 0 cannot pass step KILL_AT: its all_reduce waits for rank 1).
    assert headline.repeated_steps == 2 * KILL_AT
