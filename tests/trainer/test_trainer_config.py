"""The supervisor forwards training flags to the child; both must read them the same way."""

from __future__ import annotations

import pytest

from trainer.config import parse_train_config, safe_name


def test_forwarded_flags_rebuild_the_same_config() -> None:
    cfg = parse_train_config(["--job", "j 1/x", "--steps", "30", "--fail-at-step", "7",
                              "--no-compile", "--checkpoint-every", "0", "--lr", "0.01"])
    assert parse_train_config(cfg.to_argv()) == cfg
    assert cfg.compile is False and cfg.fail_at_step == 7 and cfg.checkpoint_every == 0


def test_a_short_run_keeps_the_default_checkpoint_interval() -> None:
    """--steps below --checkpoint-every is fine: the last step is always saved."""
    cfg = parse_train_config(["--steps", "40"])
    assert cfg.steps == 40 and cfg.checkpoint_every > 40


def test_defaults_give_a_fresh_job_and_absolute_paths() -> None:
    cfg = parse_train_config([])
    assert cfg.job.startswith("dlrm-")
    assert cfg.checkpoint_dir.endswith(f"var/checkpoints/{cfg.job}")
    assert cfg.checkpoint_dir.startswith("/") and cfg.spool_dir.startswith("/")
    assert cfg.fail_at_step is None


def test_fail_step_must_come_before_the_end(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_train_config(["--steps", "5", "--fail-at-step", "9"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == ("python -m trainer.train: error: --fail-at-step 9 is not "
                                       "before the last step (--steps 5); use 0..4\n")


def test_job_ids_become_safe_folder_names() -> None:
    assert safe_name("team/a b:c") == "team_a_b_c"
    assert safe_name("../..") == "_.."
    assert safe_name("...") == "job"
