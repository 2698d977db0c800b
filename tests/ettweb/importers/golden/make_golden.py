"""Writes ``nvrx_two_cycles.log`` and ``goodput_two_attempts.jsonl`` with the real packages.

Why: a golden file is only worth something if it is what the tool writes. The lines here are
formatted by the packages' own code: NVRx 0.7.0's ``LogManager`` formatter and profiler
(``record_profiling_event``), and ml-goodput-measurement 0.2.3's ``GoodputRecorder``. The
clock is ours, so the timeline is the scenario in README.md. Run once, outside the test
suite (the packages are not installed in .venv; nothing here runs at test time)::

    pip download --no-deps nvidia-resiliency-ext==0.7.0 --python-version 3.12 \\
        --only-binary=:all: --platform manylinux_2_39_x86_64 -d /tmp/w
    pip download --no-deps ml-goodput-measurement==0.2.3 -d /tmp/w
    (unzip each wheel into /tmp/w/nvrx and /tmp/w/goodput)
    TZ=UTC .venv/bin/python tests/ettweb/importers/golden/make_golden.py /tmp/w/nvrx \\
        /tmp/w/goodput

NVRx messages logged by code that needs a cluster (the launcher, the rendezvous) are the
f-strings of that code, logged through the same logger with the file and line it uses.
Orbax's checkpoint entries are ``dataclasses.asdict`` of its ``SaveStepStatistics`` /
``RestoreStepStatistics`` plus ``job_name`` (what its ``CloudLogger`` writes): Orbax needs
JAX, so they are built here from those dataclasses' fields.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

HERE = Path(__file__).resolve().parent
T0 = 1772438400.0  # 2026-03-02 08:00:00 UTC
RUN_ID = "llama-70b-ft-0302"
GOODPUT_JOB = "maxtext-llama2-7b-0302"
Timeline = list[tuple[float, Callable[[], None]]]


def _nvrx_node(nvrx: Path, host: str, infra_rank: int, desc: str,
               events: list[tuple[float, str, Any]], out: Path) -> None:
    """One node's launcher log: ``events`` are (seconds after T0, kind, detail)."""
    sys.path.insert(0, str(nvrx))
    from nvidia_resiliency_ext.shared_utils import log_manager, profiling

    os.environ["SLURM_PROCID"], os.environ["WORLD_SIZE"] = str(infra_rank), "2"
    now = [T0]
    with mock.patch("time.time", lambda: now[0]), \
            mock.patch.object(log_manager.LogConfig, "get_node_id", lambda: host):
        profiling._global_profiler = None  # a fresh cycle counter per node
        logger = log_manager.LogManager(log_file=str(out)).logger
        for at, kind, detail in events:
            now[0] = T0 + at
            if kind == "profile":
                event, rank = detail
                profiling.record_profiling_event(profiling.ProfilingEvent(event), desc, rank)
            else:
                filename, lineno, message = detail
                record = logger.makeRecord(logger.name, logging.INFO, filename, lineno,
                                           message, None, None)
                logger.handle(record)
        for handler in logger.handlers:
            handler.close()


