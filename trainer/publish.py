"""Publishing: a checkpoint becomes an inference artifact (``torch.export``'ed dense model).

Why a module of its own with a ``__main__``: publishing is work the trainer should not wait
for. In band (the baseline) the trainer calls :func:`publish_checkpoint` itself, a blocking
``publish`` span. With ``oob_publish`` :func:`spawn` starts ``python -m trainer.publish`` as a
separate process with no process group: it reads the checkpoint with ``dcp.load(no_dist=True)``
and reports its own ``publish`` span as non-blocking (ETT_SPEC §2: background work that does
not stop training). The artifact is written atomically (temp file + rename).

What is exported: the dense, interaction and over arches, taking the dense features and the
pooled embeddings (a serving stack looks the embeddings up in its own sharded store), with a
dynamic batch dimension.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import Tensor, nn

from collector.reporter import Reporter
from trainer.config import (
    OneLineParser,
    TrainConfig,
    add_training_args,
    config_from_args,
    helper_env,
)
from trainer.model import ModelShape, build_unsharded

PUBLISH_FOLDER = "published"


def artifact_path(checkpoint_folder: Path) -> Path:
    return checkpoint_folder.parent / PUBLISH_FOLDER / f"{checkpoint_folder.name}.pt2"


def publish_checkpoint(cfg: TrainConfig, checkpoint_folder: Path) -> Path:
    """Load the dense part of ``checkpoint_folder`` and export it; returns the artifact path."""
    shape = ModelShape(cfg.embedding_rows, cfg.embedding_dim, cfg.dense_features,
                       cfg.sparse_features)
    model = build_unsharded(shape, cfg.seed)
    dense = {key: value for key, value in model.state_dict().items()
             if ".sparse_arch." not in f".{key}"}
    state: dict[str, Any] = {"model": dense}
    with warnings.catch_warnings():  # "torch.distributed is disabled": no_dist is the intent
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(state, checkpoint_id=str(checkpoint_folder), no_dist=True)
    model.load_state_dict(state["model"], strict=False)
    scorer = DenseScorer(model.model).eval()
    batch = torch.export.Dim("batch", min=2)
    example = (torch.randn(4, cfg.dense_features),
               torch.randn(4, cfg.sparse_features, cfg.embedding_dim))
    program = torch.export.export(scorer, example, dynamic_shapes=({0: batch}, {0: batch}),
                                  strict=False)
    target = artifact_path(checkpoint_folder)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.stem}.{os.getpid()}.tmp.pt2")
    torch.export.save(program, str(tmp))
    tmp.replace(target)
    return target


class DenseScorer(nn.Module):
    """Dense features + pooled embeddings → click logit (DLRM without its lookups)."""

    def __init__(self, dlrm: Any) -> None:
        super().__init__()
        self.dense_arch, self.inter_arch, self.over_arch = (
            dlrm.dense_arch, dlrm.inter_arch, dlrm.over_arch)

    def forward(self, dense: Tensor, pooled: Tensor) -> Tensor:
        logits: Tensor = self.over_arch(self.inter_arch(self.dense_arch(dense), pooled))
        return logits


def spawn(cfg: TrainConfig, checkpoint_folder: Path) -> subprocess.Popen[bytes]:
    """Start the out-of-band publisher for ``checkpoint_folder`` and return at once."""
    command = [sys.executable, "-m", "trainer.publish", "--checkpoint", str(checkpoint_folder),
               *cfg.to_argv()]
    return subprocess.Popen(command, env=helper_env(), start_new_session=True)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m trainer.publish",
                           description="Export a checkpoint's dense model for inference.")
    parser.add_argument("--checkpoint", required=True, help="a step-<N> checkpoint folder")
    add_training_args(parser)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    cfg = config_from_args(args, parser)
    folder = Path(args.checkpoint)
    reporter = Reporter(cfg.job, spool_dir=cfg.spool_dir, rank=0, heartbeat_s=0)
    try:
        with reporter.phase("publish", blocking=False, mode="out_of_band",
                            checkpoint=folder.name):
            target = publish_checkpoint(cfg, folder)
        print(f"[{cfg.job} publisher] published {target}", file=sys.stderr, flush=True)
    finally:
        reporter.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
