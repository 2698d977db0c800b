"""``manage.py ett_import --format``: other tools' files through the same ingest path, bad
usage refused with one line and exit 2, unreadable lines quarantined with their reasons."""

from __future__ import annotations

import argparse
import gzip
import json
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from ettweb.ingest import partitions
from ettweb.ingest.management.commands import ett_import
from ettweb.ingest.models import Event, QuarantinedEvent
from ettweb.rollups.models import AttemptRollup, JobRollup

T0 = 1772438400.0  # 2026-03-02 08:00:00 UTC


@pytest.fixture(autouse=True)
def fresh_partition_cache() -> Iterator[None]:
    partitions.forget_known()
    yield
    partitions.forget_known()


def _import(*args: str) -> str:
    out = StringIO()
    call_command("ett_import", *args, "--no-progress", "--workers", "1", stdout=out)
    return out.getvalue().strip()


def _titan(seconds: int, message: str) -> str:
    return f"[rank0]:[titan] 2026-03-02 08:{seconds // 60:02d}:{seconds % 60:02d},000 - root - " \
           f"INFO - {message}"


def _titan_attempt(start: int, first_step: int, steps: int) -> list[str]:
    lines = [_titan(start, "Starting job: x"),
             _titan(start + 1, f"Training starts at step {first_step + 1}.")]
    lines += [_titan(start + 2 + 2 * n, f"step: {first_step + 10 * (n + 1)}  loss: 1.0")
              for n in range(steps)]
    return lines


@pytest.mark.django_db
@pytest.mark.parametrize(("args", "message"), [
    (["--format", "csv"], "--format: unknown format 'csv' (choose from ett, nvrx, goodput, "
                          "torchtitan)"),
    (["--job", "j1"], "--job and --gpus apply to --format nvrx, goodput, torchtitan: "
                      "schema-v1 events carry their own"),
    (["--gpus", "2"], "--job and --gpus apply to --format nvrx, goodput, torchtitan: "
                      "schema-v1 events carry their own"),
    (["--format", "nvrx", "--gpus", "0"], "--gpus: '0' is not a whole number >= 1"),
    (["--format", "nvrx", "--gpus", "two"], "--gpus: 'two' is not a whole number >= 1"),
    (["--format", "goodput", "--job", " "], "--job: a job id has 1-200 characters"),
    (["--format", "goodput", "--job", "j" * 201], "--job: a job id has 1-200 characters")])
def test_bad_usage_exits_2_with_one_line_and_imports_nothing(
        tmp_path: Path, args: list[str], message: str) -> None:
    path = tmp_path / "x.log"
    path.write_text(json.dumps({"job_name": "j", "job_start_time": T0}) + "\n")
    with pytest.raises(CommandError) as failure:
        _import(str(path), *args)
    assert (failure.value.returncode, str(failure.value)) == (2, message)
    assert not Event.objects.exists()


def test_the_command_line_says_it_in_one_line_without_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        ett_import.Command().run_from_argv(["manage.py", "ett_import", str(tmp_path / "a.log"),
                                            "--format", "nvrx", "--gpus", "-1"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "CommandError: --gpus: '-1' is not a whole number >= 1\n"


@pytest.mark.django_db
def test_unreadable_lines_are_quarantined_with_the_translators_reason(tmp_path: Path) -> None:
    entries = [{"job_name": "gp", "job_start_time": T0},
               {"job_name": "gp", "step_start_time": T0 + 5, "step_count": 0},
               {"job_name": "gp", "step_start_time": T0 + 7, "step_count": 1},
               {"job_name": "gp", "job_end_time": T0 + 9},
               {"job_name": "gp", "goodput_metric": 12.5}]
    lines = [json.dumps(entry) for entry in entries]
    lines[2:2] = ["{broken", json.dumps({"job_name": "gp", "step_start_time": "late"})]
    path = tmp_path / "gp.jsonl.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    output = _import(str(path), "--format", "goodput", "--gpus", "2")
    bad_json = QuarantinedEvent.objects.get(raw="{broken").reason
    assert bad_json.startswith("goodput: bad JSON (")
    assert output == (
        "imported 1 file: 7 goodput lines made 4 events (0 unattributed), 1 other line "
        "skipped; 4 stored, 0 duplicates, 2 rejected (goodput: 'step_start_time' must be "
        f"epoch seconds (a number >= 0): 1; {bad_json}: 1); 1 job refreshed in "
        + output.rsplit(" refreshed in ", 1)[1])
    assert set(QuarantinedEvent.objects.values_list("source", flat=True)) == {
        "import:gp.jsonl.gz"}
    row = JobRollup.objects.get(job="gp")
    assert (row.wall_s, row.productive_s, row.gpus, row.status) == (9.0, 4.0, 2, "completed")
    again = _import(str(path), "--format", "goodput", "--gpus", "2")
    assert "; 0 stored, 4 duplicates, 2 rejected (" in again  # the bad lines: kept again


@pytest.mark.django_db
def test_a_runs_attempts_in_several_files_are_one_job_with_job(tmp_path: Path) -> None:
    first, second = tmp_path / "slurm-1.out", tmp_path / "slurm-2.out"
    first.write_text("\n".join(_titan_attempt(0, 0, 3)) + "\n")
    second.write_text("\n".join(_titan_attempt(60, 10, 3)) + "\n")
    output = _import(str(first), str(second), "--format", "torchtitan", "--job", "titan-run")
    assert output.startswith("imported 2 files: 10 torchtitan lines made ")
    assert list(AttemptRollup.objects.filter(job_id="titan-run").values_list(
        "attempt", "status")) == [(0, "lost"), (1, "running")]
    assert JobRollup.objects.get(job="titan-run").repeated_steps == 20
    # without --job, each file is a job of its own, named by the file
    _import(str(first), "--format", "torchtitan")
    assert JobRollup.objects.filter(job="slurm-1").exists()


def test_the_cli_reference_shows_the_commands_help(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/reference/cli.md reproduces ``--help`` at 100 columns, Django's common options
    written as ``[common options]``."""
    monkeypatch.setenv("COLUMNS", "100")
    parser = ett_import.Command().create_parser("manage.py", "ett_import")
    common = {"--version", "--verbosity", "--settings", "--pythonpath", "--traceback",
              "--no-color", "--force-color", "--skip-checks"}
    for action in parser._actions:
        if common & set(action.option_strings):
            action.help = argparse.SUPPRESS
    text = parser.format_help().rstrip("\n").replace(
        "[--no-progress]\n", "[--no-progress]\n" + " " * 28 + "[common options]\n", 1)
    reference = (Path(__file__).resolve().parents[3] / "docs" / "reference" / "cli.md")
    block = reference.read_text().split("## `manage.py ett_import`\n\n```text\n", 1)[1]
    assert block.split("\n```", 1)[0] == text
