"""``python -m bench.reporter``: what the Reporter costs a trainer (issue 4's targets; issue
31's emit p99).

Two measurements, side by side in one run:

1. **emit cost** — the latency of one ``Reporter.span`` / ``mark`` call and of
   ``TrainTracker.advance`` as the caller sees it (validate + enqueue; the spool write happens
   on the background thread), p50 / p99 / max in microseconds.
2. **overhead on a TorchRec training step** — the reference DLRM (DistributedModelParallel,
   gloo, world of one) trains in rounds of two blocks: bare steps, and steps with a Reporter
   alive doing what the trainer does per step (``advance``, slices, its writer and heartbeat
   threads running); which block goes first alternates. The overhead is the median over
   rounds of the relative difference of the two blocks' median step times, with a 95%
   confidence interval. The Reporter's own time per step is also timed directly, which is
   the tighter number on a noisy machine.

The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collector.reporter import Reporter

EMIT_P99_TARGET_US = 15.0
OVERHEAD_TARGET_PCT = 1.0


def _percentiles(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000.0

    return {"p50_us": at(0.50), "p99_us": at(0.99), "max_us": ordered[-1] / 1000.0}


def _time_calls(call: Callable[[int], object], count: int) -> list[int]:
    samples = []
    clock = time.perf_counter_ns
    for i in range(count):
        t0 = clock()
        call(i)
        samples.append(clock() - t0)
    return samples


def measure_emit(spool: Path, count: int) -> dict[str, dict[str, float]]:
    """Caller-side latency of span, mark and advance calls."""
    reporter = Reporter("bench-emit", attempt=0, spool_dir=spool, heartbeat_s=0,
                        queue_size=4 * count + 16)
    now = time.time()
    _time_calls(lambda i: reporter.span("compile", now, now + 1), 1000)  # warm up
    span = _time_calls(lambda i: reporter.span("checkpoint_save", now + i, now + i + 0.5,
                                               blocking=False), count)
    mark = _time_calls(lambda i: reporter.mark("heartbeat", now + i, step=i), count)
    tracker = reporter.train(0)
    advance = _time_calls(lambda i: tracker.advance(i + 1), count)
    tracker.close()
    assert reporter.shutdown(timeout=60), "reporter did not drain"
    assert reporter.dropped_full == reporter.dropped_invalid == 0
    return {"span": _percentiles(span), "mark": _percentiles(mark),
            "advance": _percentiles(advance)}


def _build_trainer(spool: Path, embedding_rows: int, batch_size: int) -> Any:
    """The reference trainer's model, built the way a training process builds it
    (``trainer.startup.build_trainer``)."""
    import torch
    import torch.distributed as dist

    from trainer.config import parse_train_config
    from trainer.startup import build_trainer, default_distributed_env

    torch.set_num_threads(1)
    default_distributed_env()
    dist.init_process_group("gloo", rank=0, world_size=1)
    cfg = parse_train_config(["--job", "bench-reporter", "--no-compile", "--steps", "1000000",
                              "--embedding-rows", str(embedding_rows),
                              "--batch-size", str(batch_size), "--spool-dir", str(spool)])
    setup = Reporter("bench-setup", attempt=0, spool_dir=spool, heartbeat_s=0)
    trainer = build_trainer(cfg, setup, 0, 1, None)  # --no-compile: no compile hook
    setup.shutdown()
    return trainer


def _model_step(trainer: Any, batch: Any) -> float:
    """The trainer's optimizer step without its instrumentation: both sides of the comparison
    run exactly this, and only the reported side adds the Reporter's per-step calls."""
    trainer.optimizer.zero_grad()
    loss, _ = trainer.dmp(batch)
    loss.backward()
    trainer.optimizer.step()
    return float(loss.item())


def _median_ci(values: list[float]) -> tuple[float, float, float]:
    """Median and its ~95% confidence interval from order statistics (no normality assumed:
    step-time noise on a shared machine has long tails)."""
    ordered = sorted(values)
    n = len(ordered)
    k = max(0, int((n - 1.96 * math.sqrt(n)) / 2))
    return statistics.median(ordered), ordered[k], ordered[n - 1 - k]


def _reported_block(trainer: Any, batches: list[Any], spool: Path, first_step: int,
                    reporter_ns: list[int]) -> list[float]:
    """One block of steps with a Reporter alive for it (its writer and heartbeat threads
    included), doing what the trainer does per step; returns the step times in ms."""
    clock = time.perf_counter_ns
    reporter = Reporter("bench-step", attempt=0, spool_dir=spool, heartbeat_s=1.0,
                        train_slice_s=5.0)
    reporter.attempt_start(gpus=1)
    tracker = reporter.train(first_step)
    times = []
    for step, batch in enumerate(batches, start=first_step + 1):
        t0 = clock()
        _model_step(trainer, batch)
        t1 = clock()
        tracker.advance(step)
        t2 = clock()
        times.append((t2 - t0) / 1e6)
        reporter_ns.append(t2 - t1)
    tracker.close()
    reporter.attempt_end("completed")
    reporter.shutdown()
    return times


