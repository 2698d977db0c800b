"""The last completed step of a training process, kept where it outlives a SIGKILL.

Why a file mapped into memory: a ``train`` span is written when its slice closes, so a
process killed outright (the OOM killer, SIGKILL, a segfault, ``os._exit``) takes its open
slice with it, and its last heartbeat is up to a heartbeat interval old. ETT_SPEC §3 rule 3
lets a heartbeat's ``step`` stand for that slice; for the count to be exact, the last step
and its time must survive the process without a system call per step. A
:class:`ProgressWriter` maps a small per-rank file (``<stream>.progress`` in the spool
directory) and stores each completed step in it: one 32-byte write into the mapped page,
which the kernel keeps in the page cache however the process dies. Whoever outlives it
(``collector.run`` when its command exits, the node agent between batches) reads the file
with :func:`claim_orphans` and writes a final ``heartbeat`` mark on the process's behalf,
with its job, attempt, rank, host, step and the step's time.

The layout (little-endian), 4096 bytes::

    0   8  magic  b"ETTPROG1"
    16  32 slot 0: seq, step, time in µs, check      (four u64)
    48  32 slot 1: the same
    80  4  length of the identity JSON, then the JSON ({"job", "attempt", "rank", "host"})

Each update goes to the other slot with the next ``seq``, and ``check`` = ``seq ^ step ^
time ^ CHECK_SALT``: a write torn by the kill fails its check and the reader takes the other
slot (one step earlier). The writer holds an ``flock`` on the file for as long as it lives;
the kernel drops it when the process dies, so a reader that can take the lock knows the
writer is gone (no pid, which another container's view would not share). A file appears
under its final name only once locked and written (made under a temporary name and
renamed), and is deleted by a clean shutdown or by whoever claims it. Nothing here raises
into training: the writer turns every OSError into "no progress file" and logs it once.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import mmap
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PROGRESS_SUFFIX", "Progress", "ProgressWriter", "claim_orphans", "read_progress"]

log = logging.getLogger("ett.progress")

PROGRESS_SUFFIX = ".progress"
MAGIC = b"ETTPROG1"
SIZE = 4096
CHECK_SALT = 0x45_54_54_50_52_4F_47_31  # "ETTPROG1"
_MASK = (1 << 64) - 1
_SLOT = struct.Struct("<QQQQ")
_SLOTS = (16, 48)
_IDENTITY_AT = 80
_LENGTH = struct.Struct("<I")


@dataclass(frozen=True)
class Progress:
    """What a progress file says: whose it is, and the last step it completed, when."""

    job: str
    attempt: int
    rank: int
    host: str
    step: int
    ts: float


class ProgressWriter:
    """One process's progress file; :meth:`record` is one write into memory, no system call.

    Made by :meth:`open`, which returns None (and logs once) when the file cannot be made:
    training goes on without it.
    """

    def __init__(self, path: Path, fd: int, view: mmap.mmap) -> None:
        self.path = path
        self._fd: int | None = fd
        self._view: mmap.mmap | None = view
        self._seq = 0

    @classmethod
    def open(cls, directory: Path, stream: str, identity: dict[str, Any]) -> ProgressWriter | None:
        """Create, lock and map ``<directory>/<stream>.progress``; None if it cannot be."""
        try:
            return cls._create(directory, stream, identity)
        except (OSError, ValueError) as exc:
            log.warning("ETT reporter: no progress file in %s (%s): a hard kill loses the "
                        "steps since the last heartbeat", directory, exc)
            return None

    @classmethod
    def _create(cls, directory: Path, stream: str, identity: dict[str, Any]) -> ProgressWriter:
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / f"{stream}{PROGRESS_SUFFIX}"
        temporary = directory / f".{stream}{PROGRESS_SUFFIX}.tmp"
        fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(fd, _header(identity))
            view = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            os.rename(temporary, final)  # visible only now: locked, whole, mapped
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        return cls(final, fd, view)

    def record(self, step: int, ts: float) -> None:
        """``step`` global steps are done, the last at ``ts`` (epoch seconds)."""
        view = self._view
        if view is None:
            return
        seq = self._seq = self._seq + 1
        micros = int(ts * 1e6)
        try:
            _SLOT.pack_into(view, _SLOTS[seq & 1], seq, step, micros,
                            seq ^ step ^ micros ^ CHECK_SALT)
        except (ValueError, TypeError, struct.error):  # a step beyond u64, a closed map
            self._view = None

    def close(self, *, remove: bool = True) -> None:
        """Unmap and unlock; ``remove``: delete the file (a clean end has nothing to tell)."""
        view, self._view = self._view, None
        fd, self._fd = self._fd, None
        if remove:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        with contextlib.suppress(OSError, ValueError, BufferError):
            if view is not None:
                view.close()
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def forget_after_fork(self) -> None:
        """In a forked child: let go of the parent's file without unlocking or deleting it.

        The child's copy of the descriptor shares the parent's lock, so it is closed here
        (the parent keeps the lock); the child records nothing into the parent's file."""
        self.close(remove=False)


