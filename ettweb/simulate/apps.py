"""App config for the simulated fleet (no models: it writes events, jobs and rollouts)."""

from django.apps import AppConfig


class SimulateConfig(AppConfig):
    """``manage.py simulate_fleet``: a seeded synthetic fleet beside the live jobs."""

    name = "ettweb.simulate"
    label = "simulate"
    default_auto_field = "django.db.models.BigAutoField"
