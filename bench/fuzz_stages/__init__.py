"""The parts of ``python -m bench.fuzz_ingest`` (``bench/fuzz_ingest.py``), shared with the
ingest fuzz tests (``tests/ettweb/ingest/test_fuzz_*.py``):

- ``corpus``: malformed lines by construction, from a ``random.Random``, each refused by
  schema v1, by what Postgres can store, or by the ingestion window;
- ``strategies``: Hypothesis strategies over whole batches and spool files, each batch with
  its books (the ids that must be stored once, the lines that must be quarantined, the
  copies that must count as duplicates).
"""
