"""An attempt's start on one rank: its device, joining the process group, building the trainer.

Each step is reported as its lifecycle phase (``rendezvous``, ``process_group_init``,
``data_init``, ``model_init``, ``sharding_plan``, ``compile``), so the seconds before the
first training step are attributed to what took them. ``process_group_init`` and the
compilations come from PyTorch's own calls, through the hooks ``trainer.train`` installs
(``collector.integrations.torch``); the rest is timed here, where the hooks see nothing
(the trainer's data is no DataLoader) or less (a phase is more than one torch call).

With ``--device cuda`` the process group is ``cpu:gloo,cuda:nccl``: the CPU-sharded embedding
tables, checkpoints and object collectives use gloo, the GPU-resident dense part's DDP uses
NCCL (trainer.model explains the hybrid placement).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import torch
import torch.distributed as dist
from torchrec.distributed.types import ShardingPlan
from torchrec.models.dlrm import DLRMTrain

from collector.integrations.torch_compile import CompileSpans
from collector.reporter import Reporter
from trainer import checkpoint, plan_cache
from trainer.checkpoint import Checkpointer
from trainer.compile_setup import CompileWarmUp, compile_dense
from trainer.config import TrainConfig
from trainer.data import StepLoader, SyntheticClicks
from trainer.loop import Trainer
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

#: Batches the init-overlap data warm-up prepares ahead of training.
WARM_BATCHES = 4


def dense_device(cfg: TrainConfig) -> torch.device:
    """This rank's device for the dense part: the CPU, or on cuda the GPU of its local rank."""
    if not cfg.on_cuda:
        return torch.device("cpu")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    available = torch.cuda.device_count()
    if local_rank >= available:
        raise RuntimeError(f"--device cuda: local rank {local_rank} has no GPU "
                           f"({available} visible); one GPU per rank is needed")
    return torch.device("cuda", local_rank)


def default_distributed_env() -> None:
    """Let a plain ``python -m trainer.train`` run as a world of one (torchrun sets these)."""
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(free_port())
    for name, value in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("WORLD_SIZE", "1"),
                        ("LOCAL_RANK", "0")):
        os.environ.setdefault(name, value)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def join_process_group(reporter: Reporter, device: torch.device) -> tuple[int, int]:
    """Rendezvous (find the peers through the store) then create the group: two phases.

    On CPU the group is gloo. With the dense part on a GPU it is ``cpu:gloo,cuda:nccl``: CPU
    tensors (embedding all-to-alls, checkpoint and object collectives, barriers) go through
    gloo, CUDA tensors (DDP's gradient all-reduce) through NCCL. The GPU is made current
    first, as NCCL requires. NCCL creates its communicator lazily, on the first CUDA
    collective: one tiny all-reduce here makes that happen in a ``process_group_init`` span
    (stage ``nccl_warm_up``), where its seconds belong, instead of inside the first training
    step. The ``init_process_group`` call itself is reported by the torch hooks
    (``collector.integrations.torch``) that ``trainer.train`` installs first. (Not
    ``init_process_group(device_id=...)``: a bound device would also send barriers through
    NCCL, while this trainer's barriers and checkpoint collectives are meant for gloo.)
    """
    backend = "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
        backend = "cpu:gloo,cuda:nccl"
    with reporter.phase("rendezvous"):
        store, rank, world_size = next(dist.rendezvous("env://"))
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT")
        if restart is not None:
            # torchrun may keep one store across its restarts; gloo would then read the
            # previous round's peer addresses ("Connection refused" on some restarts). A
            # key prefix per restart keeps the rounds apart.
            store = dist.PrefixStore(f"ett/restart-{restart}", store)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size)
    if device.type == "cuda":
        with reporter.phase("process_group_init", backend=backend, stage="nccl_warm_up"):
            dist.all_reduce(torch.zeros(1, device=device))
            torch.cuda.synchronize(device)
    return rank, world_size


