"""What the Lightning and Hugging Face callbacks cost a training step.

Why measured on the hooks themselves: a framework calls a callback's per-step hooks
(Lightning's ``on_train_batch_start``/``end``, Hugging Face's ``on_step_begin``/``end``)
once per step whatever the model, so their cost is what the adapter adds; a real model's
step would only bury it in noise. Each callback is driven through an attempt with stand-ins
for the framework's objects (the same attributes its hooks read), and its per-step hooks run
in blocks side by side with a bare loop of the same length doing the same stand-in work (the
step counter), alternating which goes first, in one run; the per-step cost is the median
over blocks of the difference. The hooks' own latency (p50/p99 of one step's pair, timed per
call) and the p99 of one emit (``Reporter.span``, as a hook emits) are timed too. A
callback's Reporter writes to a temporary spool, its writer thread running meanwhile.

``python -m bench.integration_stages.frameworks [--steps N]`` prints the result as one JSON
object; ``bench.integrations`` calls :func:`measure_callbacks`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from collector.reporter import Reporter

#: The issue's targets: at most 1% of a 20 ms step per step, emit p99 at most 50 µs.
STEP_MS = 20.0
OVERHEAD_TARGET_PCT = 1.0
EMIT_P99_TARGET_US = 50.0
BLOCK_STEPS = 200
EMIT_SAMPLES = 2000

Hooks = tuple[Callable[[], None], Callable[[], None]]


def _percentiles(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000.0

    return {"p50_us": at(0.50), "p99_us": at(0.99)}


class _Lightning:
    """An ETTCallback in a stand-in fit: ``setup`` → ``on_train_start`` → batches."""

    def __init__(self, spool: Path) -> None:
        from collector.integrations.lightning import ETTCallback

        strategy = SimpleNamespace(checkpoint_io=None, load_checkpoint=lambda *a: None)
        self.trainer = SimpleNamespace(world_size=1, global_rank=0, global_step=0,
                                       sanity_checking=False, callbacks=[], strategy=strategy,
                                       save_checkpoint=lambda *a, **k: None)
        self.module, self.batch = SimpleNamespace(), object()
        self.callback = ETTCallback(job="bench-lightning", attempt=0, spool_dir=spool)
        self.callback.setup(self.trainer, self.module, "fit")
        self.callback.on_fit_start(self.trainer, self.module)
        self.callback.on_train_start(self.trainer, self.module)

    def step(self) -> None:
        self.trainer.global_step += 1

    def hooks(self) -> Hooks:
        trainer, module, batch, callback = self.trainer, self.module, self.batch, self.callback

        def begin() -> None:
            callback.on_train_batch_start(trainer, module, batch, trainer.global_step)

        def end() -> None:
            callback.on_train_batch_end(trainer, module, None, batch, trainer.global_step)

        return begin, end

    def close(self) -> Reporter | None:
        self.callback.on_train_end(self.trainer, self.module)
        reporter = self.callback.lifecycle.reporter
        self.callback.teardown(self.trainer, self.module, "fit")
        return reporter


class _Transformers:
    """An ETTCallback in a stand-in ``train``: ``on_init_end`` → ``on_train_begin`` → steps."""

    def __init__(self, spool: Path) -> None:
        from collector.integrations.transformers import ETTCallback

        self.args = SimpleNamespace(world_size=1, n_gpu=0, process_index=0)
        self.state = SimpleNamespace(global_step=0)
        self.control = SimpleNamespace(should_evaluate=False, should_save=False)
        self.callback = ETTCallback(job="bench-transformers", attempt=0, spool_dir=spool)
        self.callback.on_init_end(self.args, self.state, self.control, model=None)
        self.callback.on_train_begin(self.args, self.state, self.control)

    def step(self) -> None:
        self.state.global_step += 1

    def hooks(self) -> Hooks:
        args, state, control, callback = self.args, self.state, self.control, self.callback

        def begin() -> None:
            callback.on_step_begin(args, state, control)

        def end() -> None:
            callback.on_step_end(args, state, control)

        return begin, end

    def close(self) -> Reporter | None:
        reporter = self.callback.lifecycle.reporter
        self.callback.on_train_end(self.args, self.state, self.control)
        return reporter


def _block(run: Any, steps: int, hooked: bool) -> float:
    """Seconds for ``steps`` steps, with the callback's hooks or bare."""
    step = run.step
    begin, end = run.hooks()
    clock = time.perf_counter
    if hooked:
        t0 = clock()
        for _ in range(steps):
            begin()
            step()
            end()
        return clock() - t0
    t0 = clock()
    for _ in range(steps):
        step()
    return clock() - t0


