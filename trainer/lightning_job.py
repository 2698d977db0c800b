"""``python -m trainer.lightning_job``: a PyTorch Lightning job that ETT sees through its adapter.

Why it exists: most fleets do not train with our TorchRec trainer, so the demo shows a job
instrumented the way theirs would be — one ``ETTCallback`` on an ordinary Lightning
``Trainer``, no hand-written span. The model is a small click-through-rate ranker (hashed
sparse features through an ``EmbeddingBag``, a dense tower, a logit) on synthetic clicks,
checkpointed every ``--checkpoint-every`` steps. The first attempt crashes at
``--fail-at-step``; the supervisor here restarts it after ``--restart-delay`` seconds from the
last checkpoint, as a scheduler would, so the job page shows a failure, the restart gap, the
checkpoint load and the steps trained again.

Each attempt is a child process (``--attempt N``), so the adapter sees a real process start
and a real crash; the supervisor sets ``ETT_JOB_ID`` and ``ETT_ATTEMPT`` for it. Ctrl-C or
SIGTERM stops the job: the supervisor forwards one SIGINT to the attempt, whose callback ends
it ``cancelled``, waits for it (``trainer.launch.stop``) and restarts nothing.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from trainer.launch import EXIT_CANCELLED, Cancelled, stop

EXIT_INJECTED = 3


def _model(embedding_rows: int, dim: int) -> Any:
    import lightning.pytorch as pl
    import torch
    from torch import nn

    class Ranker(pl.LightningModule):
        """Sparse ids → mean-pooled embeddings, concatenated with dense features → click logit."""

        def __init__(self) -> None:
            super().__init__()
            self.sparse = nn.EmbeddingBag(embedding_rows, dim, mode="mean")
            self.tower = nn.Sequential(nn.Linear(dim + 13, 256), nn.ReLU(),
                                       nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 1))

        def forward(self, dense: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
            return self.tower(torch.cat([dense, self.sparse(ids)], dim=1)).squeeze(1)

        def training_step(self, batch: Any, index: int) -> torch.Tensor:
            dense, ids, clicks = batch
            loss = nn.functional.binary_cross_entropy_with_logits(self(dense, ids), clicks)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.Adagrad(self.parameters(), lr=0.02)

    return Ranker()


def _clicks(steps: int, batch: int, embedding_rows: int) -> Any:
    """Synthetic clicks: a label that depends on the features, so the loss can fall."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    generator = torch.Generator().manual_seed(0)
    size = steps * batch
    dense = torch.randn(size, 13, generator=generator)
    ids = torch.randint(0, embedding_rows, (size, 8), generator=generator)
    clicks = ((dense[:, 0] + (ids[:, 0] % 7 == 0).float()) > 0.5).float()
    return DataLoader(TensorDataset(dense, ids, clicks), batch_size=batch, shuffle=False)


def run_attempt(args: argparse.Namespace) -> int:
    """One attempt: fit from the last checkpoint if there is one; crash where asked."""
    from collector.integrations.lightning import ETTCallback

    callback = ETTCallback(job=args.job, attempt=args.attempt, model="lightning-ranker",
                           team="demo")
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint

    class InjectedFailure(Callback):
        def on_train_batch_end(self, trainer: pl.Trainer, *rest: Any) -> None:
            if args.fail_at_step and args.attempt == 0 and \
                    trainer.global_step >= args.fail_at_step:  # 0: never
                raise RuntimeError(f"injected failure at step {trainer.global_step}")

    checkpoints = Path(args.checkpoint_dir)
    saver = ModelCheckpoint(dirpath=checkpoints, every_n_train_steps=args.checkpoint_every,
                            save_last=True, save_top_k=0)
    trainer = pl.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[callback, saver, InjectedFailure()])
    last = checkpoints / "last.ckpt"
    try:
        trainer.fit(_model(args.embedding_rows, args.dim),
                    _clicks(args.steps, args.batch_size, args.embedding_rows),
                    ckpt_path=str(last) if last.exists() else None)
    except RuntimeError as exc:
        print(f"lightning job: attempt {args.attempt}: {exc}", file=sys.stderr, flush=True)
        return EXIT_INJECTED
    return 0


def _cancel(signum: int, frame: FrameType | None) -> None:
    raise Cancelled(signal.Signals(signum).name)


def supervise(args: argparse.Namespace) -> int:
    """Run attempts until one completes or ``--max-attempts`` are spent; 130 when stopped."""
    signal.signal(signal.SIGINT, _cancel)
    signal.signal(signal.SIGTERM, _cancel)
    try:
        return _attempts(args)
    except Cancelled:
        print(f"lightning job {args.job}: stopped", flush=True)
        return EXIT_CANCELLED


def _attempts(args: argparse.Namespace) -> int:
    env = {**os.environ, "ETT_JOB_ID": args.job}
    status = 1
    for attempt in range(args.max_attempts):
        env["ETT_ATTEMPT"] = str(attempt)
        argv = [sys.executable, "-m", "trainer.lightning_job", *args.argv,
                "--job", args.job, "--checkpoint-dir", args.checkpoint_dir,
                "--attempt", str(attempt)]
        print(f"lightning job {args.job}: attempt {attempt}", flush=True)
        status = _run_attempt(argv, env)
        if status == 0:
            return 0
        if attempt + 1 < args.max_attempts:
            print(f"lightning job {args.job}: attempt {attempt} exited with {status}; "
                  f"restarting from the last checkpoint in {args.restart_delay:g} s", flush=True)
            time.sleep(args.restart_delay)
    return status


def _run_attempt(argv: list[str], env: dict[str, str]) -> int:
    """One attempt in its own session: a terminal's Ctrl-C reaches the supervisor alone,
    which forwards one SIGINT and waits for the callback to end the attempt (Python's own
    wait gave it a quarter of a second, then killed it with the end unwritten)."""
    child = subprocess.Popen(argv, env=env, start_new_session=True)
    try:
        return child.wait()
    except Cancelled:
        stop(child)
        raise


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m trainer.lightning_job", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--job", default=f"lightning-{time.strftime('%Y%m%d-%H%M%S')}",
                        help="job id (default: lightning-<timestamp>)")
    parser.add_argument("--steps", type=int, default=1200, help="global steps to train")
    parser.add_argument("--fail-at-step", type=int, default=700,
                        help="the first attempt crashes at this step (0: never)")
    parser.add_argument("--checkpoint-every", type=int, default=250, help="steps per save")
    parser.add_argument("--checkpoint-dir", default=None,
                        help="where checkpoints go (default var/lightning/JOB; the restart "
                             "resumes from its last.ckpt)")
    parser.add_argument("--restart-delay", type=float, default=3.0,
                        help="seconds between a crash and the restart")
    parser.add_argument("--max-attempts", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--embedding-rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=32, help="embedding dimension")
    parser.add_argument("--attempt", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.checkpoint_dir = args.checkpoint_dir or str(Path("var") / "lightning" / args.job)
    if args.steps < 1 or args.checkpoint_every < 1 or args.max_attempts < 1:
        parser.error("--steps, --checkpoint-every and --max-attempts must be at least 1")
    if not 0 <= args.fail_at_step < args.steps:
        parser.error("--fail-at-step must be between 0 and --steps - 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_attempt(args) if args.attempt is not None else supervise(args)


if __name__ == "__main__":
    sys.exit(main())
