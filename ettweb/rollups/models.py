"""Rollup tables: what the attribution engine says about the stored events, kept per job.

Everything is stored by *category* (``compile``, ``restart_gap``, ``productive`` ...), never by
owning component: owners edit :class:`PhaseComponent` and the next query maps categories to
components, so an edit takes effect at once without recomputing anything.

Child tables reference :class:`JobRollup` through its ``job`` string (``to_field``) so the job
id is the join key everywhere, exactly as events carry it. Their foreign keys have no index of
their own (``db_index=False``): every child table has a unique or ``(job, day)`` index that
starts with the job, which serves each lookup by job, where the foreign key's index (and the
``varchar_pattern_ops`` copy Django adds to it) only made every written row two index entries
dearer. A refresh writes these rows for every job it recomputes.
"""

from __future__ import annotations

from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.db import models

from ettweb.attribution.components import UNKNOWN_COMPONENT


class PhaseComponent(models.Model):
    """Which owning component a category of lost time belongs to (ETT_SPEC §4), editable.

    Seeded from ``DEFAULT_PHASE_COMPONENTS``; an unmapped category reads as ``unknown``.
    """

    phase = models.CharField(max_length=64, unique=True,
                             help_text="category / phase name, e.g. compile or restart_gap")
    component = models.CharField(max_length=64, default=UNKNOWN_COMPONENT,
                                 help_text="owning component, e.g. pt2_compiler")

    class Meta:
        ordering = ["phase"]

    def __str__(self) -> str:
        return f"{self.phase} → {self.component}"


class JobRollup(models.Model):
    """One job's headline numbers, equal to the offline report's entry for the job."""

    job = models.CharField(max_length=200, unique=True)
    wall_s = models.FloatField(default=0.0)
    productive_s = models.FloatField(default=0.0)
    wall_gpu_s = models.FloatField(default=0.0)
    productive_gpu_s = models.FloatField(default=0.0)
    ett_pct = models.FloatField(default=0.0)
    lost_s = models.JSONField(default=dict, help_text="category -> seconds (non-zero only)")
    lost_gpu_s = models.JSONField(default=dict, help_text="category -> GPU-seconds")
    attempts = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=16, blank=True, default="",
                              help_text="status of the last attempt (running, completed ...)")
    gpus = models.PositiveIntegerField(default=1, help_text="GPUs of the last attempt")
    model = models.CharField(max_length=200, blank=True, default="")
    team = models.CharField(max_length=200, blank=True, default="")
    cluster = models.CharField(max_length=200, blank=True, default="")
    window_start = models.FloatField(null=True, help_text="job window, epoch seconds")
    window_end = models.FloatField(null=True)
    repeated_steps = models.BigIntegerField(default=0)
    time_to_start_s = models.FloatField(null=True)
    failures = models.PositiveIntegerField(default=0)
    duplicates = models.PositiveIntegerField(default=0)
    anomalies = models.JSONField(default=dict, help_text="anomaly kind -> count")
    events = models.PositiveIntegerField(default=0, help_text="stored events attributed")
    chunks = models.PositiveIntegerField(default=0, help_text="occupied chunks of its timeline")
    updated_at = models.DateTimeField(auto_now=True)
    timeline_digest = models.CharField(
        max_length=32, blank=True, default="",
        help_text="digest of the stored timeline and rank lanes: a refresh rewrites them only "
                  "when it changes; empty for a job rolled up before they were stored")
    instrumentation = models.JSONField(
        null=True, blank=True, default=None,
        help_text='the completeness check: {"findings": [...]} '
                  "(ettweb.attribution.completeness); null: not checked (rolled up before it)")

    class Meta:
        ordering = ["job"]
        indexes = [models.Index(fields=["window_start"], name="jobrollup_start"),
                   # The labels every filter names, with the job: the filters' choices, a
                   # rollout's scope and a component's lost time by model are index-only
                   # scans, not reads of the wide rows (each holds its chunk list).
                   models.Index(fields=["model", "team", "cluster"], include=["job"],
                                name="jobrollup_labels")]

    def __str__(self) -> str:
        return f"{self.job}: {self.ett_pct:.2f}%"

    @property
    def anomaly_count(self) -> int:
        return sum(int(count) for count in self.anomalies.values())


