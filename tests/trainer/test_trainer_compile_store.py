"""The compile store shared across jobs (trainer.compile_store).

What must hold: an entry serves only jobs whose artifacts it can serve (same model and config,
torch version, device, world size); an entry not signed under the store's key (unsigned,
altered, forged, re-signed with another key) or damaged is never unpacked into a job's cache
(a message names the problem, the job compiles as if the store were empty); two jobs
publishing at once leave one complete entry; and, end to end, the next job of a model starts
warm.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest
from trainer_runs import REPO, TINY, TrainerRun

from trainer import compile_store, launch, store_key
from trainer.compile_store import CompileStore, artifact_key, folder_manifest, key_digest
from trainer.config import TrainConfig

#: The store key of these tests (any job started here gets it through the environment).
KEY_HEX = "5e" * 32
KEY = KEY_HEX.encode()


@pytest.fixture(autouse=True)
def _store_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(store_key.KEY_ENV, KEY_HEX)
    monkeypatch.delenv(store_key.KEY_FILE_ENV, raising=False)


def resign(entry: Path, key: bytes = KEY) -> None:
    """Sign ``entry`` again (its old signature, if any, dropped): what someone holding
    ``key`` could do after changing it."""
    data = entry.read_bytes()
    if data[-compile_store.SIGNATURE_LEN:].startswith(compile_store.SIGNATURE_TAG):
        data = data[:-compile_store.SIGNATURE_LEN]
    mac = hmac.new(key, data, hashlib.sha256).hexdigest().encode()
    entry.write_bytes(data + compile_store.SIGNATURE_TAG + mac + b"\n")


def config(tmp: Path, *flags: str) -> TrainConfig:
    cfg, _ = launch.parse(["--job", "j", "--spool-dir", str(tmp / "spool"),
                           "--checkpoint-dir", str(tmp / "checkpoints"),
                           "--opt", "compile_cache", *flags])
    return cfg


def cache_folder(root: Path, files: dict[str, bytes]) -> Path:
    """A made-up inductor cache folder: nested files, as FX-graph and AOTAutograd caches are."""
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


ARTIFACTS = {"fxgraph/ab/graph-1": b"graph one" * 1000, "aotautograd/cd/entry": b"aot",
             "cxx/kernel.so": bytes(range(256)) * 64}


@pytest.fixture
def key(tmp_path: Path) -> dict[str, Any]:
    return artifact_key(config(tmp_path), 1, device_model="test-cpu")


def test_the_key_changes_with_the_model_its_config_versions_device_and_world_size(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = artifact_key(config(tmp_path), 1, device_model="test-cpu")
    assert key_digest(base) == key_digest(artifact_key(config(tmp_path), 1, "test-cpu"))
    others = [artifact_key(config(tmp_path, "--embedding-dim", "32"), 1, "test-cpu"),
              artifact_key(config(tmp_path, "--batch-size", "128"), 1, "test-cpu"),
              artifact_key(config(tmp_path, "--opt", "compile_cache,dynamic_shapes"), 1,
                           "test-cpu"),
              artifact_key(config(tmp_path), 2, "test-cpu"),
              artifact_key(config(tmp_path), 1, "another-cpu"),
              {**base, "model": "another-model"}]
    # switches that change when things compile, not what, share the entry
    timing = artifact_key(config(tmp_path, "--opt", "compile_cache,init_overlap"), 1, "test-cpu")
    assert key_digest(timing) == key_digest(base)
    real = compile_store._version
    monkeypatch.setattr(compile_store, "_version",
                        lambda name: "9.9.9" if name == "torch" else real(name))
    others.append(artifact_key(config(tmp_path), 1, "test-cpu"))
    assert len({key_digest(k) for k in [base, *others]}) == len(others) + 1


def test_another_model_or_torch_version_does_not_hit(
        tmp_path: Path, key: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    store = CompileStore(tmp_path / "store", KEY)
    outcome, _ = store.publish(key, cache_folder(tmp_path / "job-a", ARTIFACTS))
    assert outcome.status == "published" and outcome.files == 3
    other_model = artifact_key(config(tmp_path, "--embedding-rows", "999"), 1, "test-cpu")
    assert store.fetch(other_model, tmp_path / "job-b")[0].status == "miss"
    monkeypatch.setattr(compile_store, "_version", lambda name: f"{name}-from-elsewhere")
    other_torch = artifact_key(config(tmp_path), 1, "test-cpu")
    assert store.fetch(other_torch, tmp_path / "job-c")[0].status == "miss"
    assert not (tmp_path / "job-b").exists() and not (tmp_path / "job-c").exists()
    hit, manifest = store.fetch(key, tmp_path / "job-d")
    assert hit.status == "hit" and hit.files == 3
    assert folder_manifest(tmp_path / "job-d") == manifest == folder_manifest(tmp_path / "job-a")


def test_an_unchanged_folder_is_not_published_again(tmp_path: Path,
                                                    key: dict[str, Any]) -> None:
    store = CompileStore(tmp_path / "store", KEY)
    _, manifest = store.fetch(key, tmp_path / "empty")
    source = cache_folder(tmp_path / "job", ARTIFACTS)
    first, known = store.publish(key, source, manifest)
    again, _ = store.publish(key, source, known)
    assert (first.status, again.status) == ("published", "unchanged")
    (source / "fxgraph" / "ef" / "graph-2").parent.mkdir()
    (source / "fxgraph" / "ef" / "graph-2").write_bytes(b"a recompile")
    (source / "warm-up-attempt-1.lock").write_text("ok")  # locks are not artifacts
    grown, _ = store.publish(key, source, known)
    assert grown.status == "published" and grown.files == 4
    described = json.loads(store.entry(key).with_suffix(".json").read_text())
    assert described == json.loads(json.dumps(key))  # a readable key beside the entry


def corrupt_a_file(entry: Path) -> None:
    data = bytearray(entry.read_bytes())
    offset = data.find(b"graph one")
    data[offset:offset + 5] = b"GRAPH"  # same size: only the checksum can tell
    entry.write_bytes(bytes(data))


def truncate(entry: Path) -> None:
    entry.write_bytes(entry.read_bytes()[:3000])


def not_a_tar(entry: Path) -> None:
    entry.write_bytes(b"\x00garbage\n" * 200)


def foreign_tar(entry: Path) -> None:
    with tarfile.open(entry, "w") as tar:
        tar.add(__file__, arcname="something.py")


@pytest.mark.parametrize(("damage", "reason"), [
    (corrupt_a_file, "fxgraph/ab/graph-1 fails its checksum"),
    (truncate, "missing"),
    (not_a_tar, "unreadable"),
    (foreign_tar, "no manifest"),
])
def test_a_damaged_entry_is_skipped_with_a_reason_and_leaves_the_cache_alone(
        tmp_path: Path, key: dict[str, Any], damage: Any, reason: str) -> None:
    store = CompileStore(tmp_path / "store", KEY)
    store.publish(key, cache_folder(tmp_path / "job-a", ARTIFACTS))
    damage(store.entry(key))
    resign(store.entry(key))  # damage behind a valid signature: the checks after it
    into = tmp_path / "job-b" / "compile-cache"
    outcome, manifest = store.fetch(key, into)
    assert outcome.status == "damaged" and manifest == {}
    assert reason in outcome.reason and store.entry(key).name in outcome.reason
    assert not into.exists()  # nothing half-unpacked for the compile to trip on
    assert not list(into.parent.glob("*.tmp"))
    # the job compiles cold; its publish replaces the damaged entry
    republished, _ = store.publish(key, cache_folder(tmp_path / "job-b2", ARTIFACTS), manifest)
    assert republished.status == "published"
    assert store.fetch(key, tmp_path / "job-c")[0].status == "hit"


def test_a_member_outside_its_folder_is_refused(tmp_path: Path, key: dict[str, Any]) -> None:
    store = CompileStore(tmp_path / "store", KEY)
    store.entry(key).parent.mkdir(parents=True)
    evil = tmp_path / "evil"
    evil.write_bytes(b"x")
    with tarfile.open(store.entry(key), "w") as tar:
        body = json.dumps({"files": {"../../escaped": [1, 0]}}).encode()
        info = tarfile.TarInfo(compile_store.MANIFEST)
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
        tar.add(evil, arcname="../../escaped")
    resign(store.entry(key))
    outcome, _ = store.fetch(key, tmp_path / "job" / "cache")
    assert outcome.status == "damaged" and "outside its folder" in outcome.reason
    assert not (tmp_path / "escaped").exists()


def replace_manifest(entry: Path) -> None:
    """The kernel swapped for other bytes and the manifest rewritten to match them: every
    checksum holds, only the signature can tell."""
    with tarfile.open(entry) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()  # type: ignore[union-attr]
                 if m.name != compile_store.MANIFEST}
    files["cxx/kernel.so"] = b"\x7fELF evil" * 100
    folder = entry.parent / "evil-folder"
    cache_folder(folder, files)
    with tarfile.open(entry, "w") as tar:
        body = json.dumps({"files": folder_manifest(folder)}).encode()
        info = tarfile.TarInfo(compile_store.MANIFEST)
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
        for name in files:
            tar.add(folder / name, arcname=name)


def tamper_kernel(entry: Path) -> None:
    data = bytearray(entry.read_bytes())
    offset = data.find(bytes(range(256)))
    data[offset:offset + 4] = b"\x90\x90\x90\x90"  # the built kernel, same size
    entry.write_bytes(bytes(data))


def tamper_kernel_and_checksum(entry: Path) -> None:
    """What a writer of the store folder can do without the key: any change, signed or
    re-signed with a key of its own."""
    tamper_kernel(entry)
    resign(entry, key=b"an-attackers-own-key-of-32-chars")


def strip_signature(entry: Path) -> None:
    entry.write_bytes(entry.read_bytes()[:-compile_store.SIGNATURE_LEN])


@pytest.mark.parametrize(("attack", "reason"), [
    (tamper_kernel, "signature does not match this store's key"),
    (tamper_kernel_and_checksum, "signature does not match this store's key"),
    (replace_manifest, "unsigned"),
    (lambda entry: (replace_manifest(entry), resign(entry, b"x" * 32)),
     "signature does not match this store's key"),
    (strip_signature, "unsigned"),
])
def test_an_entry_not_signed_under_the_store_key_is_refused(
        tmp_path: Path, key: dict[str, Any], attack: Any, reason: str) -> None:
    """Entries carry code every later job runs: whoever can write the store folder but does
    not hold the key cannot get one unpacked, whatever they change; the job compiles cold and
    its publish puts back an entry signed under the key."""
    store = CompileStore(tmp_path / "store", KEY)
    store.publish(key, cache_folder(tmp_path / "job-a", ARTIFACTS))
    attack(store.entry(key))
    into = tmp_path / "job-b" / "compile-cache"
    outcome, manifest = store.fetch(key, into)
    assert outcome.status == "damaged" and manifest == {}
    assert reason in outcome.reason, outcome.reason
    assert not into.exists() and not list(into.parent.glob("*.tmp"))
    store.publish(key, cache_folder(tmp_path / "job-b2", ARTIFACTS))
    assert store.fetch(key, tmp_path / "job-c")[0].status == "hit"
    other = CompileStore(store.root, b"another-team-with-its-own-key-32")
    refused, _ = other.fetch(key, tmp_path / "job-d")
    assert refused.status == "damaged" and "another key" in refused.reason


PUBLISHER = """
import sys
from pathlib import Path
from trainer.compile_store import CompileStore
store = CompileStore(Path(sys.argv[1]), sys.argv[4].encode())
folder, rounds = Path(sys.argv[2]), int(sys.argv[3])
key = {"model": "concurrency-test"}
for _ in range(rounds):
    outcome, _ = store.publish(key, folder)
    assert outcome.status == "published", outcome
