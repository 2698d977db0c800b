"""Who is reporting: the job, attempt and rank a launcher gave this process.

Why one module: the Reporter, the framework adapters (``collector.integrations``) and the
``collector.run`` wrapper must agree on these three numbers, or one job's events split into
several jobs or attempts on the server. Each value is taken from the first source present,
in a documented order (``docs/instrument.md``), and an explicit argument always wins:

- **job**: ``ETT_JOB_ID``, torchrun's ``TORCHELASTIC_RUN_ID`` (its default ``none`` does not
  count), Slurm's ``SLURM_JOB_ID``, then the Kubernetes Job's name from the pod's labels
  (``batch.kubernetes.io/job-name`` or ``job-name``), read from the Downward API file
  ``ETT_K8S_LABELS_FILE`` (default ``/etc/podinfo/labels``).
- **attempt**: ``ETT_ATTEMPT``, ``TORCHELASTIC_RESTART_COUNT``, ``SLURM_RESTART_COUNT``, else 0.
- **rank**: ``RANK``, ``SLURM_PROCID``, else 0.

Who marks the attempt is part of the same contract: a supervisor that emits
``attempt_start``/``attempt_end`` itself (``collector.run``, the reference trainer's
``python -m trainer``) sets ``ETT_SUPERVISED=1`` (:data:`SUPERVISED_ENV`) in its command's
environment, and what runs inside — an adapter, the reference trainer — then reports phases
and training but no attempt marks of its own, so each attempt has exactly one of each.

Nothing here raises: a malformed value is skipped as if unset, and a process with no job id
anywhere gets a local one (``local-HOST-PPID``), so a forgotten variable costs a mislabelled
job, not a crashed trainer.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ATTEMPT_ENV_VARS", "JOB_ENV_VARS", "K8S_JOB_LABELS", "RANK_ENV_VARS",
           "SUPERVISED_ENV", "Identity", "attempt_from_env", "identity_from_env",
           "job_from_env", "rank_from_env"]

JOB_ENV_VARS = ("ETT_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")
ATTEMPT_ENV_VARS = ("ETT_ATTEMPT", "TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT")
RANK_ENV_VARS = ("RANK", "SLURM_PROCID")
#: Set (to ``1``) by a supervisor that marks the attempts itself: nothing inside marks them.
SUPERVISED_ENV = "ETT_SUPERVISED"
K8S_JOB_LABELS = ("batch.kubernetes.io/job-name", "job-name")
DEFAULT_K8S_LABELS_FILE = "/etc/podinfo/labels"
#: torchrun's run id when none was given: every such job would share it.
_NOT_A_RUN_ID = {"", "none"}
MAX_JOB_CHARS = 200


@dataclass(frozen=True)
class Identity:
    """The job, attempt and rank of this process, and where each came from."""

    job: str
    attempt: int
    rank: int
    job_source: str
    attempt_source: str
    rank_source: str


def _int_from(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[int, str] | None:
    for name in names:
        value = env.get(name, "").strip()
        if value.isascii() and value.isdigit():  # "²".isdigit() is True: ASCII only
            return int(value), name
    return None


def _k8s_job(env: Mapping[str, str]) -> str | None:
    """The Kubernetes Job's name from a Downward API labels file (``key="value"`` lines)."""
    path = Path(env.get("ETT_K8S_LABELS_FILE", DEFAULT_K8S_LABELS_FILE))
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    labels: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            labels[key.strip()] = value.strip().strip('"')
    for label in K8S_JOB_LABELS:
        if labels.get(label):
            return labels[label]
    return None


def job_from_env(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The job id and the name of its source (``local`` when nothing named one)."""
    env = os.environ if env is None else env
    for name in JOB_ENV_VARS:
        value = env.get(name, "").strip()
        if value.lower() not in _NOT_A_RUN_ID:
            return value[:MAX_JOB_CHARS], name
    k8s = _k8s_job(env)
    if k8s:
        return k8s[:MAX_JOB_CHARS], "kubernetes"
    return f"local-{socket.gethostname()}-{os.getppid()}"[:MAX_JOB_CHARS], "local"


def attempt_from_env(default: int = 0, env: Mapping[str, str] | None = None) -> int:
    """The restart count a launcher gave this process (``ATTEMPT_ENV_VARS`` in order)."""
    found = _int_from(os.environ if env is None else env, ATTEMPT_ENV_VARS)
    return default if found is None else found[0]


def rank_from_env(default: int = 0, env: Mapping[str, str] | None = None) -> int:
    """This process's global rank (``RANK_ENV_VARS`` in order)."""
    found = _int_from(os.environ if env is None else env, RANK_ENV_VARS)
    return default if found is None else found[0]


def identity_from_env(env: Mapping[str, str] | None = None, *, job: str | None = None,
                      attempt: int | None = None, rank: int | None = None) -> Identity:
    """This process's identity; an argument that is not None overrides the environment."""
    env = os.environ if env is None else env
    job_id, job_source = (job, "argument") if job else job_from_env(env)
    found_attempt = _int_from(env, ATTEMPT_ENV_VARS)
    found_rank = _int_from(env, RANK_ENV_VARS)
    if attempt is not None:
        attempt_value, attempt_source = attempt, "argument"
    else:
        attempt_value, attempt_source = found_attempt or (0, "default")
    if rank is not None:
        rank_value, rank_source = rank, "argument"
    else:
        rank_value, rank_source = found_rank or (0, "default")
    return Identity(job=job_id, attempt=attempt_value, rank=rank_value, job_source=job_source,
                    attempt_source=attempt_source, rank_source=rank_source)
