"""Command-line flags of the reference trainer, shared by the supervisor and the training process.

Why one module: the supervisor (``python -m trainer``) validates every flag *before* it starts
any work or imports torch, then forwards the training flags to the child
(``python -m trainer.train``), which parses them with the very same definitions. Keeping both
sides on one parser means a flag can never be accepted by one and refused by the other. This
module imports only the standard library so that ``--help`` and flag errors are instant.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import re
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import NoReturn

from collector.identity import SUPERVISED_ENV as SUPERVISED_ENV
from collector.reporter import DEFAULT_SPOOL_DIR

#: Criteo's layout: 13 dense ("integer") features and 26 categorical ones.
CRITEO_DENSE, CRITEO_SPARSE = 13, 26
DEFAULT_STEPS = 2000
DEFAULT_BATCH = 512
DEFAULT_CHECKPOINT_EVERY = 250
DEFAULT_ROWS = 50_000
DEFAULT_DIM = 64
DEFAULT_MTBF_S = 3600.0

#: The lifecycle optimizations, each a switch (``--opt``), in the order the trainer applies them.
OPTIMIZATIONS = ("init_overlap", "plan_cache", "compile_cache", "dynamic_shapes",
                 "autotune_pruning", "async_checkpoint", "oob_publish", "recovery")
#: Named sets of switches (``--profile``): the two ends that ``bench.lifecycle`` compares.
PROFILES: dict[str, tuple[str, ...]] = {"baseline": (), "optimized": OPTIMIZATIONS}
#: ``--device`` choices; ``auto`` is resolved (to cuda when available) before a config exists.
DEVICES = ("auto", "cpu", "cuda")

# The supervisor -> training process contract (here because this module imports no torch and
# both sides import it).
#: Set by the supervisor just before it spawns a training process (epoch seconds).
LAUNCH_TS_ENV = "ETT_LAUNCH_TS"
# SUPERVISED_ENV (imported from collector.identity, one name for every supervisor): set by
# the supervisor, or by collector.run, which mark the attempts; without it (torchrun
# restarting the ranks itself, or a bare ``python -m trainer.train``) rank 0 marks its own.
#: What makes a process join the job's process group: a helper process (compile warm-up,
#: publisher) is started without it, so it never mistakes itself for a rank.
RANK_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
            "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID")


def helper_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) less :data:`RANK_ENV`, for a helper process."""
    return {key: value for key, value in (os.environ if env is None else env).items()
            if key not in RANK_ENV}


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage dump), as a CLI user expects."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


#: Config fields whose flag is not their name with dashes.
_FLAGS = {"opts": "--opt"}


@dataclass(frozen=True)
class TrainConfig:
    """What one training process needs to know; every field is a flag of the same name."""

    job: str
    steps: int
    batch_size: int
    checkpoint_every: int
    checkpoint_dir: str
    spool_dir: str
    fail_at_steps: tuple[int, ...]
    seed: int
    compile: bool
    embedding_rows: int
    embedding_dim: int
    dense_features: int
    sparse_features: int
    eval_batches: int
    log_every: int
    lr: float
    threads: int
    opts: tuple[str, ...] = ()
    mtbf: float = DEFAULT_MTBF_S
    last_batch_size: int | None = None
    publish: bool = False
    device: str = "cpu"

    def has(self, optimization: str) -> bool:
        """Whether switch ``optimization`` is on (a typo is a bug, not a silent False)."""
        if optimization not in OPTIMIZATIONS:
            raise ValueError(f"unknown optimization {optimization!r}")
        return optimization in self.opts

    def fail_step_of(self, attempt: int) -> int | None:
        """The step at which attempt ``attempt`` crashes, if the failure schedule says so."""
        return self.fail_at_steps[attempt] if attempt < len(self.fail_at_steps) else None

    def batch_size_at(self, step: int) -> int:
        """Samples per rank at global ``step``: the last step may be smaller (a finite data set's
        tail), which is exactly what makes an unmarked compiled model recompile."""
        if step == self.steps - 1 and self.last_batch_size is not None:
            return self.last_batch_size
        return self.batch_size

    @property
    def on_cuda(self) -> bool:
        """Whether the dense part runs on CUDA (the hybrid placement of trainer.model)."""
        return self.device == "cuda"

    def to_argv(self) -> list[str]:
        """The flags that recreate this config in a child process."""
        argv: list[str] = []
        for field in fields(self):
            value = getattr(self, field.name)
            flag = _FLAGS.get(field.name, "--" + field.name.replace("_", "-"))
            if isinstance(value, bool):
                argv.append(flag if value else "--no-" + field.name.replace("_", "-"))
            elif isinstance(value, tuple):
                if value:
                    argv += [flag, ",".join(str(item) for item in value)]
            elif value is not None:
                argv += [flag, str(value)]
        return argv


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def positive_int(text: str) -> int:
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number >= 0")
    return value


