"""The per-node collector agent: tails the Reporter's spool files and ships them to the broker.

Why it works this way:

* It reads **complete lines only**. A Reporter appends whole lines, but a reader can catch a
  write half done; a trailing line without ``\\n`` is left for the next look.
* It keeps two positions per spool file: how far it has *read* into the batch being built, and
  how far is *committed* (shipped). Committed offsets move only after the broker took the batch
  (publisher confirms on AMQP; on Redis the push has returned), and they are saved atomically,
  so a crash or an outage re-ships at worst the last batch — never loses one. Events carry ids
  and the worker counts a repeated id once (ETT_SPEC §2), so at-least-once is enough.
* It publishes by task *name* (``ett.ingest_batch``) through a bare Celery app: the node needs
  neither Django nor the web code, and JSON is the only serializer.
* It does not validate events: the worker does, and keeps rejected ones aside with a reason.
  It does verify spool checksums (``collector.spool.read_records``): damaged records are
  resynchronised, intact ones (also those fused by a lost newline) ship, and each destroyed
  event is counted once, when the batch around it commits; the rest of the segment ships.
* Batches are signed (``collector.auth``) when the node has a credential, and a sealed segment
  is deleted only after its last byte is committed and ``keep_shipped_s`` has passed.
* Health (backlog, shipped, dropped, corrupted, last success) is a snapshot refreshed by the
  agent's own thread, served as Prometheus text and sent as ``ett.collector_health``.
* Whether the server accepts the credential comes back over HTTP (``collector.verdict``,
  with ``--server-url``), since the broker carries nothing back to the node. While the
  server's latest verdict is "rejected" the agent *holds* its spool: the worker would
  quarantine every batch (keeping a sample of its lines), so it publishes none and commits
  nothing, keeps reporting its health (each report is followed by a new check), and ships
  from where it stopped once the server accepts the credential again. Only a verdict holds
  it: a server that cannot be heard, or a check it could not judge (a node clock far off),
  leaves shipping as it was, and so does an agent without ``--server-url``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from collector.auth import health_body, sign_batch
from collector.config import AgentConfig
from collector.health import HealthStats, MetricsServer, prometheus_text
from collector.spool import dropped_events, is_sealed
from collector.spool_reader import read_records
from collector.verdict import REJECTED, VerdictWatcher, check_credential

log = logging.getLogger("ett.collector")

TASK_NAME = "ett.ingest_batch"
HEALTH_TASK_NAME = "ett.collector_health"
STATE_VERSION = 1
SPOOL_SUFFIX = ".jsonl"


# --------------------------------------------------------------------------- state
@dataclass
class FileCursor:
    """A position in one spool file; the inode tells a replaced file from an appended one."""

    offset: int
    inode: int


@dataclass
class ShipState:
    """What has been shipped: committed offsets per spool file and running totals."""

    files: dict[str, FileCursor] = field(default_factory=dict)
    lines: int = 0
    batches: int = 0
    bytes: int = 0
    corrupted: int = 0
    last_success: float | None = None

    @classmethod
    def load(cls, path: Path) -> ShipState:
        """Read the state file; a missing one is a fresh start.

        A corrupt one (written by something else: our writes are atomic) is moved aside and
        shipping starts over — re-shipped events are the same ids, which the worker counts once.
        """
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return cls._from_json(raw)
        except FileNotFoundError:
            return cls()
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            aside = path.with_name(path.name + ".corrupt")
            with contextlib.suppress(OSError):
                os.replace(path, aside)
            log.error("state file %s is unreadable (%s); moved to %s, re-shipping from the start",
                      path, exc, aside)
            return cls()

    @classmethod
    def _from_json(cls, raw: dict[str, Any]) -> ShipState:
        if raw.get("version") != STATE_VERSION:
            raise ValueError(f"unknown state version {raw.get('version')!r}")
        files = {name: FileCursor(int(cur["offset"]), int(cur["inode"]))
                 for name, cur in raw["files"].items()}
        totals = raw.get("totals", {})
        last = totals.get("last_success")
        return cls(files, int(totals.get("lines", 0)), int(totals.get("batches", 0)),
                   int(totals.get("bytes", 0)), int(totals.get("corrupted", 0)),
                   None if last is None else float(last))

    def save(self, path: Path) -> None:
        """Write atomically (tmp + fsync + rename + directory fsync): a crash at any moment
        leaves either the old state or the new one, never a torn file."""
        doc = {
            "version": STATE_VERSION,
            "files": {name: {"offset": cur.offset, "inode": cur.inode}
                      for name, cur in sorted(self.files.items())},
            "totals": {"lines": self.lines, "batches": self.batches, "bytes": self.bytes,
                       "corrupted": self.corrupted, "last_success": self.last_success},
            "updated": time.time(),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as out:
            # dumps, not dump(indent=…): those take the pure-Python encoder, which was a
            # tenth of the agent's time with a hundred spool files (one save per batch).
            out.write(json.dumps(doc, separators=(",", ":")))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    """Make a rename durable; some filesystems refuse to fsync a directory, which is fine."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- batches
