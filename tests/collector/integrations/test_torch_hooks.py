"""``collector.integrations.torch`` on real PyTorch: a gloo process group, DCP saves and loads,
``torch.compile`` and DataLoaders, each read back from the spool as the spans it must give.

Every bound is one the test measured itself with its own clock around the call; nothing is a
hard-coded duration. The hooks must pause the train tracker around blocking work on its
thread (or those seconds would count as productive), put back exactly what they replaced,
and never raise into the caller, even with a Reporter that fails at every call.
"""

from __future__ import annotations

import itertools
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.distributed.distributed_c10d as c10d
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.dataloader import _BaseDataLoaderIter

from collector.integrations import torch as torch_hooks
from collector.integrations.torch_compile import is_recompile
from collector.reporter import Reporter
from collector.schema import parse_event

EPS = 1e-3  # slack for float timestamps taken by two clocks reads apart


@pytest.fixture
def reporter(tmp_path: Path) -> Iterator[Reporter]:
    made = Reporter("torch-hooks", attempt=0, rank=0, spool_dir=tmp_path / "spool",
                    heartbeat_s=0, install_signal_handlers=False)
    yield made
    made.shutdown()


@pytest.fixture(autouse=True)
def nothing_left_installed() -> Iterator[None]:
    yield
    assert torch_hooks._active is None, "a test left the hooks installed"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spooled(reporter: Reporter) -> list[dict[str, Any]]:
    assert reporter.flush()
    events = []
    for path in sorted(reporter.spool_dir.glob("*.jsonl")):
        events += [parse_event(line) for line in path.read_text().splitlines()]
    return events


def spans(events: list[dict[str, Any]], phase: str | None = None) -> list[dict[str, Any]]:
    return sorted((e for e in events if e["kind"] == "span"
                   and (phase is None or e["phase"] == phase)), key=lambda e: e["start"])


def within(span: dict[str, Any], start: float, end: float) -> bool:
    return start - EPS <= span["start"] <= span["end"] <= end + EPS