def build_trainer(cfg: TrainConfig, reporter: Reporter, rank: int, world_size: int,
                  watch: CompileSpans | None, device: torch.device | None = None,
                  compile_warm_up: CompileWarmUp | None = None) -> Trainer:
    """Model, plan, shards, optimizer, data and compiled dense part, phase by phase.

    With ``init_overlap`` the data warm-up (a thread) and the compile warm-up (a process,
    trainer.warmup, which fills the PT2 caches) run while the model is built, planned and
    sharded; this process waits for them only where it needs their result. A restart also
    skips the embedding tables' random init, which its checkpoint load overwrites
    (:class:`~trainer.model.DeferredTableInit`).
    """
    shape = ModelShape(cfg.embedding_rows, cfg.embedding_dim, cfg.dense_features,
                       cfg.sparse_features)
    device = device or torch.device("cpu")
    overlap = cfg.has("init_overlap")
    resume_hint = _newest_checkpoint_step(cfg) if overlap else 0
    with reporter.phase("data_init", blocking=not overlap):
        data = SyntheticClicks(cfg.seed, cfg.batch_size, cfg.dense_features,
                               cfg.sparse_features, cfg.embedding_rows, rank)
        loader = StepLoader(data, cfg.batch_size_at)
    with reporter.phase("model_init", stage="build"):
        model = build_unsharded(shape, cfg.seed, device)
        attach_sparse_optimizer(model, cfg.lr)
    if overlap:
        loader.warm_up(resume_hint, WARM_BATCHES)
    pg = dist.group.WORLD
    assert pg is not None
    plan = sharding_plan(cfg, reporter, model, pg, world_size)
    # A restart skips the tables' random init that its checkpoint load will overwrite.
    defer = resume_hint > 0 and table_init_deferrable(plan)
    with reporter.phase("model_init", stage="shard") as span:
        with deferred_table_init(enabled=defer) as table_init:
            dmp = shard(model, pg, plan, init_sync=not overlap)
        span.attrs["table_init"] = "deferred" if table_init.pending else "done"
        optimizer = build_optimizer(dmp, cfg.lr)
        checkpointer = Checkpointer(Path(cfg.checkpoint_dir), reporter,
                                    asynchronous=cfg.has("async_checkpoint"))
    if cfg.compile:
        compile_dense(cfg, reporter, dmp, device, compile_warm_up)
    trainer = Trainer(cfg, reporter, rank, world_size, dmp, optimizer, loader, checkpointer,
                      watch, checkpoint_every=cfg.checkpoint_every, device=device,
                      table_init=table_init)
    return trainer


def sharding_plan(cfg: TrainConfig, reporter: Reporter, model: DLRMTrain,
                  pg: dist.ProcessGroup, world_size: int) -> ShardingPlan:
    """Plan collectively, or (``plan_cache``) load the plan an earlier attempt saved."""
    if not cfg.has("plan_cache"):
        with reporter.phase("sharding_plan", world_size=world_size, cached=False):
            return plan_sharding(model, pg, cfg.batch_size)
    key = plan_cache.plan_key(embedding_tables(model), world_size, cfg.batch_size, sharders())
    directory = Path(cfg.checkpoint_dir)
    with reporter.phase("sharding_plan", world_size=world_size, key=key) as span:
        plan = plan_cache.load_plan(directory, key)
        span.attrs["cached"] = plan is not None
        if plan is None:
            plan = plan_sharding(model, pg, cfg.batch_size)
            if dist.get_rank(pg) == 0:
                plan_cache.save_plan(directory, key, plan)
    return plan


def _newest_checkpoint_step(cfg: TrainConfig) -> int:
    """Where this attempt will probably resume: a hint, for the data warm-up and for holding the
    tables' init back. The verified load decides (a wrong hint costs a wasted warm-up, or a
    replayed table init)."""
    found = checkpoint.good_checkpoints(Path(cfg.checkpoint_dir))
    return found[-1][0] if found else 0
