"""The Hugging Face adapter on real ``Trainer.train`` runs (CPU, a 2-layer GPT-2 built from a
config: no downloaded weights, no network).

The main test crashes a run at a known step, resumes a second attempt with
``resume_from_checkpoint``, sends the spooled events through the real ingest path, and checks
the job's ETT%, repeated steps and attempt statuses against what the test measured with its
own clock (``adapter_runs.RunClock``). Another checks what the events alone can tell when
the callback never meets its Trainer (added after the Trainer was built).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch
from adapter_runs import (
    RunClock,
    assert_resumed_run_matches,
    assert_spans_hold,
    ingest_spool,
    overlaps,
    spool_events,
)
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from collector.integrations.transformers import ETTCallback

#: A real run measures its own steps: one intra-op thread, and no partition cache left
#: from a rolled-back test (tests/collector/integrations/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_partition_cache", "one_thread")

JOB = "hf-adapter-run"
STEP_S = 0.02
SAVE_EVERY = 10
CRASH_AT = 25  # global step: the last checkpoint before it is checkpoint-20
MAX_STEPS = 40
EVAL_EVERY = 25  # at the crash step: the resumed run's repeated steps fill whole train spans


class InjectedCrash(RuntimeError):
    """The failure the test injects before a training step."""


class SlowGPT2(GPT2LMHeadModel):
    """A tiny GPT-2 whose forward takes ``STEP_S`` more (a sleep): steps of known length."""

    def forward(self, input_ids: Any = None, labels: Any = None, **kwargs: Any) -> Any:
        time.sleep(STEP_S if self.training else STEP_S / 4)
        return super().forward(input_ids=input_ids, labels=labels, **kwargs)


class StepClock(TrainerCallback):
    """The test's own record of each optimizer step, and the injected crash."""

    def __init__(self, clock: RunClock, attempt: int, crash_at: int | None) -> None:
        self.clock, self.attempt, self.crash_at = clock, attempt, crash_at

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.crash_at:
            self.clock.crashed[self.attempt] = time.time()
            raise InjectedCrash(f"injected at step {state.global_step}")
        self.clock.step_start(self.attempt, state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.clock.step_end(self.attempt)


class TimedTrainer(Trainer):
    """A Trainer whose evaluations and checkpoint saves the test times itself."""

    clock: RunClock

    def evaluate(self, *args: Any, **kwargs: Any) -> Any:
        with self.clock.not_training("eval"):
            return super().evaluate(*args, **kwargs)

    def _save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        with self.clock.not_training("save"):
            super()._save_checkpoint(*args, **kwargs)


def _data(count: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [{"input_ids": ids, "labels": ids} for ids in
            (torch.randint(0, 64, (16,), generator=generator) for _ in range(count))]


def _model() -> SlowGPT2:
    torch.manual_seed(0)
    return SlowGPT2(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
                               bos_token_id=0, eos_token_id=0))


def _arguments(output: Path, **options: Any) -> TrainingArguments:
    settings: dict[str, Any] = dict(
        output_dir=str(output), max_steps=MAX_STEPS, per_device_train_batch_size=4,
        per_device_eval_batch_size=4, save_steps=SAVE_EVERY, eval_strategy="steps",
        eval_steps=EVAL_EVERY, use_cpu=True, report_to=[], disable_tqdm=True,
        logging_steps=1000, dataloader_num_workers=0, seed=0)
    return TrainingArguments(**{**settings, **options})


@pytest.mark.django_db
@pytest.mark.slow
def test_a_crashed_then_resumed_run_reports_the_ett_the_test_measured(tmp_path: Path) -> None:
    clock, spool, output = RunClock(), tmp_path / "spool", tmp_path / "output"
    data = _data(400)
    for attempt in (0, 1):
        clock.started[attempt] = time.time()
        callback = ETTCallback(job=JOB, attempt=attempt, spool_dir=spool, team="nlp")
        trainer = TimedTrainer(model=_model(), args=_arguments(output), train_dataset=data,
                               eval_dataset=data[:8],
                               callbacks=[callback, StepClock(clock, attempt,
                                                              CRASH_AT if attempt == 0 else None)])
        trainer.clock = clock
        resume = None if attempt == 0 else str(output / "checkpoint-20")
        try:
            trainer.train(resume_from_checkpoint=resume)
        except InjectedCrash:
            assert attempt == 0
        clock.ended[attempt] = time.time()
    assert trainer.state.global_step == MAX_STEPS
    assert clock.steps[1][0][0] == 20  # resumed from checkpoint-20

    expected = clock.expected()
    assert expected.repeated_steps == CRASH_AT - 20
    assert_resumed_run_matches(ingest_spool(spool, JOB), expected, model="SlowGPT2", team="nlp")

    spans = [e for e in spool_events(spool) if e["kind"] == "span"]
    train = [s for s in spans if s["phase"] == "train"]
    saves = [s for s in spans if s["phase"] == "checkpoint_save"]
    evals = [s for s in spans if s["phase"] == "eval"]
    assert_spans_hold(saves, clock.intervals("save"))
    assert_spans_hold(evals, clock.intervals("eval"))
    for other in saves + evals:  # paused around saves and evaluations
        assert not any(overlaps(t, other) for t in train), other
    first = {a: min(t["step_start"] for t in train if t["attempt"] == a) for a in (0, 1)}
    last = {a: max(t["step_end"] for t in train if t["attempt"] == a) for a in (0, 1)}
    assert (first, last) == ({0: 0, 1: 20}, {0: CRASH_AT, 1: MAX_STEPS})
    assert {s["attempt"] for s in spans if s["phase"] == "checkpoint_load"} == {1}


@pytest.mark.slow
def test_without_its_trainer_the_callback_times_saves_from_the_events(tmp_path: Path) -> None:
    """Added after the Trainer was built, the callback wraps nothing: a save is timed from
    the step's end to ``on_save`` (it includes that step's evaluation-free logging), an
    evaluation from the step's end to ``on_evaluate``, and the attempt ends at
    ``on_train_end``."""
    clock, spool = RunClock(), tmp_path / "spool"
    clock.started[0] = time.time()
    data = _data(200)
    trainer = TimedTrainer(model=_model(), args=_arguments(tmp_path / "output", max_steps=20),
                           train_dataset=data, eval_dataset=data[:8],
                           callbacks=[StepClock(clock, 0, None)])
    trainer.clock = clock
    trainer.add_callback(ETTCallback(job="hf-events-only", attempt=0, spool_dir=spool))
    trainer.train()
    events = spool_events(spool)
    spans = [e for e in events if e["kind"] == "span"]
    saves = [s for s in spans if s["phase"] == "checkpoint_save"]
    assert all(s["attrs"] == {"timed_by": "events"} for s in saves)
    assert_spans_hold(saves, clock.intervals("save"), slack_s=0.02)
    assert_spans_hold([s for s in spans if s["phase"] == "eval"], clock.intervals("eval"),
                      around=False, slack_s=0.02)
    end = [e for e in events if e.get("mark") == "attempt_end"]
    assert [e["attrs"]["status"] for e in end] == ["completed"]
    assert next(e for e in events if e.get("mark") == "attempt_start")["attrs"]["gpus"] == 1


@pytest.mark.slow
def test_compilation_is_a_compile_span_outside_training(tmp_path: Path) -> None:
    """``torch_compile=True``: accelerate compiles the model, Dynamo compiles at the first
    step, and that is a ``compile`` span no train span overlaps."""
    clock, spool = RunClock(), tmp_path / "spool"
    clock.started[0] = time.time()
    args = _arguments(tmp_path / "output", max_steps=3, eval_strategy="no", save_strategy="no",
                      torch_compile=True, torch_compile_backend="eager")
    trainer = Trainer(model=_model(), args=args, train_dataset=_data(16),
                      callbacks=[ETTCallback(job="hf-compiled", attempt=0, spool_dir=spool),
                                 StepClock(clock, 0, None)])
    trainer.train()
    spans = [e for e in spool_events(spool) if e["kind"] == "span"]
    compiles = [s for s in spans if s["phase"] == "compile"]
    first_step = clock.steps[0][0]
    assert any(first_step[1] <= c["start"] and c["end"] <= first_step[2] for c in compiles)
    train = [s for s in spans if s["phase"] == "train"]
    assert train and not any(overlaps(t, c) for t in train for c in compiles)