class AttemptRollup(models.Model):
    """One attempt window (ETT_SPEC §3.1) after clamping."""

    job = models.ForeignKey(JobRollup, to_field="job", db_column="job", on_delete=models.CASCADE,
                            db_index=False,
                            related_name="attempt_rows")
    attempt = models.PositiveIntegerField()
    start = models.FloatField()
    end = models.FloatField()
    status = models.CharField(max_length=16)
    gpus = models.PositiveIntegerField()
    repeated_steps = models.BigIntegerField(
        default=0, help_text="steps this attempt's train spans trained again (ETT_SPEC §3.7)")

    class Meta:
        ordering = ["job", "attempt"]
        constraints = [models.UniqueConstraint(fields=["job", "attempt"],
                                               name="attemptrollup_unique")]

    def __str__(self) -> str:
        return f"{self.job_id}#{self.attempt} {self.status}"


class AttemptTimeline(models.Model):
    """One attempt's row of the job page's category timeline (its restart gap included).

    Why stored: drawing it from the events meant running the engine over the whole job on
    every page load. ``pieces`` is ``[[category, start, end], ...]`` in epoch seconds, at
    most ``ettweb.attribution.lanes.MAX_PIECES`` of them (``bin_s`` > 0: cut into a grid of
    that width, each bin keeping the category that covers most of it).
    """

    job = models.ForeignKey(JobRollup, to_field="job", db_column="job", on_delete=models.CASCADE,
                            db_index=False,
                            related_name="timeline_rows")
    attempt = models.PositiveIntegerField()
    bin_s = models.FloatField(default=0.0, help_text="0: exact pieces; else the grid's bin")
    pieces = models.JSONField(default=list, help_text="[[category, start, end], ...]")

    class Meta:
        ordering = ["job", "attempt"]
        constraints = [models.UniqueConstraint(fields=["job", "attempt"],
                                               name="attempttimeline_unique")]

    def __str__(self) -> str:
        return f"{self.job_id}#{self.attempt}: {len(self.pieces)} pieces"


class DailyCategoryRollup(models.Model):
    """Seconds and GPU-seconds of one job in one category on one UTC day (§3.6).

    ``productive`` is a category here too, so a day's wall GPU-seconds is the sum of its rows.
    ``written_at`` changes only when the row's numbers change: it shows which days a late
    batch actually recomputed.
    """

    day = models.DateField()
    job = models.ForeignKey(JobRollup, to_field="job", db_column="job", on_delete=models.CASCADE,
                            db_index=False,
                            related_name="day_rows")
    category = models.CharField(max_length=64)
    seconds = models.FloatField()
    gpu_seconds = models.FloatField()
    written_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["day", "job", "category"],
                                               name="dailyrollup_unique")]
        indexes = [models.Index(fields=["job", "day"], name="dailyrollup_job_day"),
                   # A component's top jobs and models read its categories' rows of a range
                   # alone (an index-only scan), not every category's.
                   models.Index(fields=["category", "day"], include=["job", "gpu_seconds"],
                                name="dailyrollup_category_day")]

    def __str__(self) -> str:
        return f"{self.day} {self.job_id} {self.category}: {self.gpu_seconds:.1f} GPU-s"


class ExactSumField(models.Field):
    """A Postgres ``numeric`` of unbounded precision, read back as a float.

    Why: :class:`FleetDayRollup` is kept by adding each refresh's changes (new value minus
    old) rather than by summing the fleet again; in ``numeric`` those additions are exact,
    so a cell is always the exact sum of its rows and a category that vanished is exactly 0
    (in floats, a long-lived cell would drift and leave 1e-9 GPU-second ghosts).
    """

    def db_type(self, connection: Any) -> str:
        return "numeric"

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> float | None:
        return None if value is None else float(value)

    def to_python(self, value: Any) -> float | None:
        return None if value is None else float(value)