def _bare_block(trainer: Any, batches: list[Any]) -> list[float]:
    clock = time.perf_counter_ns
    times = []
    for batch in batches:
        t0 = clock()
        _model_step(trainer, batch)
        times.append((clock() - t0) / 1e6)
    return times


def measure_overhead(spool: Path, rounds: int, block: int, embedding_rows: int,
                     batch_size: int, progress: Callable[[str], None]) -> dict[str, Any]:
    """Step time without and with the Reporter, measured side by side.

    Each round runs one bare block and one reported block (which goes first alternates), so
    drift and noise bursts hit both sides alike. The overhead is the median over rounds of
    each round's relative difference of block medians, with its confidence interval; the
    Reporter's own time per step, timed directly, is the tighter figure.
    """
    trainer = _build_trainer(spool, embedding_rows, batch_size)
    batches = [trainer.loader.data.batch(step) for step in range(block)]
    for batch in batches:  # warm up allocator and kernels
        _model_step(trainer, batch)
    bare: list[float] = []
    reported: list[float] = []
    differences: list[float] = []
    reporter_ns: list[int] = []
    for r in range(rounds):
        progress(f"round {r + 1}/{rounds}")
        if r % 2:
            with_reporter = _reported_block(trainer, batches, spool, r * block, reporter_ns)
            without = _bare_block(trainer, batches)
        else:
            without = _bare_block(trainer, batches)
            with_reporter = _reported_block(trainer, batches, spool, r * block, reporter_ns)
        bare += without
        reported += with_reporter
        base = statistics.median(without)
        differences.append(100.0 * (statistics.median(with_reporter) - base) / base)
    bare_ms, reported_ms = statistics.median(bare), statistics.median(reported)
    overhead, low, high = _median_ci(differences)
    cost_us = statistics.mean(reporter_ns) / 1000.0
    return {
        "steps_each": len(bare),
        "step_ms_bare": bare_ms,
        "step_ms_reported": reported_ms,
        "overhead_pct_side_by_side": overhead,
        "overhead_pct_ci95": [low, high],
        "reporter_us_per_step": cost_us,
        "overhead_pct_direct": 100.0 * cost_us / 1000.0 / bare_ms,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reporter", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--emits", type=int, default=50_000, help="calls timed per kind")
    parser.add_argument("--rounds", type=int, default=40, help="rounds of one bare and one "
                        "reported block (the order alternates)")
    parser.add_argument("--block", type=int, default=15, help="steps per block")
    parser.add_argument("--embedding-rows", type=int, default=50_000)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--quick", action="store_true", help="small plan for a smoke test")
    parser.add_argument("--no-torch", action="store_true", help="emit cost only")
    args = parser.parse_args(argv)
    if args.quick:
        args.emits, args.rounds, args.block, args.embedding_rows, args.batch_size = (
            2000, 2, 5, 1000, 64)

    def progress(text: str) -> None:
        print(f"[bench.reporter] {text}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="ett-bench-reporter-") as tmp:
        progress(f"timing {args.emits} calls of each kind…")
        emit = measure_emit(Path(tmp) / "emit", args.emits)
        step: dict[str, Any] = {}
        if not args.no_torch:
            progress("building the TorchRec DLRM (gloo, world of one)…")
            step = measure_overhead(Path(tmp) / "step", args.rounds, args.block,
                                    args.embedding_rows, args.batch_size, progress)

    print(f"{'call':<10}{'p50 µs':>10}{'p99 µs':>10}{'max µs':>10}")
    for kind, p in emit.items():
        print(f"{kind:<10}{p['p50_us']:>10.2f}{p['p99_us']:>10.2f}{p['max_us']:>10.1f}")
    if step:
        low, high = step["overhead_pct_ci95"]
        print(f"TorchRec step: bare {step['step_ms_bare']:.2f} ms, with Reporter "
              f"{step['step_ms_reported']:.2f} ms; side by side "
              f"{step['overhead_pct_side_by_side']:+.2f}% (95% CI {low:+.2f}..{high:+.2f}%); "
              f"Reporter's own time {step['reporter_us_per_step']:.2f} µs/step = "
              f"{step['overhead_pct_direct']:.4f}%")
    emit_p99 = max(p["p99_us"] for kind, p in emit.items() if kind != "advance")
    result: dict[str, Any] = {
        "emit_p50_us": emit["span"]["p50_us"], "emit_p99_us": emit_p99,
        "advance_p99_us": emit["advance"]["p99_us"], **step,
        "targets": {"emit_p99_us": EMIT_P99_TARGET_US, "overhead_pct": OVERHEAD_TARGET_PCT},
        "emit_ok": emit_p99 <= EMIT_P99_TARGET_US,
    }
    if step:
        result["overhead_ok"] = (step["overhead_pct_side_by_side"] <= OVERHEAD_TARGET_PCT
                                 and step["overhead_pct_direct"] <= OVERHEAD_TARGET_PCT)
    print(json.dumps(result))
    os.environ.pop("MASTER_PORT", None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
