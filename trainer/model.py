"""The DLRM model: built unsharded on the meta device, planned, then sharded by TorchRec's DMP.

Why three separate functions: each is its own lifecycle phase with its own owner in ETT
(``model_init`` and ``sharding_plan`` belong to trainer_init; ``compile`` to the PT2 compiler),
and at scale they fail or slow down independently: the planner is the expensive part with many
tables and ranks (PYTORCH_NOTES "Trainer start-up"), so a later switch can cache its plan.

Placement (``--device``). On ``cpu`` everything is on the CPU, as it always was. On ``cuda`` the
model is *hybrid*: the embedding tables are planned for and sharded on the CPU by DMP (gloo,
fbgemm's CPU kernels, their optimizer fused into backward), while the dense, interaction and
over arches live on the GPU (DDP over NCCL, compiled by inductor into Triton kernels). The
pooled embeddings are copied to the GPU right after the lookup, and their gradients flow back
through that copy to the CPU tables. Why hybrid: the CUDA build of fbgemm-gpu is too large to
bring to the borrowed GPU machine, which can only take ``fbgemm-gpu-cpu``; and the lifecycle
work this trainer measures on a GPU (NCCL start-up, Triton compilation, compile caches,
autotuning) is all in the dense part.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torchrec.distributed.batched_embedding_kernel import BaseBatchedEmbeddingBag
from torchrec.distributed.embeddingbag import (
    EmbeddingBagCollectionSharder,
    ShardedEmbeddingBagCollection,
)
from torchrec.distributed.model_parallel import (
    DataParallelWrapper,
    DefaultDataParallelWrapper,
    DistributedModelParallel,
)
from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
from torchrec.distributed.types import (
    EmbeddingModuleShardingPlan,
    ModuleSharder,
    ShardingEnv,
    ShardingPlan,
    ShardingType,
)
from torchrec.models.dlrm import DLRM, DLRMTrain
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
from torchrec.optim.optimizers import in_backward_optimizer_filter
from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

from trainer.data import sparse_feature_names

DENSE_HIDDEN = 128
OVER_ARCH = (128, 64, 1)


@dataclass(frozen=True)
class ModelShape:
    """The sizes that define the model (and therefore the checkpoint layout)."""

    embedding_rows: int
    embedding_dim: int
    dense_features: int
    sparse_features: int


CPU = torch.device("cpu")


def build_unsharded(shape: ModelShape, seed: int, dense_device: torch.device = CPU) -> DLRMTrain:
    """DLRM with its embedding tables on the meta device: DMP allocates only each rank's shard.

    The dense layers are always initialized on the CPU and then moved to ``dense_device``, so
    one seed gives the same initial weights on either device (and the CPU path is unchanged).
    """
    torch.manual_seed(seed)  # dense layers are created here, identically on every rank
    tables = [
        EmbeddingBagConfig(name=f"t_{name}", embedding_dim=shape.embedding_dim,
                           num_embeddings=shape.embedding_rows, feature_names=[name])
        for name in sparse_feature_names(shape.sparse_features)
    ]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    dlrm = DLRM(embedding_bag_collection=ebc, dense_in_features=shape.dense_features,
                dense_arch_layer_sizes=[DENSE_HIDDEN, shape.embedding_dim],
                over_arch_layer_sizes=list(OVER_ARCH), dense_device=CPU)
    if dense_device.type != "cpu":
        place_dense(dlrm, dense_device)
    return DLRMTrain(dlrm)


def place_dense(dlrm: DLRM, device: torch.device) -> None:
    """Move the dense, interaction and over arches to ``device`` and route the pooled embeddings
    there.

    Why the interaction arch too: it has no parameters but a ``triu_indices`` buffer, which
    must be on the same device as the tensors it indexes inside the compiled graph. Why a
    forward hook on the sparse arch and not a wrapper module: parameter and state-dict names
    stay exactly those of the CPU model, so plans, checkpoints and the published artifact are
    the same on either device; ``Tensor.to`` is differentiable, so the embedding gradients
    return to the CPU tables in backward.
    """
    for arch in dense_arches(dlrm):
        arch.to(device)

    def to_dense_device(module: nn.Module, args: Any, pooled: torch.Tensor) -> torch.Tensor:
        return pooled.to(device)

    dlrm.sparse_arch.register_forward_hook(to_dense_device)


def dense_device_of(model: DLRMTrain) -> torch.device:
    """Where the dense arches of an unsharded DLRMTrain are (the over arch always has weights)."""
    return next(model.model.over_arch.parameters()).device


def attach_sparse_optimizer(model: DLRMTrain, lr: float) -> None:
    """Fuse the embeddings' optimizer into their backward (TorchRec's usual, memory-light way)."""
    ebc = model.model.sparse_arch.embedding_bag_collection
    apply_optimizer_in_backward(RowWiseAdagrad, ebc.parameters(), {"lr": lr})


def sharders() -> list[ModuleSharder[nn.Module]]:
    return [cast(ModuleSharder[nn.Module], EmbeddingBagCollectionSharder())]


def plan_sharding(model: DLRMTrain, pg: dist.ProcessGroup, batch_size: int) -> ShardingPlan:
    """Rank 0 plans and broadcasts the plan, so every rank shards the same way."""
    world_size = dist.get_world_size(pg)
    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=world_size, compute_device="cpu"), batch_size=batch_size)
    return planner.collective_plan(model, sharders(), pg)


def embedding_tables(model: DLRMTrain) -> list[EmbeddingBagConfig]:
    """The table configs the sharding plan depends on (for the plan cache's key)."""
    return list(model.model.sparse_arch.embedding_bag_collection.embedding_bag_configs())


class DenseDeviceDataParallel(DataParallelWrapper):
    """DDP around the unsharded (dense) part, left on the device it already is on.

    Why not TorchRec's DefaultDataParallelWrapper on cuda: it moves the whole wrapped module to
    DMP's ``device`` before wrapping it — the CPU, where the sharded tables live — which would
    pull the dense arches back off the GPU. This wrapper keeps the same DDP settings and only
    skips that move. ``device_ids=None`` is DDP's form for a module on one GPU whose inputs the
    caller places itself (the trainer moves each batch's dense part to the GPU).
    """

    def __init__(self, *, init_sync: bool) -> None:
        self.init_sync = init_sync

    def wrap(self, dmp: DistributedModelParallel, env: ShardingEnv,
             device: torch.device) -> None:
        module = dmp._dmp_wrapped_module
        ignore = set(DistributedModelParallel._sharded_parameter_names(module))
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
            module=module, params_and_buffers_to_ignore=ignore)
        dmp._dmp_wrapped_module = DistributedDataParallel(
            module=module, device_ids=None, process_group=env.process_group,
            gradient_as_bucket_view=True, broadcast_buffers=False, static_graph=True,
            find_unused_parameters=False, init_sync=self.init_sync)


