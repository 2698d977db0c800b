"""The DLRM model: built unsharded on the meta device, planned, then sharded by TorchRec's DMP.

Why three separate functions: each is its own lifecycle phase with its own owner in ETT
(``model_init`` and ``sharding_plan`` belong to trainer_init; ``compile`` to the PT2 compiler),
and at scale they fail or slow down independently: the planner is the expensive part with many
tables and ranks (PYTORCH_NOTES "Trainer start-up"), so a later switch can cache its plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.model_parallel import (
    DefaultDataParallelWrapper,
    DistributedModelParallel,
)
from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
from torchrec.distributed.types import ModuleSharder, ShardingEnv, ShardingPlan
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


def build_unsharded(shape: ModelShape, seed: int) -> DLRMTrain:
    """DLRM with its embedding tables on the meta device: DMP allocates only each rank's shard."""
    torch.manual_seed(seed)  # dense layers are created here, identically on every rank
    tables = [
        EmbeddingBagConfig(name=f"t_{name}", embedding_dim=shape.embedding_dim,
                           num_embeddings=shape.embedding_rows, feature_names=[name])
        for name in sparse_feature_names(shape.sparse_features)
    ]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    dlrm = DLRM(embedding_bag_collection=ebc, dense_in_features=shape.dense_features,
                dense_arch_layer_sizes=[DENSE_HIDDEN, shape.embedding_dim],
                over_arch_layer_sizes=list(OVER_ARCH), dense_device=torch.device("cpu"))
    return DLRMTrain(dlrm)


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


def shard(model: DLRMTrain, pg: dist.ProcessGroup, plan: ShardingPlan, *,
          init_sync: bool = True) -> DistributedModelParallel:
    """Materialize this rank's shards and wrap the dense part in DDP.

    ``output_dtensor=True`` makes the state dict hold DTensors instead of ShardedTensors: the
    form that ``torch.distributed.checkpoint.async_save`` accepts (PYTORCH_NOTES), so switching
    checkpoints to async later needs no change to the model.

    ``init_sync=False`` drops DDP's start-up broadcast of the dense weights: safe because every
    rank builds them from the same seed (and a checkpoint load follows on a restart).
    """
    env = ShardingEnv(dist.get_world_size(pg), dist.get_rank(pg), pg, output_dtensor=True)
    wrapper = DefaultDataParallelWrapper(ddp_kwargs={"init_sync": init_sync})
    return DistributedModelParallel(module=model, env=env, device=torch.device("cpu"),
                                    plan=plan, sharders=sharders(),
                                    data_parallel_wrapper=wrapper)


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
