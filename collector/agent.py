"""The per-node collector agent's shipping loop: spool to broker, batch by batch, until stopped.

Why it works this way:

* A batch is committed (``collector.ship_state``) only after the broker took it, so a crash
  or an outage re-ships at worst the last batch. Lines come from ``collector.tailer``, go out
  through ``collector.publisher``, and health leaves through ``collector.health_reports``.
* A broker error is retried with growing, jittered waits for as long as the agent is not
  stopped; a stop ships the batch in hand once more, then the agent exits.
* Whether the server accepts the credential comes back over HTTP (``collector.verdict``,
  with ``--server-url``), since the broker carries nothing back to the node. While the
  server's latest verdict is "rejected" the agent *holds* its spool: the worker would
  quarantine every batch (keeping a sample of its lines), so it publishes none and commits
  nothing, keeps reporting its health (each report is followed by a new check), and ships
  from where it stopped once the server accepts the credential again. Only a verdict holds
  it: a server that cannot be heard, or a check it could not judge (a node clock far off),
  leaves shipping as it was, and so does an agent without ``--server-url``.
* A trainer killed outright leaves its progress file (``collector.progress``) in the spool;
  between batches the agent writes its final heartbeat on its behalf
  (``collector.final_heartbeats``) and ships it with the rest, so a trainer run without
  ``collector.run`` still reports the steps its lost train slice held.
"""

from __future__ import annotations

import logging
import random
import threading
import time

from collector.config import AgentConfig
from collector.final_heartbeats import write_final_heartbeats
from collector.health import HealthStats
from collector.health_reports import HealthReports
from collector.publisher import CeleryPublisher, Publisher
from collector.ship_state import ShipState
from collector.tailer import Batch, SpoolTailer
from collector.verdict import REJECTED, VerdictWatcher, watch_credential

log = logging.getLogger("ett.collector")


class Agent:
    """Ships one spool directory; :meth:`run` returns the process exit status."""

    def __init__(self, config: AgentConfig, publisher: Publisher | None = None,
                 stop: threading.Event | None = None) -> None:
        self.config = config
        self.stop_event = stop or threading.Event()
        self.state = ShipState.load(config.state_file)
        self.tailer = SpoolTailer(config.spool_dir, self.state)
        self.publisher = publisher or CeleryPublisher(config)
        self.reports = HealthReports(config, self.state, self.tailer, self.publisher,
                                     rejected=self._rejected,
                                     after_send=self._check_credential_again)
        self._shipped_since_log = 0
        self._last_log = time.monotonic()
        self._broker_ok = False
        self._held = False  # whether the spool is held for a rejected credential
        self.verdict: VerdictWatcher | None = None

    @property
    def health(self) -> HealthStats:
        """The latest health snapshot (what ``/metrics`` serves and reports send)."""
        return self.reports.snapshot

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
        self.reports.serve()
        self.verdict = watch_credential(self.config)
        write_final_heartbeats(self.config.spool_dir)  # trainers killed while it was down
        try:
            drained = self._loop()
        finally:
            if self.verdict is not None:  # before the last report: no check on the way out
                self.verdict.close()
            self._save()
            self.tailer.retire_shipped(self.config.keep_shipped_s)
            self.reports.refresh(force=True)
            if self._broker_ok:  # a last report, unless the broker is the problem
                self._report_health()
            self.publisher.close()
            self.reports.close()
            self._log_progress(force=True)
        return 0 if drained or not self.config.once else 1

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
            self.reports.refresh(force=True)
            log.info("the server accepts credential %r again: shipping the %d held events from "
                     "where this agent stopped", self.config.collector_id,
                     self.health.backlog_events)
        return self._held

    def _begin_hold(self, reason: str) -> None:
        """Say what is held and why, and report health at once: the server records the
        refused report against this node, so ``/collectors/`` shows it as rejected even when
        its check wrote nothing (a wrong secret)."""
        self.reports.refresh(force=True)
        health = self.health
        log.warning("holding the spool: the server rejected credential %r (%s), so a batch "
                    "sent now would be quarantined, not stored. %d events (%d bytes in %d "
                    "files) stay on disk, unsent and uncommitted; asking the server again "
                    "every %gs (--health-interval) and shipping as soon as it accepts the "
                    "credential", self.config.collector_id, reason, health.backlog_events,
                    health.backlog_bytes, health.spool_files, self.config.health_interval_s)
        self._report_health()

    def _housekeeping(self) -> None:
        """Between batches (at most once a second, busy or idle): retire shipped segments,
        refresh the health snapshot, and send it when the health interval is up."""
        if self.reports.is_fresh():
            return
        write_final_heartbeats(self.config.spool_dir)
        self.tailer.retire_shipped(self.config.keep_shipped_s)
        self.reports.refresh(force=True)
        if self.reports.is_due():
            self._report_health()

    def _report_health(self) -> None:
        """Send a health report; whether it got through tells the agent about its broker."""
        self._broker_ok = self.reports.send()

    def _check_credential_again(self) -> None:
        """After each health report: a held spool ships as soon as the server accepts the
        credential again."""
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
                self.reports.refresh()  # the metrics show the backlog growing meanwhile
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