def _measure(run: Any, steps: int) -> dict[str, float]:
    blocks = max(2, steps // BLOCK_STEPS)
    per_step: list[float] = []
    for index in range(blocks):
        order = (False, True) if index % 2 == 0 else (True, False)
        seconds = {hooked: _block(run, BLOCK_STEPS, hooked) for hooked in order}
        per_step.append((seconds[True] - seconds[False]) / BLOCK_STEPS)
    begin, end = run.hooks()
    clock = time.perf_counter_ns
    pairs: list[int] = []
    for _ in range(steps):
        t0 = clock()
        begin()
        run.step()
        end()
        pairs.append(clock() - t0)
    cost_us = max(0.0, statistics.median(per_step) * 1e6)
    timed = _percentiles(pairs)
    return {"per_step_us": cost_us,
            "pct_of_step": 100.0 * cost_us / (STEP_MS * 1000.0),
            "hooks_p50_us": timed["p50_us"], "hooks_p99_us": timed["p99_us"],
            "blocks": float(blocks)}


def _emit_percentiles(spool: Path) -> dict[str, float]:
    reporter = Reporter("bench-emit", attempt=0, spool_dir=spool, heartbeat_s=0,
                        queue_size=4 * EMIT_SAMPLES + 16)
    now = time.time()
    clock = time.perf_counter_ns
    samples: list[int] = []
    for i in range(EMIT_SAMPLES + 200):
        t0 = clock()
        reporter.span("eval", now + i, now + i + 0.5)
        samples.append(clock() - t0)
    reporter.shutdown(timeout=30)
    return _percentiles(samples[200:])  # the first ones warm the interpreter's caches


def measure_callbacks(steps: int) -> dict[str, Any]:
    """Per-step cost of each callback beside a bare loop, its hooks' latency, and the p99 of
    one emit; ``meets_targets`` says whether every figure is within the issue's targets."""
    result: dict[str, Any] = {"steps": steps, "step_ms": STEP_MS,
                              "targets": {"pct_of_step": OVERHEAD_TARGET_PCT,
                                          "emit_p99_us": EMIT_P99_TARGET_US}}
    with tempfile.TemporaryDirectory(prefix="ett-bench-frameworks-") as folder:
        for name, make in (("lightning", _Lightning), ("transformers", _Transformers)):
            run = make(Path(folder) / name)
            try:
                result[name] = _measure(run, steps)
            finally:
                reporter = run.close()
            if reporter is not None:
                result[name]["events_dropped"] = reporter.dropped_full + reporter.dropped_invalid
        emit = _emit_percentiles(Path(folder) / "emit")
    result["emit_p50_us"], result["emit_p99_us"] = emit["p50_us"], emit["p99_us"]
    result["meets_targets"] = (
        all(result[name]["pct_of_step"] <= OVERHEAD_TARGET_PCT
            for name in ("lightning", "transformers"))
        and result["emit_p99_us"] <= EMIT_P99_TARGET_US)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=20000,
                        help="steps per callback (default %(default)s)")
    args = parser.parse_args(argv)
    print(json.dumps(measure_callbacks(args.steps)), file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