def apart(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a["end"] <= b["start"] + EPS or b["end"] <= a["start"] + EPS


@pytest.mark.slow
def test_a_plain_torch_loop_reports_every_phase_and_trains_only_between_them(
        reporter: Reporter, tmp_path: Path, no_group: None) -> None:
    """Process group, DataLoader, a loop whose first step compiles, a save and an async save
    inside the loop, a load after it: each is its span, in order, inside what the test timed,
    and the train spans hold the steps with none of that time."""
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(model)
    loader = DataLoader(TensorDataset(torch.randn(24, 8), torch.randn(24, 1)), batch_size=4)
    timed: dict[str, tuple[float, float]] = {}
    steps: dict[int, tuple[float, float]] = {}
    uploaded: list[float] = []

    with torch_hooks.install(reporter) as hooks:
        assert hooks.hooked == ["process_group", "checkpoint.save", "checkpoint.async_save",
                                "checkpoint.load", "compile", "data_loader"]
        assert hooks.not_hooked == {}
        t0 = time.time()
        dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0,
                                world_size=1)
        timed["process_group_init"] = (t0, time.time())
        with reporter.train(start_step=0, steps=6) as train:
            timed["data_init"] = (time.time(), 0.0)
            for step, (x, y) in zip(train, loader, strict=False):
                began = time.time()
                if step == 0:
                    timed["data_init"] = (timed["data_init"][0], began)
                loss = nn.functional.mse_loss(compiled(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                if step == 2:
                    t0 = time.time()
                    dcp.save({"model": model.state_dict()}, checkpoint_id=str(tmp_path / "c2"))
                    timed["save"] = (t0, time.time())
                if step == 4:
                    expected = {k: v.clone() for k, v in model.state_dict().items()}
                    t0 = time.time()
                    pending = dcp.async_save({"model": model.state_dict()},
                                             checkpoint_id=str(tmp_path / "c4"))
                    timed["staging"] = (t0, time.time())
                    pending.add_done_callback(lambda _: uploaded.append(time.time()))
                steps[step] = (began, time.time())
        pending.result()
        state = {"model": {k: torch.zeros_like(v) for k, v in expected.items()}}
        t0 = time.time()
        dcp.load(state, checkpoint_id=str(tmp_path / "c4"))
        timed["load"] = (t0, time.time())
        assert all(torch.equal(state["model"][k], expected[k]) for k in expected)
        assert hooks.compile is not None and hooks.compile.compilations >= 1

    events = spooled(reporter)
    blocking = [e for e in spans(events) if e["phase"] != "train" and e["blocking"]]
    phases = [phase for phase, _ in itertools.groupby(e["phase"] for e in blocking)]
    assert phases == ["process_group_init", "data_init", "compile", "checkpoint_save",
                      "checkpoint_load"]
    (group,) = spans(events, "process_group_init")
    assert within(group, *timed["process_group_init"])
    assert group["attrs"] == {"backend": "gloo", "world_size": 1, "init_method": "file"}
    (data,) = spans(events, "data_init")
    assert within(data, *timed["data_init"]) and data["attrs"] == {"num_workers": 0}

    compiles = spans(events, "compile")
    assert compiles and all(within(c, *steps[0]) for c in compiles)  # steps 1-5 hit the cache
    assert len(compiles) == hooks.compile.compilations
    first = compiles[0]["attrs"]
    assert (first["trigger"], first["recompile"]) == ("dynamo", False)
    assert first["fxgraph_cache_hit"] + first["fxgraph_cache_miss"] >= 1  # inductor's cache
    assert sum(c["attrs"]["unique_graphs"] for c in compiles) == 1

    save, staging, upload = spans(events, "checkpoint_save")
    assert within(save, *timed["save"]) and save["blocking"]
    assert save["attrs"] == {"api": "dcp.save", "mode": "sync",
                             "checkpoint_id": str(tmp_path / "c2")}
    assert within(staging, *timed["staging"]) and staging["blocking"]
    assert (staging["attrs"]["stage"], upload["attrs"]["stage"]) == ("staging", "upload")
    assert upload["blocking"] is False and "error" not in upload["attrs"]
    assert abs(upload["start"] - staging["end"]) <= EPS and upload["end"] <= uploaded[0] + EPS
    (load,) = spans(events, "checkpoint_load")
    assert within(load, *timed["load"]) and load["attrs"]["api"] == "dcp.load"

    trains = spans(events, "train")
    assert [(t["step_start"], t["step_end"]) for t in trains] == [(0, 2), (2, 4), (4, 6)]
    assert trains[0]["start"] >= max(c["end"] for c in compiles) - EPS  # no training before
    for train_span, other in itertools.product(trains, blocking):
        assert apart(train_span, other), (train_span, other)


def test_async_staging_and_a_failing_load_are_reported_as_they_happened(
        reporter: Reporter, tmp_path: Path, no_group: None) -> None:
    """With an async stager ``async_save`` returns staging and upload futures: the upload span
    says how long staging took. A load that fails raises the caller's own exception, and its
    span says so."""
    from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

    stager = DefaultStager(StagingOptions(False, False, True, False))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    state = {"w": torch.arange(1000.0)}
    with torch_hooks.install(reporter, skip=("compile", "data_loader")) as hooks:
        assert hooks.not_hooked == {"compile": "skipped", "data_loader": "skipped"}
        t0 = time.time()
        response = dcp.async_save(state, checkpoint_id=str(tmp_path / "a"), async_stager=stager)
        returned = time.time()
        uploaded: list[float] = []
        response.upload_completion.add_done_callback(lambda _: uploaded.append(time.time()))
        response.upload_completion.result()
        with pytest.raises(BaseException) as raised:  # CheckpointException is one
            dcp.load(state, checkpoint_id=str(tmp_path / "missing"))
    stager.close()
    with pytest.raises(type(raised.value)):  # the very exception the unhooked call raises
        dcp.load(state, checkpoint_id=str(tmp_path / "missing"))

    events = spooled(reporter)
    staging, upload = spans(events, "checkpoint_save")
    assert within(staging, t0, returned) and staging["blocking"]
    assert upload["blocking"] is False and upload["end"] <= uploaded[0] + EPS
    assert 0 <= upload["attrs"]["staging_s"] <= upload["end"] - staging["start"] + EPS
    (load,) = spans(events, "checkpoint_load")
    assert load["attrs"]["error"] == type(raised.value).__name__
    assert not spans(events, "process_group_init")  # created before install: not seen


def test_each_data_loader_iterator_reports_the_wait_for_its_first_batch(
        reporter: Reporter) -> None:
    """Worker processes start with the iterator; the span runs to the first batch, once per
    epoch, and an empty loader says it was empty."""
    loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2, num_workers=2)
    windows = []
    with torch_hooks.install(reporter, skip=("compile",)):
        for _ in range(2):
            t0 = time.time()
            batches = iter(loader)
            first = next(batches)
            windows.append((t0, time.time()))
            assert torch.equal(first[0], torch.tensor([0.0, 1.0]))
            assert len(list(batches)) == 3
        with pytest.raises(StopIteration):
            next(iter(DataLoader(TensorDataset(torch.zeros(0)), batch_size=2)))
    events = spans(spooled(reporter), "data_init")
    assert len(events) == 3
    for span, window in zip(events, windows, strict=False):
        assert within(span, *window) and span["attrs"] == {"num_workers": 2}
    assert events[2]["attrs"] == {"num_workers": 0, "empty": True}


def test_compiles_on_another_thread_leave_the_loop_alone_and_cached_calls_report_nothing(
        reporter: Reporter) -> None:
    import threading

    fn = torch.compile(lambda x: (x * 3).cos().sum(), backend="eager")
    with torch_hooks.install(reporter, skip=("data_loader",)) as hooks:
        with reporter.train(start_step=0) as train:
            train.advance()
            worker = threading.Thread(target=fn, args=(torch.randn(5),))
            t0 = time.time()
            worker.start()
            worker.join()
            t1 = time.time()
            train.advance()
            fn(torch.randn(5))  # cached: no compilation, no span
        assert hooks.compile is not None and hooks.compile.compilations == 1
    events = spooled(reporter)
    (compiled,) = spans(events, "compile")
    assert within(compiled, t0, t1) and compiled["blocking"]
    (trained,) = spans(events, "train")  # never paused: the compile was not on its thread
    assert (trained["step_start"], trained["step_end"]) == (0, 2)
    assert trained["start"] < compiled["start"] and trained["end"] > compiled["end"]


def test_installing_twice_does_nothing_and_uninstall_puts_back_what_it_found(
        reporter: Reporter, tmp_path: Path) -> None:
    from torch._dynamo.callback import callback_handler

    originals = (dist.init_process_group, c10d.init_process_group, dcp.save, dcp.async_save,
                 dcp.load, vars(DataLoader)["__iter__"], vars(_BaseDataLoaderIter)["__next__"])
    callbacks = (list(callback_handler.start_callbacks), list(callback_handler.end_callbacks))
    first = torch_hooks.install(reporter)
    assert dcp.save is not originals[2] and dist.init_process_group is c10d.init_process_group
    second = torch_hooks.install(reporter)
    assert (second.hooked, second.not_hooked, second.active) == ([], {"all": "already installed"},
                                                                 False)
    second()  # the no-op handle leaves the first installation in place
    assert dcp.save is not originals[2]
    dcp.save({"w": torch.ones(3)}, checkpoint_id=str(tmp_path / "once"), no_dist=True)
    first()
    first()  # twice: nothing more
    assert all(a is b for a, b in zip(originals, (
        dist.init_process_group, c10d.init_process_group, dcp.save, dcp.async_save, dcp.load,
        vars(DataLoader)["__iter__"], vars(_BaseDataLoaderIter)["__next__"]), strict=True))
    assert (callback_handler.start_callbacks, callback_handler.end_callbacks) == callbacks
    dcp.save({"w": torch.ones(3)}, checkpoint_id=str(tmp_path / "after"), no_dist=True)
    assert len(spans(spooled(reporter), "checkpoint_save")) == 1  # one span, none after


def test_what_this_torch_lacks_is_named_and_the_rest_is_hooked(
        reporter: Reporter, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    import torch._dynamo.callback

    monkeypatch.delattr(dcp, "async_save")
    monkeypatch.setattr(torch._dynamo.callback, "callback_handler", object())
    with caplog.at_level(logging.WARNING, "ett.integrations.torch"), \
            torch_hooks.install(reporter) as hooks:
        assert "checkpoint.async_save" in hooks.not_hooked and "compile" in hooks.not_hooked
        assert {"process_group", "checkpoint.save", "checkpoint.load",
                "data_loader"} <= set(hooks.hooked)
        assert hooks.compile is None
    (line,) = [r.getMessage() for r in caplog.records if "not hooked" in r.getMessage()]
    assert "checkpoint.async_save" in line and "compile" in line


class BrokenReporter:
    """A Reporter whose every attribute fails: the hooks must carry on regardless."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"reporter broken ({name})")


def test_a_broken_reporter_never_breaks_the_hooked_calls(
        tmp_path: Path, no_group: None, caplog: pytest.LogCaptureFixture) -> None:
    state = {"w": torch.arange(6.0)}
    fn = torch.compile(lambda x: x.exp().sum(), backend="eager")
    with caplog.at_level(logging.WARNING, "ett.integrations.torch"), \
            torch_hooks.install(BrokenReporter()) as hooks:  # type: ignore[arg-type]
        assert len(hooks.hooked) == 6
        dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0,
                                world_size=1)
        assert dist.get_world_size() == 1
        dcp.save(state, checkpoint_id=str(tmp_path / "b"))
        dcp.async_save(state, checkpoint_id=str(tmp_path / "c")).result()
        loaded = {"w": torch.zeros(6)}
        dcp.load(loaded, checkpoint_id=str(tmp_path / "c"))
        assert torch.equal(loaded["w"], state["w"])
        assert torch.allclose(fn(torch.zeros(4)), torch.tensor(4.0))
        assert [b[0].tolist() for b in DataLoader(TensorDataset(torch.arange(4.0)),
                                                  batch_size=2)] == [[0.0, 1.0], [2.0, 3.0]]
    lost = [r for r in caplog.records if "lost" in r.getMessage()]
    assert 1 <= len(lost) <= 2  # once for the patched calls, once for the compile callbacks


def test_dynamo_compile_ids_name_recompiles() -> None:
    assert [is_recompile(i) for i in ("0/0", "0/1", "[3/2]", "1/0_1", "")] == [
        False, True, True, False, False]
