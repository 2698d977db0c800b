"""The synthetic data is a pure function of (seed, step, rank): what exact resume relies on."""

from __future__ import annotations

import torch
from torchrec.datasets.utils import Batch

from trainer.data import SyntheticClicks, sparse_feature_names

DATA = SyntheticClicks(seed=3, batch_size=32, dense_features=13, sparse_features=26,
                       embedding_rows=100)


def same(a: Batch, b: Batch) -> bool:
    return (torch.equal(a.dense_features, b.dense_features)
            and torch.equal(a.sparse_features.values(), b.sparse_features.values())
            and torch.equal(a.labels, b.labels))


def test_a_step_always_yields_the_same_batch() -> None:
    later = [DATA.batch(step) for step in (7, 8, 9)]
    fresh = SyntheticClicks(**{**DATA.__dict__})  # as a restarted process would build it
    assert all(same(fresh.batch(step), batch) for step, batch in zip((7, 8, 9), later, strict=True))


def test_steps_ranks_seeds_and_the_eval_split_differ() -> None:
    base = DATA.batch(7)
    assert not same(DATA.batch(8), base)
    assert not same(SyntheticClicks(**{**DATA.__dict__, "rank": 1}).batch(7), base)
    assert not same(SyntheticClicks(**{**DATA.__dict__, "seed": 4}).batch(7), base)
    assert not same(DATA.batch(7, eval_split=True), base)


def test_batch_has_criteo_layout() -> None:
    batch = DATA.batch(0)
    assert batch.dense_features.shape == (32, 13)
    kjt = batch.sparse_features
    assert kjt.keys() == sparse_feature_names(26)
    assert kjt.lengths().tolist() == [1] * (26 * 32)
    values = kjt.values()
    assert int(values.min()) >= 0 and int(values.max()) < 100
    assert set(batch.labels.unique().tolist()) <= {0.0, 1.0}


def test_ids_are_skewed_like_real_categorical_data() -> None:
    values = torch.cat([DATA.batch(step).sparse_features.values() for step in range(20)])
    low_tenth = (values < 10).float().mean().item()
    assert low_tenth > 0.3  # uniform ids would put 10% there


def test_labels_depend_on_the_features() -> None:
    """A learnable task: the labels follow the dense features' hidden logistic weights."""
    batches = [DATA.batch(step) for step in range(30)]
    dense = torch.cat([b.dense_features for b in batches])
    labels = torch.cat([b.labels for b in batches])
    truth = torch.randn(13, generator=torch.Generator().manual_seed(3))
    agreement = ((dense @ truth > 0).float() == labels).float().mean().item()
    assert agreement > 0.6
