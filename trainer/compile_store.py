"""Compile caches shared across jobs: the store a new job of the same model starts from.

Why: the ``compile_cache`` switch keeps a job's PT2 caches beside its checkpoints, so its
restarts compile warm — but every *new* job of the same model still pays a cold first compile
(measured on 2 cores: 48.6 s for the first attempt against 6.5 to 10.1 s for the restarts). The
paper's reusable compilation caches are reused across jobs. The store holds one entry per
*artifact key*: everything that decides whether compiled artifacts can be reused — the model
and its config (shapes, batch sizes, the switches that change the graphs, Inductor's options),
the torch, TorchRec and Python versions, the device (CPU instruction set or GPU model) and the
world size. Change any of them and the key, hence the entry, changes: a different model or
torch version never hits.

An entry is one tar file, ``<key>.tar``, whose first member is a manifest (every file's size and
CRC-32) and whose other members are the job's cache folder: Inductor's FX-graph and AOTAutograd
caches and the built C++ kernels on CPU (PYTORCH_NOTES: the portable mega-cache does not carry
those, so the whole folder travels), plus the mega-cache artifacts (:data:`MEGA_CACHE_FILE`),
which bundle the Triton kernels, on a GPU. Why one file: it is written under a temporary name
and renamed into place (``os.replace`` is atomic), so two jobs publishing at once leave one
complete entry — the last one renamed — and a reader never sees half of one. A damaged entry
(truncated, a file that fails its checksum, not a tar at all) is skipped with a message naming
the problem; the job then compiles as if the store were empty and its publish replaces the
entry.

Entries run as code in every later job, so they are **signed**: after the tar comes a
trailer, ``SIGNATURE_TAG`` and the HMAC-SHA256 of every byte before it (manifest and files)
under the store's key (``trainer.store_key``). A fetch checks it before unpacking anything;
an unsigned entry, or one whose signature does not match this key (forged, altered, or
signed under another key), is refused with the reason like a damaged one, and the job's
publish replaces it with an entry signed under its own key. The CRC-32s in the manifest
still catch damage; the signature is what makes their values trustworthy.

The supervisor fetches an entry into a new job's empty cache folder before its first attempt
and publishes the folder after an attempt that added to it. This module imports no torch: the
supervisor, which must stay instant for ``--help``, uses it.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import platform
import shutil
import tarfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, BinaryIO

from trainer.config import TrainConfig
from trainer.integrity import CHUNK, crc32_of, write_atomic

STORE_ENV = "ETT_COMPILE_STORE"
STORE_FOLDER = "compile-store"
MANIFEST = "ett-compile-store-manifest.json"
#: The trailer after an entry's tar (tar readers stop at the archive's end and never see it):
#: this tag, 64 hex characters of HMAC-SHA256, a newline.
SIGNATURE_TAG = b"\nett-compile-store hmac-sha256 "
SIGNATURE_LEN = len(SIGNATURE_TAG) + 64 + 1
#: The GPU's mega-cache artifacts (``torch.compiler.save_cache_artifacts``) in a cache folder.
MEGA_CACHE_FILE = "mega-cache.bin"
#: Inductor's CPU vector-ISA verdict for this machine (trainer.pt2.settle_cpu_vec_isa): shared
#: like an artifact, but alone it does not make a cache warm.
VEC_ISA_FILE = "ett-vec-isa.json"
#: What in a cache folder is not an artifact: lock files of the warm-up handoff and of
#: Inductor itself, and half-written temporary files.
_SKIPPED_SUFFIXES = (".lock", ".tmp")
#: Versions that decide whether artifacts are reusable (distribution name -> key field).
_VERSIONED = ("torch", "torchrec", "fbgemm-gpu-cpu", "fbgemm-gpu", "triton")


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    """The CPU's model name: built C++ kernels are specific to its instruction set."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def gpu_model() -> str:
    """The GPU's model name (CUDA kernels are built for it), without importing torch."""
    import subprocess

    try:
        found = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return "unknown-gpu"
    return found.stdout.splitlines()[0].strip() if found.stdout.strip() else "unknown-gpu"


