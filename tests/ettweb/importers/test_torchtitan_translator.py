"""The TorchTitan translator on its own: milestones of both the 0.1/0.2 and the 0.3 log
wording, ranks, errors, validation, bad lines kept with a reason, other lines counted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from ettweb.importers.common import Options
from ettweb.importers.torchtitan import translate

T0 = datetime(2026, 3, 2, 8, tzinfo=UTC)


def titan(seconds: float, message: str, rank: int | None = None, level: str = "INFO") -> str:
    stamp = (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    prefix = "" if rank is None else f"[rank{rank}]:"
    return f"{prefix}[titan] {stamp} - root - {level} - {message}"


def _spans(events: list[dict[str, Any]], rank: int = 0) -> list[tuple[Any, ...]]:
    t0 = T0.timestamp()
    return [(e["attempt"], e["phase"], round(e["start"] - t0, 3), round(e["end"] - t0, 3),
             e.get("step_start"), e.get("step_end"))
            for e in events if e["kind"] == "span" and e["rank"] == rank]


def _ends(events: list[dict[str, Any]]) -> list[tuple[int, float, dict[str, Any]]]:
    return [(e["attempt"], e["ts"] - T0.timestamp(), e["attrs"]) for e in events
            if e.get("mark") == "attempt_end"]


def test_the_0_3_wording_is_read_too() -> None:
    lines = [titan(0, "torchtitan version: 0.3.0 (0.0.0 means __version__ is not defined "
                      "correctly)."),
             titan(1, "Building device mesh with parallelism: pp=1, dp_replicate=1, "
                      "dp_shard=8, cp=1, tp=1, ep=1"),
             titan(3, "Building llama3 8B"), titan(9, "Trainer is initialized with local batch"),
             titan(10, "Loading the checkpoint from ./outputs/checkpoint/step-10."),
             titan(12, "Finished loading the checkpoint in 2.00 seconds."),
             titan(13, "Training starts at step 11"),
             titan(15, "step: 11  loss:  7.1000  grad_norm:  1.0000  memory: 40.00GiB(42.11%)  "
                       "tps: 4,096  tflops: 197.35  mfu: 19.95%"),
             titan(15.1, "Staging the checkpoint."),
             titan(16.3, "Finished staging the checkpoint in 1.20 seconds."),
             titan(19, "step: 12  loss:  7.0000"),
             titan(19.1, "Saving the checkpoint."),
             titan(21.6, "Last step checkpoint completed in 2.50s"),
             titan(22, "Training completed")]
    out = translate(lines, Options(job="j", gpus=8))
    assert _spans(out.events) == [
        (0, "process_group_init", 0.0, 1.0, None, None),
        (0, "process_group_init", 1.0, 3.0, None, None), (0, "model_init", 3.0, 9.0, None, None),
        (0, "checkpoint_load", 10.0, 12.0, None, None),
        (0, "checkpoint_save", 15.1, 16.3, None, None),
        (0, "checkpoint_save", 19.1, 21.6, None, None),
        (0, "train", 13.0, 15.0, 10, 11), (0, "train", 15.0, 15.1, 11, 11),
        (0, "train", 16.3, 19.0, 11, 12)]
    assert _ends(out.events) == [(0, 22.0, {"status": "completed"})]
    assert (out.skipped, out.rejected) == (0, [])


def test_an_error_ends_the_attempt_failed_and_a_restart_begins_the_next() -> None:
    lines = [titan(0, "Starting job: Llama 3 debug training"),
             titan(1, "Training starts at step 1."), titan(3, "step:  1  loss: 10.0"),
             titan(4, "step:  2  loss:  9.0"),
             titan(5, "CUDA out of memory. Tried to allocate 2.00 GiB", level="ERROR"),
             "Traceback (most recent call last):", "torch.OutOfMemoryError: CUDA out of memory.",
             titan(6, "Some later line"),
             titan(20, "Starting job: Llama 3 debug training"),
             titan(21, "Training starts at step 2.")]
    out = translate(lines, Options(job="j"))
    assert _ends(out.events) == [
        (0, 6.0, {"status": "failed", "error": "CUDA out of memory. Tried to allocate 2.00 GiB"})]
    starts = sorted((e["attempt"], e["ts"] - T0.timestamp()) for e in out.events
                    if e.get("mark") == "attempt_start")
    assert starts == [(0, 0.0), (1, 20.0)]
    assert out.skipped == 3  # the traceback's two lines and "Some later line"


def test_ranks_validation_and_bad_lines() -> None:
    lines = [titan(0, "Starting job: x", rank=0), titan(0, "Starting job: x", rank=1),
             titan(1, "Training starts at step 1.", rank=0),
             titan(1, "Training starts at step 1.", rank=1),
             titan(3, "step: 10  loss: 3.0", rank=0), titan(3, "step: 10  loss: 3.0", rank=1),
             titan(7, "validate step: 10  loss: 3.1000  memory: 1.00GiB(1.00%)", rank=0),
             titan(9, "step: 20  loss: 2.0", rank=0),
             titan(9, "step: 20").replace("08:00:09", "08:00:69"),
             "[rank0]:[titan] 2026-13-02 08:00:10,000 - root - INFO - step: 30",
             "W0302 08:00:00.000000 4242 torch/distributed/run.py:792] Setting OMP_NUM_THREADS"]
    out = translate(lines, Options(job="j"))
    assert [(r.line, r.reason) for r in out.rejected] == [
        (9, "torchtitan: bad log time (second must be in 0..59)"),
        (10, "torchtitan: bad log time (month must be in 1..12)")]
    setup = (0, "process_group_init", 0.0, 1.0, None, None)
    assert _spans(out.events, rank=0) == [setup, (0, "eval", 3.0, 7.0, None, None),
                                          (0, "train", 1.0, 3.0, 0, 10),
                                          (0, "train", 7.0, 9.0, 10, 20)]
    assert _spans(out.events, rank=1) == [setup, (0, "train", 1.0, 3.0, 0, 10)]
    assert out.skipped == 1 and out.lines == len(lines)


def test_compile_is_split_from_the_first_interval_only_when_announced() -> None:
    base = [titan(0, "Starting job: x"), titan(10, "Training starts at step 1."),
            titan(40, "step:  1  loss: 1.0"), titan(58, "step: 10  loss: 1.0"),
            titan(78, "step: 20  loss: 1.0")]
    compiled = [*base[:1], titan(5, "Compiling each TransformerBlock with torch.compile"),
                *base[1:]]
    plain = [(phase, a, b) for _, phase, a, b, *_ in _spans(translate(base, Options()).events)]
    assert ("train", 10.0, 40.0) in plain and not any(p == "compile" for p, *_ in plain)
    spans = _spans(translate(compiled, Options()).events)
    assert (0, "compile", 10.0, 38.0, None, None) in spans  # 30 s less one 2 s step
    assert (0, "train", 38.0, 40.0, 0, 1) in spans
