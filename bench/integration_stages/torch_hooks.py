"""What plain-PyTorch instrumentation costs a training step: ``collector.integrations.torch``
installed and the loop counted by ``reporter.train``, side by side with the bare loop.

Why side by side in one run: on a shared machine step times drift by more than the 1% being
measured, so the two loops run in alternating blocks of the same steps (which goes first
alternates too) and are compared on their median step. Each step is the same fixed work —
a calibrated number of small real torch ops, so contention for the interpreter (the
Reporter's writer and heartbeat threads) slows it as it would slow a real step, where a
busy-wait to a deadline would hide it — plus one batch drawn from a DataLoader, whose
iterator the hooks watch. The loop's own cost per step (drawing the step number and the
batch: what the tracker and the DataLoader hook add) is also timed directly, the tighter
number on a noisy machine. The p99 of one emit is timed on its own, as a hook emits.

``python -m bench.integration_stages.torch_hooks [--steps N] [--step-ms MS]`` prints the
result as one JSON object; ``bench.integrations`` calls :func:`measure_train_loop`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from collector.integrations import torch as torch_hooks
from collector.reporter import Reporter
from collector.schema import parse_event

OVERHEAD_TARGET_FRACTION = 0.01
EMIT_P99_TARGET_US = 50.0
BLOCK_STEPS = 25
EMIT_SAMPLES = 2000


def _work(ops: int, x: torch.Tensor) -> torch.Tensor:
    for _ in range(ops):
        x = x * 0.999 + 0.001
    return x


def calibrate(step_s: float) -> int:
    """How many of :func:`_work`'s ops take ``step_s`` here (the median of a few tries: the
    machine's load at the time is part of a step)."""
    x = torch.ones(1, 16)
    _work(200, x)  # warm up the dispatcher
    per_op = statistics.median(_timed_work(400, x) for _ in range(7)) / 400
    return max(1, round(step_s / per_op))


def _timed_work(ops: int, x: torch.Tensor) -> float:
    t0 = time.perf_counter()
    _work(ops, x)
    return time.perf_counter() - t0


def _block(steps: Iterator[int], loader: DataLoader[Any], ops: int,
           step_times: list[float], loop_times: list[float]) -> None:
    """Run one block: draw the step and the batch (timed as the loop's cost), then work."""
    x = torch.ones(16)
    batches = iter(loader)
    clock = time.perf_counter
    while True:
        t0 = clock()
        try:
            next(steps)
            batch = next(batches)
        except StopIteration:
            return
        t1 = clock()
        _work(ops, x + batch[0])
        t2 = clock()
        loop_times.append(t1 - t0)
        step_times.append(t2 - t0)


def _reported_block(reporter: Reporter, loader: DataLoader[Any], ops: int, first: int,
                    step_times: list[float], loop_times: list[float]) -> None:
    with torch_hooks.install(reporter), \
            reporter.train(start_step=first, steps=first + BLOCK_STEPS) as train:
        _block(iter(train), loader, ops, step_times, loop_times)


def _emit_p99_us(reporter: Reporter) -> float:
    """p99 of one ``span`` emit as the hooks make it (validate + enqueue)."""
    now = time.time()
    samples = []
    clock = time.perf_counter_ns
    for i in range(EMIT_SAMPLES):
        t0 = clock()
        reporter.span("checkpoint_save", now + i, now + i + 0.5, blocking=False,
                      attrs={"api": "dcp.async_save", "mode": "async", "stage": "upload",
                             "checkpoint_id": f"/checkpoints/step-{i:08d}"})
        samples.append(clock() - t0)
    samples.sort()
    return samples[int(0.99 * len(samples))] / 1000.0