def artifact_key(cfg: TrainConfig, world_size: int,
                 device_model: str | None = None) -> dict[str, Any]:
    """Everything that decides whether one job's compiled artifacts serve another, spelled out.

    The model config is the trainer's whole model (shape, batch sizes) and the switches that
    change what is compiled (``dynamic_shapes``, ``autotune_pruning``); the thread count is in
    it because Inductor's C++ kernels are built for it. ``init_overlap`` and the other
    switches change when things are compiled, not what, so they are not.
    """
    if device_model is None:
        device_model = gpu_model() if cfg.on_cuda else cpu_model()
    return {
        "model": "dlrm",
        "config": {"embedding_rows": cfg.embedding_rows, "embedding_dim": cfg.embedding_dim,
                   "dense_features": cfg.dense_features,
                   "sparse_features": cfg.sparse_features, "batch_size": cfg.batch_size,
                   "last_batch_size": cfg.last_batch_size, "threads": cfg.threads,
                   "dynamic_shapes": cfg.has("dynamic_shapes"),
                   "autotune_pruning": cfg.has("autotune_pruning")},
        "versions": {"python": platform.python_version(),
                     **{name: _version(name) for name in _VERSIONED}},
        "device": {"type": cfg.device, "model": device_model, "machine": platform.machine()},
        "world_size": world_size,
    }