def _node_events(desc: str, rank: int, shift: float, detects: float,
                 joined: tuple[float, float]) -> list[tuple[float, str, Any]]:
    """The scenario of README.md for one node (``shift``: its small lag behind node-a)."""
    launcher = "/usr/lib/python3/site-packages/nvidia_resiliency_ext/fault_tolerance/launcher.py"
    rdzv = launcher.replace("launcher.py", "ft_rendezvous_barrier.py")
    progress = launcher.replace("launcher.py", "progress_tracker.py")

    def joined_line(at: float) -> tuple[float, str, Any]:
        return (at, "log", (rdzv, 2804, f"The node '{desc}' has joined the rendezvous "
                                        f"'{RUN_ID}' as rank {rank} in a world of size 2."))

    restart = ("[default] Worker group FAILED. 3/3 attempts left; will restart worker group"
               if rank else "[default] Joining cluster restart (group_rank=0)")
    return [
        (0.0 + shift, "log", (launcher, 2754, "Using nproc_per_node=4.")),
        (0.2 + shift, "log", (launcher, 655, "[default] starting workers for entrypoint: python")),
        (2.0 + shift, "profile", ("rendezvous_started", None)),
        (8.0 + shift, "profile", ("health_check_completed", None)),
        joined_line(joined[0]),
        (joined[0], "profile", ("rendezvous_completed", None)),
        (9.5 + shift * 0.2, "profile", ("worker_start_started", rank)),
        (12.0 + shift * 0.8, "profile", ("worker_start_completed", rank)),
        (detects, "profile", ("failure_detected", rank)),
        (detects + 0.001, "log", (progress, 215, "Training cycle #0 made progress: 0 → 1500 "
                                                 "(1500 iterations)")),
        (detects + 0.002, "log", (launcher, 636, restart)),
        (detects + 0.003, "log", (launcher, 1002, "Stopping workers... Timeout = 30 sec.")),
        (detects + 30.0, "profile", ("worker_terminated", rank)),
        (1832.0 - shift, "profile", ("rendezvous_started", None)),
        (1838.0 - shift * 2, "profile", ("health_check_completed", None)),
        joined_line(joined[1]),
        (joined[1], "profile", ("rendezvous_completed", None)),
        (1840.5 + shift * 0.2, "profile", ("worker_start_started", rank)),
        (1843.0 + shift, "profile", ("worker_start_completed", rank)),
        (3600.0 + shift, "log", (launcher, 672, "[default] worker group successfully finished. "
                                                "Waiting 300 seconds for other agents to finish.")),
        (3600.1 + shift, "log", (launcher, 3753, "Agent exits with exit code = 0.")),
    ]


def make_nvrx(nvrx: Path, scratch: Path) -> None:
    nodes = [("node-a", 0, "node-a_31337_0", 0.0, 1801.0, (9.0, 1840.0)),
             ("node-b", 1, "node-b_31338_0", 0.5, 1800.0, (9.2, 1840.2))]
    lines: list[tuple[str, str]] = []
    for host, rank, desc, shift, detects, joined in nodes:
        path = scratch / f"{host}.log"
        _nvrx_node(nvrx, host, rank, desc, _node_events(desc, rank, shift, detects, joined),
                   path)
        for line in path.read_text().splitlines():
            lines.append((line.split(" [", 1)[0].split(": ", 1)[1], line))
    merged = [line for _, line in sorted(lines, key=lambda item: item[0])]  # as srun -l does
    (HERE / "nvrx_two_cycles.log").write_text("\n".join(merged) + "\n")


def _stub_goodput_imports(goodput: Path) -> None:
    """Import GoodputRecorder without Google Cloud: its module-level imports of
    google.cloud.logging/storage and scipy are stubbed (the recorder never calls them)."""
    package = types.ModuleType("ml_goodput_measurement")
    package.__path__ = [str(goodput / "ml_goodput_measurement")]
    sys.modules["ml_goodput_measurement"] = package
    for name in ("google", "google.cloud", "google.cloud.logging", "google.cloud.storage",
                 "scipy", "scipy.stats"):
        module = sys.modules.setdefault(name, types.ModuleType(name))
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)
    for name in ("google.cloud.logging", "google.cloud.storage"):
        sys.modules[name].Client = object  # type: ignore[attr-defined]


def _orbax_save(step: int, start: float, blocking_s: float) -> dict[str, Any]:
    return {"step": step, "event_type": "save", "directory": "gs://ckpt/maxtext-llama2-7b",
            "reached_preemption": False, "preemption_received_at": None, "synchronous": False,
            "wait_for_prev_start_time": T0 + start, "wait_for_prev_duration_secs": 0.05,
            "checkpointer_blocking_start_time": T0 + start + 0.1,
            "checkpointer_blocking_duration_secs": blocking_s - 0.2,
            "get_old_steps_start_time": T0 + start + blocking_s - 0.1,
            "get_old_steps_duration_secs": 0.05,
            "checkpoint_manager_blocking_start_time": T0 + start,
            "checkpoint_manager_blocking_duration_secs": blocking_s, "job_name": GOODPUT_JOB}