@dataclass
class Batch:
    """Lines on their way to the broker and, per file, the offset just past the last one."""

    lines: list[str] = field(default_factory=list)
    ends: dict[str, FileCursor] = field(default_factory=dict)
    nbytes: int = 0
    opened_at: float | None = None  # monotonic time of the first line
    corrupted: int = 0  # records skipped as corrupt; counted when the batch commits

    def fits(self, size: int, max_lines: int, max_bytes: int) -> bool:
        """Whether one more line of ``size`` bytes may join; an empty batch takes any line,
        so a line longer than ``max_bytes`` ships alone instead of blocking its file."""
        if not self.lines:
            return True
        return len(self.lines) < max_lines and self.nbytes + size <= max_bytes

    def add(self, text: str, size: int) -> None:
        if self.opened_at is None:
            self.opened_at = time.monotonic()
        self.lines.append(text)
        self.nbytes += size

    def is_full(self, max_lines: int, max_bytes: int) -> bool:
        return len(self.lines) >= max_lines or self.nbytes >= max_bytes

    def age(self) -> float:
        return 0.0 if self.opened_at is None else time.monotonic() - self.opened_at


# --------------------------------------------------------------------------- tailing
class SpoolTailer:
    """Finds the spool files and reads complete lines beyond each file's read position."""

    def __init__(self, spool_dir: Path, state: ShipState) -> None:
        self.spool_dir = spool_dir
        self.state = state
        self.read: dict[str, FileCursor] = {
            name: FileCursor(cur.offset, cur.inode) for name, cur in state.files.items()}

    def scan(self) -> list[str]:
        """The spool files now present, in name order; forgets deleted ones and restarts a
        file that was replaced (new inode) or truncated below its offset."""
        present: dict[str, os.stat_result] = {}
        with contextlib.suppress(FileNotFoundError), os.scandir(self.spool_dir) as entries:
            for entry in entries:  # scandir: one stat per file (glob + is_file took two)
                if entry.name.startswith(".") or not entry.name.endswith(SPOOL_SUFFIX):
                    continue  # as glob("*.jsonl"): hidden files are not spool segments
                with contextlib.suppress(FileNotFoundError):
                    if entry.is_file():
                        present[entry.name] = entry.stat()
        for name in list(self.state.files):
            if name not in present:
                del self.state.files[name]
                self.read.pop(name, None)
        for name, st in present.items():
            self._check_identity(name, st)
        return sorted(present)

    def _check_identity(self, name: str, st: os.stat_result) -> None:
        committed = self.state.files.get(name)
        if committed is None:
            self.state.files[name] = FileCursor(0, st.st_ino)
        elif committed.inode != st.st_ino or st.st_size < committed.offset:
            log.warning("spool file %s was replaced or truncated; shipping it from the start",
                        name)
            self.state.files[name] = FileCursor(0, st.st_ino)
            self.read.pop(name, None)
        if name not in self.read:
            cur = self.state.files[name]
            self.read[name] = FileCursor(cur.offset, cur.inode)

    def fill(self, batch: Batch, max_lines: int, max_bytes: int) -> None:
        """Add complete lines to ``batch`` until it is full or nothing complete is left."""
        for name in self.scan():
            if batch.is_full(max_lines, max_bytes):
                return
            self._fill_from(name, batch, max_lines, max_bytes)

    def _fill_from(self, name: str, batch: Batch, max_lines: int, max_bytes: int) -> None:
        """Add this file's next records; a destroyed event is skipped and counted, and the
        rest of the segment still ships. The shared reader yields one item per event (one
        problem per destroyed event), so counting problems counts events."""
        cursor = self.read[name]
        records = read_records(self.spool_dir / name, cursor.offset)
        try:
            for end, payload, problem in records:
                size = end - cursor.offset
                if payload is not None:
                    if not batch.fits(size, max_lines, max_bytes):
                        return
                    batch.add(payload, size)
                elif problem is not None:
                    batch.corrupted += 1
                    log.warning("spool file %s: %s; record skipped and counted", name, problem)
                cursor.offset = end
                batch.ends[name] = FileCursor(end, cursor.inode)
                if batch.is_full(max_lines, max_bytes):
                    return
        except FileNotFoundError:
            return
        finally:
            records.close()

    def commit(self, batch: Batch) -> None:
        """The batch is shipped: its end offsets become the committed ones."""
        for name, end in batch.ends.items():
            self.state.files[name] = FileCursor(end.offset, end.inode)

    def retire_shipped(self, keep_s: float) -> int:
        """Delete sealed segments shipped to their end and idle for ``keep_s``; return how
        many. Unsealed files are never deleted: their writer may still append."""
        retired = 0
        for name, cur in list(self.state.files.items()):
            path = self.spool_dir / name
            try:
                st = path.stat()
                if not (is_sealed(st) and cur.offset >= st.st_size
                        and time.time() - st.st_mtime >= keep_s):
                    continue
                path.unlink()
            except FileNotFoundError:
                pass
            self.state.files.pop(name, None)
            self.read.pop(name, None)
            retired += 1
        return retired

    def backlog_events(self) -> int:
        """Records beyond the committed offsets: complete lines (blank ones included), and an
        unterminated tail — a write in progress, or a torn record waiting for its segment to
        be sealed — because that event is on disk, unshipped, and in no other count.

        Lines, not records: this runs every second over the whole backlog, so it counts
        newlines instead of reading records. Damage that removed or added a newline in a
        part not yet read is off by those newlines until the reader reaches it and counts
        the events exactly (shipped or corrupted)."""
        total = 0
        for name, cur in list(self.state.files.items()):
            with contextlib.suppress(FileNotFoundError), open(self.spool_dir / name, "rb") as f:
                f.seek(cur.offset)
                last = b"\n"
                while chunk := f.read(1 << 20):
                    total += chunk.count(b"\n")
                    last = chunk[-1:]
                total += last != b"\n"
        return total

    def backlog_bytes(self) -> int:
        """Bytes present in spool files beyond the committed offsets (shipped or not yet)."""
        total = 0
        for name, cur in self.state.files.items():
            with contextlib.suppress(FileNotFoundError):
                total += max(0, (self.spool_dir / name).stat().st_size - cur.offset)
        return total