class FleetDayRollup(models.Model):
    """The whole fleet's seconds and GPU-seconds in one category on one UTC day: the sum of
    every job's :class:`DailyCategoryRollup` rows of that day and category.

    Why: an unfiltered fleet page or report over months would otherwise read and group every
    job's day rows; one row per category a day answers the same sums. Kept exact (see
    :class:`ExactSumField`) by ``ettweb.rollups.day_sums`` in the transaction that writes the
    day rows; ``rollups.audit.day_sum_drift`` compares it with a fresh sum.
    """

    day = models.DateField()
    category = models.CharField(max_length=64)
    seconds = ExactSumField()
    gpu_seconds = ExactSumField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["day", "category"],
                                               name="fleetdayrollup_unique")]

    def __str__(self) -> str:
        return f"{self.day} {self.category}: {self.gpu_seconds:.1f} GPU-s"


class LabelDayRollup(models.Model):
    """Seconds and GPU-seconds per UTC day and category of the jobs sharing one model, team,
    cluster and GPU-size bucket (a job's labels and GPUs are those of its rollup).

    Why: a filtered or grouped fleet page would otherwise read and join every job's day
    rows; these sums hold the same numbers in one row per label combination a day. Kept
    exact like :class:`FleetDayRollup`; a job whose labels change moves all its sums at once.
    """

    day = models.DateField()
    category = models.CharField(max_length=64)
    model = models.CharField(max_length=200, blank=True, default="")
    team = models.CharField(max_length=200, blank=True, default="")
    cluster = models.CharField(max_length=200, blank=True, default="")
    gpus = models.CharField(max_length=16, help_text="GPU-size bucket, e.g. 9-64")
    seconds = ExactSumField()
    gpu_seconds = ExactSumField()

    class Meta:
        constraints = [models.UniqueConstraint(
            fields=["day", "category", "model", "team", "cluster", "gpus"],
            name="labeldayrollup_unique")]

    def __str__(self) -> str:
        return f"{self.day} {self.category} {self.model}/{self.team}/{self.cluster}/{self.gpus}"


class ScopeTotalRollup(models.Model):
    """Seconds and GPU-seconds per team, cluster and category over every day: the label
    sums (:class:`LabelDayRollup`) summed over days, models and GPU sizes.

    Why: ``/metrics`` reports each scope's all-time lost time on every scrape; summing the
    label sums of a whole history for it read a row per label, day and category (157,000 at
    the bench's fleet scale) where this holds a few hundred. Kept exact like the day sums,
    by the same changes in the same transaction; ``rollups.audit`` checks it.
    """

    team = models.CharField(max_length=200, blank=True, default="")
    cluster = models.CharField(max_length=200, blank=True, default="")
    category = models.CharField(max_length=64)
    seconds = ExactSumField()
    gpu_seconds = ExactSumField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "cluster", "category"],
                                               name="scopetotalrollup_unique")]

    def __str__(self) -> str:
        return f"{self.team}/{self.cluster} {self.category}: {self.gpu_seconds:.1f} GPU-s"


class JobDayRollup(models.Model):
    """One job's wall and productive GPU-seconds on one UTC day (its day rows summed over
    categories).

    Why: rollout impact sums each job's wall and productive time over two windows of up to
    90 days, and the top jobs rank jobs by lost time over a range; both would read a row
    per category and job-day from :class:`DailyCategoryRollup` where one row per job-day
    holds what they need.
    """

    job = models.ForeignKey(JobRollup, to_field="job", db_column="job", on_delete=models.CASCADE,
                            db_index=False,
                            related_name="job_days")
    day = models.DateField()
    wall_gpu_seconds = models.FloatField()
    productive_gpu_seconds = models.FloatField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["day", "job"],
                                               name="jobdayrollup_unique")]
        indexes = [models.Index(fields=["job", "day"], name="jobdayrollup_job_day")]

    def __str__(self) -> str:
        return f"{self.day} {self.job_id}: {self.wall_gpu_seconds:.1f} GPU-s"


class JobLostRollup(models.Model):
    """One job's lost GPU-seconds in one category over its whole life (its rollup's
    ``lost_gpu_s``, one row per non-zero category).

    Why a table beside the JSON: the jobs list and ``/metrics`` sum lost time per category
    over thousands of jobs on every load; Postgres sums these narrow rows far faster than
    Python unpacks one JSON object per job (docs/benchmarks.md).
    """

    job = models.ForeignKey(JobRollup, to_field="job", db_column="job", on_delete=models.CASCADE,
                            db_index=False,
                            related_name="lost_rows")
    category = models.CharField(max_length=64)
    gpu_seconds = models.FloatField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "category"],
                                               name="joblostrollup_unique")]

    def __str__(self) -> str:
        return f"{self.job_id} {self.category}: {self.gpu_seconds:.1f} GPU-s lost"


