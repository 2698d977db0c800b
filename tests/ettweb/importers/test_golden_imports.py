"""Each golden file through ``manage.py ett_import --format``: the stored job's categories,
ETT% and attempts equal what this test computes from the file by ETT_SPEC §3's rules.

The expected numbers are arithmetic on times read from the file here (with regexes of this
test's own), never constants: change a time in a golden file and both sides move.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from io import StringIO
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from ettweb.ingest import partitions
from ettweb.ingest.models import Event
from ettweb.queries.job_detail import JobQuery, JobResult
from ettweb.queries.registry import calculate

GOLDEN = Path(__file__).resolve().parent / "golden"
SUMMARY = re.compile(r"imported 1 file: (?P<lines>[\d,]+) (?P<fmt>\w+) lines made "
                     r"(?P<events>[\d,]+) events \((?P<unattributed>\d+) unattributed\), "
                     r"(?P<skipped>[\d,]+) other lines? skipped; (?P<stored>[\d,]+) stored, "
                     r"(?P<duplicates>[\d,]+) duplicates?, 0 rejected; 1 job refreshed in .*")


@pytest.fixture(autouse=True)
def fresh_partition_cache() -> Iterator[None]:
    """Partitions made inside a rolled-back test transaction are gone: forget them."""
    partitions.forget_known()
    yield
    partitions.forget_known()


def _import(fmt: str, path: Path, *args: str) -> re.Match[str]:
    out = StringIO()
    call_command("ett_import", str(path), "--format", fmt, *args, "--no-progress",
                 "--workers", "1", stdout=out)
    found = SUMMARY.fullmatch(out.getvalue().strip())
    assert found, out.getvalue()
    return found


def _job(job: str) -> JobResult:
    result = calculate(JobQuery(job=job))
    assert isinstance(result, JobResult), result
    return result


def _utc(text: str) -> float:
    """``2026-03-02 08:00:09.200`` (or ``,200``) read as UTC."""
    return datetime.strptime(text.replace(",", "."), "%Y-%m-%d %H:%M:%S.%f").replace(
        tzinfo=UTC).timestamp()


def _assert_numbers(result: JobResult, lost: dict[str, float], productive: float,
                    gpus: int) -> None:
    headline = result.headline
    wall = productive + sum(lost.values())
    assert headline.lost_s == pytest.approx(lost, abs=1e-3)
    assert headline.wall_s == pytest.approx(wall, abs=1e-3)
    assert headline.productive_s == pytest.approx(productive, abs=1e-3)
    assert headline.ett_pct == pytest.approx(100 * productive / wall, abs=1e-3)
    assert headline.wall_gpu_s == pytest.approx(wall * gpus, abs=1e-2)


# --------------------------------------------------------------------------- NVRx

NVRX = GOLDEN / "nvrx_two_cycles.log"
_PROFILED = re.compile(r"Cycle: (\d+) Event: (\w+) Node: \S+ Rank: \S+ Time: (\S+ \S+) UTC")


def _nvrx_times() -> dict[tuple[int, str], list[float]]:
    times: dict[tuple[int, str], list[float]] = defaultdict(list)
    for line in NVRX.read_text().splitlines():
        if found := _PROFILED.search(line):
            times[(int(found[1]), found[2])].append(_utc(found[3]))
        elif "successfully finished" in line:  # the logger's time: UTC on these nodes
            times[(-1, "finished")].append(_utc(line.split(" [", 1)[0].split(": ", 1)[1]))
    return times


def _nvrx_expected() -> tuple[dict[str, float], float, float]:
    """The job by hand: per cycle, the nodes' rendezvous (and worker starts) overlap, so
    each phase is the span from the first node's start to the last node's end."""
    t = _nvrx_times()
    for cycle in (0, 1):
        assert max(t[(cycle, "rendezvous_started")]) < min(t[(cycle, "rendezvous_completed")])
    lost = {"rendezvous": sum(max(t[(c, "rendezvous_completed")])
                              - min(t[(c, "rendezvous_started")]) for c in (0, 1)),
            "container_start": sum(max(t[(c, "worker_start_completed")])
                                   - min(t[(c, "worker_start_started")]) for c in (0, 1)),
            # failure_detected of cycle 1 ends attempt 0: detection to the last teardown
            "failure": max(t[(1, "worker_terminated")]) - min(t[(1, "failure_detected")]),
            "restart_gap": min(t[(1, "rendezvous_started")]) - max(t[(1, "worker_terminated")])}
    start, end = min(t[(0, "rendezvous_started")]), max(t[(-1, "finished")])
    # The workers' running time: nothing in this log says what they did.
    lost["unattributed"] = (end - start) - sum(lost.values())
    return lost, start, end


@pytest.mark.django_db
def test_nvrx_golden_file_gives_the_restart_cycle_overhead() -> None:
    summary = _import("nvrx", NVRX)
    lost, _, _ = _nvrx_expected()
    result = _job("llama-70b-ft-0302")  # the rendezvous run id names the job
    gpus = 2 * 4  # world size 2 nodes x nproc_per_node 4, both read from the log
    _assert_numbers(result, lost, productive=0.0, gpus=gpus)
    assert [(a.attempt, a.status, a.gpus) for a in result.headline.attempts] == [
        (0, "failed", gpus), (1, "completed", gpus)]
    assert result.headline.failures == 1 and result.headline.anomalies == {}
    lines = NVRX.read_text().splitlines()
    profiled = sum(1 for line in lines if _PROFILED.search(line))
    assert summary["lines"] == str(len(lines)) and summary["unattributed"] == "0"
    read = sum(1 for line in lines if any(text in line for text in (
        "has joined the rendezvous", "Using nproc_per_node", "made progress",
        "successfully finished")))  # the job id, the GPUs, attempt attrs, the job's end
    assert int(summary["skipped"]) == len(lines) - profiled - read
    assert int(summary["stored"]) == int(summary["events"]) == Event.objects.count()


@pytest.mark.django_db
def test_nvrx_joins_the_trainers_own_events_of_the_same_job(tmp_path: Path) -> None:
    """The trainer's events (same job id: torchrun's run id) fill the running time the
    launcher log cannot see; NVRx keeps the restart cycle."""
    lost, start, end = _nvrx_expected()
    t = _nvrx_times()
    trained_until = min(t[(1, "failure_detected")]) - 10.0  # its last report before dying
    resumed = max(t[(1, "worker_start_completed")]) + 5.0
    job = "llama-70b-ft-0302"
    trainer = [
        {"attempt": 0, "kind": "span", "phase": "train", "start": max(
            t[(0, "worker_start_completed")]), "end": trained_until, "step_start": 0,
         "step_end": 1500},
        {"attempt": 1, "kind": "span", "phase": "checkpoint_load",
         "start": max(t[(1, "worker_start_completed")]), "end": resumed},
        {"attempt": 1, "kind": "span", "phase": "train", "start": resumed, "end": end,
         "step_start": 1500, "step_end": 3000}]
    path = tmp_path / "trainer.jsonl"
    path.write_text("".join(json.dumps({"v": 1, "id": f"trainer-{n}", "job": job, **event})
                            + "\n" for n, event in enumerate(trainer)))
    _import("nvrx", NVRX)
    call_command("ett_import", str(path), "--no-progress", "--workers", "1", stdout=StringIO())
    productive = sum(e["end"] - e["start"] for e in trainer if e["phase"] == "train")
    lost["checkpoint_load"] = trainer[1]["end"] - trainer[1]["start"]
    lost["unattributed"] = (end - start) - productive - sum(
        v for k, v in lost.items() if k != "unattributed")
    _assert_numbers(_job(job), lost, productive=productive, gpus=8)


# --------------------------------------------------------------------------- goodput

GOODPUT = GOLDEN / "goodput_two_attempts.jsonl"


def _goodput_attempts() -> list[list[dict[str, Any]]]:
    attempts: list[list[dict[str, Any]]] = []
    for line in GOODPUT.read_text().splitlines():
        entry = json.loads(line)
        if "job_start_time" in entry:
            attempts.append([])
        attempts[-1].append(entry)
    return attempts


def _value(entries: list[dict[str, Any]], key: str) -> list[float]:
    return [e[key] for e in entries if key in e]


def _pairs(entries: list[dict[str, Any]], name: str, **match: Any) -> list[tuple[float, float]]:
    chosen = [e for e in entries if all(e.get(k) == v for k, v in match.items())]
    return list(zip(_value(chosen, f"{name}_start_time"), _value(chosen, f"{name}_end_time"),
                    strict=True))


def _goodput_expected() -> tuple[dict[str, float], float, int]:
    lost: dict[str, float] = defaultdict(float)
    productive, trained_to, repeated_steps = 0.0, 0, 0
    previous_end: float | None = None
    for entries in _goodput_attempts():
        starts = sorted(zip(_value(entries, "step_start_time"), _value(entries, "step_count"),
                            strict=True))
        ends = _value(entries, "job_end_time")
        job_start = _value(entries, "job_start_time")[0]
        saves = [(e["checkpoint_manager_blocking_start_time"],
                  e["checkpoint_manager_blocking_start_time"]
                  + e["checkpoint_manager_blocking_duration_secs"])
                 for e in entries if e.get("event_type") == "save"]
        restores = [e["checkpoint_manager_duration_secs"] for e in entries
                    if e.get("event_type") == "restore"]
        evals = _pairs(entries, "custom_badput_event", custom_badput_event_type="eval_step")
        others = _pairs(entries, "custom_badput_event", custom_badput_event_type="sdc_check")
        blocking = saves + evals + others
        lost["process_group_init"] += sum(b - a for a, b in _pairs(entries, "tpu_init"))
        lost["model_init"] += sum(b - a for a, b in _pairs(entries, "training_prep")) - sum(
            restores)  # Orbax restores inside the training preparation
        lost["checkpoint_load"] += sum(restores)
        lost["data_init"] += sum(b - a for a, b in _pairs(entries, "data_loading")
                                 if b <= starts[0][0])  # only before the first step blocks
        lost["checkpoint_save"] += sum(b - a for a, b in saves)
        lost["eval"] += sum(b - a for a, b in evals)
        lost["unattributed"] += sum(b - a for a, b in others) + (
            _value(entries, "tpu_init_start_time")[0] - job_start)
        if previous_end is not None:
            lost["restart_gap"] += job_start - previous_end
        bounds = [t for t, _ in starts] + ends
        intervals = [(step, a, b, sum(max(0.0, min(d, b) - max(c, a)) for c, d in blocking))
                     for (a, step), b in zip(starts, bounds[1:], strict=False)]
        typical = statistics.median(b - a for _, a, b, _ in intervals[1:])
        first_step, a, b, inside = intervals[0]
        lost["compile"] += (b - a - inside) - typical  # goodput's "program startup"
        intervals[0] = (first_step, a, b, inside + (b - a - inside) - typical)
        for step, a, b, inside in intervals:
            if step < trained_to:
                lost["repeated_training"] += b - a - inside
                repeated_steps += 1
            else:
                productive += b - a - inside
        trained_to = max(trained_to, max(step for step, *_ in intervals) + 1)
        previous_end = starts[-1][0] if not ends else ends[-1]
    return dict(lost), productive, repeated_steps


@pytest.mark.django_db
def test_goodput_golden_file_gives_the_documented_categories() -> None:
    summary = _import("goodput", GOODPUT, "--gpus", "4")
    lost, productive, repeated_steps = _goodput_expected()
    result = _job("maxtext-llama2-7b-0302")
    _assert_numbers(result, lost, productive, gpus=4)
    assert result.headline.repeated_steps == repeated_steps == 14
    assert [(a.attempt, a.status, a.gpus) for a in result.headline.attempts] == [
        (0, "lost", 4), (1, "completed", 4)]
    assert result.headline.failures == 1 and result.headline.anomalies == {}
    lines = GOODPUT.read_text().splitlines()
    assert (summary["lines"], summary["skipped"], summary["unattributed"]) == (
        str(len(lines)), "0", "1")  # the sdc_check badput event: no ETT phase
    again = _import("goodput", GOODPUT, "--gpus", "8")  # another --gpus: the same events
    assert again["stored"] == "0" and again["duplicates"] == summary["stored"]


# --------------------------------------------------------------------------- TorchTitan

TITAN = GOLDEN / "torchtitan_two_attempts.log"
_TITAN = re.compile(r"\[titan\] (\S+ \S+) - root - \w+ - (?:\x1b\[\d+m)?(.*)$")


def _titan_attempts() -> list[list[tuple[float, str]]]:
    attempts: list[list[tuple[float, str]]] = []
    for line in TITAN.read_text().splitlines():
        if found := _TITAN.search(line):
            if found[2].startswith("Starting job"):
                attempts.append([])
            attempts[-1].append((_utc(found[1]), found[2]))
    return attempts


def _first(lines: list[tuple[float, str]], prefix: str) -> float:
    return next(t for t, message in lines if message.startswith(prefix))


def _titan_expected() -> tuple[dict[str, float], float]:
    """Everything but ``unattributed`` (the rest of the wall time), and productive time."""
    lost: dict[str, float] = defaultdict(float)
    productive, trained_to, previous_end = 0.0, 0, None
    for lines in _titan_attempts():
        begin = lines[0][0]
        data, model = _first(lines, "Preparing"), _first(lines, "Building llama3")
        lost["process_group_init"] += data - begin  # from the start line, through the mesh
        lost["data_init"] += model - data
        lost["model_init"] += _first(lines, "Trainer is initialized") - model
        saves = [(t - float(m.split(")in ")[1].split()[0]), t) for t, m in lines
                 if m.startswith("Finished saving")]
        lost["checkpoint_save"] += sum(b - a for a, b in saves)
        lost["checkpoint_load"] += sum(float(m.split(" in ")[1].split()[0]) for _, m in lines
                                       if m.startswith("Finished loading"))
        first_step = next(m for _, m in lines if m.startswith("Training starts"))
        reports = [(_first(lines, "Training starts"), int(first_step.split()[-1].rstrip(".")) - 1)]
        reports += [(t, int(m.split()[1])) for t, m in lines if m.startswith("step:")]
        intervals = [(s0, s1, a, b, sum(max(0.0, min(d, b) - max(c, a)) for c, d in saves))
                     for (a, s0), (b, s1) in pairwise(reports)]
        typical = statistics.median((b - a - inside) / (s1 - s0)
                                    for s0, s1, a, b, inside in intervals[1:])
        s0, s1, a, b, inside = intervals[0]
        compiled = (b - a - inside) - (s1 - s0) * typical  # torch.compile: in the first steps
        lost["compile"] += compiled
        intervals[0] = (s0, s1, a + compiled, b, inside)
        for s0, s1, a, b, inside in intervals:
            share = max(0, min(s1, trained_to) - s0) / (s1 - s0)  # §3: repeated fraction
            lost["repeated_training"] += share * (b - a - inside)
            productive += (1 - share) * (b - a - inside)
        trained_to = max(trained_to, reports[-1][1])
        if previous_end is not None:
            lost["restart_gap"] += begin - previous_end
        previous_end = reports[-1][0]  # attempt 0 dies after its last step line
        if any(m.startswith("Training completed") for _, m in lines):
            lost["shutdown"] += (_first(lines, "Process group destroyed")
                                 - _first(lines, "Training completed"))
    return dict(lost), productive


@pytest.mark.django_db
def test_torchtitan_golden_file_gives_the_documented_categories() -> None:
    summary = _import("torchtitan", TITAN, "--job", "llama3-8b-titan", "--gpus", "8")
    lost, productive = _titan_expected()
    result = _job("llama3-8b-titan")
    # Unattributed: the job's wall time (first start line to the last line) less the rest.
    first = _titan_attempts()[0][0][0]
    last = _titan_attempts()[-1][-1][0]
    lost["unattributed"] = (last - first) - productive - sum(
        v for k, v in lost.items() if k != "unattributed")
    _assert_numbers(result, lost, productive, gpus=8)
    assert result.headline.repeated_steps == 20
    assert [(a.attempt, a.status) for a in result.headline.attempts] == [
        (0, "lost"), (1, "completed")]
    lines = TITAN.read_text().splitlines()
    titan = [line for line in lines if _TITAN.search(line)]
    assert summary["lines"] == str(len(lines)) and summary["unattributed"] == "0"
    assert int(summary["skipped"]) >= len(lines) - len(titan)  # torchrun, traceback lines


@pytest.mark.django_db
def test_nvrx_logs_of_each_node_in_their_own_file_make_the_same_job(tmp_path: Path) -> None:
    lines = NVRX.read_text().splitlines()
    paths = []
    for rank in ("0", "1"):  # srun --output=%t: one launcher log per node
        path = tmp_path / f"launcher-{rank}.log"
        path.write_text("".join(line + "\n" for line in lines if line.startswith(f"{rank}: ")))
        paths.append(str(path))
    out = StringIO()
    call_command("ett_import", *paths, "--format", "nvrx", "--no-progress", "--workers", "1",
                 stdout=out)
    assert out.getvalue().startswith(f"imported 2 files: {len(lines)} nvrx lines made ")
    lost, _, _ = _nvrx_expected()
    result = _job("llama-70b-ft-0302")
    _assert_numbers(result, lost, productive=0.0, gpus=8)
    assert result.headline.anomalies == {}  # one start and one end mark per attempt
