"""A sharding plan computed once and reused: the ``plan_cache`` optimization.

Why: the planner is the expensive part of trainer start-up at scale (PYTORCH_NOTES "Trainer
start-up": 200 tables on 64 ranks took minutes) and it is a collective (rank 0 plans, then
broadcasts). A restart of the same job on the same world shards the same way, so the plan from
the first attempt, pickled beside the checkpoints (a few KB), is loaded by every rank from disk
in about a millisecond with no collective at all.

The key holds everything the plan depends on, spelled out (a config's ``repr`` carries a memory
address): each table's name, rows, dim, features, dtype and pooling, the world size, the batch
size and the sharders. Change any of them and the key, hence the file, changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import nn
from torchrec.distributed.types import ModuleSharder, ShardingPlan
from torchrec.modules.embedding_configs import EmbeddingBagConfig

PLAN_FOLDER = "sharding-plans"


def plan_key(tables: Sequence[EmbeddingBagConfig], world_size: int, batch_size: int,
             sharders: Sequence[ModuleSharder[nn.Module]]) -> str:
    """A stable hex digest of what the sharding plan depends on."""
    described: dict[str, Any] = {
        "tables": [{"name": t.name, "rows": t.num_embeddings, "dim": t.embedding_dim,
                    "features": list(t.feature_names), "dtype": str(t.data_type),
                    "pooling": str(t.pooling)} for t in tables],
        "world_size": world_size,
        "batch_size": batch_size,
        "sharders": sorted(f"{type(s).__module__}.{type(s).__qualname__}" for s in sharders),
    }
    text = json.dumps(described, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def plan_path(directory: Path, key: str) -> Path:
    return directory / PLAN_FOLDER / f"plan-{key}.pkl"


def load_plan(directory: Path, key: str) -> ShardingPlan | None:
    """The cached plan, or None when there is none (or it cannot be read: plan afresh)."""
    path = plan_path(directory, key)
    try:
        with path.open("rb") as file:
            plan = pickle.load(file)
    except FileNotFoundError:
        return None
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError) as exc:
        print(f"sharding plan cache {path} unreadable ({exc}); planning afresh", flush=True)
        return None
    return plan if isinstance(plan, ShardingPlan) else None


def save_plan(directory: Path, key: str, plan: ShardingPlan) -> Path:
    """Write the plan atomically (temp file + rename): a reader never sees half a pickle."""
    path = plan_path(directory, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as file:
        pickle.dump(plan, file)
    tmp.replace(path)
    return path