class RecoveryRollup(models.Model):
    """One ``time_to_recover_s`` value (§3.8) and what the recovery time was spent on.

    ``day`` is the UTC day the failed attempt's last event falls on: the restart tax is
    charged to the day the failure happened.
    """

    job = models.ForeignKey(JobRollup, to_field="job", db_column="job", on_delete=models.CASCADE,
                            db_index=False,
                            related_name="recovery_rows")
    attempt = models.PositiveIntegerField(help_text="the failed, preempted or lost attempt")
    start = models.FloatField()
    end = models.FloatField()
    day = models.DateField()
    seconds = models.FloatField()
    gpus = models.PositiveIntegerField(default=1)
    by_category = models.JSONField(default=dict, help_text="category -> seconds")
    by_category_gpu = models.JSONField(default=dict, help_text="category -> GPU-seconds")

    class Meta:
        ordering = ["job", "attempt"]
        constraints = [models.UniqueConstraint(fields=["job", "attempt"],
                                               name="recoveryrollup_unique")]
        indexes = [models.Index(fields=["day"], name="recoveryrollup_day")]

    def __str__(self) -> str:
        return f"{self.job_id}#{self.attempt} recovered in {self.seconds:.1f} s"


class RecoveryPartRollup(models.Model):
    """One recovery's GPU-seconds in one category (its ``by_category_gpu``, one row per
    non-zero category): the restart tax the fleet page stacks per day.

    Why a table beside the JSON: summing every recovery's JSON parts on each load parses
    each value from text; these narrow rows sum far faster.
    """

    job = models.ForeignKey(JobRollup, to_field="job", db_column="job", on_delete=models.CASCADE,
                            db_index=False,
                            related_name="recovery_parts")
    attempt = models.PositiveIntegerField()
    day = models.DateField()
    category = models.CharField(max_length=64)
    gpu_seconds = models.FloatField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "attempt", "category"],
                                               name="recoverypart_unique")]
        indexes = [models.Index(fields=["day"], name="recoverypart_day")]

    def __str__(self) -> str:
        return f"{self.job_id}#{self.attempt} {self.category}: {self.gpu_seconds:.1f} GPU-s"


class DirtyJob(models.Model):
    """A job whose stored events changed since its rollups were last computed.

    Why a table rather than refreshing inside every ingest task: a refresh re-reads every
    event of the chunk a batch lands in, so refreshing per batch would read a chunk's events
    again for each of its batches — quadratic in the chunk. Ingestion marks the job here in
    the transaction that stores its events; one ``ett.refresh_rollups`` task per newly
    marked job runs a moment later, and every batch that arrives meanwhile only finds the
    mark already set. A refresh deletes the mark before it reads the events, so a batch
    committing during the refresh marks the job anew.
    """

    job = models.CharField(max_length=200, primary_key=True)
    marked_at = models.FloatField(help_text="epoch seconds the job was first marked since its "
                                            "last refresh")

    def __str__(self) -> str:
        return f"{self.job} (dirty since {self.marked_at:.0f})"


class AttributionChunk(models.Model):
    """One occupied chunk of a job's timeline, as ``ettweb.attribution.chunk_sweep`` keeps it.

    Why: re-reading and re-attributing a whole job would make a refresh cost what the job
    has lived, days of every rank's events for a large job. Each chunk keeps its
    attribution and what the next chunk needs, so a refresh recomputes only the chunks new
    events touch (or whose inputs they changed) and sums the rest. ``summary`` and ``state``
    are read at every refresh of the job (small); ``carry`` (spans still open at the chunk's
    end), ``segments`` (the swept pieces, for recoveries), ``timelines`` (the category
    timeline's pieces) and ``lanes`` (what each rank did, the job page's per-rank detail)
    only when needed.
    ``final``: the raw events of the chunk were dropped by retention, so it is never
    recomputed again.
    """

    job = models.CharField(max_length=200)
    chunk = models.BigIntegerField(help_text="index: the chunk starts at chunk x chunk_s")
    chunk_s = models.FloatField(help_text="chunk length in seconds (ETT_CHUNK_S)")
    summary = models.JSONField(default=dict, help_text="attempt -> its home events summed up")
    state = models.JSONField(default=dict, help_text="key, high-water mark, carry digest, parts")
    carry = models.JSONField(default=list, help_text="spans open at the chunk's end")
    segments = models.JSONField(default=list, help_text="[[start, end, attempt, shares], ...]")
    timelines = models.JSONField(default=list, help_text="[[attempt, bin_s, pieces], ...]")
    lanes = models.JSONField(default=list,
                             help_text="[[attempt, first_rank, ranks, rank_count, bin_s, runs]]")
    final = models.BooleanField(default=False)
    written_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "chunk"],
                                               name="attributionchunk_unique")]

    def __str__(self) -> str:
        return f"{self.job} chunk {self.chunk} ({self.chunk_s:g} s)"


