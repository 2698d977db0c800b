"""The PyTorch hooks the framework adapters share with plain PyTorch (``_patches.TorchWatch``
over ``_hooks`` and ``torch_compile``), driven through an adapter's lifecycle without a
framework: the process group's start before the attempt begins, compilations that pause
training by reason, and attributes put back as they were found."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from adapter_runs import overlaps, spool_events
from torch._dynamo.callback import callback_handler

from collector.integrations._lifecycle import AttemptLifecycle
from collector.integrations._patches import Patches, TorchWatch


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "SLURM_PROCID", "ETT_SUPERVISED", "ETT_DISABLE", "ETT_ATTEMPT"):
        monkeypatch.delenv(name, raising=False)


def _life(tmp_path: Path) -> AttemptLifecycle:
    return AttemptLifecycle(job="watched", attempt=0, spool_dir=tmp_path)


def test_a_process_group_started_before_the_attempt_begins_is_reported_with_its_attrs(
        tmp_path: Path, no_group: None) -> None:
    """As Hugging Face does it: the group starts while the arguments are built, before the
    Reporter exists; the span waits for the attempt and carries the hook's attrs."""
    originals = (dist.init_process_group, c10d.init_process_group)
    life = _life(tmp_path)
    watch = TorchWatch(life)
    assert watch.watch_process_group()
    assert dist.init_process_group is not originals[0]
    assert dist.init_process_group is c10d.init_process_group  # both names: one wrapper
    before = time.time()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    after = time.time()
    assert dist.get_world_size() == 1
    assert not watch.watch_process_group()  # the group exists: nothing more to see
    assert life.reporter is None
    life.begin(gpus=1, rank_hint=0)
    watch.remove()
    assert (dist.init_process_group, c10d.init_process_group) == originals
    life.end("completed")
    events = spool_events(tmp_path)
    assert [e.get("mark") or e["phase"] for e in events] == [
        "attempt_start", "process_group_init", "attempt_end"]
    span = events[1]
    assert before <= span["start"] <= span["end"] <= after
    assert span["attrs"] == {"backend": "gloo", "world_size": 1, "init_method": "file"}


def test_compilations_pause_training_through_the_lifecycle_and_nest_in_its_pauses(
        tmp_path: Path) -> None:
    """A compile inside a step leaves the train spans; one inside an evaluation (the
    adapter's own pause) does not resume training when it ends, the evaluation's end does."""
    torch._dynamo.reset()
    life = _life(tmp_path)
    watch = TorchWatch(life)
    assert watch.watch_compile() and watch.watch_compile()  # registered once
    registered = [cb for cb in callback_handler.start_callbacks
                  if cb == watch.compile.on_start]
    assert len(registered) == 1
    fn = torch.compile(lambda x: (x * 2).sum(), backend="eager")
    life.begin(gpus=1, rank_hint=0)
    life.step_begin(0)
    time.sleep(0.01)
    life.step_end(1)
    life.step_begin(1)
    compiled_from = time.time()
    fn(torch.ones(3))
    compiled_until = time.time()
    assert life.tracker is not None and life.tracker.running  # resumed after the compile
    time.sleep(0.01)
    life.step_end(2)
    life.open("eval", "eval")
    fn(torch.ones(3, 4))  # another rank: a recompile, inside the evaluation
    assert not life.tracker.running  # still the evaluation's pause
    life.close("eval")
    assert life.tracker.running
    life.training_done()
    watch.remove()
    assert watch.compile.on_start not in callback_handler.start_callbacks
    fn(torch.ones(2, 2, 2))  # removed: compiles again, reported nowhere
    life.end("completed")

    spans = [e for e in spool_events(tmp_path) if e["kind"] == "span"]
    compiles = [s for s in spans if s["phase"] == "compile"]
    assert len(compiles) == watch.compile.compilations == 2
    assert compiled_from <= compiles[0]["start"] <= compiles[0]["end"] <= compiled_until
    assert [c["attrs"]["recompile"] for c in compiles] == [False, True]
    assert all(c["blocking"] and c["attrs"]["trigger"] == "dynamo" for c in compiles)
    assert {"fxgraph_cache_hit", "autograd_cache_miss", "unique_graphs"} <= set(
        compiles[0]["attrs"])
    (evaluation,) = [s for s in spans if s["phase"] == "eval"]
    assert evaluation["start"] <= compiles[1]["start"] <= compiles[1]["end"] <= \
        evaluation["end"]
    train = [s for s in spans if s["phase"] == "train"]
    assert [(t["step_start"], t["step_end"]) for t in train] == [(0, 1), (1, 2)]
    for before, after in itertools.pairwise(train):
        assert before["end"] <= after["start"]
    assert not any(overlaps(t, c) for t in train for c in [*compiles, evaluation])


class Owner:
    def save(self) -> str:
        return "saved"


class Slotted:
    __slots__ = ()

    def save(self) -> str:
        return "saved"


def _loud(original: Any) -> Any:
    return lambda: "wrapped " + original()


def test_patches_put_back_what_they_found_and_leave_a_hook_someone_replaced() -> None:
    owner, patches = Owner(), Patches()
    assert patches.wrap(owner, "save", _loud)
    assert owner.save() == "wrapped saved"
    assert patches.undo() == []
    assert "save" not in vars(owner) and owner.save() == "saved"

    assert patches.wrap(owner, "save", _loud)
    theirs = owner.save = lambda: "theirs"  # type: ignore[method-assign]
    (left,) = patches.undo()
    assert left.name == "save" and owner.save is theirs  # theirs stays

    assert not patches.wrap(Slotted(), "save", _loud)  # refuses a new attribute
    assert not patches.wrap(owner, "load", _loud)  # no such callable
    assert len(patches) == 0
