"""Ingestion: schema-v1 event batches in, stored events and quarantined lines out."""