# --------------------------------------------------------------------------- publishing
class Publisher(Protocol):
    def publish(self, lines: list[str]) -> None: ...
    def publish_health(self, stats: dict[str, Any]) -> None: ...
    def reset(self) -> None: ...
    def close(self) -> None: ...


class CeleryPublisher:
    """Sends batches as the Celery task ``ett.ingest_batch`` by name, JSON only.

    It dials its own kombu connection rather than the app's pool: Celery lets an exported
    CELERY_BROKER_URL override the app's broker, and the agent must use the URL it was given
    (``--broker`` wins over the environment), with the password from its file beside it.
    Celery's publish retry is off and kombu connects once per try (``max_retries: 0``): the
    agent owns the retry loop, so a stop request is honoured between tries and the backoff
    is ours to log. Where a message goes on the wire is :func:`publish_route`.
    """

    def __init__(self, config: AgentConfig) -> None:
        import celery  # deferred: ``--help`` and config errors answer without loading Celery

        self.config = config
        self.app = celery.Celery("ett-collector", set_as_current=False)
        self.app.conf.update(task_serializer="json", accept_content=["json"])
        self.connection = self._connect()

    def _connect(self) -> Any:
        from kombu import Connection

        return Connection(self.config.broker_url, password=self.config.broker_password,
                          connect_timeout=self.config.publish_timeout_s,
                          transport_options=transport_options(self.config))

    def publish(self, lines: list[str]) -> None:
        """Return only once the broker has the batch; raise on any broker error."""
        self._send(TASK_NAME, [lines, self.config.source, self._auth(lines)])

    def publish_health(self, stats: dict[str, Any]) -> None:
        """Send the health counters as ``ett.collector_health``, signed like a batch over
        this node's name and the counters (``collector.auth.health_body``)."""
        signed = [health_body(self.config.source, stats)]
        self._send(HEALTH_TASK_NAME, [self.config.source, stats, self._auth(signed)])

    def _auth(self, lines: list[str]) -> dict[str, object] | None:
        cfg = self.config
        if cfg.collector_id is None or cfg.collector_secret is None:
            return None
        return sign_batch(cfg.collector_id, cfg.collector_secret, lines)

    def _send(self, task: str, args: list[Any]) -> None:
        timeout = self.config.publish_timeout_s
        self.app.send_task(task, args=args, queue=self.config.queue,
                           connection=self.connection, retry=False, serializer="json",
                           timeout=timeout, confirm_timeout=timeout,
                           **publish_route(self.config))

    def reset(self) -> None:
        """After an error, drop the connection: the next try dials the broker afresh."""
        self.close()
        self.connection = self._connect()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.connection.close()


