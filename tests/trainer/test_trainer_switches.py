"""The mechanisms behind the ``--opt`` switches, each checked in this process on a tiny model.

Why in-process: a world of one gloo rank is enough to shard a real TorchRec DLRM, plan it,
checkpoint it asynchronously with ``torch.distributed.checkpoint`` and compile it, in seconds;
the supervisor tests (test_trainer_launch) cover the same switches across real restarts.
Events are read back from a real Reporter spool.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torchrec.distributed.batched_embedding_kernel import BaseBatchedEmbeddingBag
from torchrec.distributed.embeddingbag import ShardedEmbeddingBagCollection
from torchrec.distributed.types import ShardingType

from collector.integrations.torch_compile import CompileSpans
from collector.reporter import Reporter
from collector.schema import parse_event
from trainer import plan_cache
from trainer.checkpoint import Checkpointer, checkpoint_path, verify
from trainer.model import (
    ModelShape,
    attach_sparse_optimizer,
    build_optimizer,
    build_unsharded,
    deferred_table_init,
    embedding_tables,
    plan_sharding,
    shard,
    sharders,
    table_init_deferrable,
)
from trainer.pt2 import compile_arches, inductor_options

SHAPE = ModelShape(embedding_rows=200, embedding_dim=8, dense_features=13, sparse_features=4)


def spooled(reporter: Reporter) -> list[dict[str, Any]]:
    reporter.flush()
    return [parse_event(line) for path in sorted(reporter.spool_dir.glob("*.jsonl"))
            for line in path.read_text().splitlines()]


def test_plan_key_names_everything_the_plan_depends_on(world: dist.ProcessGroup) -> None:
    tables = embedding_tables(build_unsharded(SHAPE, 0))
    key = plan_cache.plan_key(tables, 1, 32, sharders())
    assert key == plan_cache.plan_key(embedding_tables(build_unsharded(SHAPE, 7)), 1, 32,
                                      sharders())  # the seed does not change the plan
    bigger = ModelShape(400, 8, 13, 4)
    assert len({key, plan_cache.plan_key(tables, 2, 32, sharders()),
                plan_cache.plan_key(tables, 1, 64, sharders()),
                plan_cache.plan_key(embedding_tables(build_unsharded(bigger, 0)), 1, 32,
                                    sharders())}) == 4


def test_cached_plan_round_trips_and_shards_the_same(world: dist.ProcessGroup,
                                                     tmp_path: Path) -> None:
    model = build_unsharded(SHAPE, 0)
    key = plan_cache.plan_key(embedding_tables(model), 1, 32, sharders())
    assert plan_cache.load_plan(tmp_path, key) is None
    plan = plan_sharding(model, world, 32)
    plan_cache.save_plan(tmp_path, key, plan)
    loaded = plan_cache.load_plan(tmp_path, key)
    assert loaded is not None and str(loaded) == str(plan)
    plan_cache.plan_path(tmp_path, key).write_bytes(b"not a pickle")
    assert plan_cache.load_plan(tmp_path, key) is None  # unreadable: plan afresh


def embedding_weights(dmp: nn.Module) -> dict[str, torch.Tensor]:
    """Each table's local weights, as plain tensors (the state dict holds DTensors of
    TorchRec's LocalShardsWrapper)."""
    return {k: torch.cat([shard.clone() for shard in v.to_local().local_shards()])
            for k, v in dmp.state_dict().items() if "embedding_bags" in k}


def test_deferred_table_init_replays_bitwise_and_otherwise_leaves_zeros(
        world: dist.ProcessGroup) -> None:
    """init_overlap's restart path: the tables' init is held back while sharding, and a replay
    (no checkpoint after all) gives exactly the weights a plain shard gives."""
    def sharded(defer: bool) -> tuple[nn.Module, Any]:
        model = build_unsharded(SHAPE, 3)  # seeds the RNG: both shards start from one state
        attach_sparse_optimizer(model, 0.1)
        plan = plan_sharding(model, world, 16)
        with deferred_table_init(enabled=defer) as held:
            dmp = shard(model, world, plan)
        return dmp, held

    plain, nothing_held = sharded(False)
    assert nothing_held.pending == []
    deferred, held = sharded(True)
    # TorchRec initializes the tables twice (fused kernel, then the sharded collection); both
    # calls are held: if a TorchRec upgrade renames either, this fails instead of saving nothing
    assert len(held.pending) == 2
    assert BaseBatchedEmbeddingBag.init_parameters.__name__ == "init_parameters"
    assert ShardedEmbeddingBagCollection.reset_parameters.__name__ == "reset_parameters"
    expected, skipped = embedding_weights(plain), embedding_weights(deferred)
    assert len(expected) == SHAPE.sparse_features
    assert all(float(w.abs().sum()) > 0 for w in expected.values())
    assert all(float(w.abs().sum()) == 0 for w in skipped.values())  # zeros, never garbage
    torch.manual_seed(99)  # whatever drew from the RNG meanwhile, the replay uses the held state
    held.run()
    assert held.pending == []
    replayed = embedding_weights(deferred)
    assert all(torch.equal(expected[k], replayed[k]) for k in expected)


def test_a_data_parallel_table_is_never_deferred(world: dist.ProcessGroup) -> None:
    """A data-parallel table's init is also a broadcast every rank must join."""
    model = build_unsharded(SHAPE, 0)
    plan = plan_sharding(model, world, 16)
    assert table_init_deferrable(plan)
    data_parallel = copy.deepcopy(plan)
    module_plan = next(iter(data_parallel.plan.values()))
    next(iter(module_plan.values())).sharding_type = ShardingType.DATA_PARALLEL.value
    assert not table_init_deferrable(data_parallel)