"""


def test_two_jobs_publishing_at_once_leave_one_complete_entry(tmp_path: Path) -> None:
    """Two processes publish different caches for the same key over and over while a third
    reader fetches: every fetch is a whole entry of one job or the other, never a mix, never
    damaged, and no temporary file is left behind."""
    store = CompileStore(tmp_path / "store", KEY)
    big = {f"fxgraph/{i:02d}/graph": bytes([i]) * 200_000 for i in range(10)}
    jobs = [cache_folder(tmp_path / "job-a", {**big, "a-only": b"a"}),
            cache_folder(tmp_path / "job-b", {**big, "b-only": b"b" * 10})]
    manifests = [folder_manifest(job) for job in jobs]
    key = {"model": "concurrency-test"}
    writers = [subprocess.Popen([sys.executable, "-c", PUBLISHER, str(store.root), str(job),
                                 "15", KEY_HEX], cwd=REPO) for job in jobs]
    seen: list[dict[str, list[int]]] = []
    failures: list[str] = []

    def read() -> None:
        reads = 0
        while any(w.poll() is None for w in writers) or reads == 0:
            outcome, manifest = store.fetch(key, tmp_path / "readers" / f"r{reads}")
            reads += 1
            if outcome.status == "hit":
                seen.append(manifest)
            elif outcome.status == "damaged":
                failures.append(outcome.reason)

    reader = threading.Thread(target=read)
    reader.start()
    codes = [w.wait(timeout=120) for w in writers]
    reader.join(timeout=120)
    assert codes == [0, 0]
    assert failures == []
    assert seen and all(m in manifests for m in seen)
    final, manifest = store.fetch(key, tmp_path / "final")
    assert final.status == "hit" and manifest in manifests
    assert folder_manifest(tmp_path / "final") == manifest
    assert sorted(p.name for p in store.root.iterdir()) == sorted([
        store.entry(key).name, store.entry(key).with_suffix(".json").name])


def store_job(tmp: Path, job: str, store: Path, *flags: str) -> TrainerRun:
    """A supervised job with its caches its own (no --compile-cache-dir) and the shared store."""
    spool, checkpoints = tmp / job / "spool", tmp / job / "checkpoints"
    env = {key: value for key, value in os.environ.items()
           if key not in ("TORCHINDUCTOR_CACHE_DIR", compile_store.STORE_ENV)}
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", *TINY, "--job", job, "--spool-dir", str(spool),
         "--checkpoint-dir", str(checkpoints), "--compile-store", str(store),
         "--opt", "compile_cache,init_overlap", *flags],
        cwd=REPO, env={**env, "PYTHONUNBUFFERED": "1", store_key.KEY_ENV: KEY_HEX},
        capture_output=True, text=True, timeout=400, check=False)
    return TrainerRun(proc.returncode, proc.stdout, proc.stderr, spool, checkpoints)


def compile_spans(run: TrainerRun, attempt: int) -> list[dict[str, Any]]:
    return [e for e in run.events() if e["kind"] == "span" and e["phase"] == "compile"
            and e["attempt"] == attempt]


@pytest.fixture(scope="module")
def two_jobs(tmp_path_factory: pytest.TempPathFactory) -> tuple[TrainerRun, TrainerRun, Path]:
    """Job a meets a damaged entry for its key, compiles anyway and publishes; job b, the next
    job of the same model, starts from what job a published."""
    tmp = tmp_path_factory.mktemp("compile-store")
    store = tmp / "store"
    cfg, options = launch.parse(["--job", "a", "--spool-dir", str(tmp / "a" / "spool"),
                                 "--checkpoint-dir", str(tmp / "a" / "checkpoints"), *TINY,
                                 "--opt", "compile_cache,init_overlap"])
    entry = CompileStore(store, KEY).entry(artifact_key(cfg, options.nproc_per_node))
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"not an entry at all" * 100)
    first = store_job(tmp, "a", store, "--fail-at-steps", "20")
    second = store_job(tmp, "b", store)
    return first, second, entry


@pytest.mark.integration
def test_a_damaged_entry_is_skipped_with_a_message_and_the_job_still_compiles(
        two_jobs: tuple[TrainerRun, TrainerRun, Path]) -> None:
    first, _, entry = two_jobs
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"compile store entry skipped, compiling without it: {entry.name}: unsigned" in (
        first.stderr)
    (fetch,) = [e for e in compile_spans(first, 0) if e["attrs"].get("stage") == "store_fetch"]
    assert fetch["blocking"] and fetch["attrs"]["store"] == "damaged"
    misses = sum(e["attrs"].get("fxgraph_cache_miss", 0) for e in compile_spans(first, 0))
    assert misses >= 1  # compiled cold, as if the store were empty
    assert "published (" in first.stderr
    # the restart reuses the job's own warm cache: no store fetch, no warm-up to wait for
    assert not [e for e in compile_spans(first, 1) if e["attrs"].get("stage") == "store_fetch"]
    (setup,) = [e for e in compile_spans(first, 1) if e["attrs"].get("stage") == "setup"]
    assert "warm_up" not in setup["attrs"]


@pytest.mark.integration
def test_the_next_job_of_the_model_starts_from_the_store(
        two_jobs: tuple[TrainerRun, TrainerRun, Path]) -> None:
    _, second, entry = two_jobs
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"compile store {entry}: hit (" in second.stderr
    spans = compile_spans(second, 0)
    (fetch,) = [e for e in spans if e["attrs"].get("stage") == "store_fetch"]
    assert fetch["attrs"]["store"] == "hit" and fetch["attrs"]["store_files"] > 0
    compiled = [e for e in spans if "fxgraph_cache_hit" in e["attrs"]]
    assert compiled and all(e["attrs"]["fxgraph_cache_miss"] == 0 for e in compiled)
    assert all(e["attrs"]["fxgraph_cache_hit"] >= 1 for e in compiled)
    (setup,) = [e for e in spans if e["attrs"].get("stage") == "setup"]
    assert "warm_up" not in setup["attrs"]  # a warm first attempt has nothing to warm up


def test_the_first_job_of_a_model_is_told_it_fills_the_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)  # an operator's shared folder
    monkeypatch.delenv(compile_store.STORE_ENV, raising=False)
    cfg, options = launch.parse(["--job", "first", "--spool-dir", str(tmp_path / "spool"),
                                 "--checkpoint-dir", str(tmp_path / "checkpoints"),
                                 "--opt", "compile_cache"])
    assert options.compile_store == str(tmp_path / "compile-store")  # beside the checkpoints
    said: list[str] = []
    sync = launch.StoreSync(cfg, options, said.append)
    sync.fetch(tmp_path / "cache", None)
    assert said == [f"compile store {sync.store.entry(sync.key)}: no entry yet; this job "
                    "compiles cold and publishes one for the next job of this model"]
    cache_folder(tmp_path / "cache", ARTIFACTS)
    sync.publish_soon(tmp_path / "cache")
    sync.wait()
    assert re.fullmatch(r"compile store .+\.tar: published \(3 files, 0\.0 MB, \d+\.\d\d s\)",
                        said[-1]), said[-1]
    assert sync.store.entry(sync.key).is_file()
    _, none = launch.parse(["--job", "j", "--spool-dir", str(tmp_path / "spool"),
                            "--checkpoint-dir", str(tmp_path / "checkpoints")])
    assert none.compile_store is None  # without compile_cache a job has nothing to share
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "operator"))
    _, shared = launch.parse(["--job", "j", "--spool-dir", str(tmp_path / "spool"),
                              "--checkpoint-dir", str(tmp_path / "checkpoints"),
                              "--opt", "compile_cache"])
    assert shared.compile_store is None  # the operator's folder is shared already
