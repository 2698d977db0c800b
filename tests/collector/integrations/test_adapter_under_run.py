"""A framework adapter under ``python -m collector.run``: one attempt, marked once.

The wrapper marks the attempt from outside (it sees the interpreter start and any exit) and
tells its command so with ``ETT_SUPERVISED=1``; the Lightning adapter inside then reports its
phases and training into the same job and attempt and sends no attempt marks of its own. A
real wrapper process runs a real ``Trainer.fit`` (``lightning_child.py``); what they wrote is
read back from the spool and attributed by the engine, as ETT would.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from adapter_runs import spool_events

from collector.schema import validate_event
from ettweb.attribution.engine import attribute

ROOT = Path(__file__).resolve().parents[3]
CHILD = Path(__file__).with_name("lightning_child.py")
JOB = "lightning-wrapped"
STEPS = 6  # lightning_child.STEPS
EPS = 1e-3


def _environment() -> dict[str, str]:
    """This process's environment without ETT's, a scheduler's or torchrun's variables."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("ETT_", "SLURM_", "TORCHELASTIC_")) and key != "RANK"}
    return {**env, "PYTHONPATH": str(ROOT)}


@pytest.mark.slow
def test_a_lightning_fit_under_the_wrapper_has_one_attempt_start_and_one_end(
        tmp_path: Path) -> None:
    spool, out = tmp_path / "spool", tmp_path / "child.json"
    done = subprocess.run(
        [sys.executable, "-m", "collector.run", "--job", JOB, "--spool-dir", str(spool),
         "--", sys.executable, str(CHILD), str(out)],
        env=_environment(), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    child = json.loads(out.read_text())
    assert child["env"] == {"ETT_JOB_ID": JOB, "ETT_SPOOL_DIR": str(spool),
                            "ETT_SUPERVISED": "1"}

    events = [validate_event(e) for e in spool_events(spool)]
    assert {(e["job"], e["attempt"]) for e in events} == {(JOB, 0)}
    (start,) = [e for e in events if e.get("mark") == "attempt_start"]
    (end,) = [e for e in events if e.get("mark") == "attempt_end"]
    # The wrapper's marks: its end carries the exit code, its start no LightningModule name.
    assert end["attrs"] == {"status": "completed", "exit_code": 0}
    assert start["attrs"] == {"gpus": 1}

    spans = [e for e in events if e["kind"] == "span"]
    (launch,) = [s for s in spans if s["phase"] == "launch"]
    own = [s for s in spans if s["phase"] != "launch"]
    assert {"model_init", "data_init", "train"} <= {s["phase"] for s in own}
    assert launch["start"] == start["ts"]
    assert launch["end"] <= min(s["start"] for s in own) + EPS  # until the adapter's first
    assert all(start["ts"] <= s["start"] and s["end"] <= end["ts"] for s in own)

    train = sorted((s for s in own if s["phase"] == "train"), key=lambda s: s["start"])
    assert train[0]["step_start"] == 0 and train[-1]["step_end"] == STEPS
    for before, after in itertools.pairwise(train):
        assert after["step_start"] == before["step_end"]
    first_step, last_step = child["steps"][0], child["steps"][-1]
    assert train[0]["start"] <= first_step[1] + EPS and last_step[2] <= train[-1]["end"] + EPS

    (job,) = attribute(events).jobs
    assert [(a.attempt, a.status) for a in job.attempts] == [(0, "completed")]
    assert job.anomalies == {}  # no repeated attempt marks
    assert job.lost_s["launch"] > 0 and job.productive_s > 0