def _orbax_restore(step: int, start: float, seconds: float) -> dict[str, Any]:
    return {"step": step, "event_type": "restore", "directory": "gs://ckpt/maxtext-llama2-7b",
            "checkpointer_start_time": T0 + start + 0.5,
            "checkpointer_duration_secs": seconds - 1.0,
            "checkpoint_manager_start_time": T0 + start,
            "checkpoint_manager_duration_secs": seconds, "job_name": GOODPUT_JOB}


def make_goodput(goodput: Path) -> None:
    _stub_goodput_imports(goodput)
    from ml_goodput_measurement.src import goodput as library

    entries: list[dict[str, Any]] = []

    class Capture:
        def write_cloud_logging_entry(self, entry: dict[str, Any]) -> None:
            entries.append(entry)

    recorder = library.GoodputRecorder(GOODPUT_JOB, "goodput_" + GOODPUT_JOB,
                                       logging_enabled=True, cloud_logger=Capture())

    def at(seconds: float) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(T0 + seconds, tz=datetime.UTC)

    def step(number: int, seconds: float) -> tuple[float, Callable[[], None]]:
        return seconds, lambda: recorder.record_step_start_time(number, at(seconds))

    def custom(kind: str, start: float, end: float) -> Timeline:
        return [(start, lambda: recorder.record_custom_badput_event_start_time(at(start), kind)),
                (end, lambda: recorder.record_custom_badput_event_end_time(at(end), kind))]

    def orbax(written: float, entry: dict[str, Any]) -> tuple[float, Callable[[], None]]:
        return written, lambda: entries.append(entry)

    def setup(start: float, tpu: tuple[float, float], prep: tuple[float, float],
              data: tuple[float, float]) -> Timeline:
        return [(start, lambda: recorder.record_job_start_time(at(start))),
                (tpu[0], lambda: recorder.record_tpu_init_start_time(at(tpu[0]))),
                (tpu[1], lambda: recorder.record_tpu_init_end_time(at(tpu[1]))),
                (prep[0], lambda: recorder.record_training_preparation_start_time(at(prep[0]))),
                (prep[1], lambda: recorder.record_training_preparation_end_time(at(prep[1]))),
                (data[0], lambda: recorder.record_data_loading_start_time(at(data[0]))),
                (data[1], lambda: recorder.record_data_loading_end_time(at(data[1])))]

    timeline: Timeline = [
        *setup(0.0, (1.0, 11.0), (11.0, 31.0), (31.0, 36.0)), step(0, 36.0),
        (49.8, lambda: recorder.record_data_loading_start_time(at(49.8))),
        (50.0, lambda: recorder.record_data_loading_end_time(at(50.0))),
        *(step(n, 50.0 + 2 * (n - 1)) for n in range(1, 10)),
        orbax(72.0, _orbax_save(9, 68.0, 4.0)),
        *(step(n, 73.0 + 2 * (n - 10)) for n in range(10, 20)),
        *custom("eval_step", 92.0, 96.0), step(20, 97.0), step(21, 99.0),
        *custom("sdc_check", 99.5, 100.5),
        *(step(n, 101.0 + 2 * (n - 22)) for n in range(22, 25)),
        # attempt 0 dies inside step 24; attempt 1 restores step 9's checkpoint
        *setup(140.0, (141.0, 149.0), (149.0, 170.0), (170.0, 173.0)),
        orbax(164.0, _orbax_restore(9, 152.0, 12.0)), step(10, 173.0),
        *(step(n, 183.0 + 2 * (n - 11)) for n in range(11, 30)),
        orbax(221.5, _orbax_save(29, 220.0, 1.5)),
        (222.0, lambda: recorder.record_job_end_time(at(222.0))),
    ]
    for _, write in sorted(timeline, key=lambda item: item[0]):
        write()
    text = "".join(json.dumps(entry, sort_keys=True) + "\n" for entry in entries)
    (HERE / "goodput_two_attempts.jsonl").write_text(text)


def main() -> None:
    nvrx, goodput = Path(sys.argv[1]), Path(sys.argv[2])
    scratch = HERE / ".scratch"
    scratch.mkdir(exist_ok=True)
    try:
        make_nvrx(nvrx, scratch)
    finally:
        for path in scratch.iterdir():
            path.unlink()
        scratch.rmdir()
    make_goodput(goodput)


if __name__ == "__main__":
    main()
