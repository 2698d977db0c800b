"""Which folders count as good checkpoints: only renamed, complete ones."""

from __future__ import annotations

from pathlib import Path

from trainer.checkpoint import checkpoint_path, good_checkpoints


def make(directory: Path, name: str, *, metadata: bool) -> None:
    (directory / name).mkdir(parents=True)
    if metadata:
        (directory / name / ".metadata").write_bytes(b"x")


def test_only_complete_renamed_checkpoints_are_good(tmp_path: Path) -> None:
    make(tmp_path, "step-00000010", metadata=True)
    make(tmp_path, "step-00000030", metadata=True)
    make(tmp_path, "step-00000040.tmp", metadata=True)  # crashed between save and rename
    make(tmp_path, "step-00000050", metadata=False)  # crashed mid-write (never renamed here)
    make(tmp_path, "notes", metadata=True)
    assert good_checkpoints(tmp_path) == [(10, tmp_path / "step-00000010"),
                                          (30, tmp_path / "step-00000030")]


def test_missing_directory_has_no_checkpoints(tmp_path: Path) -> None:
    assert good_checkpoints(tmp_path / "absent") == []


def test_names_sort_by_step() -> None:
    assert checkpoint_path(Path("/c"), 7).name == "step-00000007"
    assert checkpoint_path(Path("/c"), 123456).name == "step-00123456"
