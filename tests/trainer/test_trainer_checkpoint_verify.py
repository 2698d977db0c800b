"""A damaged checkpoint is never loaded: the manifest catches it and the previous one is used."""

from __future__ import annotations

from pathlib import Path

from trainer.checkpoint import latest_verified, verify, write_manifest


def make_checkpoint(directory: Path, step: int, payload: bytes) -> Path:
    folder = directory / f"step-{step:08d}"
    folder.mkdir(parents=True)
    (folder / ".metadata").write_bytes(b"meta")
    (folder / "__0_0.distcp").write_bytes(payload)
    write_manifest(folder, step)
    return folder


def test_intact_checkpoint_verifies(tmp_path: Path) -> None:
    assert verify(make_checkpoint(tmp_path, 10, b"weights" * 100)) is None


def test_corrupted_truncated_or_unmanifested_checkpoints_fall_back(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 10, b"good" * 50)
    flipped = make_checkpoint(tmp_path, 20, b"abcd" * 50)
    truncated = make_checkpoint(tmp_path, 30, b"wxyz" * 50)
    unmanifested = make_checkpoint(tmp_path, 40, b"qrst" * 50)
    data = flipped / "__0_0.distcp"
    data.write_bytes(b"abce" + data.read_bytes()[4:])  # same size, one byte changed
    (truncated / "__0_0.distcp").write_bytes(b"wxyz")
    (unmanifested / "manifest.json").unlink()
    said: list[str] = []
    assert latest_verified(tmp_path, said.append) == 10
    assert said == [
        "checkpoint step-00000040 is damaged (no readable manifest (FileNotFoundError)); "
        "falling back to the previous one",
        "checkpoint step-00000030 is damaged (__0_0.distcp has 4 bytes, expected 200); "
        "falling back to the previous one",
        "checkpoint step-00000020 is damaged (__0_0.distcp fails its checksum); "
        "falling back to the previous one",
    ]


def test_nothing_verified_means_a_fresh_start(tmp_path: Path) -> None:
    folder = make_checkpoint(tmp_path, 5, b"x")
    (folder / "__0_0.distcp").unlink()
    assert latest_verified(tmp_path, lambda _: None) is None
