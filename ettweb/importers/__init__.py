"""Importers of other tools' histories: their log lines translated into schema-v1 events.

Why a package of its own, without Django (an import contract checks): a fleet adopting ETT
already has months of NVIDIA resiliency-extension launcher logs, goodput-library entries and
TorchTitan logs. Each translator here is a pure function from those lines (and the file name
and the command's options) to schema-v1 event dicts, so it can be tested, benchmarked and
read without a database; ``manage.py ett_import --format`` (``ettweb.ingest.foreign``) sends
what it makes through the same ingest path as any event. The mapping of each tool's events
to ETT phases is documented in ``docs/instrument.md``.
"""
