"""Final heartbeats on behalf of processes that were killed outright.

Why a module of its own: ``collector.progress`` knows the file and its lock but writes no
events (the Reporter imports it); the two processes that outlive a trainer, ``collector.run``
(when its command or a torchrun worker group exits) and the node agent (between batches),
both turn a dead process's progress file into one ``heartbeat`` mark with its job, attempt,
rank, host, last completed step and that step's time, written into the spool like any
event. ETT_SPEC §3 rule 3 turns it into the train slice the kill took with it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from collector.progress import Progress, claim_orphans
from collector.reporter import Reporter

__all__ = ["write_final_heartbeats"]

log = logging.getLogger("ett.progress")


def write_final_heartbeats(spool_dir: Path, *, job: str | None = None) -> list[Progress]:
    """Claim the progress files in ``spool_dir`` whose writers are gone (only ``job``'s,
    when given) and write each one's final heartbeat there; the claimed ones are returned.
    Never raises."""
    try:
        claimed = claim_orphans(spool_dir, lambda found: _write(spool_dir, found), job=job)
    except Exception as exc:  # never let this stop the wrapper or the agent
        log.warning("cannot read the progress files in %s: %s", spool_dir, exc)
        return []
    for found in claimed:
        log.info("final heartbeat of %s attempt %s rank %s: step %s", found.job, found.attempt,
                 found.rank, found.step)
    return claimed


def _write(spool_dir: Path, found: Progress) -> None:
    """One heartbeat through a Reporter of the dead process's identity; raises when it was
    not written, so the file stays for the next look."""
    reporter = Reporter(found.job, attempt=found.attempt, rank=found.rank, host=found.host,
                        spool_dir=spool_dir, heartbeat_s=0, install_signal_handlers=False)
    queued = reporter.mark("heartbeat", ts=found.ts, step=found.step)
    written = reporter.shutdown(timeout=5.0)
    if queued is None or not written or reporter.dropped_full or reporter.dropped_invalid:
        raise OSError(f"the heartbeat was not written to {spool_dir}")
