"""``manage.py ett_import`` and ``ett_export``: files in through the worker's ingest logic,
stored events out as JSONL that the offline report turns into exactly the rollups' numbers."""

from __future__ import annotations

import gzip
import json
import re
import time
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from bench.fleet import fleet_events
from collector.schema import dump_event
from collector.spool import frame
from ettweb.attribution.__main__ import main as offline_report
from ettweb.ingest import imports, partitions
from ettweb.ingest.imports import ImportSummary, import_lines, read_lines
from ettweb.ingest.management.commands import ett_export, ett_import
from ettweb.ingest.models import Event, QuarantinedEvent
from ettweb.rollups.models import DirtyJob, JobRollup
from tests.conftest import worked_example

LineFactory = Callable[..., str]
DAY = partitions.DAY_S
SUMMARY = re.compile(r"imported (?P<files>\d+ files?): (?P<counts>.*); "
                     r"(?P<jobs>[\d,]+) jobs? refreshed in \d+\.\d s")


@pytest.fixture(autouse=True)
def fresh_partition_cache() -> Iterator[None]:
    """Partitions made inside a rolled-back test transaction are gone: forget them."""
    partitions.forget_known()
    yield
    partitions.forget_known()


def _write(path: Path, lines: list[str]) -> Path:
    data = "".join(f"{line}\n" for line in lines).encode()
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def _import(*paths: Path, **options: Any) -> str:
    out = StringIO()
    call_command("ett_import", *map(str, paths), "--no-progress", stdout=out, **options)
    return out.getvalue().strip()


def _counts(output: str) -> str:
    match = SUMMARY.fullmatch(output)
    assert match, output
    return match["counts"]