def positive_float(text: str) -> float:
    value = non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return value


def optimization_list(text: str) -> tuple[str, ...]:
    """``a,b,...`` of known optimization names (empty = none), in canonical order."""
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = sorted(names - set(OPTIMIZATIONS))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown optimization {', '.join(map(repr, unknown))}; "
            f"known: {','.join(OPTIMIZATIONS)}")
    return tuple(name for name in OPTIMIZATIONS if name in names)


def step_list(text: str) -> tuple[int, ...]:
    """``a,b,...`` of strictly increasing non-negative steps (one failure per attempt)."""
    steps = tuple(non_negative_int(item.strip()) for item in text.split(",") if item.strip())
    if any(b <= a for a, b in itertools.pairwise(steps)):
        raise argparse.ArgumentTypeError(f"{text!r} is not strictly increasing")
    return steps


def mtbf_failure_steps(mean_steps: float, seed: int, total_steps: int) -> tuple[int, ...]:
    """A seeded failure schedule with exponential gaps of mean ``mean_steps`` (a Poisson
    process in steps). Why in steps and drawn up front: baseline and optimized runs of one plan
    must crash at the same steps whatever their speed, so their numbers are comparable."""
    rng = random.Random(seed)
    steps: list[int] = []
    position = 0.0
    while True:
        position += rng.expovariate(1.0 / mean_steps)
        step = int(position)
        if step >= total_steps:
            return tuple(steps)
        if not steps or step > steps[-1]:
            steps.append(step)


def _job_id(text: str) -> str:
    # ETT_SPEC §2: a job id is 1-200 characters.
    if not 1 <= len(text) <= 200:
        raise argparse.ArgumentTypeError("a job id must be 1-200 characters")
    return text


def cuda_device_count() -> int:
    """CUDA devices this process can use (0 without a CUDA build or a GPU).

    Why a lazy import: this module must stay instant for ``--help`` and flag errors; torch is
    imported only when a flag actually asks about CUDA (``--device auto|cuda``).
    """
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def resolve_device(requested: str) -> str:
    """``auto`` → ``cuda`` when a CUDA device is usable, else ``cpu``; ``cpu`` stays ``cpu``
    without importing torch; ``cuda`` is checked. Raises ValueError with a one-line reason."""
    if requested == "cpu":
        return "cpu"
    count = cuda_device_count()
    if requested == "auto":
        return "cuda" if count else "cpu"
    if requested == "cuda":
        if not count:
            raise ValueError("--device cuda: no CUDA device is available here "
                             "(use --device cpu, or auto to pick cuda only when present)")
        return "cuda"
    raise ValueError(f"--device {requested!r}: choose from {', '.join(DEVICES)}")


def default_job() -> str:
    """A fresh job id per invocation, so a default run never resumes someone else's checkpoint."""
    return time.strftime("dlrm-%Y%m%d-%H%M%S", time.gmtime())