def shard(model: DLRMTrain, pg: dist.ProcessGroup, plan: ShardingPlan, *,
          init_sync: bool = True,
          wrapper: DataParallelWrapper | None = None) -> DistributedModelParallel:
    """Materialize this rank's shards and wrap the dense part in DDP.

    ``output_dtensor=True`` makes the state dict hold DTensors instead of ShardedTensors: the
    form that ``torch.distributed.checkpoint.async_save`` accepts (PYTORCH_NOTES), so switching
    checkpoints to async later needs no change to the model.

    ``init_sync=False`` drops DDP's start-up broadcast of the dense weights: safe because every
    rank builds them from the same seed (and a checkpoint load follows on a restart).

    The tables are always sharded for the CPU (``device=cpu``); dense arches already moved to
    a GPU by :func:`build_unsharded` stay there (:class:`DenseDeviceDataParallel`).
    ``wrapper`` overrides that choice (tests use it to run the GPU path's wrapper on a CPU).
    """
    env = ShardingEnv(dist.get_world_size(pg), dist.get_rank(pg), pg, output_dtensor=True)
    if wrapper is None and dense_device_of(model).type == "cpu":
        wrapper = DefaultDataParallelWrapper(ddp_kwargs={"init_sync": init_sync})
    elif wrapper is None:
        wrapper = DenseDeviceDataParallel(init_sync=init_sync)
    return DistributedModelParallel(module=model, env=env, device=CPU,
                                    plan=plan, sharders=sharders(),
                                    data_parallel_wrapper=wrapper)


