"""The job, attempt and rank every reporter, adapter and wrapper agree on."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.identity import identity_from_env, job_from_env


def test_the_first_source_present_wins_in_the_documented_order(tmp_path: Path) -> None:
    env = {"ETT_JOB_ID": "ett", "TORCHELASTIC_RUN_ID": "elastic", "SLURM_JOB_ID": "77",
           "ETT_ATTEMPT": "3", "TORCHELASTIC_RESTART_COUNT": "1", "SLURM_RESTART_COUNT": "2",
           "RANK": "5", "SLURM_PROCID": "6", "ETT_K8S_LABELS_FILE": str(tmp_path / "none")}
    ident = identity_from_env(env)
    assert (ident.job, ident.attempt, ident.rank) == ("ett", 3, 5)
    assert (ident.job_source, ident.attempt_source, ident.rank_source) == \
        ("ETT_JOB_ID", "ETT_ATTEMPT", "RANK")
    for name in ("ETT_JOB_ID", "ETT_ATTEMPT", "RANK"):
        del env[name]
    ident = identity_from_env(env)
    assert (ident.job, ident.attempt, ident.rank) == ("elastic", 1, 6)
    for name in ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"):
        del env[name]
    assert (identity_from_env(env).job, identity_from_env(env).attempt) == ("77", 2)


def test_torchruns_default_run_id_names_no_job(tmp_path: Path) -> None:
    env = {"TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "9",
           "ETT_K8S_LABELS_FILE": str(tmp_path / "none")}
    assert job_from_env(env) == ("9", "SLURM_JOB_ID")


def test_a_kubernetes_job_is_named_by_its_pod_labels(tmp_path: Path) -> None:
    labels = tmp_path / "labels"
    labels.write_text('app="trainer"\nbatch.kubernetes.io/job-name="ranker-7"\n')
    assert job_from_env({"ETT_K8S_LABELS_FILE": str(labels)}) == ("ranker-7", "kubernetes")
    labels.write_text('job-name="old-style"\n')
    assert job_from_env({"ETT_K8S_LABELS_FILE": str(labels)}) == ("old-style", "kubernetes")


def test_arguments_override_and_bad_values_are_skipped(tmp_path: Path) -> None:
    env = {"ETT_JOB_ID": "env", "ETT_ATTEMPT": "-1", "TORCHELASTIC_RESTART_COUNT": "²",
           "SLURM_RESTART_COUNT": "4", "RANK": "x"}
    ident = identity_from_env(env, job="mine", rank=2)
    assert (ident.job, ident.attempt, ident.rank) == ("mine", 4, 2)
    assert (ident.job_source, ident.attempt_source, ident.rank_source) == \
        ("argument", "SLURM_RESTART_COUNT", "argument")


@pytest.mark.parametrize("env", [{}, {"ETT_JOB_ID": "   "}])
def test_no_job_anywhere_gives_a_local_one_not_an_error(env: dict[str, str],
                                                        tmp_path: Path) -> None:
    env = {**env, "ETT_K8S_LABELS_FILE": str(tmp_path / "missing")}
    job, source = job_from_env(env)
    assert source == "local" and job.startswith("local-")