def safe_name(text: str) -> str:
    """A job id made safe to use as one path component."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:120].lstrip(".") or "job"


def add_training_args(parser: argparse.ArgumentParser) -> None:
    """The flags of one training process (also accepted, and forwarded, by the supervisor)."""
    job = parser.add_argument_group("job and files")
    job.add_argument("--job", type=_job_id, default=None,
                     help="job id, stable across restarts (default: dlrm-<UTC time>)")
    job.add_argument("--checkpoint-dir", default=None,
                     help="where checkpoints go (default: var/checkpoints/<job>); an existing "
                          "checkpoint there is resumed")
    job.add_argument("--spool-dir", default=None,
                     help="where ETT events are spooled (default: $ETT_SPOOL_DIR or var/spool)")

    run = parser.add_argument_group("training")
    run.add_argument("--steps", type=positive_int, default=DEFAULT_STEPS,
                     help="global steps to train (default: %(default)s)")
    run.add_argument("--batch-size", type=positive_int, default=DEFAULT_BATCH,
                     help="samples per rank per step (default: %(default)s)")
    run.add_argument("--checkpoint-every", type=non_negative_int,
                     default=DEFAULT_CHECKPOINT_EVERY,
                     help="save a checkpoint every N steps; the last step is always saved; "
                          "0 = only at the end (default: %(default)s)")
    run.add_argument("--fail-at-step", type=non_negative_int, default=None,
                     help="crash (exit 1) on reaching this step, on attempt 0 only")
    run.add_argument("--fail-at-steps", type=step_list, default=None, metavar="A,B,...",
                     help="failure schedule: attempt i crashes on reaching the i-th step")
    run.add_argument("--fail-mtbf-steps", type=positive_float, default=None,
                     help="seeded random failure schedule: mean steps between failures")
    run.add_argument("--fail-seed", type=non_negative_int, default=0,
                     help="seed of the --fail-mtbf-steps schedule (default: %(default)s)")
    run.add_argument("--last-batch-size", type=positive_int, default=None,
                     help="samples per rank of the last step (a finite data set's tail; "
                          "default: --batch-size)")
    run.add_argument("--publish", action=argparse.BooleanOptionalAction, default=False,
                     help="export the final model as an inference artifact (default: off)")

    opt = parser.add_argument_group("lifecycle optimizations")
    opt.add_argument("--profile", choices=sorted(PROFILES), default=None,
                     help="a named set of optimizations: baseline (none) or optimized (all)")
    opt.add_argument("--opt", type=optimization_list, default=(), metavar="A,B,...",
                     help="optimizations to switch on, added to --profile: "
                          + ", ".join(OPTIMIZATIONS))
    opt.add_argument("--mtbf", type=positive_float, default=DEFAULT_MTBF_S,
                     help="expected seconds between failures, for the Young/Daly checkpoint "
                          "interval of --opt recovery (default: %(default)s)")
    run.add_argument("--seed", type=non_negative_int, default=0,
                     help="seed of the model init and the synthetic data (default: %(default)s)")
    # Why cpu by default and not auto: the same command must behave the same on a developer's
    # machine and in CI whatever hardware happens to be there; CUDA is asked for explicitly.
    run.add_argument("--device", choices=DEVICES, default="cpu",
                     help="where the dense, interaction and over arches run; the embedding "
                          "tables stay on CPU (fbgemm CPU kernels) either way; auto = cuda "
                          "when available (default: %(default)s)")
    run.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                     help="torch.compile the dense and over arch (default: on)")
    run.add_argument("--lr", type=positive_float, default=0.05,
                     help="learning rate (default: %(default)s)")
    run.add_argument("--eval-batches", type=non_negative_int, default=4,
                     help="batches of the final evaluation; 0 = none (default: %(default)s)")
    # Why 1 by default: with 2 OpenMP threads per rank, any other busy process on a small
    # machine makes them spin-wait, and throughput fell from 20-35 to 4-11 steps/s (measured on
    # 2 cores); one thread per rank keeps step times steady, which ETT's numbers rely on.
    run.add_argument("--threads", type=positive_int, default=1,
                     help="CPU threads per rank for tensor ops (default: %(default)s)")
    run.add_argument("--log-every", type=positive_int, default=10,
                     help="print a progress line every N steps (default: %(default)s)")

    model = parser.add_argument_group("model size")
    model.add_argument("--embedding-rows", type=positive_int, default=DEFAULT_ROWS,
                       help="rows of each embedding table (default: %(default)s)")
    model.add_argument("--embedding-dim", type=positive_int, default=DEFAULT_DIM,
                       help="embedding dimension (default: %(default)s)")
    model.add_argument("--dense-features", type=positive_int, default=CRITEO_DENSE,
                       help="dense features per sample (default: %(default)s, as Criteo)")
    model.add_argument("--sparse-features", type=positive_int, default=CRITEO_SPARSE,
                       help="sparse features = embedding tables (default: %(default)s)")


def config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> TrainConfig:
    """Build a TrainConfig, rejecting combinations of flags that no single flag can check."""
    fail_at_steps = _failure_schedule(args, parser)
    if args.last_batch_size is not None and args.last_batch_size > args.batch_size:
        parser.error(f"--last-batch-size {args.last_batch_size} is larger than --batch-size "
                     f"{args.batch_size}")
    opts = optimization_list(",".join((*PROFILES[args.profile or "baseline"], *args.opt)))
    try:
        device = resolve_device(args.device)
    except ValueError as exc:
        parser.error(str(exc))
    job = args.job or default_job()
    checkpoint_dir = args.checkpoint_dir or str(Path("var/checkpoints") / safe_name(job))
    spool_dir = args.spool_dir or _env_spool_dir()
    return TrainConfig(
        job=job, steps=args.steps, batch_size=args.batch_size,
        checkpoint_every=args.checkpoint_every,
        checkpoint_dir=str(Path(checkpoint_dir).absolute()),
        spool_dir=str(Path(spool_dir).absolute()), fail_at_steps=fail_at_steps,
        seed=args.seed, compile=args.compile, embedding_rows=args.embedding_rows,
        embedding_dim=args.embedding_dim, dense_features=args.dense_features,
        sparse_features=args.sparse_features, eval_batches=args.eval_batches,
        log_every=args.log_every, lr=args.lr, threads=args.threads, opts=opts,
        mtbf=args.mtbf, last_batch_size=args.last_batch_size, publish=args.publish,
        device=device,
    )


def _failure_schedule(args: argparse.Namespace, parser: argparse.ArgumentParser
                      ) -> tuple[int, ...]:
    """One schedule from whichever failure flag was given; every step must come before the end."""
    given = [flag for flag, value in (("--fail-at-step", args.fail_at_step),
                                      ("--fail-at-steps", args.fail_at_steps),
                                      ("--fail-mtbf-steps", args.fail_mtbf_steps))
             if value is not None]
    if len(given) > 1:
        parser.error(f"{' and '.join(given)} are exclusive: give one failure schedule")
    if args.fail_at_step is not None:
        schedule: tuple[int, ...] = (args.fail_at_step,)
        flag = "--fail-at-step"
    elif args.fail_mtbf_steps is not None:
        return mtbf_failure_steps(args.fail_mtbf_steps, args.fail_seed, args.steps)
    else:
        schedule, flag = args.fail_at_steps or (), "--fail-at-steps"
    late = [step for step in schedule if step >= args.steps]
    if late:
        parser.error(f"{flag} {late[0]} is not before the last step "
                     f"(--steps {args.steps}); use 0..{args.steps - 1}")
    return schedule


def _env_spool_dir() -> str:
    return os.environ.get("ETT_SPOOL_DIR") or DEFAULT_SPOOL_DIR


def parse_train_config(argv: list[str] | None = None, prog: str | None = None) -> TrainConfig:
    """Parse the flags of one training process (``python -m trainer.train``)."""
    parser = OneLineParser(prog=prog or "python -m trainer.train",
                           description="One training process of the reference DLRM trainer.")
    add_training_args(parser)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return config_from_args(args, parser)