@dataclass
class DeferredTableInit:
    """The random init of the embedding tables, held back while DMP shards the model.

    Why (``init_overlap``, on a restart): the checkpoint load overwrites every table, so their
    random init is wasted work, and TorchRec does it twice: the fused kernel's
    ``init_parameters`` and then the sharded collection's ``reset_parameters``. Measured at the
    default size (26 tables x 50,000 x 64) on 2 cores: 0.62 s of a 0.81 s shard. When the load
    finds no checkpoint after all, :meth:`run` replays the held-back calls in their order from
    the RNG state they would have seen, so the tables get bitwise the values a plain shard gives
    (tested).
    """

    pending: list[Callable[[], None]] = field(default_factory=list)
    rng_state: torch.Tensor | None = None

    def hold(self, call: Callable[[], None]) -> None:
        if not self.pending:
            self.rng_state = torch.get_rng_state()
        self.pending.append(call)

    def run(self) -> None:
        """Initialize the tables after all (no checkpoint was loaded)."""
        if self.rng_state is not None:
            torch.set_rng_state(self.rng_state)
        for call in self.pending:
            call()
        self.discard()

    def discard(self) -> None:
        """Forget the held-back init (a checkpoint has overwritten the tables)."""
        self.pending.clear()
        self.rng_state = None


def table_init_deferrable(plan: ShardingPlan) -> bool:
    """Whether a plan's tables may skip their init: not when one is data-parallel, whose
    ``reset_parameters`` is also a broadcast that every rank must join."""
    return not any(
        parameter.sharding_type == ShardingType.DATA_PARALLEL.value
        for module in plan.plan.values() if isinstance(module, EmbeddingModuleShardingPlan)
        for parameter in module.values())


@contextmanager
def deferred_table_init(enabled: bool = True) -> Iterator[DeferredTableInit]:
    """Within this block, sharding holds the tables' random init back (see
    :class:`DeferredTableInit`); disabled, it changes nothing.

    Why patch two TorchRec methods for the block instead of calling a TorchRec option: it has
    none; both run inside ``DistributedModelParallel.__init__``. The tables' memory is still
    allocated (zeros) by fbgemm, so a table whose init is neither replayed nor loaded is zero,
    never garbage. Only this thread shards, so a class-level patch for the block is safe.
    """
    deferred = DeferredTableInit()
    if not enabled:
        yield deferred
        return
    kernel_init = BaseBatchedEmbeddingBag.init_parameters
    collection_reset = ShardedEmbeddingBagCollection.reset_parameters

    def hold_kernel_init(kernel: BaseBatchedEmbeddingBag[Any]) -> None:
        deferred.hold(lambda: kernel_init(kernel))

    def hold_collection_reset(collection: ShardedEmbeddingBagCollection) -> None:
        deferred.hold(lambda: collection_reset(collection))

    BaseBatchedEmbeddingBag.init_parameters = hold_kernel_init
    ShardedEmbeddingBagCollection.reset_parameters = hold_collection_reset
    try:
        yield deferred
    finally:
        BaseBatchedEmbeddingBag.init_parameters = kernel_init
        ShardedEmbeddingBagCollection.reset_parameters = collection_reset


def build_optimizer(dmp: DistributedModelParallel, lr: float) -> CombinedOptimizer:
    """The fused embedding optimizer plus Adagrad on the dense parameters, as one keyed optimizer.

    Adagrad creates its state in its constructor, so the optimizer's state dict is complete
    before the first step and a checkpoint can be loaded into it in place.
    """
    dense_params = dict(in_backward_optimizer_filter(dmp.named_parameters()))
    dense = KeyedOptimizerWrapper(dense_params, lambda ps: torch.optim.Adagrad(ps, lr=lr))
    return CombinedOptimizer([dmp.fused_optimizer, dense])


def dense_arches(dlrm: Any) -> list[nn.Module]:
    """The dense, interaction and over arches: what the trainer compiles.

    Why only these: the sharded embedding lookups are fbgemm kernels plus collectives that dynamo
    cannot trace into usefully on CPU; the dense part is where inductor helps.
    """
    return [dlrm.dense_arch, dlrm.inter_arch, dlrm.over_arch]


def dlrm_of(dmp: DistributedModelParallel) -> Any:
    return dmp.module.model