def _header(identity: dict[str, Any]) -> bytes:
    text = json.dumps(identity, ensure_ascii=False, separators=(",", ":")).encode()
    if _IDENTITY_AT + _LENGTH.size + len(text) > SIZE:
        raise ValueError("identity too long for a progress file")
    head = bytearray(SIZE)
    head[:len(MAGIC)] = MAGIC
    _LENGTH.pack_into(head, _IDENTITY_AT, len(text))
    start = _IDENTITY_AT + _LENGTH.size
    head[start:start + len(text)] = text
    return bytes(head)


def read_progress(data: bytes) -> Progress | None:
    """A progress file's content; None when it is not one or holds no intact step."""
    if len(data) < SIZE or data[:len(MAGIC)] != MAGIC:
        return None
    best: tuple[int, int, int] | None = None
    for offset in _SLOTS:
        seq, step, micros, check = _SLOT.unpack_from(data, offset)
        if seq and check == seq ^ step ^ micros ^ CHECK_SALT and (best is None or seq > best[0]):
            best = (seq, step, micros)
    if best is None:
        return None
    (length,) = _LENGTH.unpack_from(data, _IDENTITY_AT)
    start = _IDENTITY_AT + _LENGTH.size
    try:
        ident = json.loads(data[start:start + length])
        return Progress(str(ident["job"]), int(ident["attempt"]), int(ident["rank"]),
                        str(ident["host"]), best[1], best[2] / 1e6)
    except (ValueError, KeyError, TypeError):
        return None


#: Writes the final heartbeat of a claimed file (the caller's Reporter factory).
Emit = Callable[[Progress], None]


def claim_orphans(directory: Path, emit: Emit, *, job: str | None = None) -> list[Progress]:
    """Turn the progress files of processes that are gone into final heartbeats.

    A file whose lock can be taken has no writer left. Under the lock its step is handed to
    ``emit`` and the file deleted, so two claimants (the wrapper and the node agent) never
    both emit it. ``job``: only that job's files (the wrapper claims its own job's). A
    temporary file left by a writer killed while making it is deleted. Never raises: a file
    that cannot be read or emitted is left for the next look.
    """
    claimed: list[Progress] = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return claimed
    for name in names:
        path = directory / name
        if name.startswith(".") and name.endswith(PROGRESS_SUFFIX + ".tmp"):
            _locked_do(path, functools.partial(_forget, path))
        elif name.endswith(PROGRESS_SUFFIX):
            found = _locked_do(path, functools.partial(_claim, path, emit=emit, job=job))
            if found is not None:
                claimed.append(found)
    return claimed


def _locked_do(path: Path, action: Callable[[int], Any]) -> Any:
    """``action(fd)`` under the file's lock, when its writer is gone; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_nlink == 0:  # claimed by another while this one looked
            return None
        return action(fd)
    except OSError:  # still locked: its writer lives
        return None
    finally:
        os.close(fd)


#: Files this process claimed but could not delete (a spool with the sticky bit, owned by
#: another user), by device, inode and change time: never emitted twice from here.
_UNDELETABLE: set[tuple[int, int, int]] = set()


def _claim(path: Path, fd: int, *, emit: Emit, job: str | None) -> Progress | None:
    """Emit the file's step and delete it, under its lock (so it is emitted once)."""
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino, st.st_ctime_ns)
    progress = read_progress(os.pread(fd, SIZE, 0))
    if key in _UNDELETABLE or (progress is not None and job not in (None, progress.job)):
        return None
    if progress is not None:
        try:
            emit(progress)
        except Exception as exc:  # left in place: the next look tries again
            log.warning("cannot write the final heartbeat of %s: %s", progress, exc)
            return None
    try:
        os.unlink(path)  # emitted, or no step was ever recorded: nothing more to tell
    except FileNotFoundError:
        pass
    except OSError as exc:
        _UNDELETABLE.add(key)
        log.warning("cannot delete the claimed progress file %s (%s); it is not claimed "
                    "again by this process", path, exc)
    return progress


def _forget(path: Path, fd: int) -> None:
    """A temporary file whose writer died while making it: nothing in it to tell."""
    _unlink(path)


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
