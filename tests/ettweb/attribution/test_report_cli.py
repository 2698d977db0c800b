"""The offline report (§5), through a real subprocess and through ``report_from_lines``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from attribution_events import Timeline, hard_kill_example, worked_example

from ettweb.attribution.__main__ import main, report_from_lines

ROOT = Path(__file__).resolve().parents[3]

WORKED_EXAMPLE_REPORT = {
    "jobs": [{
        "job": "j1", "attempts": 2, "wall_s": 113.0, "productive_s": 80.0, "ett_pct": 70.8,
        "wall_gpu_s": 452.0, "productive_gpu_s": 320.0, "repeated_steps": 80,
        "time_to_start_s": 10.0, "time_to_recover_s": [21.0], "failures": 1,
        "lost_s": {"checkpoint_load": 3.0, "checkpoint_save": 2.0, "compile": 6.0,
                   "failure": 3.0, "process_group_init": 4.0, "repeated_training": 8.0,
                   "restart_gap": 7.0},
        "lost_by_component_s": {"checkpointing": 5.0, "distributed_runtime": 4.0,
                                "pt2_compiler": 6.0, "reliability": 11.0, "scheduler": 7.0},
        # extra keys beyond §5: the restart tax of the one recovery (1080 -> 1101 = 21 s:
        # failure 1080-1083, gap 1083-1090, load 1090-1093, repeated 1093-1101) ...
        "recoveries": [{"attempt": 0, "start": 1080.0, "end": 1101.0,
                        "by_category": {"checkpoint_load": 3.0, "failure": 3.0,
                                        "repeated_training": 8.0, "restart_gap": 7.0}}],
        # ... and no anomalies in a consistent timeline
        "anomalies": {},
    }],
    "fleet": {"wall_gpu_s": 452.0, "productive_gpu_s": 320.0, "ett_pct": 70.8},
    "rejected": [],
    "duplicates": 0,
}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ettweb.attribution", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_worked_example_through_the_cli(tmp_path: Path) -> None:
    events = _write(tmp_path / "events.jsonl", worked_example().lines())
    result = _run(str(events))
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document == WORKED_EXAMPLE_REPORT
    # key order is part of the contract (§5)
    assert list(document) == ["jobs", "fleet", "rejected", "duplicates"]
    assert list(document["jobs"][0]) == list(WORKED_EXAMPLE_REPORT["jobs"][0])  # type: ignore[index]


def test_rejected_lines_kept_aside_and_valid_lines_reported() -> None:
    lines = worked_example().lines()
    bad_span = json.loads(lines[1])
    bad_span.update(id="bad", start=2000, end=1999)
    lines[2:2] = [json.dumps(bad_span), "{not json", '{"v": 1}']
    report = report_from_lines(lines)
    assert report["rejected"] == [
        {"line": 3, "reason": "span end before start"},
        {"line": 4, "reason": report["rejected"][1]["reason"]},
        {"line": 5, "reason": "missing required field 'id'"},
    ]
    assert report["rejected"][1]["reason"].startswith("bad JSON")
    assert report["jobs"] == WORKED_EXAMPLE_REPORT["jobs"]


def test_blank_lines_are_skipped_but_counted() -> None:
    lines = ["", "   ", *worked_example().lines(), "", "[]"]
    report = report_from_lines(lines)
    assert report["rejected"] == [{"line": 16, "reason": "event must be a JSON object"}]
    assert report["jobs"] == WORKED_EXAMPLE_REPORT["jobs"]


def test_duplicate_ids_counted_once() -> None:
    lines = worked_example().lines()
    report = report_from_lines([*lines, lines[3], lines[9]])
    assert report["duplicates"] == 2
    assert report["jobs"] == WORKED_EXAMPLE_REPORT["jobs"]


def test_several_files_name_the_file_of_each_rejection(tmp_path: Path) -> None:
    lines = worked_example().lines()
    first = _write(tmp_path / "a.jsonl", lines[:6])
    second = _write(tmp_path / "b.jsonl", [*lines[6:], "{}"])
    result = _run(str(first), str(second))
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["jobs"] == WORKED_EXAMPLE_REPORT["jobs"]
    assert document["rejected"] == [
        {"line": 7, "reason": "missing required field 'v'", "file": str(second)},
    ]


def test_missing_file_exits_2_with_one_line_error(tmp_path: Path) -> None:
    present = _write(tmp_path / "events.jsonl", worked_example().lines())
    missing = tmp_path / "nope.jsonl"
    result = _run(str(present), str(missing))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert str(missing) in result.stderr
    assert "No such file" in result.stderr


def test_directory_is_unreadable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_main_reads_stdin(monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    import io

    data = ("\n".join(worked_example().lines()) + "\n").encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["-"]) == 0
    assert json.loads(capsys.readouterr().out) == WORKED_EXAMPLE_REPORT


def test_help_explains_the_report() -> None:
    result = _run("--help")
    assert result.returncode == 0
    assert "EVENTS.jsonl" in result.stdout
    assert "rejected" in result.stdout


def test_empty_input_is_an_empty_report() -> None:
    assert report_from_lines([]) == {
        "jobs": [], "fleet": {"wall_gpu_s": 0, "productive_gpu_s": 0, "ett_pct": 0.0},
        "rejected": [], "duplicates": 0,
    }


def test_job_without_training_reports_null_time_to_start() -> None:
    t = Timeline("idle")
    t.mark(0, "attempt_start", 0, gpus=2)
    t.span(0, "scheduling", 0, 30)
    report = report_from_lines(t.lines())
    job = report["jobs"][0]
    assert job["time_to_start_s"] is None
    assert job["ett_pct"] == 0.0
    assert job["lost_by_component_s"] == {"scheduler": 30.0}


HARD_KILL = ROOT / "docs" / "explanation" / "hard-kill.jsonl"


def test_the_hand_computed_hard_kill_through_the_cli() -> None:
    """ETT_SPEC §3 rule 3's example, as docs/explanation/attribution.md works it by hand."""
    assert HARD_KILL.read_text().splitlines() == hard_kill_example().lines()
    result = _run(str(HARD_KILL))
    assert result.returncode == 0, result.stderr
    [job] = json.loads(result.stdout)["jobs"]
    assert (job["wall_s"], job["productive_s"], job["ett_pct"], job["repeated_steps"]) == (
        123.0, 80.0, 65.04, 80)
    assert (job["wall_gpu_s"], job["productive_gpu_s"]) == (492.0, 320.0)
    assert (job["time_to_start_s"], job["time_to_recover_s"], job["failures"]) == (
        0.0, [41.0, 21.0], 2)
    assert job["lost_s"] == {"checkpoint_load": 6.0, "checkpoint_save": 2.0,
                             "repeated_training": 8.0, "restart_gap": 20.0,
                             "unattributed": 7.0}