def _export(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("ett_export", *args, "--no-progress", stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def _worked_example_lines() -> list[str]:
    return [json.dumps({"v": 1, "id": f"we-{n}", **fields})
            for n, fields in enumerate(worked_example())]


def _fleet_lines(jobs: int = 6) -> list[str]:
    return [dump_event(event) for event in fleet_events(
        seed=5, jobs=jobs, min_ranks=1, max_ranks=3, min_slices=2, max_slices=6, days=3)]


# --------------------------------------------------------------------------- ett_import

@pytest.mark.django_db
@pytest.mark.parametrize("name", ["events.jsonl", "events.jsonl.gz", "job.a0.r0.1.ab.00000.jsonl"])
def test_plain_gzip_and_spool_segment_files_are_stored(tmp_path: Path, name: str) -> None:
    lines = _worked_example_lines()
    if name.startswith("job."):  # a Reporter's spool segment: <json>\t<crc32>
        lines = [frame(line) for line in lines]
    output = _import(_write(tmp_path / name, lines))
    assert _counts(output) == "12 stored, 0 duplicates, 0 rejected"
    assert Event.objects.filter(job="j1").count() == 12
    assert not QuarantinedEvent.objects.exists()


@pytest.mark.django_db
def test_importing_the_same_file_twice_stores_nothing_new(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", _worked_example_lines())
    assert _counts(_import(path)) == "12 stored, 0 duplicates, 0 rejected"
    assert _counts(_import(path)) == "0 stored, 12 duplicates, 0 rejected"
    assert Event.objects.count() == 12


@pytest.mark.django_db
def test_bad_lines_are_quarantined_with_reasons_and_the_rest_is_stored(
        tmp_path: Path, event_line: LineFactory) -> None:
    good = _worked_example_lines()
    bad = [event_line(kind="span", phase="compile", start=10.0, end=5.0),
           event_line(kind="span", phase="compile", start=20.0, end=1.0),
           event_line(kind="mark", mark="heartbeat", ts=1.0, foo=1),
           "{not json"]
    corrupted = frame(good[0]).replace("attempt_start", "attempt_XXXXX")  # crc now wrong
    lines = [bad[0], *good[:6], bad[1], "", *good[6:], bad[2], good[3], bad[3], corrupted]
    output = _import(_write(tmp_path / "events.jsonl", lines))
    reasons = {"span end before start": 2, "unknown field(s): foo": 1,
               "checksum mismatch (corrupted spool record)": 1}
    quarantined = list(QuarantinedEvent.objects.values_list("reason", "source"))
    assert len(quarantined) == 5
    assert {source for _, source in quarantined} == {"import:events.jsonl"}
    bad_json = [reason for reason, _ in quarantined if reason.startswith("bad JSON")]
    assert len(bad_json) == 1
    assert _counts(output) == (
        f"12 stored, 1 duplicate, 5 rejected (span end before start: 2; "
        f"{bad_json[0]}: 1; checksum mismatch (corrupted spool record): 1; "
        "unknown field(s): foo: 1)")
    assert all(QuarantinedEvent.objects.filter(reason=r).count() == n for r, n in reasons.items())
    assert Event.objects.count() == 12  # the blank line is no event and no rejection
    kept = QuarantinedEvent.objects.get(reason="unknown field(s): foo")
    assert (kept.raw, kept.job) == (bad[2], "j1")  # the line as it was, and its job


def test_the_summary_line_counts_by_reason_most_frequent_first() -> None:
    summary = ImportSummary(stored=1234, duplicates=0, rejected=3,
                            reasons={"unknown field(s): foo": 1, "span end before start": 2},
                            jobs=("a", "b"))
    assert summary.line() == ("1,234 stored, 0 duplicates, 3 rejected "
                              "(span end before start: 2; unknown field(s): foo: 1)")
    both = summary + ImportSummary(stored=1, duplicates=1, rejected=1,
                                   reasons={"span end before start": 1}, jobs=("c", "a"))
    assert both.line() == ("1,235 stored, 1 duplicate, 4 rejected "
                           "(span end before start: 3; unknown field(s): foo: 1)")
    assert both.jobs == ("a", "b", "c")


@pytest.mark.django_db
def test_summary_line_of_several_files_and_batches(tmp_path: Path,
                                                   event_line: LineFactory) -> None:
    fleet = _fleet_lines(jobs=3)
    first = _write(tmp_path / "a.jsonl", fleet[:100])
    second = _write(tmp_path / "b.jsonl.gz",
                    [*fleet[90:], event_line(kind="span", phase="x", start=2.0, end=1.0)])
    output = _import(first, second, batch_lines=7)
    assert SUMMARY.fullmatch(output)
    assert output.startswith(f"imported 2 files: {len(fleet):,} stored, 10 duplicates, "
                             "1 rejected (span end before start: 1); 3 jobs refreshed in ")
    assert Event.objects.count() == len(fleet)


@pytest.mark.django_db
@pytest.mark.parametrize("problem", ["missing", "directory", "corrupt gzip", "truncated gzip",
                                     "permission"])
def test_an_unreadable_file_exits_2_and_imports_nothing(
        tmp_path: Path, problem: str, monkeypatch: pytest.MonkeyPatch) -> None:
    good = _write(tmp_path / "good.jsonl", _worked_example_lines())
    bad = tmp_path / ("bad.jsonl.gz" if "gzip" in problem else "bad.jsonl")
    if problem == "directory":
        bad.mkdir()
    elif problem == "corrupt gzip":
        bad.write_bytes(b"this is no gzip file\n")
    elif problem == "truncated gzip":  # only its end is wrong: found before importing anything
        bad.write_bytes(gzip.compress(good.read_bytes() * 50)[:-40])
    elif problem == "permission":  # tests run as root, whom chmod does not stop
        _write(bad, _worked_example_lines())
        real_open = Path.open

        def refuse(self: Path, *args: Any, **kwargs: Any) -> Any:
            if self == bad:
                raise PermissionError(13, "Permission denied", str(self))
            return real_open(self, *args, **kwargs)

        monkeypatch.setattr(Path, "open", refuse)
    with pytest.raises(CommandError) as failure:
        _import(good, bad)  # the bad file is the second: the first must not be imported
    assert failure.value.returncode == 2
    message = str(failure.value)
    assert "\n" not in message and message.startswith(f"cannot read {bad}: ")
    expected = {"missing": "No such file or directory", "directory": "Is a directory",
                "corrupt gzip": "corrupt gzip file", "truncated gzip": "corrupt gzip file",
                "permission": "Permission denied"}[problem]
    assert expected in message
    assert not Event.objects.exists() and not QuarantinedEvent.objects.exists()


def test_the_command_line_prints_one_line_and_exits_2(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(SystemExit) as exit_:
        ett_import.Command().run_from_argv(["manage.py", "ett_import", str(missing)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == f"CommandError: cannot read {missing}: No such file or directory\n"


@pytest.mark.django_db
def test_events_400_days_old_land_in_their_own_daily_partition(
        tmp_path: Path, event_line: LineFactory) -> None:
    day = partitions.day_of(time.time() - 400 * DAY)
    lines = [event_line(job="history", kind="mark", mark="heartbeat", ts=day + 3600.0 * n)
             for n in range(3)]
    lines.append(event_line(job="history", kind="span", phase="eval", start=day + DAY + 1.0,
                            end=day + DAY + 2.0))
    _import(_write(tmp_path / "history.jsonl", lines))
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text, count(*) FROM ingest_event GROUP BY 1")
        placed = dict(cursor.fetchall())
    assert placed == {partitions.partition_name(day): 3,
                      partitions.partition_name(day + DAY): 1}
    # The worker keeps its window: the same age stays in the default partition there.
    assert partitions.ensure_for_events([day - DAY + 5.0]) == []


@pytest.mark.django_db
def test_rollups_are_current_when_the_command_returns(tmp_path: Path) -> None:
    output = _import(_write(tmp_path / "events.jsonl", _worked_example_lines()))
    assert SUMMARY.fullmatch(output) and output.endswith(" s") and "; 1 job refreshed" in output
    row = JobRollup.objects.get(job="j1")  # ETT_SPEC §3 worked example
    assert (row.wall_s, row.productive_s, row.wall_gpu_s, row.productive_gpu_s) == (
        113.0, 80.0, 452.0, 320.0)
    assert round(row.ett_pct, 2) == 70.80 and row.attempts == 2
    assert not DirtyJob.objects.exists()


def test_read_lines_skips_blank_lines_and_keeps_spool_checksums(tmp_path: Path) -> None:
    record = frame('{"v":1}')
    path = _write(tmp_path / "seg.jsonl", [record, "", "   ", '{"v":2}'])
    assert list(read_lines(path)) == [record.encode(), b'{"v":2}']


@pytest.mark.django_db(transaction=True)
def test_worker_processes_store_and_refresh_like_one_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's default path (forked workers): same rows as in-process, and nothing
    committed outside the test is left behind (partitions made here are dropped)."""
    pools: list[int] = []

    class CountedPool(imports.ProcessPoolExecutor):
        def __init__(self, count: int, **options: Any) -> None:
            pools.append(count)
            super().__init__(count, **options)

    monkeypatch.setattr(imports, "ProcessPoolExecutor", CountedPool)
    before = partitions.existing_days()
    try:
        lines = _fleet_lines(jobs=4)
        summary = import_lines(lines, source="import:test", batch_lines=50, workers=2)
        assert (summary.stored, summary.duplicates, summary.rejected) == (len(lines), 0, 0)
        output = _import(_write(tmp_path / "again.jsonl", lines), workers=2, batch_lines=50)
        assert _counts(output) == f"0 stored, {len(lines)} duplicates, 0 rejected"
        assert output.endswith(" s") and "; 4 jobs refreshed" in output
        assert JobRollup.objects.count() == 4 and not DirtyJob.objects.exists()
        assert pools == [2, 2]  # the first import, then the command's (its refresh: 1 chunk)
        report = _report_of_export(tmp_path)
        _assert_rollups_equal(report)
    finally:
        with connection.cursor() as cursor:
            for day in partitions.existing_days() - before:
                cursor.execute(f"DROP TABLE {partitions.partition_name(day)}")


# --------------------------------------------------------------------------- ett_export

def _lines_of(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.django_db
def test_export_writes_normalized_v1_events_in_job_time_id_order(tmp_path: Path) -> None:
    fleet = _fleet_lines(jobs=3)
    _import(_write(tmp_path / "fleet.jsonl", [*reversed(fleet), *_worked_example_lines()]))
    out, err = _export()
    events = _lines_of(out)
    assert len(events) == len(fleet) + 12
    assert err.strip() == f"exported {len(events):,} events of 4 jobs to standard output"
    keys = [(e["job"], e.get("start", e.get("ts")), e["id"]) for e in events]
    assert keys == sorted(keys)
    heartbeat = next(e for e in events if e.get("mark") == "heartbeat" and e["job"] == "j1")
    assert heartbeat == {"v": 1, "id": heartbeat["id"], "job": "j1", "attempt": 0,
                         "kind": "mark", "mark": "heartbeat", "ts": 1080.0, "rank": 0,
                         "step": 680, "blocking": True}  # no host, no attrs, no span fields
    train = next(e for e in events if e.get("phase") == "train" and e["job"] != "j1")
    assert set(train) == {"v", "id", "job", "attempt", "kind", "phase", "start", "end",
                          "rank", "host", "step_start", "step_end", "blocking"}
    started = next(e for e in events if e.get("mark") == "attempt_start" and e["job"] == "j1")
    assert started["attrs"] == {"gpus": 4, "model": "dlrm", "team": "ads"}
    original = {json.loads(line)["id"]: json.loads(line) for line in fleet}
    for event in events:  # every exported event is its stored original, field for field
        if event["job"] != "j1":
            expected = {k: v for k, v in original[event["id"]].items() if v not in ({}, "")}
            assert event == expected


@pytest.mark.django_db
def test_export_filters_by_job_and_utc_days(tmp_path: Path, event_line: LineFactory) -> None:
    day = 1_780_000_000.0 // DAY * DAY  # 2026-05-28 00:00 UTC
    lines = [event_line(job=job, kind="mark", mark="heartbeat", ts=day + offset)
             for job in ("a", "b", "c") for offset in (-1.0, 0.0, DAY - 1.0, DAY, 2 * DAY)]
    lines.append(event_line(job="a", kind="span", phase="compile", start=day - 5.0, end=day + 5))
    _import(_write(tmp_path / "days.jsonl", lines))

    def exported(*args: str) -> list[tuple[str, float]]:
        return [(e["job"], e.get("ts", e.get("start"))) for e in _lines_of(_export(*args)[0])]

    assert {job for job, _ in exported("--job", "a", "--job", "c")} == {"a", "c"}
    assert {job for job, _ in exported("--job", "b", "c")} == {"b", "c"}
    assert exported("--job", "a", "--since", "2026-05-28", "--until", "2026-05-28") == [
        ("a", day), ("a", day + DAY - 1.0)]  # the span started the day before: not in it
    assert [t for _, t in exported("--job", "b", "--since", "2026-05-29")] == [
        day + DAY, day + 2 * DAY]
    assert [t for _, t in exported("--job", "a", "--until", "2026-05-27")] == [
        day - 5.0, day - 1.0]
    assert exported("--job", "nobody") == []


@pytest.mark.django_db
@pytest.mark.parametrize(("args", "flag"), [
    (["--since", "2026-13-01"], "--since"), (["--since", "yesterday"], "--since"),
    (["--until", "2026-2-1"], "--until"), (["--since", "2026-05-02", "--until", "2026-05-01"],
                                           "--since")])
def test_a_bad_day_exits_2_with_one_line_naming_the_flag(args: list[str], flag: str) -> None:
    with pytest.raises(CommandError) as failure:
        _export(*args)
    assert failure.value.returncode == 2
    assert str(failure.value).startswith(f"{flag}: ") and "\n" not in str(failure.value)


@pytest.mark.django_db
def test_export_to_a_gzip_file(tmp_path: Path) -> None:
    _import(_write(tmp_path / "in.jsonl", _worked_example_lines()))
    target = tmp_path / "out.jsonl.gz"
    out, err = _export("--output", str(target))
    assert out == "" and err.strip() == f"exported 12 events of 1 job to {target}"
    assert len(_lines_of(gzip.decompress(target.read_bytes()).decode())) == 12
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no partial
    with pytest.raises(CommandError, match=r"^--output: cannot write .*: No such file"):
        _export("--output", str(tmp_path / "no-dir" / "out.jsonl"))


def test_export_command_help_names_every_flag() -> None:
    parser = ett_export.Command().create_parser("manage.py", "ett_export")
    text = parser.format_help()
    assert all(flag in text for flag in ("--job", "--since", "--until", "--output"))


# --------------------------------------------------------------------------- round trip

def _report_of_export(tmp_path: Path, *args: str) -> dict[str, Any]:
    """``ett_export --output FILE`` then ``python -m ettweb.attribution FILE`` (its main)."""
    path = tmp_path / "export.jsonl"
    _export("--output", str(path), *args)
    stdout = StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdout", stdout)
        assert offline_report([str(path)]) == 0
    report: dict[str, Any] = json.loads(stdout.getvalue())
    return report


def _assert_rollups_equal(report: dict[str, Any]) -> None:
    rows = {row.job: row for row in JobRollup.objects.all()}
    assert sorted(rows) == [job["job"] for job in report["jobs"]]
    for job in report["jobs"]:
        row = rows[job["job"]]
        assert (round(row.ett_pct, 2), row.wall_gpu_s, row.productive_gpu_s, row.lost_s) == (
            job["ett_pct"], job["wall_gpu_s"], job["productive_gpu_s"], job["lost_s"])
    assert report["rejected"] == [] and report["duplicates"] == 0


@pytest.mark.django_db
def test_round_trip_of_the_worked_example(tmp_path: Path) -> None:
    _import(_write(tmp_path / "in.jsonl", _worked_example_lines()))
    report = _report_of_export(tmp_path)
    (job,) = report["jobs"]
    assert (job["job"], job["ett_pct"], job["wall_gpu_s"], job["productive_gpu_s"]) == (
        "j1", 70.80, 452.0, 320.0)
    assert job["lost_s"] == {"checkpoint_load": 3.0, "checkpoint_save": 2.0, "compile": 6.0,
                             "failure": 3.0, "process_group_init": 4.0, "repeated_training": 8.0,
                             "restart_gap": 7.0}
    _assert_rollups_equal(report)


@pytest.mark.django_db
def test_round_trip_of_a_fleet_equals_the_rollups(tmp_path: Path) -> None:
    lines = _fleet_lines(jobs=6)
    _import(_write(tmp_path / "fleet.jsonl.gz", lines), batch_lines=97)
    report = _report_of_export(tmp_path)
    assert len(report["jobs"]) == 6
    assert sum(1 for job in report["jobs"] if job["failures"]) >= 1  # restarts exercised
    _assert_rollups_equal(report)
    only = _report_of_export(tmp_path, "--job", "job-00002")
    assert [job["job"] for job in only["jobs"]] == ["job-00002"]
    assert only["jobs"][0] == next(j for j in report["jobs"] if j["job"] == "job-00002")
