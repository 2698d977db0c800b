"""Synthetic Criteo-like click data, a pure function of (seed, global step, rank).

Why a function of the step and not a stream: a restarted attempt resumes at its checkpoint's
step k and must see exactly the batches k, k+1, ... that the crashed attempt saw, so that the
steps trained again are truly *repeated* training (ETT_SPEC §3.4.1) and a resumed run ends in
the same model as an uninterrupted one. No data-loader state needs checkpointing.

The labels are learnable (a fixed logistic function of the dense features and of per-id biases),
so the loss falls and a broken resume shows up as a loss that does not match.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

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


class StepLoader:
    """A stateful loader over :class:`SyntheticClicks`: its state is the next global step.

    Why stateful although the data is a pure function of the step: the checkpoint records the
    loader's position next to the model's, and the restart checks that they agree (exact
    resume: no sample skipped, none repeated beyond the checkpoint). ``warm_up`` prepares the
    first batches in a background thread while the model is built (``init_overlap``).
    """

    def __init__(self, data: SyntheticClicks, batch_size_at: Callable[[int], int]) -> None:
        self.data = data
        self.batch_size_at = batch_size_at
        self.next_step = 0
        self._ready: dict[int, Batch] = {}
        self._lock = threading.Lock()
        self._warm: threading.Thread | None = None

    def state_dict(self) -> dict[str, int]:
        return {"next_step": self.next_step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.next_step = int(state["next_step"])

    def warm_up(self, from_step: int, count: int) -> threading.Thread:
        """Start building batches ``from_step .. from_step + count - 1`` in the background."""
        def build() -> None:
            for step in range(from_step, from_step + count):
                batch = self._make(step)
                with self._lock:
                    self._ready[step] = batch

        self._warm = threading.Thread(target=build, name="data-warm-up", daemon=True)
        self._warm.start()
        return self._warm

    def next_batch(self) -> Batch:
        """The batch of ``next_step``; advances the loader."""
        step = self.next_step
        with self._lock:
            batch = self._ready.pop(step, None)
        self.next_step = step + 1
        return batch if batch is not None else self._make(step)

    def _make(self, step: int) -> Batch:
        size = self.batch_size_at(step)
        if size == self.data.batch_size:
            return self.data.batch(step)
        return replace(self.data, batch_size=size).batch(step)
