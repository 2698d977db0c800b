"""Correctness of recovery: a run with failures and restarts ends with the *same* parameters,
bit for bit, as an uninterrupted run with the same seed.

Why bitwise is possible: the data is a pure function of the step, a checkpoint holds the model,
both optimizers' state and the loader's position, and one thread per rank keeps the CPU kernels
deterministic. Compile is off to keep the test under a minute (compiled and eager runs
checkpoint the same parameter names; test_trainer_launch covers compiled restarts).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from trainer_runs import TrainerRun, run_supervisor

pytestmark = pytest.mark.integration  # real supervisor and trainer processes

STEPS = 24
SMALL = ("--no-compile", "--steps", str(STEPS), "--batch-size", "32", "--embedding-rows", "300",
         "--embedding-dim", "8", "--checkpoint-every", "5", "--eval-batches", "0",
         "--restart-delay", "0", "--seed", "11")


def final_state(run: TrainerRun, tmp: Path) -> dict[str, Any]:
    target = tmp / "final.pt"
    dcp_to_torch_save(str(run.checkpoint_dir / f"step-{STEPS:08d}"), str(target))
    state: dict[str, Any] = torch.load(target, weights_only=False)
    return state


def flatten(tree: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    if isinstance(tree, dict):
        out: dict[str, torch.Tensor] = {}
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}{key}/"))
        return out
    return {prefix: tree} if isinstance(tree, torch.Tensor) else {}


@pytest.mark.parametrize("profile", ["baseline", "optimized"])
def test_failures_and_restarts_end_in_the_uninterrupted_model(
        profile: str, tmp_path: Path, compile_cache: Path) -> None:
    clean = run_supervisor(tmp_path / "clean", *SMALL, "--job", "clean", cache=compile_cache)
    crashed = run_supervisor(tmp_path / "crashed", *SMALL, "--job", "crashed",
                             "--profile", profile, "--mtbf", "30",
                             "--fail-at-steps", "7,16", cache=compile_cache)
    assert clean.returncode == 0, clean.stderr[-2000:]
    assert crashed.returncode == 0, crashed.stderr[-2000:]
    assert crashed.stderr.count("simulated failure") == 2
    expected = flatten(final_state(clean, tmp_path))
    got = flatten(final_state(crashed, tmp_path))
    assert expected.keys() == got.keys() and len(expected) > 10
    assert any(k.startswith("model/") and "sparse_arch" in k for k in expected)
    differing = [k for k in expected if not torch.equal(expected[k], got[k])]
    assert differing == []
    assert_every_step_trained_once_after_its_checkpoint(crashed)


def assert_every_step_trained_once_after_its_checkpoint(run: TrainerRun) -> None:
    """No step skipped; a step is trained again only after a restart from a checkpoint."""
    events = run.events()
    trains = sorted((e for e in events if e["kind"] == "span" and e["phase"] == "train"),
                    key=lambda e: (e["attempt"], e["start"]))
    loads = {e["attempt"]: e["attrs"]["step"] for e in events
             if e["kind"] == "span" and e["phase"] == "checkpoint_load"}
    covered: set[int] = set()
    for attempt in sorted({e["attempt"] for e in trains}):
        ranges = [(e["step_start"], e["step_end"]) for e in trains if e["attempt"] == attempt]
        assert ranges[0][0] == loads.get(attempt, 0)  # resumes exactly at its checkpoint
        for (_, end), (start, _) in itertools.pairwise(ranges):
            assert start == end  # contiguous within an attempt: nothing skipped
        covered.update(range(ranges[0][0], ranges[-1][1]))
    assert covered == set(range(STEPS))


def test_a_start_with_only_damaged_checkpoints_trains_from_the_seeded_init(
        tmp_path: Path, compile_cache: Path) -> None:
    """init_overlap skips the tables' random init when a checkpoint is there to load; if every
    checkpoint then fails verification, the held-back init runs after all, from the RNG state
    it would have had, so the job trains exactly the model of a clean start."""
    clean = run_supervisor(tmp_path / "clean", *SMALL, "--job", "clean", cache=compile_cache)
    damaged = tmp_path / "damaged" / "checkpoints" / f"step-{3:08d}"
    damaged.mkdir(parents=True)
    (damaged / ".metadata").write_bytes(b"not a checkpoint")  # listed, but has no manifest
    resumed = run_supervisor(tmp_path / "damaged", *SMALL, "--job", "damaged",
                             "--opt", "init_overlap", cache=compile_cache)
    assert clean.returncode == 0, clean.stderr[-2000:]
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "embedding tables initialized now" in resumed.stdout + resumed.stderr
    stages = [e["attrs"] for e in resumed.events()
              if e["kind"] == "span" and e["phase"] == "model_init"]
    assert {"stage": "shard", "table_init": "deferred"} in stages
    assert {"stage": "table_init"} in stages
    expected = flatten(final_state(clean, tmp_path))
    got = flatten(final_state(resumed, tmp_path))
    assert expected.keys() == got.keys()
    assert [k for k in expected if not torch.equal(expected[k], got[k])] == []
