"""The seeded chaos schedule and every fault the soak injects.

Why a schedule drawn up front: the same seed gives the same faults (kind, time, target,
duration, mode) in the same order, so a failing soak can be rerun; only the interleaving
with the fleet's own timing differs between runs. Faults of every kind are spread over the
emission window in strata (one per slice of the window, at a random point inside it), so
none bunches at the start. Each fault runs in a thread of its own and holds locks on what it
touches (an agent, a proxy, the workers, the broker, Postgres): faults on different things
overlap freely — a Postgres crash while every worker is stopped, a broker restart during a
node's stalled network — while two faults never fight over one process.

Spool damage is aimed where it cannot be mistaken for the soak's own bug: the agent is
stopped gracefully (it ships and commits the batch in hand), the size of every segment is
noted, and only records written *after* that are damaged. Those bytes were never read by any
agent process, so none of them can have been shipped: every payload flip must end up
counted corrupted, never stored. The ids of the damaged records are kept for the accounting.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import stat
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.soak.redelivery import Kill, held_tasks
from bench.soak.rig import PUBLISH_TIMEOUT_S, Node, Rig, read_state, say
from bench.soak.rig import segment_sizes as sizes_of
from collector.schema import dump_event, validate_event
from collector.spool import dropped_events, frame

KINDS: tuple[str, ...] = (
    "agent_kill", "worker_kill", "broker_restart", "postgres_restart", "workers_stopped",
    "spool_full", "spool_corrupt", "publish_blocked", "memory_alarm", "backlog_replay",
    "source_flood",
)
DAY_S = 86_400.0
BACKLOG_AGE_S = 3 * DAY_S


#: How long a spool_corrupt fault waits, its agent frozen, for records it may damage.
CORRUPT_WAIT_S = 12.0


@dataclass(frozen=True)
class Fault:
    """One scheduled fault: when (seconds into the emission window), what, on which target,
    and the seed of its own random choices (durations, modes, records)."""

    at: float
    kind: str
    target: int
    seed: int


@dataclass
class Outcome:
    fault: Fault
    began: float = 0.0
    took: float = 0.0
    injected: bool = False
    effective: bool = False
    note: str = ""


#: Kinds a broker does not have at all, by broker, with why: skipping them is no shortfall
#: of a run (``run.meets_targets``), unlike a skip for the rig's sake or for ``--only``.
NOT_FOR_BROKER: dict[str, dict[str, str]] = {
    "redis": {"memory_alarm": "RabbitMQ only: a Redis at maxmemory refuses the write after "
                              "BRPOP took the message; blocked publishing is covered by "
                              "publish_blocked"}}


def available_kinds(rig: Rig) -> tuple[list[str], dict[str, str]]:
    """The kinds this rig can inject, and why each other one is skipped."""
    skipped = dict(NOT_FOR_BROKER.get(rig.broker.kind, {}))
    if "memory_alarm" not in skipped and not rig.broker.private:
        skipped["memory_alarm"] = "no private RabbitMQ node; the shared one is not alarmed"
    if not rig.broker.private:
        skipped["broker_restart"] = "no private RabbitMQ node; the shared one is not restarted"
    return [k for k in KINDS if k not in skipped], skipped


def plan(seed: int, kinds: list[str], per_kind: int, window_s: float, nodes: int,
         workers: int) -> list[Fault]:
    """``per_kind`` faults of each kind, stratified over 5%-85% of the window, sorted."""
    rng = random.Random(seed)
    begin, span = 0.05 * window_s, 0.80 * window_s
    faults: list[Fault] = []
    for kind in kinds:
        for slot in range(per_kind):
            at = begin + span * (slot + rng.random()) / per_kind
            if kind in ("worker_kill",):
                target = rng.randrange(workers)
            elif kind == "spool_full":
                target = 0  # node 0's spool is the small disk
            elif kind == "backlog_replay":
                target = 1 + rng.randrange(nodes - 1) if nodes > 1 else 0
            elif kind == "publish_blocked":
                target = -1 if rng.random() < 0.3 else rng.randrange(nodes)  # -1: every node
            else:
                target = rng.randrange(nodes)
            faults.append(Fault(round(at, 3), kind, target, rng.randrange(2**31)))
    return sorted(faults, key=lambda f: (f.at, f.kind))


@dataclass
class Damage:
    """What one spool_corrupt fault did: ids of records whose payload it destroyed (they must
    end up counted corrupted, never stored) and the structural hits (a frame byte, whose
    record the reader may well recover: only the counts must balance)."""

    ids: list[str] = field(default_factory=list)
    structural: int = 0
    files: list[str] = field(default_factory=list)


@dataclass
class Flood:
    """What one source_flood did: the flood's and the probe's event ids (every one must be
    stored, once), how long the probe took to be stored, and how many flood batches were
    stored before it (the per-source rate allows ``allowed`` of them; without it, all)."""

    ids: list[str]
    probe_id: str
    batches: int
    probe_delay_s: float | None = None
    ahead: int | None = None
    allowed: float | None = None


@dataclass
class Backlog:
    """A replayed 3-day-old backlog: new ids (must be stored), the jobs and UTC days it
    touches (their rollups must be recomputed after ``written``), copies of old lines."""

    node: int
    ids: list[str]
    jobs: list[str]
    days: list[str]  # the UTC days of all its events
    written: float
    duplicates: int
    job_days: dict[str, list[str]] = field(default_factory=dict)  # each job's own days


class Chaos:
    """Runs the schedule against the rig in background threads and keeps the outcomes."""

    def __init__(self, rig: Rig, faults: list[Fault]) -> None:
        self.rig, self.faults = rig, faults
        self.outcomes: list[Outcome] = []
        self.damage: list[Damage] = []
        self.backlogs: list[Backlog] = []
        self.floods: list[Flood] = []
        self.kills: list[Kill] = []  # every worker_kill, with the tasks its victim held
        self.locks: dict[str, threading.Lock] = {}
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._runner: threading.Thread | None = None
        self.t0 = 0.0

    # ------------------------------------------------------------------ running
    def start(self) -> None:
        self.t0 = time.monotonic()
        self._runner = threading.Thread(target=self._run, name="soak-chaos", daemon=True)
        self._runner.start()

    def _run(self) -> None:
        for fault in self.faults:
            wait = self.t0 + fault.at - time.monotonic()
            if wait > 0 and self._stop.wait(wait):
                return
            thread = threading.Thread(target=self._inject, args=(fault,),
                                      name=f"fault-{fault.kind}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def finish(self, timeout: float = 120.0) -> None:
        """Stop scheduling and wait for the faults in flight to restore what they broke."""
        self._stop.set()
        if self._runner is not None:
            self._runner.join(timeout)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))

    @contextlib.contextmanager
    def _holding(self, *names: str) -> Iterator[None]:
        with self._mutex:
            locks = [self.locks.setdefault(n, threading.Lock()) for n in sorted(set(names))]
        for lock in locks:
            lock.acquire()
        try:
            yield
        finally:
            for lock in reversed(locks):
                lock.release()

    def _inject(self, fault: Fault) -> None:
        outcome = Outcome(fault)
        rng = random.Random(fault.seed)
        action: Callable[[Fault, random.Random, Outcome], None] = getattr(self, f"_{fault.kind}")
        try:
            with self._holding(*self._resources(fault)):
                outcome.began = time.monotonic() - self.t0
                action(fault, rng, outcome)
        except Exception as exc:  # a fault that failed is reported, never fatal
            outcome.note = f"error: {type(exc).__name__}: {exc}"
            say(f"fault {fault.kind} failed: {outcome.note}")
        outcome.took = time.monotonic() - self.t0 - outcome.began
        with self._mutex:
            self.outcomes.append(outcome)
        say(f"fault {fault.kind}[{fault.target}] at {outcome.began:.1f}s took "
            f"{outcome.took:.1f}s {'ok' if outcome.injected else 'NOT INJECTED'} "
            f"{outcome.note}")

    def _resources(self, fault: Fault) -> list[str]:
        kind, target = fault.kind, fault.target
        nodes = range(len(self.rig.nodes))
        if kind in ("agent_kill", "spool_full"):
            return [f"agent-{target}"]
        if kind == "spool_corrupt":  # only bytes no agent read are damaged: nothing else
            return [f"agent-{target}"]
        if kind == "worker_kill":
            return [f"worker-{target}"]
        if kind == "workers_stopped":
            return [f"worker-{i}" for i in range(len(self.rig.workers))]
        if kind in ("broker_restart", "memory_alarm"):
            return ["broker"]
        if kind == "postgres_restart":
            return ["postgres"]
        if kind == "publish_blocked":
            return [f"proxy-{i}" for i in (nodes if target < 0 else [target])]
        if kind == "source_flood":  # a clean measurement: no worker, broker or database away
            return [*(f"worker-{i}" for i in range(len(self.rig.workers))), "broker",
                    "postgres"]
        return []

    # ------------------------------------------------------------------ the faults
    def _agent_kill(self, fault: Fault, rng: random.Random, out: Outcome) -> None:
        agent = self.rig.nodes[fault.target].agent
        out.effective = agent.alive()
        agent.kill()
        out.injected = True
        time.sleep(rng.uniform(0.2, 2.0))
        agent.start()

    def _worker_kill(self, fault: Fault, rng: random.Random, out: Outcome) -> None:
        worker = self.rig.workers[fault.target]
        out.effective = worker.alive()
        killed_at = time.time()
        worker.kill()
        out.injected = True
        if out.effective:
            held = held_tasks(worker.log.read_text(errors="replace"))
            with self._mutex:
                self.kills.append(Kill(worker.name, killed_at, held))
        time.sleep(rng.uniform(0.2, 2.0))
        worker.start()

    def _workers_stopped(self, fault: Fault, rng: random.Random, out: Outcome) -> None:
        """Every worker away for longer than any timeout (visibility, publish, retry):
        killed whole, stopped warmly, or frozen (SIGSTOP) and thawed."""
        mode = rng.choice(("kill", "term", "freeze"))
        away = self.rig.visibility_s + 2.0 + rng.uniform(0.0, 3.0)
        began = time.monotonic()
        workers = self.rig.workers
        for worker in workers:
            if mode == "freeze":
                worker.signal_group(signal.SIGSTOP)
            elif mode == "kill":
                worker.kill()
            else:
                worker.stop(timeout=30)
        out.injected = out.effective = True
        time.sleep(max(0.0, away - (time.monotonic() - began)))
        for worker in workers:
            if mode == "freeze":
                worker.signal_group(signal.SIGCONT)
            else:
                worker.start()
        out.note = f"{mode} {time.monotonic() - began:.1f}s"

    def _broker_restart(self, fault: Fault, rng: random.Random, out: Outcome) -> None:
        hard = rng.random() < 0.7
        self.rig.broker.restart(rng.uniform(0.5, 2.0), hard=hard)
        out.injected = out.effective = True
        out.note = "kill -9" if hard else "graceful"

    def _postgres_restart(self, fault: Fault, rng: random.Random, out: Outcome) -> None:
        self.rig.pg.restart(rng.uniform(0.5, 2.0))
        out.injected = out.effective = True

    def _memory_alarm(self, fault: Fault, rng: random.Random, out: Outcome) -> None:
        broker = self.rig.broker
        broker.set_memory_alarm(True)
        out.injected = out.effective = True
        try:
            time.sleep(2 * PUBLISH_TIMEOUT_S + rng.uniform(1.0, 3.0))
        finally:
            broker.set_memory_alarm(False)

    def _publish_blocked(self, fault: Fault, rng: random.Random, out: Outcome) -> None:
        """The network to the broker stalls (nothing moves, confirms never come), then
        recovers, or is cut (RST) so the agent must dial again."""
        nodes = self.rig.nodes if fault.target < 0 else [self.rig.nodes[fault.target]]
        for node in nodes:
            node.proxy.block()
        out.injected = out.effective = True
        time.sleep(2 * PUBLISH_TIMEOUT_S + rng.uniform(1.0, 3.0))
        cut = rng.random() < 0.5
        for node in nodes:
            if cut:
                node.proxy.cut()
            node.proxy.unblock()
        out.note = f"{len(nodes)} node(s), {'cut' if cut else 'resumed'}"

    def _spool_full(self, fault: Fault, rng: random.Random, out: Outcome) -> None:
        """Node 0's agent hangs (SIGSTOP) until its small spool is full and trainers drop
        events (ENOSPC on the tmpfs, or the Reporter's byte cap), then carries on."""
        node = self.rig.nodes[fault.target]
        before = dropped_events(node.spool)
        node.agent.signal_group(signal.SIGSTOP)
        out.injected = True
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if _spool_is_full(node, self.rig.profile.spool_full_bytes) or \
                        dropped_events(node.spool) > before:
                    out.effective = True
                    break
                time.sleep(0.1)
            time.sleep(rng.uniform(0.5, 1.5))  # some drops, not only the first
        finally:
            node.agent.signal_group(signal.SIGCONT)
        out.note = "tmpfs" if node.tmpfs else "byte cap"

    def _spool_corrupt(self, fault: Fault, rng: random.Random, out: Outcome) -> None:
        """Byte flips in records the node's agent has not read. The agent is frozen, not
        stopped: a graceful stop ships its batch in hand once more, which with the broker
        down takes seconds, and records are only written while the trainers still emit."""
        node = self.rig.nodes[fault.target]
        damage = Damage()
        try:
            if not node.agent.freeze():
                out.note = "agent did not freeze: nothing damaged"
                return
            floor = sizes_of(node.spool)  # nothing beyond this was ever read
            # Only records written while the agent is frozen can be damaged; on a loaded
            # machine the node's trainers may take seconds to write one (the agent being
            # frozen longer costs nothing: its spool holds the records).
            deadline = time.monotonic() + CORRUPT_WAIT_S
            time.sleep(rng.uniform(0.3, 0.8))
            while not damage.ids and not damage.structural and time.monotonic() < deadline:
                damage = damage_unread(node.spool, floor, rng, records=rng.randint(1, 3),
                                       structural=rng.random() < 0.3)
                if not damage.ids and not damage.structural:
                    time.sleep(0.3)
        finally:
            node.agent.signal_group(signal.SIGCONT)
        out.injected = out.effective = bool(damage.ids or damage.structural)
        out.note = f"{len(damage.ids)} record(s) + {damage.structural} frame byte(s)"
        with self._mutex:
            self.damage.append(damage)

    def _backlog_replay(self, fault: Fault, rng: random.Random, out: Outcome) -> None:
        node = self.rig.nodes[fault.target]
        backlog = write_backlog(node, self.rig.tag, len(self.backlogs), rng,
                                self.rig.profile.backlog_events, self.rig.stored_among)
        with self._mutex:
            self.backlogs.append(backlog)
        out.injected = out.effective = True
        out.note = f"{len(backlog.ids)} events + {backlog.duplicates} copies, {backlog.days}"


    def _source_flood(self, fault: Fault, rng: random.Random, out: Outcome) -> None:
        """One source publishes ``profile.flood_batches`` signed batches of ``flood_lines``
        events (1: tiny) straight to the broker (as a hostile or broken node would), then
        another source one batch: the probe. How long the probe takes to be stored is the
        flood's delay of other sources' events (issue 40, item 5); the flood's batches must
        all be stored too."""
        flood = flood_and_probe(self.rig, len(self.floods), self.rig.profile.flood_batches)
        with self._mutex:
            self.floods.append(flood)
        out.injected = out.effective = True
        out.note = (f"{flood.batches} batches; probe stored after "
                    f"{flood.probe_delay_s if flood.probe_delay_s is not None else '-'} s, "
                    f"behind {flood.ahead} of them (the rate allows {flood.allowed})")


#: How long a source_flood waits for its probe before it gives up (counted not stored).
PROBE_WAIT_S = 300.0


def flood_and_probe(rig: Rig, number: int, batches: int) -> Flood:
    """Publish the flood and the probe, and time the probe (see ``Chaos._source_flood``)."""
    from django.conf import settings

    from collector.auth import sign_batch
    from ettweb.celery import app

    collector_id, secret = rig.flood_credential
    tag = f"{rig.tag}-f{number}"
    now = time.time()

    def batch(job: str, event_id: str, at: float, lines: int = 1) -> list[str]:
        return [json.dumps({"v": 1, "id": event_id if not k else f"{event_id}.{k}",
                            "job": job, "attempt": 0, "kind": "mark", "mark": "heartbeat",
                            "ts": at + k * 0.001})
                for k in range(lines)]

    size = rig.profile.flood_lines
    ids = [f"flood-{tag}-{i}" for i in range(batches)]  # each batch's first event
    every = [event_id if not k else f"{event_id}.{k}" for event_id in ids for k in range(size)]
    probe_id = f"probe-{tag}"
    flood = Flood([*every, probe_id], probe_id, batches)
    options: dict[str, Any] = {"queue": rig.queue}
    with app.connection_for_write(transport_options={"confirm_publish": True}) as conn:
        for index, event_id in enumerate(ids):
            lines = batch(f"soak-flood-{tag}", event_id, now - 3600 + index, size)
            app.send_task("ett.ingest_batch", connection=conn, **options,
                          args=(lines, f"flood-{tag}", sign_batch(collector_id, secret, lines)))
        lines = batch(f"soak-probe-{tag}", probe_id, now - 60)
        app.send_task("ett.ingest_batch", connection=conn, **options,
                      args=(lines, f"probe-{tag}", sign_batch(collector_id, secret, lines)))
    published = time.monotonic()
    while time.monotonic() - published < PROBE_WAIT_S:
        if rig.stored_among([probe_id]):
            flood.probe_delay_s = round(time.monotonic() - published, 2)
            flood.ahead = len(rig.stored_among(ids))
            rate = float(rig.worker_env()["ETT_INGEST_SOURCE_RATE"])
            burst = settings.ETT_INGEST_SOURCE_BURST
            if rate and size >= settings.ETT_INGEST_DEFER_MIN_LINES:  # else none is put back
                # In batches; + 5: batches in flight at the workers, and the poll's own lag.
                flood.allowed = round((burst + rate * flood.probe_delay_s) / size + 5, 1)
            break
        time.sleep(0.05)
    return flood


def _spool_is_full(node: Node, limit: int) -> bool:
    if node.tmpfs:
        st = os.statvfs(node.spool)
        return st.f_bavail * st.f_frsize < 16 * 1024
    return sum(sizes_of(node.spool).values()) >= limit - 8 * 1024


# --------------------------------------------------------------------------- spool damage
def _intact_lines(data: bytes, base: int) -> Iterator[tuple[int, bytes]]:
    """(file offset, line without newline) of each complete record whose CRC verifies."""
    pos = 0
    while True:
        end = data.find(b"\n", pos)
        if end == -1:
            return
        line = data[pos:end]
        if line[-9:-8] == b"\t" and b"%08x" % zlib.crc32(line[:-9]) == line[-8:]:
            yield base + pos, line
        pos = end + 1


def damage_unread(spool: Path, floor: dict[str, int], rng: random.Random, *, records: int,
                  structural: bool) -> Damage:
    """Damage up to ``records`` intact records that start at or after ``floor`` (the file
    sizes when the agent stopped): one payload byte each, or (``structural``) the newline
    or the tab of one record. Returns what was damaged."""
    candidates: list[tuple[str, int, bytes]] = []
    for name, size in sizes_of(spool).items():
        start = floor.get(name, 0)
        if size <= start:
            continue
        with open(spool / name, "rb") as segment:
            segment.seek(max(0, start - 1))
            data = segment.read(size - max(0, start - 1))
        base = max(0, start - 1)
        if start > 0:  # align: the first line that begins at or after ``start``
            newline = data.find(b"\n")
            if newline == -1:
                continue
            data, base = data[newline + 1:], base + newline + 1
        candidates += [(name, offset, line) for offset, line in _intact_lines(data, base)]
    damage = Damage()
    if not candidates:
        return damage
    picked = rng.sample(candidates, min(records, len(candidates)))
    for index, (name, offset, line) in enumerate(picked):
        path = spool / name
        payload_len = len(line) - 9
        if structural and index == 0:
            # the tab before the CRC, or the newline after it
            where = offset + payload_len if rng.random() < 0.5 else offset + len(line)
            _overwrite(path, where, b"X")
            damage.structural += 1
        else:
            where = offset + rng.randrange(1, payload_len - 1)
            old = line[where - offset:where - offset + 1]
            _overwrite(path, where, b"Q" if old != b"Q" else b"Z")
            damage.ids.append(str(json.loads(line[:payload_len])["id"]))
        damage.files.append(name)
    return damage


def _overwrite(path: Path, offset: int, byte: bytes) -> None:
    """Write one byte in place; a sealed (read-only) segment is opened as its owner may."""
    mode = path.stat().st_mode
    try:
        fd = os.open(path, os.O_WRONLY)
    except PermissionError:  # not root: a sealed segment is 0444, and its writer is done
        os.chmod(path, mode | stat.S_IWUSR)
        try:
            fd = os.open(path, os.O_WRONLY)
        finally:
            os.chmod(path, mode)
    try:
        os.pwrite(fd, byte, offset)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- the backlog
def _old_lines(spool: Path, rng: random.Random, count: int,
               stored_among: Callable[[list[str]], set[str]]) -> list[bytes]:
    """Copies of records already stored: a replay must store nothing twice. Taken from
    committed bytes (damage never reaches below them) and checked against the database,
    so a copy never brings back an event the pipeline lost (that would hide the loss)."""
    files = read_state(spool).get("files", {})
    lines: list[bytes] = []
    for name, cursor in files.items():
        offset = int(cursor.get("offset", 0))
        if offset <= 0:
            continue
        with contextlib.suppress(OSError), open(spool / name, "rb") as segment:
            lines += [line for _pos, line in _intact_lines(segment.read(offset), 0)]
    picked = rng.sample(lines, min(4 * count, len(lines)))
    ids = {str(json.loads(line[:-9])["id"]): line for line in picked}
    stored = stored_among(list(ids))
    return [line for event_id, line in ids.items() if event_id in stored][:count]


def write_backlog(node: Node, tag: str, number: int, rng: random.Random, events: int,
                  stored_among: Callable[[list[str]], set[str]]) -> Backlog:
    """A sealed segment of a node that was offline for three days, dropped into its spool:
    two finished jobs whose events are 3 days old, mixed with copies of lines it shipped."""
    now = time.time()
    ids: list[str] = []
    jobs: list[str] = []
    lines: list[bytes] = []
    job_days: dict[str, set[str]] = {}
    per_job = max(10, events // 2)
    for k in range(2):
        job = f"soak-{tag}-late-n{node.index}-b{number}-{k}"
        jobs.append(job)
        t = now - BACKLOG_AGE_S - rng.uniform(0, 6 * 3600)
        built = _late_job(job, t, per_job, f"late-{tag}-n{node.index}-b{number}-{k}")
        for event in built:
            ids.append(str(event["id"]))
            when = float(event["end"] if event["kind"] == "span" else event["ts"])
            job_days.setdefault(job, set()).add(time.strftime("%Y-%m-%d", time.gmtime(when)))
            lines.append(frame(dump_event(validate_event(event))).encode())
    copies = _old_lines(node.spool, rng, max(1, events // 20), stored_among)
    lines += copies
    rng.shuffle(lines)
    stem = f"late-{tag}-b{number}.a0.r0.{os.getpid()}.{uuid.uuid4().hex[:8]}.00000"
    tmp = node.spool / f".{stem}.tmp"
    tmp.write_bytes(b"".join(line + b"\n" for line in lines))
    os.chmod(tmp, 0o444)  # sealed: the writer (us) is done with it
    os.replace(tmp, node.spool / f"{stem}.jsonl")
    days = sorted(set().union(*job_days.values()))
    return Backlog(node.index, ids, jobs, days, now, len(copies),
                   {job: sorted(d) for job, d in job_days.items()})


def _late_job(job: str, t: float, count: int, id_prefix: str) -> list[dict[str, Any]]:
    """One job's lifecycle starting at ``t``: a failed attempt, then a completed one."""
    out: list[dict[str, Any]] = []
    seq = 0

    def add(**fields: Any) -> None:
        nonlocal seq
        out.append({"v": 1, "id": f"{id_prefix}-{seq}", "job": job, "rank": 0,
                    "host": "late", **fields})
        seq += 1

    step = 0
    per_attempt = max(5, count // 2)
    for attempt in range(2):
        add(attempt=attempt, kind="mark", mark="attempt_start", ts=t,
            attrs={"gpus": 4, "model": "late-dlrm", "team": "late"})
        add(attempt=attempt, kind="span", phase="model_init", start=t, end=t + 30)
        t += 30
        if attempt:
            add(attempt=attempt, kind="span", phase="checkpoint_load", start=t, end=t + 20)
            t += 20
            step = max(0, step - 100)
        while seq < per_attempt * (attempt + 1) - 1:
            add(attempt=attempt, kind="span", phase="train", start=t, end=t + 60,
                step_start=step, step_end=step + 100)
            t += 60
            step += 100
        status = "failed" if attempt == 0 else "completed"
        add(attempt=attempt, kind="mark", mark="attempt_end", ts=t, attrs={"status": status})
        t += 120  # the restart gap
    return out