def measure_train_loop(steps: int, step_s: float = 0.02) -> dict[str, Any]:
    """``steps`` steps bare and ``steps`` steps reported, alternating blocks of
    :data:`BLOCK_STEPS`; the overhead as a fraction of the step, and emit p99 in µs.

    ``overhead_fraction`` is the median over rounds (one bare and one reported block each)
    of the relative difference of their median steps, which cancels the machine's drift;
    ``direct_overhead_fraction`` is the difference of the loops' own median cost per step
    (drawing the step number and the batch) over the bare median step.
    """
    blocks = max(2, -(-steps // BLOCK_STEPS))
    loader = DataLoader(TensorDataset(torch.randn(BLOCK_STEPS, 16)), batch_size=1)
    ops = calibrate(step_s)
    warm_up: tuple[list[float], list[float]] = ([], [])  # and a check of the calibration
    _block(iter(range(BLOCK_STEPS)), loader, ops, *warm_up)
    ops = max(1, round(ops * step_s / statistics.median(warm_up[0])))
    bare: tuple[list[float], list[float]] = ([], [])
    reported: tuple[list[float], list[float]] = ([], [])
    rounds: list[float] = []
    with tempfile.TemporaryDirectory(prefix="ett-bench-torch-") as spool:
        reporter = Reporter("bench-torch-hooks", attempt=0, rank=0, spool_dir=Path(spool),
                            install_signal_handlers=False)
        torch_hooks.install(reporter)()  # the first install imports Dynamo: not timed
        try:
            for block in range(blocks):
                order = ("bare", "reported") if block % 2 == 0 else ("reported", "bare")
                medians = {}
                for side in order:
                    times: tuple[list[float], list[float]] = ([], [])
                    if side == "bare":
                        _block(iter(range(BLOCK_STEPS)), loader, ops, *times)
                    else:
                        _reported_block(reporter, loader, ops, block * BLOCK_STEPS, *times)
                    medians[side] = statistics.median(times[0])
                    for kept, new in zip(bare if side == "bare" else reported, times,
                                         strict=True):
                        kept += new
                rounds.append((medians["reported"] - medians["bare"]) / medians["bare"])
            emit_p99 = _emit_p99_us(reporter)
        finally:
            drained = reporter.shutdown(timeout=30)
        dropped = reporter.dropped_full + reporter.dropped_invalid
        spooled = _spooled_work(Path(spool))
    bare_step, reported_step = statistics.median(bare[0]), statistics.median(reported[0])
    bare_loop, reported_loop = statistics.median(bare[1]), statistics.median(reported[1])
    overhead = statistics.median(rounds)
    direct = (reported_loop - bare_loop) / bare_step
    return {
        "steps_per_side": len(bare[0]),
        "step_ms": {"target": step_s * 1000, "bare": round(bare_step * 1000, 4),
                    "reported": round(reported_step * 1000, 4)},
        "overhead_fraction": round(overhead, 6),
        "loop_us": {"bare": round(bare_loop * 1e6, 3), "reported": round(reported_loop * 1e6, 3),
                    "p99_reported": round(_p99(reported[1]) * 1e6, 3)},
        "direct_overhead_fraction": round(direct, 6),
        "emit_p99_us": round(emit_p99, 3),
        "targets": {"overhead_fraction": OVERHEAD_TARGET_FRACTION,
                    "emit_p99_us": EMIT_P99_TARGET_US},
        "meets_targets": (max(overhead, direct) <= OVERHEAD_TARGET_FRACTION
                          and emit_p99 <= EMIT_P99_TARGET_US),
        "reporter_drained": drained,
        "dropped_events": dropped,
        "spooled": spooled,
    }


def _spooled_work(spool: Path) -> dict[str, int]:
    """What the reported side left in the spool: its steps in train spans, its DataLoader
    iterators as data_init spans (the proof that the reported loop was reported)."""
    train_steps = data_inits = 0
    for path in spool.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            event = parse_event(line)
            if event.get("phase") == "train":
                train_steps += event["step_end"] - event["step_start"]
            elif event.get("phase") == "data_init":
                data_inits += 1
    return {"train_steps": train_steps, "data_init_spans": data_inits}


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[int(0.99 * (len(ordered) - 1))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=500, help="steps per side (default 500)")
    parser.add_argument("--step-ms", type=float, default=20.0,
                        help="the simulated step, in ms (default 20)")
    args = parser.parse_args(argv)
    result = measure_train_loop(args.steps, args.step_ms / 1000)
    print(json.dumps(result), file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
