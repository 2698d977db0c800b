"""The JSON API for deploy pipelines (``/api/v1/``), built on django-ninja."""
