"""Stored events, the jobs they belong to, and quarantined (rejected) lines.

Times are kept as float epoch seconds, exactly as schema v1 carries them: the attribution
engine works in seconds, and converting to timestamps and back would only add rounding.
"""

from __future__ import annotations

from django.db import models


class Event(models.Model):
    """One valid schema-v1 event, in a table partitioned by event time (migration 0002).

    Postgres only allows a unique constraint on a partitioned table when it includes the
    partition key, so ``event_id`` is unique through :class:`EventId` instead. The table is
    created by raw SQL in that migration; the model stays managed so test flushes empty it.
    """

    event_id = models.CharField(max_length=64)
    job = models.CharField(max_length=200)
    attempt = models.PositiveIntegerField()
    kind = models.CharField(max_length=8)
    phase = models.CharField(max_length=64, blank=True, default="")
    mark = models.CharField(max_length=16, blank=True, default="")
    start = models.FloatField(null=True, blank=True)
    end = models.FloatField(null=True, blank=True)
    ts = models.FloatField(null=True, blank=True)
    rank = models.PositiveIntegerField(default=0)
    host = models.CharField(max_length=200, blank=True, default="")
    step_start = models.BigIntegerField(null=True, blank=True)
    step_end = models.BigIntegerField(null=True, blank=True)
    step = models.BigIntegerField(null=True, blank=True)
    blocking = models.BooleanField(default=True)
    attrs = models.JSONField(default=dict, blank=True)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "ingest_event"

    def __str__(self) -> str:
        what = self.phase or self.mark
        return f"{self.job}#{self.attempt} {self.kind}:{what}"



class Job(models.Model):
    """A training job as first seen by ingestion; the event history stays in :class:`Event`."""

    job_id = models.CharField(max_length=200, unique=True)
    first_seen = models.DateTimeField(auto_now_add=True)
    last_event_time = models.FloatField(help_text="latest event time seen, epoch seconds")
    #: Every stored event of the job has its home time (span start, mark time: the events
    #: table's partition key) between these, so a refresh reads a new job's events from its
    #: days' partitions alone. NULL: not known (the job was stored before they were kept).
    first_home = models.FloatField(null=True, blank=True,
                                   help_text="earliest home time of its events, epoch seconds")
    last_home = models.FloatField(null=True, blank=True,
                                  help_text="latest home time of its events, epoch seconds")
    #: Every stored span of the job is at most this long, so a span ending by ``t`` started
    #: after ``t`` minus it: how far back ``ettweb.rollups.implied_store`` looks first.
    longest_span_s = models.FloatField(null=True, blank=True,
                                       help_text="its longest span, seconds (NULL: not known)")
    model = models.CharField(max_length=200, blank=True, default="")
    team = models.CharField(max_length=200, blank=True, default="")
    cluster = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["job_id"]

    def __str__(self) -> str:
        return self.job_id


class QuarantinedEvent(models.Model):
    """A rejected line with the reason, so nothing is silently dropped.

    ``raw`` keeps at most the first ``QUARANTINE_RAW_CHARS`` characters (with the line's full
    size and SHA-256 beside them): anyone who can publish to the broker can send a 20 MB line,
    and a quarantine row must not be a way to fill the database.
    """

    raw = models.TextField(help_text="the line, or its first characters (see raw_bytes)")
    raw_bytes = models.PositiveBigIntegerField(default=0,
                                               help_text="size of the whole line (UTF-8)")
    raw_sha256 = models.CharField(max_length=64, blank=True, default="",
                                  help_text="SHA-256 of the whole line")
    lines = models.PositiveIntegerField(default=1, help_text=(
        "rejected lines this row counts: 1, or for the last kept line of a batch refused "
        "whole, also the lines not kept (the sum over rows is every rejected line)"))
    reason = models.TextField()
    source = models.CharField(max_length=200, blank=True, default="")
    job = models.CharField(max_length=200, blank=True, default="",
                           help_text="job id if the line named one; helps find gaps per job")
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["job"], name="quarantine_job")]

    def __str__(self) -> str:
        return f"{self.source or '?'}: {self.reason}"


class EventId(models.Model):
    """Every stored event id once: the dedup key the partitioned events table cannot hold."""

    event_id = models.CharField(max_length=64, primary_key=True)

    def __str__(self) -> str:
        return self.event_id