def publish_route(config: AgentConfig) -> dict[str, Any]:
    """Where a message goes on AMQP: to the exchange named like the queue (the one Celery
    binds the queue to), declaring nothing, and mandatory.

    A training node's broker user may only write to that exchange (docs/operations.md, "The
    broker"). Declaring takes RabbitMQ's configure permission, which that user lacks, and
    Celery's default route, the nameless exchange, reaches every queue by name (the workers'
    control queues too), so it is not granted. Since nothing is declared, ``mandatory`` makes
    a message that no queue is bound to take fail (the agent retries it) instead of vanishing.
    Redis has no such permissions: there Celery's default stays (declare, publish by name).
    """
    if not config.is_amqp:
        return {}
    return {"exchange": config.queue, "routing_key": config.queue, "declare": [],
            "mandatory": True}


def transport_options(config: AgentConfig) -> dict[str, Any]:
    """Broker transport options: confirms on AMQP, bounded socket waits everywhere."""
    options: dict[str, Any] = {"max_retries": 0}
    if config.is_amqp:
        options["confirm_publish"] = True
    else:
        options["socket_connect_timeout"] = config.publish_timeout_s
        options["socket_timeout"] = config.publish_timeout_s
    return options


# --------------------------------------------------------------------------- the agent
class Agent:
    """Ships one spool directory; :meth:`run` returns the process exit status."""

    def __init__(self, config: AgentConfig, publisher: Publisher | None = None,
                 stop: threading.Event | None = None) -> None:
        self.config = config
        self.stop_event = stop or threading.Event()
        self.state = ShipState.load(config.state_file)
        self.tailer = SpoolTailer(config.spool_dir, self.state)
        self.publisher = publisher or CeleryPublisher(config)
        self._shipped_since_log = 0
        self._last_log = time.monotonic()
        self._last_health = time.monotonic()
        self._last_refresh = float("-inf")
        self._broker_ok = False
        self._held = False  # whether the spool is held for a rejected credential
        self.health = HealthStats()
        self.metrics: MetricsServer | None = None
        self.verdict: VerdictWatcher | None = None
        # A report's place in this agent's order: the broker may deliver an older one after a
        # newer one (a redelivery), and the server keeps only the newest of each source.
        self._report_epoch, self._report_seq = time.time(), 0

    def stop(self) -> None:
        """Ask the agent to finish: the batch in hand is shipped once more, then it exits."""
        self.stop_event.set()

    def run(self) -> int:
        """Follow the spool (or drain it once) until stopped; commit and return 0.

        With ``--once``, lines left unshipped return 1 (a stop came while they were in hand,
        or the spool is held for a rejected credential): the caller asked for everything and
        did not get it.
        """
        log.info("shipping %s to %s queue %r as %r", self.config.spool_dir,
                 _redact(self.config.broker_url), self.config.queue, self.config.source)
        self._start_metrics()
        self._start_verdict()
        try:
            drained = self._loop()
        finally:
            if self.verdict is not None:  # before the last report: no check on the way out
                self.verdict.close()
            self._save()
            self.tailer.retire_shipped(self.config.keep_shipped_s)
            self._refresh_health(force=True)
            if self._broker_ok:  # a last report, unless the broker is the problem
                self._send_health()
            self.publisher.close()
            if self.metrics is not None:
                self.metrics.close()
            self._log_progress(force=True)
        return 0 if drained or not self.config.once else 1

    # ------------------------------------------------------------ health
    def _start_metrics(self) -> None:
        cfg = self.config
        if cfg.metrics_port:
            self.metrics = MetricsServer(
                cfg.metrics_host, cfg.metrics_port,
                lambda: prometheus_text(self.health, cfg.source, rejected=self._rejected()))
            self.metrics.start()
            log.info("metrics on http://%s:%d/metrics", cfg.metrics_host, self.metrics.port)

    def _start_verdict(self) -> None:
        """Ask the server about the credential now, or say why this agent cannot."""
        cfg = self.config
        if cfg.collector_id is None or cfg.collector_secret is None:
            return  # unsigned: there is no credential to judge
        if cfg.server_url is None:
            log.warning("no --server-url (ETT_SERVER_URL): this agent cannot hear whether the "
                        "server accepts credential %r, and a rejected one would quarantine "
                        "every batch it sends; set it to the dashboard's address (e.g. "
                        "http://web:8000)", cfg.collector_id)
            return
        collector_id, secret, url = cfg.collector_id, cfg.collector_secret, cfg.server_url
        self.verdict = VerdictWatcher(
            lambda: check_credential(url, collector_id, secret, cfg.source),
            collector_id).start()

    def _rejected(self) -> bool:
        return self.verdict is not None and self.verdict.rejected

    def _rejection(self) -> str | None:
        """The server's reason while its latest verdict rejects the credential, else None."""
        standing = self.verdict.standing if self.verdict is not None else None
        return standing.reason if standing is not None and standing.state == REJECTED else None

    def _holding(self) -> bool:
        """Whether the spool is held: the server's latest verdict rejects the credential.

        Asked on the agent's thread before each publish; the hold begins and ends here, so
        each is logged once, when the agent acts on it."""
        reason = self._rejection()
        if reason is not None and not self._held:
            self._held = True
            self._begin_hold(reason)
        elif reason is None and self._held:
            self._held = False
            self._refresh_health(force=True)
            log.info("the server accepts credential %r again: shipping the %d held events from "
                     "where this agent stopped", self.config.collector_id,
                     self.health.backlog_events)
        return self._held

    def _begin_hold(self, reason: str) -> None:
        """Say what is held and why, and report health at once: the server records the
        refused report against this node, so ``/collectors/`` shows it as rejected even when
        its check wrote nothing (a wrong secret)."""
        self._refresh_health(force=True)
        health = self.health
        log.warning("holding the spool: the server rejected credential %r (%s), so a batch "
                    "sent now would be quarantined, not stored. %d events (%d bytes in %d "
                    "files) stay on disk, unsent and uncommitted; asking the server again "
                    "every %gs (--health-interval) and shipping as soon as it accepts the "
                    "credential", self.config.collector_id, reason, health.backlog_events,
                    health.backlog_bytes, health.spool_files, self.config.health_interval_s)
        self._send_health()

    def _refresh_health(self, *, force: bool = False) -> None:
        """Recompute the snapshot (at most once a second): scrapes read it, never the state."""
        now = time.monotonic()
        if not force and now - self._last_refresh < 1.0:
            return
        self._last_refresh = now
        self.health = HealthStats(
            backlog_bytes=self.tailer.backlog_bytes(),
            backlog_events=self.tailer.backlog_events(),
            shipped_events=self.state.lines,
            dropped_events=dropped_events(self.config.spool_dir),
            corrupted_records=self.state.corrupted,
            last_success_ts=self.state.last_success,
            spool_files=len(self.state.files),
        )

    def _housekeeping(self) -> None:
        """Between batches (at most once a second, busy or idle): retire shipped segments,
        refresh the health snapshot, and send it when the health interval is up."""
        if time.monotonic() - self._last_refresh < 1.0:
            return
        self.tailer.retire_shipped(self.config.keep_shipped_s)
        self._refresh_health(force=True)
        if time.monotonic() - self._last_health >= self.config.health_interval_s:
            self._send_health()

    def _send_health(self) -> None:
        """Best effort, never retried: the next report carries the same totals anyway."""
        self._last_health = time.monotonic()
        self._report_seq += 1
        report = {**self.health.as_dict(), "report_epoch": self._report_epoch,
                  "report_seq": self._report_seq}
        try:
            self.publisher.publish_health(report)
            self._broker_ok = True
        except Exception as exc:  # a broker problem shows up in the batch path too
            log.warning("health report not sent (%s: %s)", type(exc).__name__, exc)
            self._broker_ok = False
            self.publisher.reset()
        if self.verdict is not None:
            self.verdict.request()

    def _loop(self) -> bool:
        """Ship batches until stopped (or, with ``--once``, until nothing complete is left);
        False when lines were left in hand. While held, the batch in hand waits, unsent."""
        cfg = self.config
        batch = Batch()
        while True:
            stopping = self.stop_event.is_set()
            self.tailer.fill(batch, cfg.batch_lines, cfg.batch_bytes)
            full = batch.is_full(cfg.batch_lines, cfg.batch_bytes)
            due = full or cfg.once or stopping or batch.age() >= cfg.batch_wait_s
            if not self._holding() and batch.ends and due:
                if self._ship(batch, retry=not stopping):
                    if stopping:  # a stop ships the batch in hand, not the whole backlog
                        return not cfg.once
                    self._housekeeping()
                    batch = Batch()
                    continue  # more may be waiting: look again at once
                if stopping or not self._held:
                    return False
                # held while the broker was retried: the batch waits in hand, uncommitted
            if stopping or cfg.once:
                return not batch.ends
            self._housekeeping()
            self._log_progress()
            self.stop_event.wait(self._idle_wait(batch))

    def _idle_wait(self, batch: Batch) -> float:
        """Sleep a poll interval, but wake in time for a waiting batch's deadline (unless
        it is held: then its deadline has nothing to wake for)."""
        if not batch.lines or self._held:
            return self.config.poll_interval_s
        return max(0.0, min(self.config.poll_interval_s,
                            self.config.batch_wait_s - batch.age()))

    def _ship(self, batch: Batch, *, retry: bool) -> bool:
        """Publish (retrying with backoff while not stopped or held), then commit; False if
        not sent, and then nothing is committed."""
        if batch.lines and not self._publish_with_retry(batch.lines, retry=retry):
            return False
        self.tailer.commit(batch)
        self.state.lines += len(batch.lines)
        self.state.bytes += batch.nbytes
        self.state.batches += 1 if batch.lines else 0
        self.state.corrupted += batch.corrupted
        if batch.lines:
            self.state.last_success = time.time()
        self._save()  # before any retirement: a segment is deleted only once committed
        self._shipped_since_log += len(batch.lines)
        log.debug("shipped %d lines (%d bytes)", len(batch.lines), batch.nbytes)
        return True

    def _publish_with_retry(self, lines: list[str], *, retry: bool) -> bool:
        delay = self.config.retry_initial_s
        failures = 0
        while True:
            if self._holding():  # the verdict may come while the broker is being retried
                return False
            try:
                self.publisher.publish(lines)
            except Exception as exc:  # any broker failure (connection, auth, nack) is retried
                failures += 1
                self._broker_ok = False
                self._refresh_health()  # the metrics show the backlog growing meanwhile
                self.publisher.reset()
                if not retry or self.stop_event.is_set():
                    log.warning("broker error (%s: %s); stopping with %d lines unshipped",
                                type(exc).__name__, exc, len(lines))
                    return False
                wait = backoff(delay)
                log.warning("broker error (%s: %s); try %d failed, retrying in %.1fs",
                            type(exc).__name__, exc, failures, wait)
                if self.stop_event.wait(wait):
                    return self._publish_with_retry(lines, retry=False)
                delay = min(delay * 2, self.config.retry_max_s)
                continue
            if failures:
                log.info("broker reachable again after %d failed tries", failures)
            self._broker_ok = True
            return True

    def _save(self) -> None:
        try:
            self.state.save(self.config.state_file)
        except OSError as exc:  # a full disk must not stop shipping; offsets lag, no loss
            log.error("cannot save state %s: %s", self.config.state_file, exc)

    def _log_progress(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_log < self.config.stats_interval_s:
            return
        self._last_log = now
        if self._held and self.verdict is not None:
            held = self.health  # the snapshot: counting events reads the whole backlog
            log.info("sent %d events (total %d in %d batches), server rejected the credential: "
                     "%s; holding %d events, %d bytes in %d files", self._shipped_since_log,
                     self.state.lines, self.state.batches, self.verdict.reason,
                     held.backlog_events, held.backlog_bytes, held.spool_files)
        else:
            backlog = self.tailer.backlog_bytes(), len(self.state.files)
            log.info("shipped %d events (total %d in %d batches); backlog %d bytes in %d files",
                     self._shipped_since_log, self.state.lines, self.state.batches, *backlog)
        self._shipped_since_log = 0


def backoff(delay: float) -> float:
    """Equal jitter: between half and all of ``delay``, so many nodes that lost the same
    broker do not all come back in the same instant."""
    return delay / 2 + random.uniform(0, delay / 2)


def _redact(url: str) -> str:
    """The broker URL without its password, for logs."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