class DirtyChunk(models.Model):
    """Chunks of a job that got new events since its last refresh (set by ingestion in the
    transaction that stores them, beside the job's :class:`DirtyJob` mark): one row per job
    and batch, the batch's chunks of that job in ``chunks``.

    Why one row per batch, not per chunk: a batch touches a job's chunks in runs (an
    import's batch holds whole jobs' histories), and a row per chunk was a heap tuple and two
    index entries written and deleted for every second event. A job may have several rows
    (one per batch since its refresh); the refresh claims them all and takes their union.
    """

    job = models.CharField(max_length=200)
    chunks = ArrayField(models.BigIntegerField(), help_text="indexes of the chunks marked")

    class Meta:
        indexes = [models.Index(fields=["job"], name="dirtychunk_job")]

    def __str__(self) -> str:
        return f"{self.job} chunks {self.chunks}"


class ParkedRefresh(models.Model):
    """A job whose rollup refresh failed: while it runs, a failure, or *parked*.

    Why: one job that cannot be refreshed (a bug, or events whose times no refresh should
    attribute) must not stop every other job's refresh, nor be retried forever, killing the
    worker each time. A refresh writes ``running_pid`` (its database backend) before it
    starts and removes the row when it commits; a row whose backend is gone means the worker
    died mid-refresh (killed, out of memory). A failure is counted with its error; the same
    error twice in a row parks the job (``parked_at``): refreshes skip it, keeping its last
    numbers, until an admin retries it (``ettweb.rollups.parking``).
    """

    job = models.CharField(max_length=200, primary_key=True)
    error = models.TextField(blank=True, default="", help_text="the last failure's error")
    failures = models.IntegerField(default=0, help_text="failures in a row with this error")
    first_failed_at = models.DateTimeField(null=True, blank=True)
    last_failed_at = models.DateTimeField(null=True, blank=True)
    parked_at = models.DateTimeField(null=True, blank=True, db_index=True,
                                     help_text="set: refreshes skip the job until retried")
    running_pid = models.IntegerField(null=True, blank=True,
                                      help_text="database backend of the refresh under way")
    running_since = models.DateTimeField(null=True, blank=True,
                                         help_text="when that backend started (tells a reused "
                                                   "pid apart)")

    class Meta:
        ordering = ["-parked_at", "job"]
        verbose_name_plural = "parked refreshes"

    def __str__(self) -> str:
        state = "parked" if self.parked_at else f"{self.failures} failure(s)"
        return f"{self.job} ({state}): {self.error[:80]}"


class RankProgress(models.Model):
    """One attempt and rank's latest stepped heartbeat and the train span it implies (ETT_SPEC
    §3 rule 3; ``ettweb.rollups.implied_store`` keeps it). ``start`` null: it implies none."""

    job = models.CharField(max_length=200)
    attempt = models.PositiveIntegerField()
    rank = models.PositiveIntegerField()
    beat_id = models.CharField(max_length=64, help_text="the latest stepped heartbeat's id")
    beat_ts = models.FloatField(help_text="its time, epoch seconds")
    beat_step = models.BigIntegerField(help_text="its step (steps completed)")
    earlier_max = models.BigIntegerField(null=True, blank=True, help_text=(
        "the highest step of its earlier heartbeats (above beat_step: went backwards)"))
    start = models.FloatField(null=True, blank=True, help_text="the implied span's start")
    step_start = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "attempt", "rank"],
                                               name="rank_progress_unique")]
        verbose_name_plural = "rank progress"
