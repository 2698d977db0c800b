"""A backward graph compiled on another thread still stops the train span.

On a GPU, autograd runs the backward pass on its device thread, so a lazily compiled backward
(Dynamo's ``LAZY_BACKWARD`` trigger) starts its compilation there while the training loop
waits in ``backward()``. Seen on an H200 with torch 2.11: left running, the train span
covered that compilation, and the rules (ETT_SPEC §3, training wins) counted it productive.
"""

from __future__ import annotations

import enum
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from collector.integrations.torch_compile import CompileSpans
from collector.reporter import Reporter
from tests.collector.integrations.adapter_runs import spool_events


class Trigger(enum.Enum):
    DYNAMO = 1
    LAZY_BACKWARD = 2


def compile_on_another_thread(spans: CompileSpans, trigger: Trigger) -> None:
    args = SimpleNamespace(callback_trigger=trigger, compile_id="0/0")
    thread = threading.Thread(target=lambda: (spans.on_start(args), spans.on_end(args)))
    thread.start()
    thread.join()


def train_spans_around(tmp_path: Path, trigger: Trigger) -> tuple[list[dict[str, Any]],
                                                                   dict[str, Any]]:
    reporter = Reporter("compile-threads", attempt=0, rank=0, spool_dir=tmp_path,
                        heartbeat_s=0, install_signal_handlers=False)
    spans = CompileSpans(reporter)
    with reporter.train(start_step=0) as train:
        train.advance(1)
        compile_on_another_thread(spans, trigger)
        train.advance(2)
    reporter.shutdown()
    events = spool_events(tmp_path)
    trains = [e for e in events if e.get("phase") == "train"]
    (compiled,) = [e for e in events if e.get("phase") == "compile"]
    return trains, compiled


def test_a_lazy_backward_compiled_elsewhere_pauses_training(tmp_path: Path) -> None:
    trains, compiled = train_spans_around(tmp_path, Trigger.LAZY_BACKWARD)
    assert compiled["attrs"]["trigger"] == "lazy_backward"
    assert len(trains) == 2
    assert not any(t["start"] < compiled["end"] and compiled["start"] < t["end"]
                   for t in trains)


def test_other_work_on_another_thread_leaves_training_alone(tmp_path: Path) -> None:
    """A compile on a thread the loop does not wait for (a background warm-up) is not a
    pause of the loop's training."""
    trains, compiled = train_spans_around(tmp_path, Trigger.DYNAMO)
    assert len(trains) == 1
    assert trains[0]["start"] <= compiled["start"] and compiled["end"] <= trains[0]["end"]
