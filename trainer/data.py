"""Synthetic Criteo-like click data, a pure function of (seed, global step, rank).

Why a function of the step and not a stream: a restarted attempt resumes at its checkpoint's
step k and must see exactly the batches k, k+1, ... that the crashed attempt saw, so that the
steps trained again are truly *repeated* training (ETT_SPEC §3.3.1) and a resumed run ends in
the same model as an uninterrupted one. No data-loader state needs checkpointing.

The labels are learnable (a fixed logistic function of the dense features and of per-id biases),
so the loss falls and a broken resume shows up as a loss that does not match.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torchrec.datasets.utils import Batch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

#: Skew of the id distribution: real categorical features are heavy-tailed (few hot ids).
ID_SKEW = 3.0
_STEP_STRIDE = 1_000_003
_RANK_STRIDE = 7_919
_EVAL_SALT = 0x5EED


def sparse_feature_names(count: int) -> list[str]:
    return [f"cat_{i}" for i in range(count)]


@dataclass(frozen=True)
class SyntheticClicks:
    """The data set: ``batch(step)`` is the rank's share of global step ``step``."""

    seed: int
    batch_size: int
    dense_features: int
    sparse_features: int
    embedding_rows: int
    rank: int = 0

    def batch(self, step: int, *, eval_split: bool = False) -> Batch:
        """The deterministic batch of one global step (or of eval batch ``step``)."""
        gen = torch.Generator().manual_seed(self._stream_seed(step, eval_split))
        dense = torch.randn(self.batch_size, self.dense_features, generator=gen)
        uniform = torch.rand(self.batch_size, self.sparse_features, generator=gen)
        ids = (uniform.pow(ID_SKEW) * self.embedding_rows).long()
        ids.clamp_(max=self.embedding_rows - 1)
        labels = self._labels(dense, ids, gen)
        return Batch(dense_features=dense, sparse_features=self._kjt(ids), labels=labels)

    def _stream_seed(self, step: int, eval_split: bool) -> int:
        salt = _EVAL_SALT if eval_split else 0
        return (self.seed * _STEP_STRIDE + step) * _RANK_STRIDE + self.rank * 2 + salt

    def _labels(self, dense: torch.Tensor, ids: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        # The "true" model depends only on the seed, never on the step: the task stays the same.
        truth = torch.Generator().manual_seed(self.seed)
        weights = torch.randn(self.dense_features, generator=truth) / self.dense_features**0.5
        id_bias = ((ids * 2654435761) % 1009).float().div(1009).sub(0.5).mean(dim=1) * 4
        logits = dense @ weights + id_bias
        return torch.bernoulli(torch.sigmoid(logits), generator=gen)

    def _kjt(self, ids: torch.Tensor) -> KeyedJaggedTensor:
        # One id per sample and feature, as in Criteo; values are laid out feature-major.
        return KeyedJaggedTensor.from_lengths_sync(
            keys=sparse_feature_names(self.sparse_features),
            values=ids.t().contiguous().view(-1),
            lengths=torch.ones(ids.numel(), dtype=torch.int32),
        )