def test_async_checkpoint_blocks_only_for_staging(world: dist.ProcessGroup,
                                                  tmp_path: Path) -> None:
    reporter = Reporter("async-ckpt", attempt=0, rank=0, spool_dir=tmp_path / "spool",
                        heartbeat_s=0, install_signal_handlers=False)
    model = build_unsharded(SHAPE, 0)
    attach_sparse_optimizer(model, 0.1)
    dmp = shard(model, world, plan_sharding(model, world, 16))
    optimizer = build_optimizer(dmp, 0.1)
    checkpointer = Checkpointer(tmp_path / "ckpt", reporter, asynchronous=True)
    before = {k: v.full_tensor().clone() if hasattr(v, "full_tensor") else v.clone()
              for k, v in dmp.state_dict().items()}
    checkpointer.save(5, dmp, optimizer, {"next_step": 5})
    with torch.no_grad():  # training goes on while the write runs: the staged copy is kept
        for param in dmp.parameters():
            param.add_(1.0)
    checkpointer.save(6, dmp, optimizer, {"next_step": 6})  # waits for step 5 first
    checkpointer.wait()
    assert verify(checkpoint_path(tmp_path / "ckpt", 5)) is None
    restored = checkpointer.load(5, dmp, optimizer)
    assert restored == {"step": 5, "loader": {"next_step": 5}}
    after = {k: v.full_tensor() if hasattr(v, "full_tensor") else v
             for k, v in dmp.state_dict().items()}
    assert all(torch.equal(before[k], after[k]) for k in before)
    saves = [e for e in spooled(reporter) if e["phase"] == "checkpoint_save"]
    reporter.shutdown()
    blocking = [(e["attrs"]["step"], e["blocking"]) for e in saves]
    assert sorted(blocking) == [(5, False), (5, True), (6, False), (6, True)]
    for step in (5, 6):
        staged = next(e for e in saves if e["attrs"]["step"] == step and e["blocking"])
        written = next(e for e in saves if e["attrs"]["step"] == step and not e["blocking"])
        assert written["start"] >= staged["end"] - 1e-3  # the write follows the staging


def test_cpu_autotune_options() -> None:
    assert inductor_options(False, "cpu") == {}
    assert inductor_options(True, "cpu") == {"max_autotune": True,
                                             "max_autotune_gemm_backends": "ATEN"}
    assert "TRITON" in inductor_options(True, "cuda")["max_autotune_gemm_backends"]


def test_marked_batch_never_recompiles_and_hooks_report_compiles(tmp_path: Path) -> None:
    """``dynamic_shapes``: a smaller last batch runs under ``fail_on_recompile``; the compile
    hooks turn the one compilation into ``compile`` spans with cache counters."""
    reporter = Reporter("pt2", attempt=0, rank=0, spool_dir=tmp_path / "spool", heartbeat_s=0,
                        install_signal_handlers=False)
    torch._dynamo.reset()
    arch = nn.Sequential(nn.Linear(13, 16), nn.ReLU(), nn.Linear(16, 1))
    with CompileSpans(reporter).installed():
        compile_arches([arch], dynamic_batch=True, options={}, device_type="cpu")
        tracker = reporter.train(0)
        arch(torch.randn(64, 13)).sum().backward()
        tracker.advance(1)
        with torch.compiler.set_stance("fail_on_recompile"):
            arch(torch.randn(40, 13)).sum().backward()
        tracker.advance(2)
        tracker.close()
    events = spooled(reporter)
    reporter.shutdown()
    compiles = [e for e in events if e["phase"] == "compile"]
    assert compiles and all(e["blocking"] for e in compiles)
    assert sum(e["attrs"]["unique_graphs"] for e in compiles) == 1
    assert {"fxgraph_cache_hit", "fxgraph_cache_miss", "autograd_cache_hit",
            "autograd_cache_miss"} <= set(compiles[0]["attrs"])
    trains = [e for e in events if e["phase"] == "train"]
    assert trains[-1]["step_end"] == 2
    for comp in compiles:  # the tracker was paused while compiling
        assert all(t["end"] <= comp["start"] or t["start"] >= comp["end"] for t in trains)


def test_unmarked_batch_recompiles(tmp_path: Path) -> None:
    """The control: without the mark, the smaller batch fails ``fail_on_recompile``."""
    torch._dynamo.reset()
    arch = nn.Sequential(nn.Linear(13, 16), nn.ReLU(), nn.Linear(16, 1))
    compile_arches([arch], dynamic_batch=False, options={}, device_type="cpu")
    arch(torch.randn(64, 13)).sum().backward()
    with pytest.raises(RuntimeError, match="Detected recompile"), \
            torch.compiler.set_stance("fail_on_recompile"):
        arch(torch.randn(40, 13))


def test_keyword_inputs_are_marked_dynamic_too() -> None:
    """DLRM calls its interaction arch with ``dense_features=`` and ``sparse_features=``:
    the batch dimension of keyword inputs must be dynamic as well, or the last batch
    recompiles the interaction arch."""
    from torchrec.models.dlrm import InteractionArch

    torch._dynamo.reset()
    arch = InteractionArch(num_sparse_features=3)
    compile_arches([arch], dynamic_batch=True, options={}, device_type="cpu")
    arch(dense_features=torch.randn(64, 8), sparse_features=torch.randn(64, 3, 8))
    with torch.compiler.set_stance("fail_on_recompile"):
        out = arch(dense_features=torch.randn(40, 8), sparse_features=torch.randn(40, 3, 8))
    assert out.shape[0] == 40
