"""Rollups: per-job, per-attempt and per-UTC-day numbers kept fresh as batches arrive.

The dashboard and reports read these tables instead of re-attributing every event on every
request. How they stay equal to what the engine says about the stored events:

- ``marks``: which jobs wait for a refresh (ingestion marks them) and how long it waits;
- ``refresh``: recompute a job's changed chunks and sum them into its rows (``chunk_store``
  stores the chunks, ``job_rows`` turns the sum into rows);
- ``writers``: store those rows; ``day_sums`` writes the day rows that changed and keeps
  the pages' day sums with them; ``copying`` is the COPY both use;
- ``rebuild``, ``removal``: recompute everything, or forget jobs whose events went;
- ``audit``: check the day sums against the day rows.
"""
