"""App config for ingestion."""

from django.apps import AppConfig


class IngestConfig(AppConfig):
    """Events, jobs and the quarantine of rejected lines."""

    name = "ettweb.ingest"
    label = "ingest"
    default_auto_field = "django.db.models.BigAutoField"