def key_digest(key: dict[str, Any]) -> str:
    """A stable hex digest of an artifact key (the entry's file name)."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Outcome:
    """What a fetch or publish did, for the supervisor's message and the span's attrs."""

    status: str  # fetch: hit / miss / damaged; publish: published / unchanged / failed
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    reason: str = ""

    def attrs(self) -> dict[str, Any]:
        found = {"store": self.status, "store_files": self.files, "store_bytes": self.bytes}
        return {**found, "store_reason": self.reason} if self.reason else found

    def describe(self) -> str:
        size = f"{self.files} files, {self.bytes / 1e6:.1f} MB, {self.seconds:.2f} s"
        return f"{self.status} ({size})" + (f": {self.reason}" if self.reason else "")


class Damaged(Exception):
    """A store entry that must not be used; the message names the problem."""


def _artifacts(folder: Path) -> Iterator[Path]:
    """The artifact files under ``folder`` (sorted, so an entry's layout is reproducible)."""
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink() and not path.name.endswith(_SKIPPED_SUFFIXES):
            yield path


def has_artifacts(folder: Path) -> bool:
    """Whether ``folder`` holds any compiled artifact (lock files and the ISA verdict do not
    count: a folder with only those compiles cold)."""
    return folder.is_dir() and any(path.name != VEC_ISA_FILE for path in _artifacts(folder))


def folder_manifest(folder: Path) -> dict[str, list[int]]:
    """``relative path -> [size, CRC-32]`` of every artifact under ``folder``."""
    return {path.relative_to(folder).as_posix(): [path.stat().st_size, crc32_of(path)]
            for path in _artifacts(folder)}


class CompileStore:
    """The shared store: a folder of ``<key digest>.tar`` entries (and a readable ``.json``
    of each key beside it, for whoever lists the folder)."""

    def __init__(self, root: Path, key: bytes) -> None:
        self.root = root
        self.key = key

    def entry(self, key: dict[str, Any]) -> Path:
        return self.root / f"{key_digest(key)}.tar"

    def fetch(self, key: dict[str, Any], into: Path) -> tuple[Outcome, dict[str, list[int]]]:
        """Fill the empty folder ``into`` from the entry for ``key``; returns what happened and
        the manifest of what was put there (empty unless a hit).

        The entry is unpacked into a temporary folder beside ``into`` and checked file by file
        against its manifest before it is renamed into place: a damaged entry leaves ``into``
        as it was (absent or empty), so the job compiles cold.
        """
        started = time.monotonic()
        entry = self.entry(key)
        if not entry.is_file():
            return Outcome("miss", seconds=time.monotonic() - started), {}
        into.parent.mkdir(parents=True, exist_ok=True)
        if has_artifacts(into):
            return Outcome("miss", seconds=time.monotonic() - started,
                           reason=f"{into} already holds caches"), {}
        staging = into.with_name(f"{into.name}.fetch-{os.getpid()}.tmp")
        shutil.rmtree(staging, ignore_errors=True)
        try:
            check_signature(entry, self.key)
            manifest = _unpack(entry, staging)
            shutil.rmtree(into, ignore_errors=True)  # no artifacts: at most old lock files
            staging.rename(into)
        except (Damaged, OSError) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            problem = str(exc) if isinstance(exc, Damaged) else f"{type(exc).__name__}: {exc}"
            return Outcome("damaged", seconds=time.monotonic() - started,
                           reason=f"{entry.name}: {problem}"), {}
        return Outcome("hit", len(manifest), sum(size for size, _ in manifest.values()),
                       time.monotonic() - started), manifest

    def publish(self, key: dict[str, Any], folder: Path,
                known: dict[str, list[int]] | None = None) -> tuple[Outcome, dict[str, list[int]]]:
        """Write ``folder``'s artifacts as the entry for ``key``, unless they are ``known``
        (what was fetched or last published: nothing new to share). Returns what happened and
        the manifest now in the store."""
        started = time.monotonic()
        try:
            manifest = folder_manifest(folder)
            if not manifest or manifest == known:
                return Outcome("unchanged", len(manifest), seconds=time.monotonic() - started), \
                    manifest
            self.root.mkdir(parents=True, exist_ok=True)
            entry = self.entry(key)
            tmp = entry.with_name(f"{entry.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
            try:
                _pack(folder, manifest, tmp, self.key)
                tmp.replace(entry)
            finally:
                tmp.unlink(missing_ok=True)
            write_atomic(entry.with_suffix(".json"), json.dumps(key, indent=2, sort_keys=True))
        except OSError as exc:  # a store that cannot be written must not fail the job
            return Outcome("failed", seconds=time.monotonic() - started,
                           reason=f"{exc.__class__.__name__}: {exc}"), known or {}
        return Outcome("published", len(manifest), sum(size for size, _ in manifest.values()),
                       time.monotonic() - started), manifest


def _pack(folder: Path, manifest: dict[str, list[int]], tar_path: Path, key: bytes) -> None:
    """The manifest first (a reader checks every file against it), then every artifact, then
    the signature over all of it."""
    body = json.dumps({"files": manifest}).encode()
    with tar_path.open("w+b") as file:
        with tarfile.open(fileobj=file, mode="w") as tar:
            info = tarfile.TarInfo(MANIFEST)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
            for name in manifest:
                tar.add(folder / name, arcname=name, recursive=False)
        signature = _mac(file, key, file.seek(0, os.SEEK_END))
        file.seek(0, os.SEEK_END)
        file.write(SIGNATURE_TAG + signature.encode() + b"\n")
        file.flush()
        os.fsync(file.fileno())  # on disk before the rename makes it the entry


def _mac(file: BinaryIO, key: bytes, length: int) -> str:
    """HMAC-SHA256 of the first ``length`` bytes of ``file``, as hex."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    file.seek(0)
    left = length
    while left > 0 and (chunk := file.read(min(CHUNK, left))):
        mac.update(chunk)
        left -= len(chunk)
    return mac.hexdigest()


def check_signature(entry: Path, key: bytes) -> None:
    """Raise Damaged unless ``entry`` ends in a signature of everything before it under
    ``key``."""
    with entry.open("rb") as file:
        size = file.seek(0, os.SEEK_END)
        if size < SIGNATURE_LEN:
            raise Damaged("unsigned (no signature: written without a store key, or cut short)")
        file.seek(size - SIGNATURE_LEN)
        trailer = file.read(SIGNATURE_LEN)
        if not trailer.startswith(SIGNATURE_TAG) or not trailer.endswith(b"\n"):
            raise Damaged("unsigned (no signature: written without a store key, or cut short)")
        signature = trailer[len(SIGNATURE_TAG):-1].decode("ascii", "replace")
        if not hmac.compare_digest(signature, _mac(file, key, size - SIGNATURE_LEN)):
            raise Damaged("signature does not match this store's key: altered, forged, or "
                          "signed with another key")


def _unpack(entry: Path, into: Path) -> dict[str, list[int]]:
    """Unpack ``entry`` into the new folder ``into``, verifying every file; raises Damaged."""
    try:
        with tarfile.open(entry, "r:") as tar:
            first = tar.next()
            if first is None or first.name != MANIFEST:
                raise Damaged("no manifest (not written by this store)")
            raw = tar.extractfile(first)
            assert raw is not None
            manifest: dict[str, list[int]] = json.loads(raw.read())["files"]
            seen: set[str] = set()
            into.mkdir(parents=True)
            root = into.resolve()
            while (member := tar.next()) is not None:  # iterating would start over
                if member.name not in manifest or not member.isfile():
                    raise Damaged(f"unexpected member {member.name!r}")
                size, crc = manifest[member.name]
                target = (root / member.name).resolve()
                if root not in target.parents:
                    raise Damaged(f"member {member.name!r} points outside its folder")
                source = tar.extractfile(member)
                assert source is not None
                target.parent.mkdir(parents=True, exist_ok=True)
                got_crc, got_size = 0, 0
                with target.open("wb") as out:
                    while chunk := source.read(CHUNK):
                        got_crc = zlib.crc32(chunk, got_crc)
                        got_size += len(chunk)
                        out.write(chunk)
                if (got_size, got_crc) != (size, crc):
                    raise Damaged(f"{member.name} fails its checksum")
                seen.add(member.name)
    except (tarfile.TarError, EOFError, ValueError, KeyError, TypeError) as exc:
        raise Damaged(f"unreadable ({exc.__class__.__name__}: {exc})") from None
    missing = sorted(set(manifest) - seen)
    if missing:
        raise Damaged(f"{len(missing)} file(s) missing, first {missing[0]!r}")
    return manifest
