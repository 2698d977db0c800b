"""The supervisor forwards training flags to the child; both must read them the same way."""

from __future__ import annotations

import pytest

from trainer.config import OPTIMIZATIONS, mtbf_failure_steps, parse_train_config, safe_name


def test_forwarded_flags_rebuild_the_same_config() -> None:
    cfg = parse_train_config(["--job", "j 1/x", "--steps", "30", "--fail-at-step", "7",
                              "--no-compile", "--checkpoint-every", "0", "--lr", "0.01"])
    assert parse_train_config(cfg.to_argv()) == cfg
    assert cfg.compile is False and cfg.fail_at_steps == (7,) and cfg.checkpoint_every == 0


def test_a_short_run_keeps_the_default_checkpoint_interval() -> None:
    """--steps below --checkpoint-every is fine: the last step is always saved."""
    cfg = parse_train_config(["--steps", "40"])
    assert cfg.steps == 40 and cfg.checkpoint_every > 40


def test_defaults_give_a_fresh_job_and_absolute_paths() -> None:
    cfg = parse_train_config([])
    assert cfg.job.startswith("dlrm-")
    assert cfg.checkpoint_dir.endswith(f"var/checkpoints/{cfg.job}")
    assert cfg.checkpoint_dir.startswith("/") and cfg.spool_dir.startswith("/")
    assert cfg.fail_at_steps == () and cfg.opts == ()


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


def test_profiles_and_opt_switches_combine_in_canonical_order() -> None:
    assert parse_train_config(["--profile", "baseline"]).opts == ()
    assert parse_train_config(["--profile", "optimized"]).opts == OPTIMIZATIONS
    cfg = parse_train_config(["--opt", "recovery, plan_cache"])
    assert cfg.opts == ("plan_cache", "recovery")
    assert cfg.has("plan_cache") and not cfg.has("async_checkpoint")
    assert parse_train_config(cfg.to_argv()) == cfg
    with pytest.raises(ValueError, match="unknown optimization 'plan_cach'"):
        cfg.has("plan_cach")


@pytest.mark.parametrize(("flags", "reason"), [
    (["--opt", "plan_cache,warp_drive"], "argument --opt: unknown optimization 'warp_drive'"),
    (["--profile", "fast"], "argument --profile: invalid choice: 'fast'"),
    (["--steps", "10", "--fail-at-steps", "3,10"], "--fail-at-steps 10 is not before the last"),
    (["--fail-at-steps", "5,5"], "'5,5' is not strictly increasing"),
    (["--fail-at-step", "1", "--fail-at-steps", "2"], "are exclusive"),
    (["--batch-size", "8", "--last-batch-size", "9"], "--last-batch-size 9 is larger"),
    (["--mtbf", "0"], "--mtbf: must be greater than 0"),
])
def test_bad_switches_and_impossible_plans_are_one_line_errors(
        flags: list[str], reason: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_train_config(flags)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and reason in err, err


def test_failure_schedule_gives_each_attempt_its_own_step() -> None:
    cfg = parse_train_config(["--steps", "100", "--fail-at-steps", "30,70"])
    assert [cfg.fail_step_of(a) for a in range(3)] == [30, 70, None]


def test_seeded_mtbf_schedule_is_reproducible_and_inside_the_run() -> None:
    flags = ["--steps", "5000", "--fail-mtbf-steps", "800", "--fail-seed", "4"]
    first, again = parse_train_config(flags), parse_train_config(flags)
    assert first.fail_at_steps == again.fail_at_steps
    assert len(first.fail_at_steps) >= 2  # ~6 expected; a draw of 0-1 would be a broken rng
    assert all(0 <= s < 5000 for s in first.fail_at_steps)
    assert list(first.fail_at_steps) == sorted(set(first.fail_at_steps))
    other = parse_train_config([*flags[:-1], "5"])
    assert other.fail_at_steps != first.fail_at_steps
    assert mtbf_failure_steps(800, 4, 5000) == first.fail_at_steps


def test_only_the_last_step_has_the_smaller_batch() -> None:
    cfg = parse_train_config(["--steps", "10", "--batch-size", "8", "--last-batch-size", "5"])
    assert [cfg.batch_size_at(s) for s in (0, 8, 9)] == [8, 8, 5]