class CollectorCredential(models.Model):
    """One collector's HMAC secret. The worker needs the secret itself to verify a
    signature, so it is stored as given; the admin shows only a prefix."""

    name = models.CharField(max_length=200, unique=True)
    collector_id = models.CharField(max_length=64, unique=True)
    secret = models.CharField(max_length=128)
    active = models.BooleanField(default=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def secret_prefix(self) -> str:
        """Enough to tell two secrets apart, too little to sign with."""
        return f"{self.secret[:6]}…"


class BatchNonce(models.Model):
    """Nonces of accepted batches, kept ``NONCE_TTL_S`` (7 days): a batch with a seen nonce
    is a replay (or a redelivery) and stores nothing new."""

    nonce = models.CharField(max_length=64, unique=True)
    collector_id = models.CharField(max_length=64)
    seen_at = models.FloatField(help_text="epoch seconds", db_index=True)

    def __str__(self) -> str:
        return self.nonce


class CollectorHealth(models.Model):
    """The latest health report of one collector agent (``ett.collector_health``)."""

    source = models.CharField(max_length=200, unique=True)
    collector_id = models.CharField(max_length=64, blank=True, default="")
    backlog_bytes = models.BigIntegerField(default=0)
    backlog_events = models.BigIntegerField(default=0)
    shipped_events = models.BigIntegerField(default=0)
    dropped_events = models.BigIntegerField(default=0)
    corrupted_records = models.BigIntegerField(default=0)
    spool_files = models.BigIntegerField(default=0)
    last_success_ts = models.FloatField(null=True, blank=True)
    # Which report this is, in its agent's order (start time, then a counter): an older report
    # delivered late never replaces a newer one. 0/0 for agents that do not say.
    report_epoch = models.FloatField(default=0.0)
    report_seq = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["source"]
        verbose_name_plural = "collector health"

    def __str__(self) -> str:
        return self.source


class CollectorRejection(models.Model):
    """The server's latest refusal of one claimed collector's credential, per source.

    Why: the broker carries nothing back to a node, and quarantine rows are lines, not
    nodes: without this, a collector whose every report is refused would not appear among
    the collectors at all. One row per (source, claimed id), updated at each refusal, shows
    it as rejected with the reason until an accepted report is newer. The claimed id is
    whatever the message said (empty when unsigned or unreadable); no secret or signature is
    kept.
    """

    source = models.CharField(max_length=200)
    collector_id = models.CharField(max_length=64, blank=True, default="",
                                    help_text="the id the refused message claimed")
    reason = models.TextField(help_text="the latest refusal's reason")
    refused = models.CharField(max_length=32, help_text="what was refused last: a batch, a "
                                                        "health report, a credential check")
    refusals = models.BigIntegerField(default=1)
    first_at = models.DateTimeField()
    last_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-last_at"]
        constraints = [models.UniqueConstraint(fields=["source", "collector_id"],
                                               name="one_rejection_per_source_and_id")]

    def __str__(self) -> str:
        return f"{self.source} ({self.collector_id or 'no credential'}): {self.reason}"


class RejectionTally(models.Model):
    """Every refusal of a collector's credential, counted per reason, forever.

    Why: the per-source rows (:class:`CollectorRejection`) are kept bounded, because anyone
    who can publish to the broker can name as many sources as they like (3,000 unsigned
    one-line batches once left 3,000 rows and a 2.5 MB collectors page). What is pruned there
    is still counted here, exactly: ``refusals`` every refused message, ``sources`` every
    (source, claimed id) row the reason created. The key is the reason with what the sender
    chose cut off (``ettweb.ingest.credentials.reason_kind``), and past
    ``REASON_KINDS_KEPT`` kinds new ones are counted under one "other" row, so this table is
    bounded by construction too.
    """

    reason = models.CharField(max_length=200, unique=True)
    refusals = models.BigIntegerField(default=0, help_text="refused messages, all sources")
    sources = models.BigIntegerField(default=0, help_text=(
        "(source, claimed id) pairs first refused for this reason, pruned ones included"))
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()

    class Meta:
        ordering = ["-refusals", "reason"]
        verbose_name_plural = "rejection tallies"

    def __str__(self) -> str:
        return f"{self.reason}: {self.refusals}"


class SourceBucket(models.Model):
    """The per-source rate limit's state: one row per hash slot of a batch's ``source``.

    Why: a node flooding tiny batches must not hold every other node's events back
    (``ettweb.ingest.fairness``). The state is a GCRA "theoretical arrival time" per slot,
    shared by every worker; sources are hashed into ``ETT_INGEST_SOURCE_SLOTS`` slots, so a
    publisher naming a million sources still makes at most that many rows.
    """

    slot = models.IntegerField(primary_key=True)
    tat = models.FloatField(help_text="epoch seconds: when the slot's bucket is full again")

    def __str__(self) -> str:
        return f"slot {self.slot}"


class CheckNonce(models.Model):
    """Nonces of accepted credential checks (``POST /api/v1/collectors/self``). A check older
    than the clock window is refused by its timestamp, so a nonce is kept only that long:
    not with the batches' nonces, which stay a week."""

    nonce = models.CharField(max_length=64, unique=True)
    seen_at = models.FloatField(help_text="epoch seconds", db_index=True)

    def __str__(self) -> str:
        return self.nonce


class EventHorizon(models.Model):
    """The one row saying how far back raw events are kept: events whose home time (span
    start, mark time) is before ``before`` were dropped by retention, their chunks are
    final, and an event that old is refused with that reason (``ettweb.ingest.retention``)."""

    before = models.FloatField(null=True, help_text="epoch seconds; null: nothing dropped yet")
    dropped_events = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return f"events kept from {self.before}" if self.before else "nothing dropped yet"
