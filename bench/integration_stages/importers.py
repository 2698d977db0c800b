"""Each history importer's speed: events translated per second, without a database.

Why: a team brings months of logs on day one (``ett_import --format``), and translation runs
before the worker's ingest path stores anything; it must not be the slow part. Each
translator gets a synthetic file made here in memory, in its tool's format (NVRx restart
cycles on two nodes, goodput step entries with checkpoints, TorchTitan step lines with
saves), and is timed on it alone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ettweb.importers.common import Options
from ettweb.importers.formats import TRANSLATORS

T0 = 1772438400.0  # 2026-03-02 08:00:00 UTC


def _clock(seconds: float, sep: str) -> str:
    stamp = datetime.fromtimestamp(T0 + seconds, tz=UTC)
    return stamp.strftime("%Y-%m-%d %H:%M:%S") + f"{sep}{stamp.microsecond // 1000:03d}"


def nvrx_lines(n_events: int) -> list[str]:
    """Restart cycles of two nodes, about five events per node and cycle."""
    lines: list[str] = []
    for cycle in range(max(1, n_events // 10)):
        base = cycle * 600.0
        for node, rank in (("node-a_1_0", 0), ("node-b_2_0", 1)):
            for at, event, shown in ((1.0, "rendezvous_started", "None"),
                                     (4.0, "rendezvous_completed", "None"),
                                     (4.5, "worker_start_started", str(rank)),
                                     (7.0, "worker_start_completed", str(rank)),
                                     (590.0, "failure_detected", str(rank)),
                                     (599.0, "worker_terminated", str(rank))):
                # failure_detected raises the cycle before it is logged
                shown_cycle = cycle + 1 if at > 500 else cycle
                lines.append(f"{rank}: {_clock(base + at, ',')} [INFO] [host] profiling.py:93 "
                             f"  - Cycle: {shown_cycle} Event: {event} Node: {node} Rank: "
                             f"{shown} Time: {_clock(base + at, '.')} UTC")
    return lines


def goodput_lines(n_events: int) -> list[str]:
    """One attempt of step entries, an Orbax save every 100 steps."""
    entries: list[dict[str, Any]] = [{"job_name": "bench", "job_start_time": T0}]
    for step in range(n_events):
        at = T0 + 10.0 + 2.0 * step
        entries.append({"job_name": "bench", "step_count": step, "step_start_time": at})
        if step % 100 == 99:
            entries.append({"job_name": "bench", "event_type": "save", "step": step,
                            "checkpoint_manager_blocking_start_time": at + 1.0,
                            "checkpoint_manager_blocking_duration_secs": 0.5})
    return [json.dumps(entry) for entry in entries]


def torchtitan_lines(n_events: int) -> list[str]:
    """One attempt: a step line every 10 steps, a save every 50 lines."""
    def line(seconds: float, message: str) -> str:
        return f"[rank0]:[titan] {_clock(seconds, ',')} - root - INFO - {message}"

    lines = [line(0.0, "Starting job: bench"), line(1.0, "Training starts at step 1.")]
    for n in range(1, n_events + 1):
        at = 1.0 + 20.0 * n
        lines.append(line(at, f"step: {10 * n:2}  loss: 7.1000  memory: 40.00GiB(42.11%)  "
                              "tps: 4,096  tflops: 197.35  mfu: 19.95%"))
        if n % 50 == 0:
            lines.append(line(at + 0.1, "Saving the checkpoint (or staging if async is "
                                        "enabled)."))
            lines.append(line(at + 2.1, "Finished saving the checkpoint (or staging if async "
                                        "is enabled)in 2.00 seconds."))
    return lines


SYNTHETIC: dict[str, Callable[[int], list[str]]] = {
    "nvrx": nvrx_lines, "goodput": goodput_lines, "torchtitan": torchtitan_lines}


def measure_importers(n_events: int) -> dict[str, dict[str, float]]:
    """Per format: ``events``, ``lines``, ``seconds`` and ``events_per_s`` of translating a
    synthetic file of about ``n_events`` events (the file is made before the clock starts)."""
    results: dict[str, dict[str, float]] = {}
    for fmt, translate in TRANSLATORS.items():
        lines = SYNTHETIC[fmt](n_events)
        began = time.perf_counter()
        translation = translate(lines, Options(source=f"bench.{fmt}", gpus=8))
        seconds = max(time.perf_counter() - began, 1e-9)
        results[fmt] = {"events": float(len(translation.events)), "lines": float(len(lines)),
                        "seconds": seconds,
                        "events_per_s": len(translation.events) / seconds}
    return results
